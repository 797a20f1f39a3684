/* Inside the fake libibverbs.so.1 (tests only): what its three files share, none of it
 * exported (hidden visibility, so out of libibverbs.map's fake_* too). verbs.c: the device,
 * PDs, MRs, CQs and completion channels; qp.c: the QPs, their posts, and the matching of
 * arrived SENDs to posted receives; link.c: the lock, the progress thread, listening
 * sockets and links. What the library lends cm.c is fake_rdma.h. */
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

struct fake_qp {
	struct ibv_qp qp;
	struct fake_link *link;
	int sig_all;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint32_t nrecv, nsend; /* posted receives, sends not yet written */
	struct fake_rwr *rhead, **rtail;
	struct fake_msg *mhead, **mtail;
};

/* The context's post_send and post_recv (qp.c); they take the lock. */
FAKE_HIDDEN int qp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
FAKE_HIDDEN int qp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);

/* Everything below: called with the lock held. */

/* verbs.c */
/* Where sge's bytes are in this process, or NULL when no MR of pd with access holds them. */
FAKE_HIDDEN char *sge_bytes(const struct ibv_sge *sge, struct ibv_pd *pd, int access);
/* A completion: in order; the CQ grows rather than overflows. Wakes an armed CQ's channel. */
FAKE_HIDDEN void cq_push(struct fake_cq *c, const struct ibv_wc *wc);

/* qp.c */
/* A completion of one of q's work requests on cq; m: the SEND received, for its immediate. */
FAKE_HIDDEN void wc_push(struct fake_qp *q, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
			 enum ibv_wc_opcode op, uint32_t len, const struct fake_msg *m);
/* A SEND arrived for q (NULL: dropped); takes buf, f->len bytes. */
FAKE_HIDDEN void qp_arrived(struct fake_qp *q, char *buf, const struct fake_frame *f);

/* link.c */
/* Queues a frame (header, then the n pieces) on l and writes what it can; data: a SEND of
 * the attached QP, completed (when signaled) once written. -1 when l is broken or closing. */
FAKE_HIDDEN int link_queue(struct fake_link *l, const struct fake_frame *f, const struct iovec *pieces, int n,
			   int data, int signaled, uint64_t wr_id);
/* On error: every send of q not yet written completes with a flush error. */
FAKE_HIDDEN void qp_flush_sends(struct fake_qp *q);

#endif
