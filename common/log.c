#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int rm_log_level = RM_LOG_ERROR;
static const char *log_prefix = "remora";

int rm_log_level_parse(const char *text, int *level)
{
	static const char *names[] = {"error", "warn", "info", "debug"};
	for (int i = 0; i < 4; i++)
		if (!strcasecmp(text, names[i])) {
			*level = i;
			return 0;
		}
	if (text[0] >= '0' && text[0] <= '3' && !text[1]) {
		*level = text[0] - '0';
		return 0;
	}
	return -EINVAL;
}

int rm_log_init(const char *prefix, int fallback)
{
	const char *text = getenv("REMORA_LOG");
	int level = fallback, err = text && *text ? rm_log_level_parse(text, &level) : 0;
	log_prefix = prefix;
	rm_log_level = err ? fallback : level;
	return err;
}

void rm_log_write(int level, const char *fmt, ...)
{
	static const char *tags[] = {"error", "warn", "info", "debug"};
	char line[1024];
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int n = snprintf(line, sizeof(line), "%s[%d] %s: ", log_prefix, (int)getpid(),
			 tags[level < 0 ? 0 : level > 3 ? 3 : level]);
	va_list ap;
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(line))
		n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(line) - 1)
		n = (int)sizeof(line) - 2;
	line[n++] = '\n';
	/* One write per line so lines of several threads do not interleave. */
	ssize_t unused = write(STDERR_FILENO, line, (size_t)n);
	(void)unused;
}
