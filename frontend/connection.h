/* The client library's connections to its daemon. A connection holds a link, the batch
 * of async calls not sent yet with the thread that flushes it (flusher.c), and, for the
 * session's main one, the copy links. rm_client_conn_open greets the daemon on a new
 * session and acquires them in that order; rm_client_channel_open attaches a channel to
 * that session (docs/protocol.md "Channels"): a connection of the same kind with its
 * batch and flusher but no copy links; rm_client_conn_close releases either in reverse.
 * The client object (client_object.h) owns the process's main connection and channels;
 * calls go out through rm_client_call (rpc.c). */
#ifndef REMORA_FRONTEND_CONNECTION_H
#define REMORA_FRONTEND_CONNECTION_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

#include "client.h"
#include "link.h"

#define RM_CLIENT_BATCH_CAP (1u << 20) /* bytes of async calls a connection queues at most */
#define RM_BATCH_FLUSH_AT (64u << 10)  /* flush async calls once this much is queued */
/* How long queued async calls wait for company: RM_FLUSH_DELAY_NS for the first batch of a
 * run of them, doubled at each batch the program's own next call finds overdue, up to
 * rm_flush_delay_max_ns() (REMORA_FLUSH_DELAY_MAX_US); back to the first at a call that
 * waits and at a batch the flusher sends (docs/hotpath.md, "Round trips"). */
#define RM_FLUSH_DELAY_NS 50000
#define RM_FLUSH_DELAY_MAX_NS 400000
uint64_t rm_flush_delay_max_ns(void);
/* Parses REMORA_FLUSH_DELAY_MAX_US (whole µs, RM_FLUSH_DELAY_NS to 10 ms) into *ns: 0, or -EINVAL. */
int rm_flush_delay_parse(const char *v, uint64_t *ns);

struct rm_copy_links;

#define RM_ORDER_SLOTS 16
#define RM_ATTACH_KEY_BYTES 16

/* What attaching a connection to a session takes (a channel, a copy link): learnt by the
 * main connection from its hello. */
struct rm_attach_to {
	const struct rm_transport *tp;
	char addr[256];
	uint64_t session_id;
	uint8_t key[RM_ATTACH_KEY_BYTES];
	size_t keylen;            /* 0: the daemon offers no attaching */
	int timeout_ms;           /* the liveness timeout of each connection (REMORA_PEER_TIMEOUT) */
};

struct rm_client_conn {
	struct rm_link link;      /* the session's connection */
	pthread_mutex_t lock;     /* one call on the link at a time; guards the fields below */
	int connected;            /* 1 from the hello until lost or closed; 0: calls fail fast */
	int greeting;             /* 1 while the hello is out: a connection shed is the opener's to report */
	int lost_err;             /* why the connection was lost, -errno (rm_client_lost_locked) */
	uint8_t *batch;           /* async calls queued, sent with the next call that sends */
	size_t batch_len;
	uint64_t session_id;
	int driver_version;       /* the GPU host's, from the hello reply */
	uint32_t heartbeat_ms;    /* the daemon wants to hear from us this often; 0: no need */
	uint64_t last_send_ns;    /* when a frame last went out (written under lock, read atomically) */
	struct rm_copy_links *copy_links; /* NULL: large copies go over the link alone */

	uint32_t chan;            /* 0: the main connection; else its channel number */
	struct rm_attach_to attach; /* the main connection's: how channels and copy links attach */
	int ended;                /* rm_client_conn_end ran: the link is closed */
	/* Fences: seqs are unique in the process (rpc.c). Written under lock, read atomically. */
	uint64_t last_async_seq;  /* the last async call queued */
	uint64_t synced_seq;      /* the last synchronous call answered: all before it ran */
	uint64_t *fenced;         /* [channel]: the other channel's seq this one has fenced on */
	struct {
		uint64_t key, seq;
	} order_slot[RM_ORDER_SLOTS]; /* by a key's hash: the last async call on that stream or event */
	uint64_t unordered_seq;   /* the last async call whose streams and events are not all in order_slot */

	/* The flusher (flusher.c): sends a batch whose oldest call has waited long enough, for a
	 * program that makes no further call, and a heartbeat on a connection idle for
	 * heartbeat_ms. The times are written under lock and read by the flusher without it
	 * (atomics); armed is set under flusher_lock. */
	uint64_t batch_since_ns;  /* when the oldest queued call was queued; 0: none queued */
	uint64_t last_async_ns;   /* when the last async call was queued */
	uint64_t flush_delay_ns;  /* how long the batch may wait now (written under lock) */
	int flusher_armed;
	int reader;               /* another thread reads the link (the callback channel,
				   * host_functions.c): the flusher only sends heartbeats */
	int flusher_running;      /* its thread was started and is to be joined */
	pthread_t flusher;
	pthread_mutex_t flusher_lock;
	pthread_cond_t flusher_cond;

	/* Live migration (moved.c): the daemon said, before a reply, that the session now lives
	 * at another remorad; the connection moves there once the reply is read. */
	int moved;
	char moved_to[256];
	uint64_t moved_session;
	uint32_t moved_heartbeat_ms; /* the target's heartbeat interval; 0: the one we have */
	uint8_t moved_key[RM_ATTACH_KEY_BYTES];
	int holding; /* the main connection: the thread channels are held still for a move */
};

/* An RM_OP_MOVED frame rf (its header read) on c: its message read and noted. 1, or
 * -errno (c is then lost). (moved.c) */
int rm_client_moved_note_locked(struct rm_client_conn *c, const struct rm_frame *rf);
/* Once the reply after it is read: c's link, copy links and attach details are the new
 * remorad's. 0, or -errno after a line saying why (c is then lost). */
int rm_client_move_locked(struct rm_client_conn *c);
/* An RM_OP_MOVE_PREPARE on the main connection c: every thread channel held (its lock
 * taken, its batch sent) and RM_OP_MOVE_READY sent. 1, or -errno (c is then lost). */
int rm_client_move_prepare_locked(struct rm_client_conn *c, const struct rm_frame *rf);
/* Once the reply is read: the held channels attached to the new session where c moved
 * (moved), then let go. */
void rm_client_channels_release_locked(struct rm_client_conn *c, int moved);

/* Connects to server ("tcp://host:port" or "host:port"), greets the daemon and opens the
 * session's copy links and flusher. CUDA_SUCCESS, or the CUresult to give the program
 * after one line on stderr saying why; then c holds nothing. */
CUresult rm_client_conn_open(struct rm_client_conn *c, const char *server);
/* Attaches c as channel number chan of main's session: CUDA_SUCCESS; CUDA_ERROR_TOO_MANY_PEERS
 * when the daemon has no room for it (nothing said); else a failure after a line on
 * stderr. Either way not CUDA_SUCCESS leaves c holding nothing. */
CUresult rm_client_channel_open(struct rm_client_conn *c, const struct rm_client_conn *main, uint32_t chan);
/* Dials to->addr and attaches the connection to to's session as l: a channel (channel 1,
 * index its number) or copy link index. 0, or -errno: the dial's, -EUSERS when the daemon
 * has no room for it, -EACCES or -ENOMEM when it refused it, -EPROTO for an answer out of
 * contract. Says nothing; l holds nothing on failure. (connection.c) */
int rm_client_attach(struct rm_link *l, const struct rm_attach_to *to, uint32_t index, int channel);
/* Stops c (calls fail fast), ends its flusher and copy links and closes its link. Its memory
 * stays, for threads that may still look at it without its lock (rpc.c's fences). */
void rm_client_conn_end(struct rm_client_conn *c);
/* Ends every call in progress with CUDA_ERROR_DEVICE_UNAVAILABLE, then releases what
 * open acquired, in reverse. No other thread may hold c. */
void rm_client_conn_close(struct rm_client_conn *c);

/* Makes call on c (client.h's rm_rpc on a given connection). (rpc.c) */
CUresult rm_client_call(struct rm_client_conn *c, struct rm_rpc_call *call);
/* Sends frame f (no message, no bulk) on c under its lock: 0, or -errno after c is lost. */
int rm_client_send_frame(struct rm_client_conn *c, const struct rm_frame *f);
/* Sends the batch and then extra (under c->lock): 0 or -errno. */
int rm_client_flush_locked(struct rm_client_conn *c, const struct iovec *extra, int nextra);
/* Gives c up after a transport error err while doing what (one line on stderr, unless
 * the client is closed); every later call fails fast. Under c->lock. Returns
 * CUDA_ERROR_DEVICE_UNAVAILABLE. */
CUresult rm_client_lost_locked(struct rm_client_conn *c, const char *what, int err);
/* Deals with frame rf read where a reply may come: 1 when it was a heartbeat or a fault
 * notice (logged), 0 when it is none, -errno when its text could not be read. */
int rm_client_before_reply(struct rm_client_conn *c, const struct rm_frame *rf);
/* Marks c lost (calls fail fast from now on), unblocks a call waiting on its link and
 * wakes the flusher so that it ends. Called with c->lock held. */
void rm_client_conn_stop_locked(struct rm_client_conn *c);

/* Opens a channel of the session that no thread's calls use (the callback channel):
 * NULL when the daemon has no room or none could be opened. rm_channel_close_spare ends
 * it. (channels.c) */
struct rm_client_conn *rm_channel_open_spare(void);
void rm_channel_close_spare(struct rm_client_conn *c);

static inline uint64_t rm_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The flusher (flusher.c). rm_client_flusher_start starts its thread: 0 or -errno;
 * rm_client_flusher_arm, under c->lock after an async call was queued, makes sure it
 * looks at the batch. */
int rm_client_flusher_start(struct rm_client_conn *c);
void rm_client_flusher_arm(struct rm_client_conn *c);
/* The interval a daemon asked for (0: none), no shorter than RM_MIN_HEARTBEAT_MS. */
static inline uint32_t rm_client_heartbeat_of(uint32_t asked)
{
	return asked && asked < RM_MIN_HEARTBEAT_MS ? RM_MIN_HEARTBEAT_MS : asked;
}
/* A new heartbeat interval (a move's target's), the flusher woken to wait for it. */
void rm_client_set_heartbeat(struct rm_client_conn *c, uint32_t ms);

#endif
