/* GPU time for accounting, measured in spans: the first launch on a stream opens a span
 * (an event recorded before it), and the span is closed (an event after the last launch)
 * when the channel's thread has read every frame the client sent so far, is about to
 * run a call the client waits for, or runs the client's record of an event on the stream
 * (so that the end record precedes it). A span is the time the client's work occupied its
 * stream, from its first kernel's start to its last kernel's end: an upper bound of the
 * kernels' time that also counts gaps within one batch. So a stream of launches costs
 * two event records per batch, not two per launch (docs/hotpath.md). Before a call the
 * client waits for, only spans older than RM_SPAN_EARLY_CLOSE_NS are closed; younger ones
 * are closed once its reply is sent, off the client's path: their end then also counts the
 * wait's last microseconds. Events come from a
 * small ring per context; a span is read once its end has passed (at the client's
 * synchronizing calls once RM_SPAN_READ_AGE_NS old, when the ring is full, and at the
 * session's end), never waited
 * for. Launches go untimed where no slot is free, on a capturing stream, and on a stream
 * whose hardware queue other client streams share: there the end record, queued behind
 * the running kernel, would hold up their work (stream_pool.h). A span that a synchronize
 * right behind its launch will end is timed on the host alone, with no event. */
#ifndef REMORA_KERNEL_TIMING_H
#define REMORA_KERNEL_TIMING_H

#include <stdint.h>

#include <cuda.h>

struct rm_channel;
struct rm_session_ctx;

/* Whether launches are timed (the configuration's kernel_timing; default on). */
void rm_kernel_timing_enable(int on);
/* Before the launch of frame launch on stream st (the client's stream value v) of the
 * session's current context: opens a span on st unless one of the calling channel's is
 * open there. Where the client's next frame is a synchronize of st
 * (rm_session_sync_follows), which will end the span in host time
 * (rm_kernel_timing_synced), the span records no start event: a launch followed by a
 * synchronize makes no event call at all. */
struct rm_frame;
void rm_kernel_timing_before_launch(struct rm_channel *s, CUstream st, const struct rm_frame *launch, uint64_t v);
#define RM_SPAN_EARLY_CLOSE_NS 200000u

/* Whether any span of the session is open. */
int rm_kernel_timing_open(struct rm_channel *s);
/* Closes the calling channel's open spans opened at least min_age_ns ago (records their
 * end events). */
void rm_kernel_timing_close(struct rm_channel *s, uint64_t min_age_ns);
/* The client records an event on st (current context): the calling channel's open span
 * there is closed first, so that its end record precedes the client's and a wait for the
 * client's event leaves nothing of remorad's behind on st (a query after it finds st idle,
 * as in CUDA). It replaces the close at the batch's end or after the reply. */
void rm_kernel_timing_close_stream(struct rm_channel *s, CUstream st);
/* The client records an event for context c's work as a whole (cuCtxRecordEvent): every
 * open span in c, of every channel and stream, is closed first, so that no end record of
 * remorad's lands behind the record's marks (a query after a wait for the event finds each
 * stream idle). */
void rm_kernel_timing_close_context(struct rm_channel *s, struct rm_session_ctx *c);
/* A synchronize of stream st by the calling channel has returned: its open spans there
 * have ended, and are counted from their start to now, host time (an upper bound, as a
 * span is), with no end event recorded and nothing to read later; the time waits in
 * s->synced_gpu_ns for rm_kernel_timing_post, after the reply. Saves a launch
 * followed by a synchronize two of its four event calls. (A closed one is left to be
 * read after the reply.) */
void rm_kernel_timing_synced(struct rm_channel *s, CUstream st);
/* Adds the time of every finished span of the session's contexts to its usage, asking only
 * about spans whose end was recorded RM_SPAN_READ_AGE_NS ago or more: the span a
 * synchronizing call just closed has not ended yet, and asking is a driver call the
 * client's next call waits behind. */
void rm_kernel_timing_collect(struct rm_channel *s);
/* Adds to the registry the time the calling channel's synchronizes ended (s->synced_gpu_ns),
 * at most once every RM_SPAN_POST_NS unless now: the registry's lock is every worker's. */
void rm_kernel_timing_post(struct rm_channel *s, int now);
#define RM_SPAN_POST_NS 1000000u
#define RM_SPAN_READ_AGE_NS 50000u
/* The client has gone: closes every open span and collects the spans that end within
 * wait_ms, before the session's usage goes to the history (a span that ends later is
 * not counted: the kernel it waits for may run long). */
void rm_kernel_timing_settle(struct rm_channel *s, int wait_ms);
/* The session's end, its work drained: collects every span, then frees context c's events
 * (c current). */
void rm_kernel_timing_release(struct rm_channel *s, struct rm_session_ctx *c);

#endif
