/* REMORA_STATS: the process's round-trip budget (docs/performance.md "The round-trip
 * budget"): the calls forwarded, those that waited for the daemon's reply (round trips)
 * and the bytes its connections carried. REMORA_STATS=1: one line on stderr at exit;
 * REMORA_STATS=PATH (%p: the process id): the counters live in that file, mapped and
 * updated as they change, for a reader to take the difference over a window of its own
 * (bench/torch_worker.py reads it around its timed steps). The file: 8 bytes "RMSTATS2",
 * then little-endian u64s: pid, calls, round_trips, bytes_sent, bytes_received, sends. */
#ifndef REMORA_FRONTEND_STATS_H
#define REMORA_FRONTEND_STATS_H

#include <stdint.h>

#include "transport.h"

struct rm_stats {
	char magic[8];
	uint64_t pid, calls, round_trips;
	struct rm_transport_bytes bytes;
	uint64_t sends; /* writes of the main connection and channels: batches and calls */
};

extern struct rm_stats *rm_stats; /* NULL: not counting */

/* Reads REMORA_STATS once (the client's initialisation). */
void rm_stats_init(void);
/* A call forwarded; waited: it waited for its reply. */
static inline void rm_stats_call(int waited)
{
	struct rm_stats *s = rm_stats;
	if (__builtin_expect(s != NULL, 0)) {
		__atomic_add_fetch(&s->calls, 1, __ATOMIC_RELAXED);
		if (waited)
			__atomic_add_fetch(&s->round_trips, 1, __ATOMIC_RELAXED);
	}
}

/* A connection's write of its batch (and call). */
static inline void rm_stats_send(void)
{
	struct rm_stats *s = rm_stats;
	if (__builtin_expect(s != NULL, 0))
		__atomic_add_fetch(&s->sends, 1, __ATOMIC_RELAXED);
}

#endif
