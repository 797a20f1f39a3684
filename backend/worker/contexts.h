/* A session's contexts (one shared context per GPU it uses), the client's streams in
 * them (its legacy and per-thread streams, the legacy stream's ordering, stream_order.c),
 * its device ordinals and its synchronizes. */
#ifndef REMORA_CONTEXTS_H
#define REMORA_CONTEXTS_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "wire.h"

struct rm_frame;
struct rm_kernel_timers;
struct rm_channel;

/* A stream the client created without CU_STREAM_NON_BLOCKING (or its per-thread
 * default stream). The driver's streams are all non-blocking, so that no client
 * waits on the context's NULL stream; the legacy stream's ordering against these
 * streams is kept by events (stream_order.c). */
struct rm_blocking_stream {
	CUstream stream;
	CUevent done;          /* recorded on it when the legacy stream must wait for it */
	uint64_t work;         /* calls issued to it */
	uint64_t legacy_waited; /* its work count the legacy stream last waited for */
	uint64_t waited_legacy; /* the legacy stream's work count it last waited for */
};

#define RM_CTX_LIMITS 16 /* CUlimit values a context records (beyond: the driver's) */

/* Per-context state of a session, shared by its channels: a primary context (the worker's
 * shared context of the GPU), or a context the client created, its own record over that
 * same shared context. Slots are appended and never reused: a destroyed one stays, marked. */
#define RM_MAX_RETIRED_STREAMS 32

struct rm_session_ctx {
	CUcontext ctx;           /* the worker's shared context: what the driver is given */
	CUdevice dev;
	uint64_t handle;         /* the client's value for it: ctx itself for the primary context */
	int created;             /* made by cuCtxCreate */
	int destroyed;           /* by cuCtxDestroy (atomic): requests naming it are refused */
	unsigned long long id;   /* a created context's cuCtxGetId */
	/* The limits the client set in it (cuCtxSetLimit; under the session's lock): what
	 * cuCtxGetLimit answers, while the shared context keeps the highest any client set. */
	size_t limits[RM_CTX_LIMITS];
	uint32_t limits_set;
	/* What each limit the client set holds on the device, charged to its quota (bytes
	 * before rm_charged_bytes; context_handlers.c): given back when the context goes. */
	uint64_t limit_charge[RM_CTX_LIMITS];
	CUstream default_stream; /* the client's legacy NULL stream: a stream of its own */
	/* The fields below are guarded by order_lock: held while a call is ordered on the
	 * legacy stream semantics (stream_order.c), which may wait for a shared hardware
	 * queue (rm_stream_pool_before_wait) but never for a synchronize. */
	pthread_mutex_t order_lock;
	CUevent legacy_done;     /* recorded on it when a blocking stream must wait for it */
	uint64_t legacy_work;
	/* Each channel's per-thread default stream (index: the channel), made when first
	 * named: a client thread with a channel of its own has a stream of its own, as in
	 * CUDA; threads sharing the main connection share channel 0's. */
	CUstream per_thread[RM_MAX_CHANNELS + 1];
	int nper_thread;         /* how many of them are made (under order_lock) */
	CUmemoryPool pool;       /* the client's default memory pool on this GPU, made when first named */
	struct rm_blocking_stream *blocking;
	int nblocking, blocking_cap;
	/* Stream captures the client began in this context and has not ended (atomic):
	 * while there are some, a stream is asked whether it captures before the daemon
	 * puts anything of its own on it (capture_handlers.c). */
	int captures;
	/* Streams the client destroyed while a capture held them (forked into another stream's
	 * capture): given back to the pool once none does, at an end of capture or of the
	 * session, so that the capture goes on and the pool's next user gets a stream no
	 * capture records (capture_state.c; under order_lock). */
	CUstream retired[RM_MAX_RETIRED_STREAMS];
	int nretired;
	struct rm_kernel_timers *timers; /* kernel_timing.h; made at the first timed launch (under sh->lock) */
	/* cuCtxRecordEvent, cuCtxWaitEvent (backend/calls/ctx_event_handlers.c): the context's
	 * stream for them and the event its later streams wait for, made when first needed. */
	CUstream record_stream;
	CUevent wait_event;
};

/* Context i of the session, or NULL (the list is only appended to). */
struct rm_session_ctx *rm_session_ctx_at(struct rm_channel *s, int i);
/* Makes the context a request names current on this thread; 0 means none. */
CUresult rm_session_enter(struct rm_channel *s, uint64_t ctx);

/* Maps the client's device ordinal to the host's GPU. */
CUresult rm_session_device(struct rm_channel *s, int ordinal, CUdevice *out);
/* Maps a host GPU to the client's ordinal for it (a CUdevice the driver gave back). */
CUresult rm_session_device_out(struct rm_channel *s, CUdevice dev, CUdevice *out);

/* Gives the session dev's shared context (once per device), creating the client's default stream in it. */
CUresult rm_session_add_ctx(struct rm_channel *s, CUdevice dev, CUcontext *out);
/* A context the client creates on dev: a slot of its own over dev's shared context, with
 * its own default stream; *out its record. */
CUresult rm_session_create_ctx(struct rm_channel *s, CUdevice dev, struct rm_session_ctx **out);
/* The session's context of the client's value v (created or primary), or NULL; a destroyed
 * one gives CUDA_ERROR_CONTEXT_IS_DESTROYED in *why. */
struct rm_session_ctx *rm_session_ctx_of(struct rm_channel *s, uint64_t v, CUresult *why);
/* Destroys created context c: waits for its streams, releases what the client made in it
 * (release.c, rm_session_release_ctx) and gives its streams back. */
CUresult rm_session_destroy_ctx(struct rm_channel *s, struct rm_session_ctx *c);
/* A stream new in c waits for what cuCtxWaitEvent made c wait for; and c's record stream
 * and wait event go (backend/calls/ctx_event_handlers.c). */
CUresult rm_ctx_events_adopt(struct rm_session_ctx *c, CUstream st);
void rm_ctx_events_release(struct rm_session_ctx *c);
/* Releases the handles the client made in context c that die with it (release.c). */
size_t rm_session_release_ctx(struct rm_channel *s, struct rm_session_ctx *c);

/* Frees one of the client's allocations in the current context once the client's own
 * work is done: cuMemFree would wait for every client's work in the shared context
 * and hold up their launches meanwhile (H200: 348 ms behind another client's kernel). */
CUresult rm_session_free_memory(struct rm_channel *s, uint64_t ptr);

/* Frees memory whose users are known to be done, without cuMemFree's wait for the whole
 * shared context. */
void rm_session_free_drained(struct rm_channel *s, uint64_t ptr);
/* Waits for every stream of the client in the current context. */
CUresult rm_session_synchronize(struct rm_channel *s);
/* Waits for every stream of the client in every context. */
CUresult rm_session_synchronize_all(struct rm_channel *s);

/* Maps a stream value for a call about to be issued to it: 0 and CU_STREAM_LEGACY become
 * the client's legacy stream, CU_STREAM_PER_THREAD (or 0 from a _ptds/_ptsz entry point)
 * its per-thread stream; and orders the call as CUDA's legacy stream semantics ask. The
 * stream counts as in use on its hardware queue (stream_pool.h). */
CUresult rm_session_stream(struct rm_channel *s, uint64_t v, uint32_t frame_flags, CUstream *out);
/* rm_session_stream for a call that puts work on the stream: when another client's stream
 * on its hardware queue is in use, first waits for its unfinished work. */
CUresult rm_session_stream_submit(struct rm_channel *s, uint64_t v, uint32_t frame_flags, CUstream *out);
/* Whether the client's next frame, already buffered behind the launch of frame launch on
 * stream value v, is a synchronize that waits for that stream: cuCtxSynchronize of the
 * same context, or cuStreamSynchronize naming the same stream. Only looks; consumes and
 * orders nothing. (Kernel timing then needs no event, kernel_timing.h.) */
int rm_session_sync_follows(struct rm_channel *s, const struct rm_frame *launch, uint64_t v);
/* Records that the client's new stream st was asked for as blocking (flags without
 * CU_STREAM_NON_BLOCKING), and forgets a destroyed one. */
CUresult rm_stream_order_add(struct rm_session_ctx *c, CUstream st);
void rm_stream_order_remove(struct rm_channel *s, CUstream st);
/* Whether st is one of the client's blocking streams (or its legacy or per-thread stream). */
int rm_stream_order_is_blocking(struct rm_session_ctx *c, CUstream st);
/* Orders a call about to be issued to stream st (a stream of context c). */
CUresult rm_stream_order_before(struct rm_session_ctx *c, CUstream st);
/* Frees a context's ordering state. */
void rm_stream_order_release(struct rm_session_ctx *c);

#endif
