/* Kernels that run past their tenant's kernel_time_limit (docs/sharing.md, "Faults"). A
 * kernel cannot be stopped inside a context: the only way to end one is to end the
 * process whose context runs it. So a worker whose client's kernel runs past the limit
 * tells each of its clients why, marks itself faulted (the tenant's next client gets a
 * fresh worker) and exits, which ends the kernel.
 *
 * How a kernel's time is known: after each launch (and graph launch) of a session with a
 * limit, an event is recorded on its stream; the worker's watch (every 200 ms) takes the
 * oldest unfinished launch of each stream as running since its launch, or since the
 * launch before it on that stream was seen finished, whichever is later. So a kernel
 * queued behind its own stream's work is not counted before it can start; one queued on
 * a hardware queue behind another client's work is (docs/sharing.md, "Hardware queues").
 * RM_KERNEL_WATCH_MAX launches a session are followed at once; past that, a launch is
 * covered by the next one followed. */
#ifndef REMORA_KERNEL_WATCH_H
#define REMORA_KERNEL_WATCH_H

#include <cuda.h>
#include <stdint.h>

#define RM_KERNEL_WATCH_MAX 64

struct rm_channel;
struct rm_kernel_watch;

/* A watch of limit_ms for a new session; NULL where limit_ms is 0 (no limit) or memory
 * is short (then the session is not watched, and a line says so). */
struct rm_kernel_watch *rm_kernel_watch_new(uint32_t limit_ms);
/* A launch of s succeeded on stream st (its context current). */
void rm_kernel_watch_launched(struct rm_channel *s, CUstream st);
/* Looks at s's launches (its main channel; the worker's watch thread, with s kept alive).
 * 1 where one has run past the limit: the caller recycles the worker (a line logged). */
int rm_kernel_watch_over(struct rm_channel *s);
/* Frees the watch's events (the session's context current) and the watch. */
void rm_kernel_watch_free(struct rm_kernel_watch *w);

#endif
