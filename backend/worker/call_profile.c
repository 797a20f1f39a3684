/* Per-call profile of a session's thread: REMORA_PROFILE=calls (call_profile.h). */
#include "call_profile.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_ops.h"
#include "copy_profile.h"
#include "log_histogram.h"
#include "log.h"

#define SLOTS (RM_OP_LIMIT + 1) /* the last: the reserved opcodes */

struct tally {
	uint64_t calls, ns;
};

struct rm_call_profile {
	uint64_t start_ns;
	struct tally op[SLOTS], reading, part[RM_PARTS];
	struct rm_log_histogram reading_spread, call_spread, part_spread[RM_PARTS];
};

__thread struct rm_call_profile *rm_call_profile_thread;

static const char *const part_names[RM_PARTS] = {"driver_launch", "kernel_timing",  "driver_sync",   "reply",
						 "launch_stream", "before_handler", "after_handler"};
static int mode = -1; /* -1 unread, 0 off, 1 on */

uint64_t rm_call_profile_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct rm_call_profile *rm_call_profile_begin(void)
{
	int on = __atomic_load_n(&mode, __ATOMIC_ACQUIRE);
	if (on < 0) {
		const char *v = getenv("REMORA_PROFILE");
		uint64_t copies;
		int calls = 0;
		on = v && *v && !rm_profile_parse(v, &copies, &calls) && calls;
		__atomic_store_n(&mode, on, __ATOMIC_RELEASE);
	}
	struct rm_call_profile *p = on ? calloc(1, sizeof(*p)) : NULL;
	if (p)
		p->start_ns = rm_call_profile_now_ns();
	rm_call_profile_thread = p;
	return p;
}

void rm_call_profile_read(struct rm_call_profile *p, uint64_t start_ns)
{
	if (!p)
		return;
	uint64_t ns = rm_call_profile_now_ns() - start_ns;
	p->reading.calls++;
	p->reading.ns += ns;
	rm_log_histogram_add(&p->reading_spread, ns);
}

void rm_call_profile_call(struct rm_call_profile *p, uint32_t op, uint64_t start_ns)
{
	if (!p)
		return;
	struct tally *t = &p->op[op < RM_OP_LIMIT ? op : RM_OP_LIMIT];
	uint64_t ns = rm_call_profile_now_ns() - start_ns;
	t->calls++;
	t->ns += ns;
	rm_log_histogram_add(&p->call_spread, ns);
}

void rm_call_part_add(enum rm_call_part part, uint64_t start_ns)
{
	struct rm_call_profile *p = rm_call_profile_thread;
	if (p && part < RM_PARTS) {
		uint64_t ns = rm_call_profile_now_ns() - start_ns;
		p->part[part].calls++;
		p->part[part].ns += ns;
		rm_log_histogram_add(&p->part_spread[part], ns);
	}
}

static void line(uint64_t session, const char *what, const char *name, const struct tally *t)
{
	rm_log(RM_LOG_INFO, "remora-profile side=daemon session=%llu %s=%s calls=%llu mean_us=%.3f total_ms=%.3f",
	       (unsigned long long)session, what, name, (unsigned long long)t->calls,
	       t->calls ? (double)t->ns / (double)t->calls / 1e3 : 0.0, (double)t->ns / 1e6);
}

static void spread_line(uint64_t session, const char *name, const struct rm_log_histogram *s, uint64_t count)
{
	if (count)
		rm_log(RM_LOG_INFO, "remora-profile side=daemon session=%llu spread=%s p50_us=%.3f p99_us=%.3f p999_us=%.3f",
		       (unsigned long long)session, name, rm_log_histogram_quantile(s, count, 0.5) / 1e3,
		       rm_log_histogram_quantile(s, count, 0.99) / 1e3, rm_log_histogram_quantile(s, count, 0.999) / 1e3);
}

void rm_call_profile_end(struct rm_call_profile *p, uint64_t session_id)
{
	if (!p)
		return;
	rm_call_profile_thread = NULL;
	uint64_t calls = 0, ns = 0;
	for (int i = 0; i < SLOTS; i++)
		calls += p->op[i].calls, ns += p->op[i].ns;
	rm_log(RM_LOG_INFO, "remora-profile side=daemon session=%llu wall_ms=%.3f calls=%llu in_calls_ms=%.3f reading_ms=%.3f",
	       (unsigned long long)session_id, (double)(rm_call_profile_now_ns() - p->start_ns) / 1e6,
	       (unsigned long long)calls, (double)ns / 1e6, (double)p->reading.ns / 1e6);
	for (int shown = 0; shown < 12; shown++) { /* the costliest first */
		int best = -1;
		for (int i = 0; i < SLOTS; i++)
			if (p->op[i].calls && (best < 0 || p->op[i].ns > p->op[best].ns))
				best = i;
		if (best < 0)
			break;
		line(session_id, "op", best < RM_OP_LIMIT ? rm_op_names[best] : "reserved", &p->op[best]);
		p->op[best].calls = 0;
	}
	for (int i = 0; i < RM_PARTS; i++)
		if (p->part[i].calls)
			line(session_id, "part", part_names[i], &p->part[i]);
	spread_line(session_id, "call", &p->call_spread, calls);
	spread_line(session_id, "reading", &p->reading_spread, p->reading.calls);
	for (int i = 0; i < RM_PARTS; i++)
		spread_line(session_id, part_names[i], &p->part_spread[i], p->part[i].calls);
	free(p);
}
