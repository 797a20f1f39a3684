/* A client's session on the daemon: what it owns, and the checks that keep it to that. */
#ifndef REMORA_SESSION_H
#define REMORA_SESSION_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "config.h"
#include "host_memory.h"
#include "link.h"
#include "staging.h"

/* What a session owns: the kinds of proto/handle_kinds.def, the one list of them. */
enum rm_handle_kind {
	RM_H_NONE, /* 0: no kind; the kinds count from 1 */
#define RM_HANDLE_KIND(kind, ctype) kind,
#include "../proto/handle_kinds.def"
#undef RM_HANDLE_KIND
};

struct rm_handle {
	uint64_t value;
	uint64_t size;   /* memory: its length; an event: its creation flags */
	uint64_t parent; /* the module of a function or global, else 0 */
	uint32_t kind;
};

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

/* Per-context state of a session, shared by its channels. */
struct rm_session_ctx {
	CUcontext ctx;
	CUdevice dev;
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
	struct rm_kernel_timers *timers; /* kernel_timing.h; made at the first timed launch (under sh->lock) */
};

#define RM_SESSION_MAX_CTX 16

struct rm_handoff;
struct rm_kernel_timers;
struct rm_copy_link;
struct rm_hostfn_hub;
struct rm_session;
struct rm_shared_region;

struct rm_wait_word;

/* What the channels of one session share (docs/protocol.md, "Channels"): what the client
 * owns, its contexts and its copy links. Each channel's calls run on the channel's own
 * thread, so this is used concurrently: lock guards the handle table, the owned ranges,
 * the contexts' list and the channel table, and is never held across a driver call that
 * waits for the GPU (a synchronize's streams are gathered under it, waited for without). */
struct rm_session_shared {
	pthread_mutex_t lock;
	struct rm_handle *handles; /* open-addressing table keyed by (kind, value) */
	size_t handles_cap, handles_used, handles_live;
	struct rm_handle *ranges; /* owned device memory, sorted by base, for range checks */
	size_t nranges, ranges_cap;
	CUstream *streams; /* the streams it created: what a synchronize waits for, without a
			    * walk of the handle table */
	size_t nstreams, streams_cap;
	/* How its stream waits ended (atomic; stream_wait.h): answered by a query, by a
	 * word the GPU wrote, by the driver's wait. */
	unsigned long long waits_idle, waits_word, waits_driver;
	uint64_t mem_bytes;

	struct rm_session_ctx ctxs[RM_SESSION_MAX_CTX]; /* appended, never moved */
	int nctx;
	int open_spans; /* kernel-time spans open in all contexts (kernel_timing.c; atomic) */
	int pending_spans; /* closed and not yet read, in all contexts (kernel_timing.c; atomic) */

	/* The channels (worker.c): [0] the main connection's, [1 .. max_channels] threads'
	 * channels, NULL where none. The session closes once the main connection ends,
	 * after shutting the other channels and waiting for their threads (nchannels). */
	struct rm_session *channels[RM_MAX_CHANNELS + 1];
	int nchannels;             /* thread channels whose threads run */
	int closing;               /* the main connection ended: no channel attaches */
	pthread_cond_t channel_gone;
	/* Fences (rm_session_fence): each channel's last finished request's seq. */
	pthread_cond_t progress;
	int fence_waiters;

	struct rm_hostfn_hub *hostfn; /* host functions' callback channel (host_functions.h); NULL: none */
	int fault_told; /* the client was told why its calls fail after a fault (fault.h; atomic) */
	struct rm_kernel_watch *kernel_watch; /* its launches against kernel_time_limit; NULL: none */

	pthread_mutex_t copy_lock; /* attaching copy links; held by a striped copy throughout */
	struct rm_copy_link *copy_links[RM_MAX_COPY_LINKS]; /* [1 .. ncopy_links] */
	int ncopy_links;

	/* Shared pinned memory (shared_host.h): the client's regions, sorted by address. Not
	 * handles: a primary context reset (rm_session_release_all) leaves them, as the client
	 * keeps using its allocations. shared_lock is held for reading by a copy while it finds
	 * its region and queues the copy, for writing by a share or unshare. */
	pthread_rwlock_t shared_lock;
	struct rm_shared_region *shared;
	int nshared;
	uint64_t shared_bytes;
	uint64_t shared_limit; /* shared_pinned_limit; 0: no sharing */

	/* Host memory the worker holds for the client (client_host_memory_limit): its channels,
	 * copy links and their staging, images being received, its connections' rings. */
	struct rm_host_account host;
};

/* A channel of a session: one connection of the client and the thread that runs its
 * calls, in order. Handlers get the channel; what they share with the session's other
 * channels is behind sh. The identity (id to heartbeat_ms) is copied from the main
 * channel and never changes. */
struct rm_session {
	uint64_t id;
	int chan;                  /* 0: the session's main connection; 1..: a client thread's */
	int callbacks;             /* the session's callback channel: it carries host functions'
				    * calls and answers, nothing else (host_functions.h) */
	int left_early;            /* the client went during a call: its registry slot is freed
				    * (liveness.c; set and read by the heartbeat thread) */
	struct rm_session_shared *sh;
	uint64_t done_seq;         /* the seq of its last finished request (atomic; fences) */
	uint64_t synced_gpu_ns;    /* kernel time its synchronizes ended, for the registry once
				    * the call has replied (kernel_timing.c, worker.c) */
	uint64_t synced_posted_ns; /* when it last went there */
	struct rm_link link;
	char peer[64];
	char name[64];
	uint32_t pid;
	uint32_t hello_seq;

	int slot;                /* its registry slot */
	int tenant;              /* configuration tenant index; -1: anonymous */
	char tenant_name[64];
	int ndevices;            /* the host GPUs it sees: its ordinal i is host GPU devices[i] */
	int devices[64];

	uint8_t attach_key[16];  /* what a copy link's or channel's Attach must present */
	int max_channels;        /* thread channels allowed (daemon configuration) */

	struct rm_session_ctx *cur; /* the context the current request names */
	CUcontext thread_ctx;       /* the context current on this session's thread */

	CUresult async_error; /* first error of an async call not reported yet */

	/* Liveness (liveness.h): while the session's thread runs a call, a heartbeat goes to
	 * the client every heartbeat_ms until the call's reply begins. */
	pthread_mutex_t send_lock; /* who sends a frame on link: a reply, or a heartbeat */
	uint64_t call_since_ns;    /* when the running call began; 0: none (atomic) */
	uint64_t heartbeat_ns;     /* the last heartbeat, or the call's start (atomic) */
	int reply_begun;           /* the running call's reply is being sent (set under send_lock) */
	uint32_t heartbeat_ms;

	struct rm_staging staging; /* copies over the channel's own connection */
	size_t ring_bytes;         /* its link's read buffer and what its connection holds for the
				    * client (rm_conn_held): charged to sh->host */
	/* Words its stream waits watch, one per context it waited in: the main channel's only,
	 * as words are used only while the client has no thread channels (stream_wait.h). */
	struct rm_wait_word *wait_words[RM_SESSION_MAX_CTX];
	uint8_t small_in[RM_SMALL_HTOD]; /* a small blocking copy's bytes (rm_copy_in): pageable */
};

/* A session for a client the accepting process admitted (handoff h). */
struct rm_session *rm_session_new(struct rm_conn *conn, const struct rm_daemon_config *cfg,
				  const struct rm_handoff *h);
/* A channel of s's session for a client thread's connection conn (worker.c), numbered
 * chan; NULL when out of memory. rm_session_channel_close frees it and what the channel
 * alone held (its per-thread default streams, drained first). */
struct rm_session *rm_session_channel_new(struct rm_session *s, struct rm_conn *conn, int chan);
void rm_session_channel_close(struct rm_session *ch);
/* Waits until channel chan of s's session has finished its request seq (or is gone):
 * a call on one channel that another client thread's returned async calls must precede. */
void rm_session_fence(struct rm_session *s, uint32_t chan, uint64_t seq);
/* Records that s finished its request seq, waking fences. */
void rm_session_progress(struct rm_session *s, uint64_t seq);

/* Frees everything the client owns; returns how many handles that was. */
size_t rm_session_release_all(struct rm_session *s);
/* Frees everything the client still owns, then the session. */
void rm_session_destroy(struct rm_session *s);

/* Makes the context a request names current on this thread; 0 means none. */
CUresult rm_session_enter(struct rm_session *s, uint64_t ctx);

/* Gives the real handle of wire value v, if the client owns one of that kind. */
CUresult rm_session_use(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, void **out);
/* Maps a stream value for a call about to be issued to it: 0 and CU_STREAM_LEGACY become
 * the client's legacy stream, CU_STREAM_PER_THREAD (or 0 from a _ptds/_ptsz entry point)
 * its per-thread stream; and orders the call as CUDA's legacy stream semantics ask. The
 * stream counts as in use on its hardware queue (stream_pool.h). */
CUresult rm_session_stream(struct rm_session *s, uint64_t v, uint32_t frame_flags, CUstream *out);
/* rm_session_stream for a call that puts work on the stream: when another client's stream
 * on its hardware queue is in use, first waits for its unfinished work. */
CUresult rm_session_stream_submit(struct rm_session *s, uint64_t v, uint32_t frame_flags, CUstream *out);
/* Whether the client's next frame, already buffered behind the launch of frame launch on
 * stream value v, is a synchronize that waits for that stream: cuCtxSynchronize of the
 * same context, or cuStreamSynchronize naming the same stream. Only looks; consumes and
 * orders nothing. (Kernel timing then needs no event, kernel_timing.h.) */
int rm_session_sync_follows(struct rm_session *s, const struct rm_frame *launch, uint64_t v);
/* Records that the client's new stream st was asked for as blocking (flags without
 * CU_STREAM_NON_BLOCKING), and forgets a destroyed one. */
CUresult rm_stream_order_add(struct rm_session_ctx *c, CUstream st);
void rm_stream_order_remove(struct rm_session *s, CUstream st);
/* Whether st is one of the client's blocking streams (or its legacy or per-thread stream). */
int rm_stream_order_is_blocking(struct rm_session_ctx *c, CUstream st);
/* Orders a call about to be issued to stream st (a stream of context c). */
CUresult rm_stream_order_before(struct rm_session_ctx *c, CUstream st);
/* Frees a context's ordering state. */
void rm_stream_order_release(struct rm_session_ctx *c);
/* Checks that [ptr, ptr+len) lies inside one piece of memory the client owns. */
CUresult rm_session_check_range(struct rm_session *s, uint64_t ptr, uint64_t len);
/* rm_session_check_range for count elements of unit bytes: CUDA_ERROR_INVALID_VALUE
 * when count * unit overflows. */
CUresult rm_session_check_span(struct rm_session *s, uint64_t ptr, uint64_t count, uint64_t unit);
/* Whether a piece of usable memory (an allocation, global or mapping) the client owns
 * holds ptr, and if so a copy of its record in *out (may be NULL); quietly, for queries
 * that answer "not found" themselves. */
int rm_session_range_of(struct rm_session *s, uint64_t ptr, struct rm_handle *out);
/* Maps the client's device ordinal to the host's GPU. */
CUresult rm_session_device(struct rm_session *s, int ordinal, CUdevice *out);
/* Maps a host GPU to the client's ordinal for it (a CUdevice the driver gave back). */
CUresult rm_session_device_out(struct rm_session *s, CUdevice dev, CUdevice *out);

/* What an allocation of bytes is charged: what the driver takes for it, not what was asked
 * (docs/sharing.md, "Quotas"). cuMemAlloc gives no two allocations one 512-byte block, and
 * maps an allocation of 2 MiB or more in whole 2 MiB pages: 20,000 one-byte allocations
 * took 5.1 MB of the device. So below 2 MiB, bytes rounded up to 512; from 2 MiB, to 2 MiB. */
#define RM_CHARGE_SMALL_UNIT 512u
#define RM_CHARGE_LARGE_UNIT (2u << 20)
static inline uint64_t rm_charged_bytes(uint64_t bytes)
{
	uint64_t unit = bytes < RM_CHARGE_LARGE_UNIT ? RM_CHARGE_SMALL_UNIT : RM_CHARGE_LARGE_UNIT;
	return bytes > UINT64_MAX - unit ? UINT64_MAX : (bytes + unit - 1) / unit * unit;
}
/* Charges a new allocation of bytes (rm_charged_bytes of them) to the client's and its
 * tenant's quotas: CUDA_ERROR_OUT_OF_MEMORY (and a log line) when it would pass either.
 * rm_session_uncharge gives back what charging the same bytes took. */
CUresult rm_session_charge(struct rm_session *s, uint64_t bytes);
void rm_session_uncharge(struct rm_session *s, uint64_t bytes);
/* The client's view of device memory: the device's, narrowed by its quotas. */
void rm_session_memory_view(struct rm_session *s, size_t *free_b, size_t *total_b);
/* The device memory one client of its tenant may hold now (registry.h); 0: no limit. */
uint64_t rm_session_client_limit(struct rm_session *s);

/* Records that the client now owns h (size: bytes of memory; parent: owning module). */
void rm_session_own(struct rm_session *s, enum rm_handle_kind kind, const void *h, uint64_t parent);
void rm_session_own_memory(struct rm_session *s, enum rm_handle_kind kind, uint64_t base, uint64_t size,
			   uint64_t parent);
/* Forgets h, and what h is the parent of. */
void rm_session_disown(struct rm_session *s, enum rm_handle_kind kind, const void *h);
void rm_session_disown_value(struct rm_session *s, enum rm_handle_kind kind, uint64_t v);
/* Copies an owned handle's record into out (may be NULL): 1, or 0 when not owned. */
int rm_session_find(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out);
/* Calls visit on each owned handle of kind, under the session's lock (visit must not call
 * into the session), until one returns nonzero; returns that, or 0. */
int rm_session_each(struct rm_session *s, enum rm_handle_kind kind, int (*visit)(const struct rm_handle *h, void *arg),
		    void *arg);
/* Sets an owned handle's parent field (a mark kinds without parents keep there): 1, or 0
 * when it is not owned. */
int rm_session_set_parent(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, uint64_t parent);
/* Forgets an owned handle as one step, copying its record into out: 1, or 0 when it was
 * not owned (another thread's call gave it up first). For a call that gives the handle
 * back to the driver: a handle only one call can take is freed once. */
int rm_session_take(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out);

/* Gives the session dev's shared context (once per device), creating the client's default stream in it. */
CUresult rm_session_add_ctx(struct rm_session *s, CUdevice dev, CUcontext *out);

/* Frees one of the client's allocations in the current context once the client's own
 * work is done: cuMemFree would wait for every client's work in the shared context
 * and hold up their launches meanwhile (H200: 348 ms behind another client's kernel). */
CUresult rm_session_free_memory(struct rm_session *s, uint64_t ptr);

/* Whether driver stream st takes part in a stream capture (active or invalidated). */
int rm_capture_active(CUstream st);
/* Ends every capture of the client's streams, destroying what they made (a client that
 * went away mid-capture); the contexts' capture counts drop to 0. */
void rm_capture_end_all(struct rm_session *s);
/* Whether a call to the legacy stream of c must fail because a blocking stream of the
 * client captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT): that capture is invalidated. */
CUresult rm_capture_check_legacy(struct rm_session_ctx *c);

/* Each of n node handles is one the client owns, of graph g (graph_handlers.c). */
CUresult rm_graph_check_nodes(struct rm_session *s, CUgraph g, const CUgraphNode *nodes, size_t n);
/* A memset node's rows lie in memory the client owns: height rows of width elements,
 * pitch bytes apart, without overflow. */
CUresult rm_graph_check_memset(struct rm_session *s, const CUDA_MEMSET_NODE_PARAMS *p);

/* Waits for every stream of the client in the current context. */
CUresult rm_session_synchronize(struct rm_session *s);
/* Waits for every stream of the client in every context. */
CUresult rm_session_synchronize_all(struct rm_session *s);

#endif
