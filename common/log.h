/* Logging to stderr, filtered by level (REMORA_LOG=error|warn|info|debug). */
#ifndef REMORA_LOG_H
#define REMORA_LOG_H

enum { RM_LOG_ERROR = 0, RM_LOG_WARN = 1, RM_LOG_INFO = 2, RM_LOG_DEBUG = 3 };

extern int rm_log_level;

/* What REMORA_LOG accepts, for messages that refuse a value. */
#define RM_LOG_LEVELS "error, warn, info, debug, or 0 to 3"

/* A level's name or number (RM_LOG_LEVELS, any case) into *level: 0, or -EINVAL. */
int rm_log_level_parse(const char *text, int *level);
/* Sets the level from REMORA_LOG, or to fallback when it is unset or empty; prefix names
 * the component. 0, or -EINVAL when REMORA_LOG names no level (the level is then fallback). */
int rm_log_init(const char *prefix, int fallback);
void rm_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define rm_log(level, ...)                               \
	do {                                             \
		if ((level) <= rm_log_level)             \
			rm_log_write((level), __VA_ARGS__); \
	} while (0)

#endif
