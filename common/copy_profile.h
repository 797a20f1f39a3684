/* Profiling of bulk copies, without perf (docs/hotpath.md).
 *
 * REMORA_PROFILE=copies (or copies:SIZE, e.g. copies:256M) in the environment
 * of the client or of remorad makes each bulk copy of at least SIZE (1 MiB by
 * default) print one line on stderr when it ends, on each side:
 *
 *   remora-profile side=client op=cuMemcpyHtoD_v2 host=pageable bytes=268435456 wall_us=... user_us=... sys_us=...
 *     send_calls=... send_us=... recv_calls=... recv_us=... wait_calls=... wait_us=...
 *     dma_calls=... dma_us=... prefault_us=... minflt=... vcsw=... ivcsw=... pid=...
 *
 * host says what memory the copy's host side is: on the client the program's
 * pageable or pinned (cuMemHostAlloc, cuMemHostRegister) buffer, on remorad
 * its pinned staging buffers. wall is the copy's whole time on that side; user and sys the CPU time of the
 * thread doing it (getrusage(RUSAGE_THREAD)), minflt its page faults and
 * vcsw/ivcsw its voluntary and involuntary context switches. send and recv are
 * the socket calls the transport made for the copy on that thread (sendmsg,
 * recv; their count and the time spent inside them). wait is time spent
 * waiting for something other than the socket: on remorad a staging buffer to
 * come free, a DMA's event, the stream; on the client the call lock and the
 * pre-fault helper. dma is the time inside cuMemcpy*Async calls (remorad).
 * prefault is the CPU time the client's helper thread spent populating a
 * pageable destination (frontend/memory.c), overlapping the copy.
 *
 * Off (the default) it costs one predictable branch per copy and per socket
 * call: the environment is read once, at the first copy. */
#ifndef REMORA_COPY_PROFILE_H
#define REMORA_COPY_PROFILE_H

#include <stdint.h>
#include <sys/resource.h>

#include "transport.h"

/* A time tally: how often, and how long in all. */
struct rm_time_tally {
	uint64_t ns, calls;
};

struct rm_copy_profile {
	int active; /* 0: not profiled, every other call here is a no-op */
	const char *side, *op, *host;
	uint64_t bytes;
	uint64_t start_ns;
	struct rusage ru;
	struct rm_transport_tally sock; /* its thread's socket calls (transport.h) */
	struct rm_time_tally wait, dma;
	uint64_t prefault_ns;
};

/* -1 before the environment was read, 0 off, 1 on. */
extern int rm_copy_profile_mode;

/* REMORA_PROFILE's text, a comma-separated list of items: "copies" or "copies:SIZE"
 * (*copies_min the smallest copy profiled, 0 without), "calls" (*calls 1: remorad's
 * per-call profile, backend/worker/call_profile.h). 0, or -EINVAL. */
int rm_profile_parse(const char *text, uint64_t *copies_min, int *calls);

int rm_copy_profile_start(struct rm_copy_profile *p, const char *side, const char *op, uint64_t bytes);

/* Starts profiling a copy of bytes on the calling thread when profiling is on
 * and the copy is large enough; p->active says whether it did. */
static inline void rm_copy_profile_begin(struct rm_copy_profile *p, const char *side, const char *op,
					 uint64_t bytes)
{
	p->active = 0;
	if (__builtin_expect(rm_copy_profile_mode != 0, 0))
		rm_copy_profile_start(p, side, op, bytes);
}

void rm_copy_profile_finish(struct rm_copy_profile *p);

/* Prints the copy's line and stops counting its socket calls. */
static inline void rm_copy_profile_end(struct rm_copy_profile *p)
{
	if (p->active)
		rm_copy_profile_finish(p);
}

uint64_t rm_copy_profile_now_ns(void);

/* Brackets a call to be counted in t: mark before, add after. */
static inline uint64_t rm_copy_profile_mark(const struct rm_copy_profile *p)
{
	return p->active ? rm_copy_profile_now_ns() : 0;
}

static inline void rm_copy_profile_add(const struct rm_copy_profile *p, struct rm_time_tally *t, uint64_t mark)
{
	if (p->active) {
		t->ns += rm_copy_profile_now_ns() - mark;
		t->calls++;
	}
}

#endif
