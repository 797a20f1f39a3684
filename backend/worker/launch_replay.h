/* Launch replay (docs/hotpath.md, "The daemon's per-call work"): a channel's runs of kernel
 * launches made as CUDA graphs where they repeat, so that a program's steady loop of
 * launches costs the worker one driver call per chunk of launches instead of one per launch.
 *
 * A launch the client sent async (cuLaunchKernel, cuLaunchKernelEx) is queued in its
 * channel's run instead of being made at once; the run holds launches of one stream of
 * one context, in order, and is cut into chunks (below). A chunk is made as soon as it is
 * whole, so the GPU gets a run's work chunk by chunk as the batch is read. What is pending
 * is made before the channel handles anything else (another call, a launch on another
 * stream, a fence), once the client's batch has been read (nothing buffered or readable),
 * and when its parameters fill the run's room. So the run adds no wait beyond a chunk:
 * a call that could see its work comes after it. Until then the channel's progress
 * (rm_session_progress) stays before the pending launches, so that a fence of another
 * channel waits for them to be made.
 *
 * Chunks: a run is cut after each launch whose shape hash has its two low bits clear, or
 * at RM_REPLAY_CHUNK_MAX launches, so that the same launches are cut the same way whatever
 * the batches were. A launch's shape is all but its parameters' bytes: function,
 * dimensions, shared memory, attributes, parameters' length. A chunk whose shape was seen
 * before on that stream and is held as a graph is launched as that graph, after its kernels
 * whose parameters differ from the graph's are given the chunk's
 * (cuGraphExecKernelNodeSetParams: frameworks' launches keep their shape from step to step
 * while their pointers move). A chunk seen once before is captured into a graph (on a
 * stream of the channel's own, relaxed capture mode, each launch's node taken from the
 * capture), instantiated and launched; any other chunk is launched launch by launch, and
 * remembered. A graph launch costs the driver about what one cuLaunchKernel does whatever
 * the chunk's length (1.3 against 3 µs on an H100), a kernel's new parameters 0.45 µs, and
 * the graph runs its kernels in order on the stream, as the launches would have. Where the
 * driver refuses to capture, instantiate, update or launch a graph, the chunk's launches
 * are made one by one, so that each error is the launch's own; an error comes back at the
 * client's next syncpoint, as an async launch's does.
 *
 * Not replayed: launches while any stream of the context captures, cooperative launches,
 * launches with a priority attribute, sessions under a kernel_time_limit (its watch times
 * launches) and sessions that have set a stream attribute other than its priority (a
 * captured kernel carries its capture stream's). A call annotated drops_replays in
 * proto/api.spec (unloading code, a kernel's or context's settings, a stream's attributes
 * or destruction) drops every replay of the session's channels. A channel whose chunks do
 * not repeat (graphs made outnumber graph launches after RM_REPLAY_GIVE_UP_AFTER graphs)
 * stops replaying. The configuration's launch_replay turns it off. */
#ifndef REMORA_LAUNCH_REPLAY_H
#define REMORA_LAUNCH_REPLAY_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "api_ops.h"

#define RM_REPLAY_CHUNK_MAX 32
#define RM_REPLAY_GIVE_UP_AFTER 256

/* Why a pending chunk is made before its end: the op of the call that cuts it short, or one
 * of these. Counted per channel and logged with what replay did (rm_launch_replay_free), to
 * tell what keeps chunks short. */
enum rm_replay_end {
	RM_REPLAY_END_BATCH = RM_OP_LIMIT, /* the client's batch was read */
	RM_REPLAY_END_FULL,                /* its parameters filled the run's room */
	RM_REPLAY_END_STREAM,              /* a launch on another stream or context */
	RM_REPLAY_END_UNREPLAYED,          /* a launch that is not replayed */
	RM_REPLAY_END_FENCE,               /* a fence */
	RM_REPLAY_END_PROTOCOL,            /* a call of the protocol's own (proto/reserved_ops.def) */
	RM_REPLAY_END_LIMIT
};

struct rm_channel;
struct rm_frame;

/* Whether replay is on (the configuration's launch_replay; default on). */
void rm_launch_replay_enable(int on);

/* Whether a launch of frame f on the client's stream value v with nattrs launch attributes
 * attrs could join a run (f async, replay on for the session, no capture in its context, no
 * priority among its attributes: a graph's kernels take its stream's). */
int rm_launch_replay_wanted(struct rm_channel *s, const struct rm_frame *f, const CUlaunchAttribute *attrs,
			    unsigned nattrs);
/* Before the launch of f on v is resolved: makes the pending run where the launch does not
 * continue it (another context or stream). */
void rm_launch_replay_before(struct rm_channel *s, const struct rm_frame *f, uint64_t v);
/* Queues a launch of func on st (resolved, v's), cfg's dimensions, shared memory and
 * attributes, params_len bytes of packed parameters (copied), ex: it came as
 * cuLaunchKernelEx. Where it cannot be queued, makes the run and then the launch.
 * CUDA_SUCCESS, or the launch's error where it was made at once. */
CUresult rm_launch_replay_add(struct rm_channel *s, const struct rm_frame *f, uint64_t v, CUstream st, void *func,
			      const CUlaunchConfig *cfg, const void *params, size_t params_len, int ex);
/* Whether a run is pending on s. */
int rm_launch_replay_pending(const struct rm_channel *s);
/* Whether frame f could continue s's pending run (one is pending; f a launch in its
 * context): the run is then made by the launch's handler where its stream differs. */
int rm_launch_replay_continues(const struct rm_channel *s, const struct rm_frame *f);
/* Makes s's pending run (its context current), why: as for rm_launch_replay_flush. The seq of its last launch, for the caller
 * to record as the channel's progress (rm_session_progress) once what must precede that is
 * done (kernel_timing.h: the spans' ends); 0 where none was pending. */
uint64_t rm_launch_replay_make(struct rm_channel *s, uint32_t why);
/* rm_launch_replay_make, then the channel's progress recorded. why: the op of the call that
 * ends the run, or an rm_replay_end. */
void rm_launch_replay_flush(struct rm_channel *s, uint32_t why);
/* A call annotated drops_replays ran on a channel of s's session: every channel drops its
 * graphs before it next makes a run. */
void rm_launch_replay_drop_all(struct rm_channel *s);
/* The session set a stream attribute: its launches are no longer replayed. */
void rm_launch_replay_stream_attrs_set(struct rm_channel *s);
/* The channel ends: drops its pending run (the client has gone) and frees its graphs,
 * logging what replay did for it (info, once there was any). */
void rm_launch_replay_free(struct rm_channel *s);

#endif
