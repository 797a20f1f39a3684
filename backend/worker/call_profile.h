/* Where a session's thread spends its time, per call (docs/hotpath.md).
 *
 * REMORA_PROFILE=calls in remorad's environment (an item of its comma-separated list,
 * common/copy_profile.h) makes each session's thread tally, per opcode, the calls it ran
 * and the time inside their handlers, the time it waited for frames, and, inside a
 * kernel launch, the driver's cuLaunchKernel, the kernel-time events
 * (kernel_timing.h) and the launch's stream, in a context or stream synchronize the
 * driver's stream waits, the sending of replies, and what every call does around its
 * handler (enum rm_call_part). When the session ends it logs, at info level:
 *
 *   remora-profile side=daemon session=N wall_ms=... calls=... in_calls_ms=... reading_ms=...
 *   remora-profile side=daemon session=N op=cuLaunchKernel calls=... mean_us=... total_ms=...
 *   remora-profile side=daemon session=N part=driver_launch calls=... mean_us=...
 *
 * the twelve costliest opcodes, then the parts, then how they spread, from quarter-octave
 * histograms (common/log_histogram.h: each figure at most a quarter above the truth):
 *
 *   remora-profile side=daemon session=N spread=driver_launch p50_us=... p99_us=... p999_us=...
 *
 * for every call's handler (spread=call), the waits for frames (spread=reading) and each
 * part. Off (the default) each hook costs one
 * predictable branch: the environment is read once, when the first session starts. */
#ifndef REMORA_CALL_PROFILE_H
#define REMORA_CALL_PROFILE_H

#include <stdint.h>

struct rm_call_profile;

/* The parts of a call timed separately: the driver's launch, kernel-time events, the
 * driver's stream waits, sending the reply, a launch's stream (rm_session_stream_submit),
 * what every call does around its handler before it (spans' early close, liveness,
 * entering the context) and after it (spans' close, accounting, progress). */
enum rm_call_part {
	RM_PART_DRIVER_LAUNCH,
	RM_PART_KERNEL_TIMING,
	RM_PART_DRIVER_SYNC,
	RM_PART_REPLY,
	RM_PART_LAUNCH_STREAM,
	RM_PART_BEFORE_HANDLER,
	RM_PART_AFTER_HANDLER,
	RM_PARTS
};

/* The calling thread's profile (a session's thread), or NULL when profiling is off. */
struct rm_call_profile *rm_call_profile_begin(void);
void rm_call_profile_end(struct rm_call_profile *p, uint64_t session_id);

uint64_t rm_call_profile_now_ns(void);
/* Reading a frame took the time since start_ns. */
void rm_call_profile_read(struct rm_call_profile *p, uint64_t start_ns);
/* A call of op ended; it began at start_ns. */
void rm_call_profile_call(struct rm_call_profile *p, uint32_t op, uint64_t start_ns);

/* Part timing on the calling thread; a no-op where it has no profile. */
extern __thread struct rm_call_profile *rm_call_profile_thread;
static inline uint64_t rm_call_part_begin(void)
{
	return rm_call_profile_thread ? rm_call_profile_now_ns() : 0;
}
void rm_call_part_add(enum rm_call_part part, uint64_t start_ns);
static inline void rm_call_part_end(enum rm_call_part part, uint64_t start_ns)
{
	if (start_ns)
		rm_call_part_add(part, start_ns);
}

#endif
