/* A client's session on the daemon and its channels: who the client is, what its channels
 * share, and the session's life from admission to release. */
#ifndef REMORA_SESSION_H
#define REMORA_SESSION_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "capture_state.h"
#include "config.h"
#include "contexts.h"
#include "handles.h"
#include "host_memory.h"
#include "link.h"
#include "log.h"
#include "quota.h"
#include "staging.h"

#define RM_SESSION_MAX_CTX 64 /* primary and created contexts, destroyed ones included */

struct rm_handoff;
struct rm_kernel_timers;
struct rm_copy_link;
struct rm_hostfn_hub;
struct rm_channel;
struct rm_shared_region;
struct rm_alias;
struct rm_variable_alias;
struct rm_kept_image;
struct rm_moved_run;
struct rm_moved_block;
struct rm_migration;
struct rm_conn;

struct rm_wait_word;
struct rm_launch_replay;

/* A client's session (docs/protocol.md, "Channels"): who the client is, and what its
 * channels share: what it owns, its contexts and its copy links. Each channel's calls run
 * on the channel's own thread, so this is used concurrently: the identity (id to
 * max_channels) is set at admission and never changes; lock guards the handle table, the
 * owned ranges, the contexts' list and the channel table, and is never held across a
 * driver call that waits for the GPU (a synchronize's streams are gathered under it,
 * waited for without). */
struct rm_session {
	uint64_t id;
	int slot;                /* its registry slot */
	int tenant;              /* configuration tenant index; -1: anonymous */
	char tenant_name[64];
	char name[64];
	uint32_t pid;
	uint32_t hello_seq;
	uint32_t heartbeat_ms;   /* how often a long call is covered by a heartbeat (liveness.h) */
	int ndevices;            /* the host GPUs it sees: its ordinal i is host GPU devices[i] */
	int devices[64];
	uint8_t attach_key[16];  /* what a copy link's or channel's Attach must present */
	int max_channels;        /* thread channels allowed (daemon configuration) */

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
	uint64_t peer_enabled[RM_SESSION_MAX_CTX]; /* bit j of [i]: ctxs[i] reaches ctxs[j]'s
						    * memory (peer_access.c; atomic) */
	int open_spans; /* kernel-time spans open in all contexts (kernel_timing.c; atomic) */
	int pending_spans; /* closed and not yet read, in all contexts (kernel_timing.c; atomic) */

	/* The channels (worker.c): [0] the main connection's, [1 .. max_channels] threads'
	 * channels, NULL where none. The session closes once the main connection ends,
	 * after shutting the other channels and waiting for their threads (nchannels). */
	struct rm_channel *channels[RM_MAX_CHANNELS + 1];
	int nchannels;             /* thread channels whose threads run */
	int closing;               /* the main connection ended: no channel attaches */
	pthread_cond_t channel_gone;
	/* Fences (rm_session_fence): each channel's last finished request's seq. */
	pthread_cond_t progress;
	int fence_waiters;

	struct rm_hostfn_hub *hostfn; /* host functions' callback channel (host_functions.h); NULL: none */
	int fault_told; /* the client was told why its calls fail after a fault (fault.h; atomic) */
	struct rm_kernel_watch *kernel_watch; /* its launches against kernel_time_limit; NULL: none */
	uint32_t replay_generation; /* bumped by a call that drops launch replays (launch_replay.h; atomic) */
	int replay_off;             /* it set a stream attribute: no launch replay (atomic) */

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
	/* Live migration (migrate.h, docs/pool.md): the handles it brought from another remorad
	 * (handle_alias.h; under lock), the images of its modules, kept to send them on (under
	 * lock), and a move to another remorad asked for (under lock). */
	struct rm_alias *aliases;
	size_t naliases, aliases_cap;
	struct rm_variable_alias *variable_aliases; /* its device variables' addresses (variable_alias.h) */
	size_t nvariable_aliases;
	struct rm_kept_image *images;
	size_t nimages, images_cap;
	struct rm_preloaded *preloaded; /* a move's target: images sent ahead of the state */
	struct rm_moved_run *moved_runs; /* the mappings its moved memory lies in */
	size_t nmoved_runs, moved_runs_cap;
	struct rm_moved_block *moved_blocks; /* the reservations those mappings lie in */
	size_t nmoved_blocks, moved_blocks_cap;
	struct rm_migration *migration;
	int migrate_in; /* greeted as a move's target: 1 until its state came, 2 until the client attached */
	struct rm_conn *resume_conn; /* the moved client's connection, handed over by its attach (under lock) */
	pthread_cond_t resumed;
};

/* A channel of a session: one connection of the client and the thread that runs its
 * calls, in order. Handlers get the channel; the session it belongs to, who the client
 * is and what it shares with the session's other channels, is sh. */
struct rm_channel {
	int chan;                  /* 0: the session's main connection; 1..: a client thread's */
	int callbacks;             /* the session's callback channel: it carries host functions'
				    * calls and answers, nothing else (host_functions.h) */
	int left_early;            /* the client went during a call: its registry slot is freed
				    * (liveness.c; set and read by the heartbeat thread) */
	struct rm_session *sh;
	uint64_t done_seq;         /* the seq of its last finished request (atomic; fences) */
	uint64_t synced_gpu_ns;    /* kernel time its synchronizes ended, for the registry once
				    * the call has replied (kernel_timing.c, serve.c) */
	uint64_t synced_posted_ns; /* when it last went there */
	struct rm_link link;
	char peer[64];             /* its connection's peer */

	struct rm_session_ctx *cur; /* the context the current request names */
	struct rm_session_ctx *named; /* the context its last CUcontext parameter named (rm_session_use):
				       * a created context's driver value is the shared one's */
	CUcontext thread_ctx;       /* the context current on this session's thread */

	CUresult async_error; /* first error of an async call not reported yet */
	struct rm_launch_replay *replay; /* its run of launches and their graphs (launch_replay.h) */

	/* Liveness (liveness.h): while the session's thread runs a call, a heartbeat goes to
	 * the client every sh->heartbeat_ms until the call's reply begins. */
	pthread_mutex_t send_lock; /* who sends a frame on link: a reply, or a heartbeat */
	uint64_t call_since_ns;    /* when the running call began; 0: none (atomic) */
	uint32_t call_op;          /* the running call's op (atomic) */
	uint64_t long_call_logged; /* call_since_ns of the call last logged as long (liveness.c) */
	uint64_t heartbeat_ns;     /* the last heartbeat, or the call's start (atomic) */
	int reply_begun;           /* the running call's reply is being sent (set under send_lock) */

	struct rm_staging staging; /* copies over the channel's own connection */
	size_t ring_bytes;         /* its link's read buffer and what its connection holds for the
				    * client (rm_conn_held): charged to sh->host */
	/* Words its stream waits watch, one per context it waited in: the main channel's only,
	 * as words are used only while the client has no thread channels (stream_wait.h). */
	struct rm_wait_word *wait_words[RM_SESSION_MAX_CTX];
	uint8_t small_in[RM_SMALL_HTOD]; /* a small blocking copy's bytes (rm_copy_in): pageable */
};

/* Logs a line about session s (given any of its channels), prefixed with its id and name. */
#define rm_session_log(s, level, fmt, ...)                                                        \
	rm_log((level), "session %llu (%s): " fmt, (unsigned long long)(s)->sh->id, (s)->sh->name, \
	       ##__VA_ARGS__)

/* A session for a client the accepting process admitted (handoff h). */
struct rm_channel *rm_session_new(struct rm_conn *conn, const struct rm_daemon_config *cfg,
				  const struct rm_handoff *h);
/* A channel of s's session for a client thread's connection conn, numbered
 * chan (attach.c); NULL when out of memory. rm_session_channel_close frees it and what the channel
 * alone held (its per-thread default streams, drained first). */
struct rm_channel *rm_session_channel_new(struct rm_channel *s, struct rm_conn *conn, int chan);
void rm_session_channel_close(struct rm_channel *ch);
/* Waits until channel chan of s's session has finished its request seq (or is gone):
 * a call on one channel that another client thread's returned async calls must precede. */
void rm_session_fence(struct rm_channel *s, uint32_t chan, uint64_t seq);
/* Records that s finished its request seq, waking fences. */
void rm_session_progress(struct rm_channel *s, uint64_t seq);

/* Frees everything the client owns, each kind in its step of proto/handle_kinds.def
 * (release.c); returns how many handles that was. */
size_t rm_session_release_all(struct rm_channel *s);
/* The device memory and address ranges of a session that moved away (migrate_out.c), its
 * work done, given back now (cuMemFree, cuMemAddressFree) rather than at its end, so that
 * its addresses are free here when the client moves back: how many were. */
size_t rm_session_release_memory_now(struct rm_channel *s);
/* Gives back an address range of the client's (RM_H_VA_RANGE) now, nothing mapped in it:
 * the window's, else parked (rm_migrate_park_range) for the client's return. */
void rm_va_range_give_back(struct rm_channel *s, const struct rm_handle *h);
/* Frees everything the client still owns, then the session. */
void rm_session_destroy(struct rm_channel *s);

#endif
