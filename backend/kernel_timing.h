/* GPU time for accounting: each launch of a client is bracketed by two events on its
 * stream, from a small ring per context; a pair is read once its end has passed (at the
 * client's synchronizing calls, when the ring comes round, and at the session's end),
 * never waited for. A launch that finds its ring slot still running goes untimed, and so
 * does one on a stream whose hardware queue other client streams share: there the end
 * record, queued behind the running kernel, would hold up their work (stream_pool.h). */
#ifndef REMORA_KERNEL_TIMING_H
#define REMORA_KERNEL_TIMING_H

#include <cuda.h>

struct rm_session;
struct rm_session_ctx;

/* Whether launches are timed (the configuration's kernel_timing; default on). */
void rm_kernel_timing_enable(int on);
/* Before a launch on stream st of the session's current context: the slot whose start
 * event was recorded, or -1 (untimed). */
int rm_kernel_timing_before(struct rm_session *s, CUstream st);
/* After it: records the end event of slot (when the launch succeeded) or frees the slot. */
void rm_kernel_timing_after(struct rm_session *s, int slot, CUstream st, CUresult launch);
/* Adds the time of every finished pair of the session's contexts to its usage. */
void rm_kernel_timing_collect(struct rm_session *s);
/* The session's end: collects what finished, then frees context c's events (c current). */
void rm_kernel_timing_release(struct rm_session *s, struct rm_session_ctx *c);

#endif
