/* The client library's connection to its daemon: the session's link, the batch of async
 * calls not sent yet with the thread that flushes it, and the copy links.
 * rm_client_conn_open acquires them in that order and rm_client_conn_close releases them
 * in the reverse; a process has one connection (rpc.c), opened at its first call.
 * Each other thread of the process that calls gets a channel of its own (rpc.c,
 * docs/protocol.md "Channels"): a connection of the same kind attached to the session
 * (rm_client_channel_open), with its batch and flusher but no copy links. */
#ifndef REMORA_FRONTEND_CONNECTION_H
#define REMORA_FRONTEND_CONNECTION_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "client.h"
#include "link.h"

#define RM_CLIENT_BATCH_CAP (1u << 20) /* bytes of async calls a connection queues at most */

struct rm_copy_links;

#define RM_ORDER_SLOTS 16

struct rm_client_conn {
	struct rm_link link;      /* the session's connection */
	pthread_mutex_t lock;     /* one call on the link at a time; guards the fields below */
	int connected;            /* 1 from the hello until lost or closed; 0: calls fail fast */
	uint8_t *batch;           /* async calls queued, sent with the next call that sends */
	size_t batch_len;
	uint64_t session_id;
	int driver_version;       /* the GPU host's, from the hello reply */
	uint32_t heartbeat_ms;    /* the daemon wants to hear from us this often; 0: no need */
	uint64_t last_send_ns;    /* when a frame last went out (written under lock, read atomically) */
	struct rm_copy_links *copy_links; /* NULL: large copies go over the link alone */

	/* Channels (rpc.c). What a channel needs to attach, kept by the main connection. */
	uint32_t chan;            /* 0: the main connection; else its channel number */
	const struct rm_transport *tp;
	char addr[256];
	uint8_t key[16];
	size_t keylen;            /* 0: the daemon offers no attaching */
	int timeout_ms;
	/* Fences: seqs are unique in the process (rpc.c). Written under lock, read atomically. */
	uint64_t last_async_seq;  /* the last async call queued */
	uint64_t synced_seq;      /* the last synchronous call answered: all before it ran */
	uint64_t *fenced;         /* [channel]: the other channel's seq this one has fenced on */
	struct {
		uint64_t key, seq;
	} order_slot[RM_ORDER_SLOTS]; /* by a key's hash: the last async call on that stream or event */
	uint64_t unordered_seq;   /* the last async call whose streams and events are not all in order_slot */

	/* The flusher (rpc.c): sends a batch whose oldest call has waited long enough, for a
	 * program that makes no further call, and a heartbeat on a connection idle for
	 * heartbeat_ms. The times are written under lock and read by the flusher without it
	 * (atomics); armed is set under flusher_lock. */
	uint64_t batch_since_ns;  /* when the oldest queued call was queued; 0: none queued */
	uint64_t last_async_ns;   /* when the last async call was queued */
	int flusher_armed;
	int reader;               /* another thread reads the link (the callback channel,
				   * host_functions.c): the flusher only sends heartbeats */
	int flusher_running;      /* its thread was started and is to be joined */
	pthread_t flusher;
	pthread_mutex_t flusher_lock;
	pthread_cond_t flusher_cond;
};

/* Connects to server ("tcp://host:port" or "host:port"), greets the daemon and opens the
 * session's copy links and flusher. CUDA_SUCCESS, or the CUresult to give the program
 * after one line on stderr saying why; then c holds nothing. */
CUresult rm_client_conn_open(struct rm_client_conn *c, const char *server);
/* Attaches c as channel number chan of main's session: CUDA_SUCCESS; CUDA_ERROR_TOO_MANY_PEERS
 * when the daemon has no room for it (nothing said); else a failure after a line on
 * stderr. Either way not CUDA_SUCCESS leaves c holding nothing. */
CUresult rm_client_channel_open(struct rm_client_conn *c, const struct rm_client_conn *main, uint32_t chan);
/* Ends every call in progress with CUDA_ERROR_DEVICE_UNAVAILABLE, then releases what
 * open acquired, in reverse. */
void rm_client_conn_close(struct rm_client_conn *c);

/* Makes call on c (client.h's rm_rpc on a given connection). */
CUresult rm_client_call(struct rm_client_conn *c, struct rm_rpc_call *call);
/* Sends frame f (no message, no bulk) on c under its lock: 0, or -errno after c is lost. */
int rm_client_send_frame(struct rm_client_conn *c, const struct rm_frame *f);
/* Opens a channel of the session that no thread's calls use (the callback channel):
 * NULL when the daemon has no room or none could be opened. rm_channel_close_spare ends it. */
struct rm_client_conn *rm_channel_open_spare(void);
void rm_channel_close_spare(struct rm_client_conn *c);
/* Starts the flusher thread: 0 or -errno. */
int rm_client_flusher_start(struct rm_client_conn *c);
/* Marks c lost (calls fail fast from now on), unblocks a call waiting on its link and
 * wakes the flusher so that it ends. Called with c->lock held. */
void rm_client_conn_stop_locked(struct rm_client_conn *c);

#endif
