/* Inside the fake libibverbs.so.1 (tests only): what its four files share, none of it
 * exported (hidden visibility, so out of libibverbs.map's fake_* too). verbs.c: the device,
 * PDs, MRs, CQs and completion channels; qp.c: the QPs, their posts, their send queues'
 * completions in posting order, and the matching of arrived SENDs to posted receives;
 * rdma_ops.c: RDMA READ and WRITE, the requester's frames, the responder's service and the
 * answers; link.c: the lock, the progress thread, listening sockets and links. What the
 * library lends cm.c is fake_rdma.h. */
#ifndef FAKE_VERBS_PRIVATE_H
#define FAKE_VERBS_PRIVATE_H

#include "fake_rdma.h"

#include <sys/uio.h>

#define FAKE_HIDDEN __attribute__((visibility("hidden")))

struct fake_pd {
	struct ibv_pd pd;
	int refs; /* MRs and QPs */
};

struct fake_cq {
	struct ibv_cq cq;
	struct ibv_wc *ring;
	size_t cap, first, n;
	int armed;
	int refs; /* QPs */
};

struct fake_rwr;
struct fake_msg;

/* A work request of a send queue, from its post to its completion. Completions leave in
 * posting order (sq_done): one whose outcome is known waits for those posted before it. */
struct fake_swr {
	struct fake_swr *next;
	uint64_t wr_id;
	enum ibv_wc_opcode op; /* IBV_WC_SEND, IBV_WC_RDMA_WRITE or IBV_WC_RDMA_READ */
	int signaled;
	int done; /* status and byte_len are final */
	enum ibv_wc_status status;
	uint32_t byte_len;
	uint32_t len; /* the bytes of the message */
	uint32_t tag; /* READ, WRITE: the peer's answer names it (struct fake_rdma_ack) */
	int num_sge;  /* READ: where the answer's bytes go, checked again when they come */
	struct ibv_sge sg[];
};

struct fake_qp {
	struct ibv_qp qp;
	struct fake_link *link;
	int sig_all;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint32_t nrecv, nsend; /* posted receives, send queue WRs not yet completed */
	struct fake_rwr *rhead, **rtail;
	struct fake_msg *mhead, **mtail;
	struct fake_swr *shead, **stail; /* the send queue, in posting order */
};

/* Not on the wire: a message of qp_arrived that is an RDMA WRITE's immediate (no bytes;
 * len: the WRITE's). */
#define FAKE_WRITE_IMM 2u

/* The context's post_send and post_recv (qp.c); they take the lock. */
FAKE_HIDDEN int qp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
FAKE_HIDDEN int qp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Everything below: called with the lock held. */

/* verbs.c */
/* Where [addr, addr + len) under key is in this process, or NULL when it is not inside one
 * MR of pd with access (a range that wraps past 2^64 never is). */
FAKE_HIDDEN char *mr_bytes(uint32_t key, uint64_t addr, uint64_t len, struct ibv_pd *pd, int access);
/* Where sge's bytes are in this process, or NULL when no MR of pd with access holds them. */
FAKE_HIDDEN char *sge_bytes(const struct ibv_sge *sge, struct ibv_pd *pd, int access);
/* A completion: in order; the CQ grows rather than overflows. Wakes an armed CQ's channel. */
FAKE_HIDDEN void cq_push(struct fake_cq *c, const struct ibv_wc *wc);

/* qp.c */
/* A completion of one of q's work requests on cq; m: the SEND received, for its immediate. */
FAKE_HIDDEN void wc_push(struct fake_qp *q, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
			 enum ibv_wc_opcode op, uint32_t len, const struct fake_msg *m);
/* A message arrived for q (NULL: dropped), waiting for a posted receive: a SEND (takes
 * buf, len bytes) or, flags FAKE_WRITE_IMM, a WRITE's immediate. flags: FAKE_WITH_IMM too. */
FAKE_HIDDEN void qp_arrived(struct fake_qp *q, char *buf, uint32_t len, uint32_t imm, uint32_t flags);
/* s's outcome is known: its completion is reported once those posted before it are. An
 * error puts q in the error state (the WRs after s flush). s may be freed. */
FAKE_HIDDEN void sq_done(struct fake_qp *q, struct fake_swr *s, enum ibv_wc_status status, uint32_t byte_len);

/* rdma_ops.c */
/* Queues s, a READ or WRITE wr of q, on q's link; v: a WRITE's n pieces, len bytes in all. */
FAKE_HIDDEN void rdma_post(struct fake_qp *q, struct fake_swr *s, const struct ibv_send_wr *wr, const struct iovec *v,
			   int n, size_t len);
/* The responder: a READ_REQ or WRITE frame (buf, f->len bytes) for q (NULL: none attached),
 * served from this process's MRs and answered on l. -1: malformed, the link is to break. */
FAKE_HIDDEN int rdma_serve(struct fake_link *l, struct fake_qp *q, const char *buf, const struct fake_frame *f);
/* The requester: a READ_RESP or ACK frame for q (NULL: none attached). -1: malformed. */
FAKE_HIDDEN int rdma_answered(struct fake_qp *q, const char *buf, const struct fake_frame *f);

/* link.c */
/* Queues a frame (header, then the n pieces) on l and writes what it can; swr: a work request
 * of the attached QP (a SEND's is done once written), NULL for the CM's frames and the
 * answers. -1 when l is broken or closing. */
FAKE_HIDDEN int link_queue(struct fake_link *l, const struct fake_frame *f, const struct iovec *pieces, int n,
			   struct fake_swr *swr);
/* On error: q's frames not yet written are dropped (the one being written still goes out
 * whole, to keep the stream in frames); their work requests stay in q's send queue. */
FAKE_HIDDEN void link_unqueue(struct fake_qp *q);

#endif
