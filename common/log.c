#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int rm_log_level = RM_LOG_ERROR;
static const char *log_prefix = "remora";
static int to_journal; /* stderr is systemd's journal: priority prefixes, no timestamps */

/* True when stderr is the journal stream systemd named in JOURNAL_STREAM ("DEV:INODE"). */
static int stderr_is_journal(void)
{
	const char *js = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	if (!js || sscanf(js, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st))
		return 0;
	return (unsigned long long)st.st_dev == dev && (unsigned long long)st.st_ino == ino;
}

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
	to_journal = stderr_is_journal();
	rm_log_level = err ? fallback : level;
	return err;
}

void rm_log_write(int level, const char *fmt, ...)
{
	static const char *tags[] = {"error", "warn", "info", "debug"};
	static const char *priorities[] = {"<3>", "<4>", "<6>", "<7>"}; /* syslog's err, warning, info, debug */
	int l = level < 0 ? 0 : level > 3 ? 3 : level;
	char line[1024], stamp[40] = "";
	if (!to_journal) {
		/* UTC with microseconds, then the process: the journal adds both itself. */
		struct timespec ts;
		struct tm tm;
		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		size_t k = strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
		snprintf(stamp + k, sizeof(stamp) - k, ".%06ldZ ", ts.tv_nsec / 1000);
	}
	int n = snprintf(line, sizeof(line), "%s%s%s[%d] %s: ", to_journal ? priorities[l] : "", stamp, log_prefix,
			 (int)getpid(), tags[l]);
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
