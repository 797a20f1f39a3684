/* The test double's inside (tests only, never shipped): what the fake libibverbs.so.1
 * (verbs.c, qp.c, link.c) lends the fake librdmacm.so.1 (cm.c). README.md says what is
 * emulated; verbs_private.h is what the fake libibverbs's own files share.
 *
 * One process-wide lock guards every object of both libraries; the progress thread
 * (link.c) holds it while it handles a socket. A link is one connected Unix stream
 * socket between two rdma_cm_ids, carrying frames (struct fake_frame, then len bytes):
 * the CM's control frames, the QP's SENDs, its RDMA READs and WRITEs, and the peer's
 * answers to those (rdma_ops.c). */
#ifndef FAKE_RDMA_H
#define FAKE_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>

enum fake_frame_type {
	FAKE_BROKEN = 0, /* not on the wire: the link broke (EOF, reset) */
	FAKE_REQ,        /* struct fake_req */
	FAKE_ACCEPT,     /* the acceptor's private data */
	FAKE_REJECT,     /* the rejecter's private data */
	FAKE_RTU,        /* the connector saw the accept */
	FAKE_DISCONNECT,
	FAKE_DATA,      /* a SEND: flags FAKE_WITH_IMM, imm (network order) */
	FAKE_READ_REQ,  /* an RDMA READ: struct fake_rdma_op, nothing after it */
	FAKE_WRITE,     /* an RDMA WRITE: struct fake_rdma_op, then its len bytes; flags FAKE_WITH_IMM, imm */
	FAKE_READ_RESP, /* a READ served: struct fake_rdma_ack (status 0), then the READ's len bytes */
	FAKE_ACK,       /* a WRITE placed (status 0), or a READ or WRITE refused: struct fake_rdma_ack */
};

#define FAKE_WITH_IMM 1u
#define FAKE_MAX_MSG (1u << 30)             /* a message's bytes (the port's max_msg_sz) */
#define FAKE_MAX_FRAME (FAKE_MAX_MSG + 64u) /* a frame's len: a message and its head */

struct fake_frame {
	uint32_t type, len, imm, flags;
};

/* The head of a READ_REQ or WRITE: the peer's range [addr, addr + len) under rkey; tag
 * (the requester's) comes back in the answer. */
struct fake_rdma_op {
	uint64_t addr;
	uint32_t rkey, len, tag, pad;
};

/* The head of a READ_RESP or ACK: the tag of the op answered, and 0 (IBV_WC_SUCCESS) or
 * the ibv_wc_status the requester's work request completes with. */
struct fake_rdma_ack {
	uint32_t tag, status;
};

/* Is the emulated device present: $REMORA_FAKE_RDMA_DIR, made if missing, or NULL. */
const char *fake_dir(void);
/* The device's one context, or NULL (errno ENODEV) when the device is absent. */
struct ibv_context *fake_context(void);

void fake_lock(void);
void fake_unlock(void);

/* Everything below: called with the lock held. */

/* The link calls fn(arg, type, data, len) for each control frame and once with FAKE_BROKEN;
 * fn may close the link. */
typedef void fake_link_fn(void *arg, int type, const void *data, size_t len);
struct fake_link;
/* Takes fd (a connected stream socket) in every case; NULL with errno on failure. */
struct fake_link *fake_link_open(int fd, fake_link_fn *fn, void *arg);
/* Queues a control frame; -1 when the link is broken. */
int fake_link_ctl(struct fake_link *l, int type, const void *data, size_t len);
/* Data frames go to qp (NULL: dropped); qp's sends go out on l. */
void fake_link_attach_qp(struct fake_link *l, struct ibv_qp *qp);
/* fn is not called again; the socket closes once queued frames are written. */
void fake_link_close(struct fake_link *l);

/* A listening socket: fn(arg) while it is readable. fake_watch_del closes fd. */
typedef void fake_watch_fn(void *arg);
struct fake_watch;
struct fake_watch *fake_watch_add(int fd, fake_watch_fn *fn, void *arg);
void fake_watch_del(struct fake_watch *w);

/* The QP flushes its receives and unsent sends and stays in the error state. */
void fake_qp_error(struct ibv_qp *qp);
void fake_qp_set_state(struct ibv_qp *qp, enum ibv_qp_state state);

#endif
