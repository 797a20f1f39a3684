/* Logging to stderr, filtered by level (REMORA_LOG=error|warn|info|debug). */
#ifndef REMORA_LOG_H
#define REMORA_LOG_H

enum { RM_LOG_ERROR = 0, RM_LOG_WARN = 1, RM_LOG_INFO = 2, RM_LOG_DEBUG = 3 };

extern int rm_log_level;

/* Sets the level from REMORA_LOG, or to fallback when it is unset; prefix names the component. */
void rm_log_init(const char *prefix, int fallback);
void rm_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define rm_log(level, ...)                               \
	do {                                             \
		if ((level) <= rm_log_level)             \
			rm_log_write((level), __VA_ARGS__); \
	} while (0)

#endif
