/* One rdma:// connection, shared by the files of the rdma transport (rdma.c says how it
 * works): rdma_queue.c, its verbs resources and messages over RDMA; rdma_reads.c, bulk
 * bytes read from the sender's memory; rdma_upgrade.c, its chunks over TCP and the
 * upgrade; rdma.c, the ops. One thread at a time uses a connection
 * (transport.h), except shut, set by shutdown from another. */
#ifndef REMORA_RDMA_CONN_H
#define REMORA_RDMA_CONN_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "rdma_wire.h"
#include "transport.h"
#include "verbs_api.h"

#define BUFFERS 16                  /* data messages a side receives at once */
#define BUFFER_SIZE (64u << 10)     /* a message, header included */
#define RECV_SLOTS (BUFFERS + 2)    /* and one each for a credit-only message and a read done */
#define SEND_SLOTS (BUFFERS + 3)    /* every send waits for its completion before its slot is reused */
#define READ_WR_ID UINT64_MAX       /* the receiving side's one RDMA read in flight */
#define READ_OFFER_MAX (8u << 20)   /* the most one read offer registers and offers */
#define READ_OFFER_MAX_PINNED (1u << 30) /* ... and offers from a pinned region (registered) */
#define READ_DIRECT_MIN (64u << 10) /* a smaller read goes through the bounce buffer */
#define READ_MIN_KB_DEFAULT 256     /* REMORA_RDMA_READ_MIN_KB: bytes sent as read offers from this on */
#define UPGRADE_TIMEOUT_MS 10000    /* the worker's wait for its client's connect */
#define RESOLVE_TIMEOUT_MS 2000
#define RDMA_SPIN_US_DEFAULT 60
#define RDMA_SPIN_US_MAX 1000

enum role { CLIENT, SERVER };

/* A connection is used by at most one sending and one receiving thread at a time (the
 * daemon's heartbeats go out while its session thread reads a call's bytes). lock guards
 * the completion queue and everything its completions change; send_lock orders the
 * sending side's TCP chunks against the client's SWITCH, which its receiving side sends. */
struct rdma_conn {
	struct rm_conn base;
	struct rm_conn *boot; /* the TCP connection: the bytes before the upgrade, then the peer's liveness */
	int boot_fd;
	enum role role;
	const struct rm_verbs_api *v;
	pthread_mutex_t lock, send_lock;

	/* The receiving side's, reading chunks on TCP: the header being read, and the DATA
	 * bytes left of the current chunk; tcp_in_done once the peer's last chunk is read
	 * (the client: the offer; the worker: the SWITCH), then it reads from RDMA. */
	uint8_t hdr[RM_RDMA_CHUNK_HEADER_LEN];
	uint32_t hdr_got, chunk_left;
	int tcp_in_done;
	/* Under send_lock: once this side's last chunk went (the worker: the offer; the
	 * client: its SWITCH), it sends over RDMA. The client's receiving side, connected, sets
	 * switch_due, and sends the SWITCH itself unless its sending side is busy on TCP, which
	 * then sends it before its next bytes. */
	int tcp_out_done;
	_Atomic int switch_due;
	int established; /* under lock: the queue pair may send */

	/* RDMA, acquired in this order (rconn_release goes back up it). */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id; /* the worker's, until its client connected */
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	uint8_t *mem; /* RECV_SLOTS receive buffers, then SEND_SLOTS send buffers */
	struct ibv_mr *mr;
	int qp_made;

	/* Under lock. */
	struct rm_rdma_geometry peer;  /* how the peer receives */
	uint32_t credits;              /* the peer's data buffers this side may fill */
	uint32_t to_return;            /* own data buffers posted again since the peer was last told */
	uint8_t ctrl_sent, ctrl_acked; /* credit-only messages sent, and seen by the peer (mod 256) */
	uint8_t ctrl_seen;             /* the peer's credit-only messages received (mod 256) */
	uint32_t send_free;            /* a bit per free send slot */
	struct {
		uint32_t slot, len, pos; /* a read offer: its length, and how much is read */
		uint8_t kind;            /* RM_RDMA_MSG_BYTES or RM_RDMA_MSG_READ_OFFER */
		uint64_t addr;           /* a read offer's bytes at the peer */
		uint32_t rkey;
	} rq[RECV_SLOTS]; /* received data messages in order, the first partly read */
	uint32_t rq_head, rq_count;
	uint64_t absorbed; /* completions taken in: a waiter sleeps only if none came since it looked */
	int asleep[2];     /* the sending [0] and receiving [1] side wait in poll(), to be kicked */
	/* Reads (rdma_reads.c), when both sides have RM_RDMA_FEATURE_READS. */
	int reads;            /* set once at the upgrade */
	size_t read_min;      /* the sending side offers runs of bytes this long or longer (0: none) */
	int read_state;       /* the receiving side's read: 1 in flight, 0 done, -errno failed */
	int offer_out;        /* the sending side's offer is the peer's until its read done comes */
	_Atomic int broken; /* -errno once the connection failed (either side may find out) */

	int kick[2]; /* eventfds, the sending and the receiving side's: one side's completions wake the other */
	int wake[2]; /* shutdown's pipe */
	_Atomic int shut;
	int recv_timeout_ms, send_timeout_ms;
	uint64_t spin_ns;
	char peer_name[64];
};

static inline struct rdma_conn *rdma_conn_of(struct rm_conn *c)
{
	return (struct rdma_conn *)c;
}

static inline uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* A deadline timeout_ms from now, 0 for none. */
static inline uint64_t deadline_in(int timeout_ms)
{
	return timeout_ms > 0 ? mono_ms() + (uint64_t)timeout_ms : 0;
}

/* What poll() may wait until deadline: -1 for none, 0 once passed. */
static inline int poll_ms(uint64_t deadline)
{
	if (!deadline)
		return -1;
	uint64_t now = mono_ms();
	return now >= deadline ? 0 : (int)(deadline - now);
}

static inline uint8_t *recv_buffer(struct rdma_conn *c, uint32_t slot)
{
	return c->mem + (size_t)slot * BUFFER_SIZE;
}

static inline uint8_t *send_buffer(struct rdma_conn *c, uint32_t slot)
{
	return c->mem + (size_t)(RECV_SLOTS + slot) * BUFFER_SIZE;
}

/* Where small reads land before they are copied to the caller. */
static inline uint8_t *bounce_buffer(struct rdma_conn *c)
{
	return c->mem + (size_t)(RECV_SLOTS + SEND_SLOTS) * BUFFER_SIZE;
}

/* The registered buffers: RECV_SLOTS receive, SEND_SLOTS send and one bounce buffer. */
#define REGISTERED_BYTES ((size_t)(RECV_SLOTS + SEND_SLOTS + 1) * BUFFER_SIZE)

/* Fails the connection with err and why (rm_transport_set_why); the first failure is the
 * one kept, and returned. Under lock where the other side may be running. */
int rconn_fail(struct rdma_conn *c, int err, const char *why);
/* O_NONBLOCK on fd: 0 or -errno. */
int rconn_nonblocking(int fd);

/* rdma_queue.c: the verbs resources, acquired in the order of the struct's fields and
 * released back up it, and the messages over RDMA. */
int rconn_make_channel(struct rdma_conn *c);
/* Everything the messages need on id (connected or about to be), every receive posted. */
int rconn_make_queue_pair(struct rdma_conn *c, struct rdma_cm_id *id);
void rconn_release(struct rdma_conn *c);
/* Under lock: takes in what has completed. The count, or the connection's failure. */
int rconn_pump(struct rdma_conn *c);
int rconn_rdma_sendv(struct rdma_conn *c, const struct iovec *iov, int iovcnt);
ssize_t rconn_rdma_recv(struct rdma_conn *c, void *buf, size_t len);
/* Under lock: a free send slot, taken, or -1; posting a message from send slot slot. */
int rconn_take_send_slot(struct rdma_conn *c);
int rconn_post_send(struct rdma_conn *c, uint32_t slot, uint32_t len);
/* Under lock (released meanwhile): waits for the next completions of the sending (0) or
 * receiving (1) side: 0, -ETIMEDOUT past deadline, or the connection's failure. */
int rconn_wait(struct rdma_conn *c, int receiving, uint64_t deadline);
/* Under lock: the first received message is read whole; its buffer is posted again. */
int rconn_consume_head(struct rdma_conn *c);

/* rdma_regions.c. Where p lies in a pinned region (rm_transport_pin): the region's
 * registration in c's protection domain (made at its first use; with need_write, one
 * reads may land in), the bytes of the region from p in *usable, and a token to give back
 * with rregion_put once the offer or read is over. NULL: p is in none, or it cannot be
 * registered. Called without c's lock. */
struct ibv_mr *rregion_get(struct rdma_conn *c, const void *p, int need_write, size_t *usable, void **token);
void rregion_put(void *token);
/* The transport's pin and unpin ops (transport.h): regions known, registered at first use. */
void rm_rdma_pin(void *addr, size_t len);
void rm_rdma_unpin(void *addr);
/* Deregisters every region's registration in pd, before pd is deallocated. */
void rregion_forget_pd(struct ibv_pd *pd);

/* rdma_reads.c. Whether the sending side offers len bytes (>= read_min); reads and
 * read_min are set before the connection carries bytes, so no lock is needed. */
int rconn_offers(const struct rdma_conn *c, size_t len);
/* The sending side, under lock (released meanwhile): offers p's first bytes, at most
 * READ_OFFER_MAX, and waits until the peer has read them; their count, 0 where p cannot
 * be registered (the caller sends them as bytes), or the connection's failure. */
ssize_t rconn_offer(struct rdma_conn *c, const uint8_t *p, size_t len, uint64_t deadline);
/* The receiving side, under lock (released meanwhile), the first message a read offer:
 * reads at most len of its bytes into buf. */
ssize_t rconn_read_offered(struct rdma_conn *c, void *buf, size_t len, uint64_t deadline);
/* Under lock: the completion of the receiving side's read. */
void rconn_read_completed(struct rdma_conn *c, const struct ibv_wc *wc);

/* rdma_upgrade.c: chunks over TCP, and the upgrade. The caller holds send_lock. */
int rconn_boot_sendv(struct rdma_conn *c, const struct iovec *iov, int iovcnt);
/* Sends the client's SWITCH if it is due and not sent (send_lock held). */
int rconn_switch_if_due(struct rdma_conn *c);
/* The receiving side before tcp_in_done: the peer's next TCP bytes, or the client's upgrade
 * when the offer comes. */
ssize_t rconn_boot_recv(struct rdma_conn *c, void *buf, size_t len);
/* The worker's upgrade (see rdma.c): offers, and waits for the connect that brings the
 * nonce back; then the connection sends over RDMA and reads the client's TCP bytes up to
 * its SWITCH. */
int rconn_upgrade_as_server(struct rdma_conn *c);

#endif
