/* GPU time for accounting, measured in spans: the first launch on a stream opens a span
 * (an event recorded before it), and the span is closed (an event after the last launch)
 * when the channel's thread has read every frame the client sent so far or is about to
 * run a call the client waits for. A span is the time the client's work occupied its
 * stream, from its first kernel's start to its last kernel's end: an upper bound of the
 * kernels' time that also counts gaps within one batch. So a stream of launches costs
 * two event records per batch, not two per launch (docs/hotpath.md). Events come from a
 * small ring per context; a span is read once its end has passed (at the client's
 * synchronizing calls, when the ring is full, and at the session's end), never waited
 * for. Launches go untimed where no slot is free, on a capturing stream, and on a stream
 * whose hardware queue other client streams share: there the end record, queued behind
 * the running kernel, would hold up their work (stream_pool.h). */
#ifndef REMORA_KERNEL_TIMING_H
#define REMORA_KERNEL_TIMING_H

#include <cuda.h>

struct rm_session;
struct rm_session_ctx;

/* Whether launches are timed (the configuration's kernel_timing; default on). */
void rm_kernel_timing_enable(int on);
/* Before a launch on stream st of the session's current context: opens a span on st
 * unless one of the calling channel's is open there. */
void rm_kernel_timing_before_launch(struct rm_session *s, CUstream st);
/* Closes the calling channel's open spans (records their end events). */
void rm_kernel_timing_close(struct rm_session *s);
/* Adds the time of every finished span of the session's contexts to its usage. */
void rm_kernel_timing_collect(struct rm_session *s);
/* The session's end: collects what finished, then frees context c's events (c current). */
void rm_kernel_timing_release(struct rm_session *s, struct rm_session_ctx *c);

#endif
