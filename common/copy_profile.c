/* Profiling of bulk copies: REMORA_PROFILE=copies[:SIZE] (copy_profile.h). */
#include "copy_profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "size.h"

#define DEFAULT_MIN_BYTES (1u << 20)

int rm_copy_profile_mode = -1;
static uint64_t min_bytes = DEFAULT_MIN_BYTES;

uint64_t rm_copy_profile_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int rm_profile_parse(const char *text, uint64_t *copies_min, int *calls)
{
	*copies_min = 0;
	*calls = 0;
	char item[64];
	for (const char *p = text; *p;) {
		size_t n = strcspn(p, ",");
		if (n == 0 || n >= sizeof(item))
			return -EINVAL;
		memcpy(item, p, n);
		item[n] = 0;
		p += n + (p[n] == ',');
		if (!strcmp(item, "calls")) {
			*calls = 1;
		} else if (!strcmp(item, "copies")) {
			*copies_min = DEFAULT_MIN_BYTES;
		} else if (!strncmp(item, "copies:", 7)) {
			if (rm_parse_size(item + 7, copies_min) || !*copies_min)
				return -EINVAL;
		} else {
			return -EINVAL;
		}
	}
	return 0;
}

/* Reads REMORA_PROFILE once: an item "copies" or "copies:SIZE" turns copy profiles on.
 * Racing threads read the same environment and store the same values. */
static int read_mode(void)
{
	const char *v = getenv("REMORA_PROFILE");
	uint64_t min = 0;
	int calls, on = 0;
	if (v && *v && !rm_profile_parse(v, &min, &calls)) {
		on = min != 0;
		if (on) {
			__atomic_store_n(&min_bytes, min, __ATOMIC_RELAXED);
			__atomic_store_n(&rm_transport_profiling, 1, __ATOMIC_RELAXED);
		}
	} else if (v && *v) {
		fprintf(stderr, "remora-profile: REMORA_PROFILE=%s not understood (items copies, copies:SIZE, calls); off\n", v);
	}
	__atomic_store_n(&rm_copy_profile_mode, on, __ATOMIC_RELEASE);
	return on;
}

int rm_copy_profile_start(struct rm_copy_profile *p, const char *side, const char *op, uint64_t bytes)
{
	int mode = __atomic_load_n(&rm_copy_profile_mode, __ATOMIC_ACQUIRE);
	if (mode < 0)
		mode = read_mode();
	if (!mode || bytes < __atomic_load_n(&min_bytes, __ATOMIC_RELAXED))
		return 0;
	memset(p, 0, sizeof(*p));
	p->side = side;
	p->op = op;
	p->bytes = bytes;
	getrusage(RUSAGE_THREAD, &p->ru);
	rm_transport_thread_tally = &p->sock;
	p->start_ns = rm_copy_profile_now_ns();
	p->active = 1;
	return 1;
}

static uint64_t tv_us(const struct timeval *tv)
{
	return (uint64_t)tv->tv_sec * 1000000u + (uint64_t)tv->tv_usec;
}

void rm_copy_profile_finish(struct rm_copy_profile *p)
{
	uint64_t wall = rm_copy_profile_now_ns() - p->start_ns;
	struct rusage ru;
	getrusage(RUSAGE_THREAD, &ru);
	rm_transport_thread_tally = NULL;
	p->active = 0;
	/* One fprintf: stderr is unbuffered, so the line goes out in one write. */
	fprintf(stderr,
		"remora-profile side=%s op=%s host=%s bytes=%llu wall_us=%llu user_us=%llu sys_us=%llu "
		"send_calls=%llu send_us=%llu recv_calls=%llu recv_us=%llu wait_calls=%llu wait_us=%llu "
		"dma_calls=%llu dma_us=%llu prefault_us=%llu minflt=%ld vcsw=%ld ivcsw=%ld pid=%d\n",
		p->side, p->op, p->host ? p->host : "-", (unsigned long long)p->bytes, (unsigned long long)(wall / 1000),
		(unsigned long long)(tv_us(&ru.ru_utime) - tv_us(&p->ru.ru_utime)),
		(unsigned long long)(tv_us(&ru.ru_stime) - tv_us(&p->ru.ru_stime)),
		(unsigned long long)p->sock.sends, (unsigned long long)(p->sock.send_ns / 1000),
		(unsigned long long)p->sock.recvs, (unsigned long long)(p->sock.recv_ns / 1000),
		(unsigned long long)p->wait.calls, (unsigned long long)(p->wait.ns / 1000),
		(unsigned long long)p->dma.calls, (unsigned long long)(p->dma.ns / 1000),
		(unsigned long long)(p->prefault_ns / 1000), ru.ru_minflt - p->ru.ru_minflt,
		ru.ru_nvcsw - p->ru.ru_nvcsw, ru.ru_nivcsw - p->ru.ru_nivcsw, (int)getpid());
}
