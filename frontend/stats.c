/* REMORA_STATS (stats.h). */
#include "stats.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"

struct rm_stats *rm_stats;
static struct rm_stats in_memory;
static int at_exit_line;

/* PATH with each %p replaced by the process id. */
static int expand(char *out, size_t len, const char *path)
{
	size_t n = 0;
	for (const char *p = path; *p && n + 24 < len; p++) {
		if (p[0] == '%' && p[1] == 'p') {
			n += (size_t)snprintf(out + n, len - n, "%ld", (long)getpid());
			p++;
		} else {
			out[n++] = *p;
		}
	}
	out[n] = 0;
	return n + 24 < len ? 0 : -1;
}

void rm_stats_init(void)
{
	const char *v = getenv("REMORA_STATS");
	struct rm_stats *s = &in_memory;
	if (!v || !*v || !strcmp(v, "0")) /* "0" is refused by the settings' check (environment.c) */
		return;
	if (!strcmp(v, "1")) {
		at_exit_line = 1;
	} else {
		char path[4096];
		int fd = expand(path, sizeof path, v) ? -1 : open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
		void *map = fd < 0 || ftruncate(fd, sizeof *s) ? MAP_FAILED
			  : mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		if (fd >= 0)
			close(fd);
		if (map == MAP_FAILED) {
			rm_log(RM_LOG_ERROR, "REMORA_STATS=%s: cannot keep the counters there; not counting", v);
			return;
		}
		s = map;
	}
	s->pid = (uint64_t)getpid();
	memcpy(s->magic, "RMSTATS2", 8);
	rm_transport_bytes = &s->bytes;
	__atomic_store_n(&rm_stats, s, __ATOMIC_RELEASE);
}

__attribute__((destructor)) static void stats_at_exit(void)
{
	struct rm_stats *s = rm_stats;
	if (!s || !at_exit_line)
		return;
	fprintf(stderr, "remora-stats pid=%llu calls=%llu round_trips=%llu bytes_sent=%llu bytes_received=%llu sends=%llu\n",
		(unsigned long long)s->pid, (unsigned long long)__atomic_load_n(&s->calls, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&s->round_trips, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&s->bytes.sent, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&s->bytes.received, __ATOMIC_RELAXED),
		(unsigned long long)__atomic_load_n(&s->sends, __ATOMIC_RELAXED));
}
