/* The fake libibverbs.so.1's QPs (tests only): RC QPs whose work requests travel over a
 * link (link.c). Create, modify and destroy; post_recv, and the matching of arrived SENDs
 * (and WRITEs' immediates) to posted receives; post_send, and the send queue whose
 * completions leave in posting order. RDMA READ and WRITE on the wire: rdma_ops.c. */
#include "verbs_private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t next_qpn = 0x40;
static uint32_t next_tag = 1; /* of READs and WRITEs, over every QP: a stale answer names none */

static void sq_flush(struct fake_qp *q);

/* ---- QPs ---- */

struct fake_rwr { /* a posted receive */
	struct fake_rwr *next;
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge sg[];
};

struct fake_msg { /* an arrived SEND (or WRITE's immediate) no receive has taken yet */
	struct fake_msg *next;
	char *buf;
	uint32_t len, imm, flags; /* flags: FAKE_WITH_IMM, FAKE_WRITE_IMM */
};

void wc_push(struct fake_qp *q, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
	     enum ibv_wc_opcode op, uint32_t len, const struct fake_msg *m)
{
	struct ibv_wc wc = {
		.wr_id = wr_id,
		.status = status,
		.opcode = op,
		.vendor_err = status == IBV_WC_SUCCESS ? 0 : 0x99,
		.byte_len = len,
		.qp_num = q->qp.qp_num,
	};
	if (m && (m->flags & FAKE_WITH_IMM)) {
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = m->imm;
	}
	cq_push((struct fake_cq *)cq, &wc);
}

void fake_qp_set_state(struct ibv_qp *qp, enum ibv_qp_state state)
{
	if (qp->state != IBV_QPS_ERR)
		qp->state = state;
}

void fake_qp_error(struct ibv_qp *qp)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	if (qp->state == IBV_QPS_ERR)
		return;
	qp->state = IBV_QPS_ERR;
	while (q->rhead) {
		struct fake_rwr *r = q->rhead;
		q->rhead = r->next;
		wc_push(q, qp->recv_cq, r->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, NULL);
		free(r);
	}
	q->rtail = &q->rhead;
	q->nrecv = 0;
	while (q->mhead) {
		struct fake_msg *m = q->mhead;
		q->mhead = m->next;
		free(m->buf);
		free(m);
	}
	q->mtail = &q->mhead;
	link_unqueue(q);
	sq_flush(q);
}

/* Hands arrived SENDs to posted receives, in order. */
static void qp_match(struct fake_qp *q)
{
	while (q->rhead && q->mhead && q->qp.state != IBV_QPS_ERR) {
		struct fake_rwr *r = q->rhead;
		struct fake_msg *m = q->mhead;
		if (!(q->rhead = r->next))
			q->rtail = &q->rhead;
		if (!(q->mhead = m->next))
			q->mtail = &q->mhead;
		q->nrecv--;
		enum ibv_wc_status status = IBV_WC_SUCCESS;
		uint32_t bytes = m->flags & FAKE_WRITE_IMM ? 0 : m->len; /* a WRITE's are in place */
		size_t off = 0;
		for (int i = 0; i < r->num_sge && off < bytes; i++) {
			char *dst = r->sg[i].length ? sge_bytes(&r->sg[i], q->qp.pd, IBV_ACCESS_LOCAL_WRITE) : NULL;
			if (r->sg[i].length && !dst) {
				status = IBV_WC_LOC_PROT_ERR;
				break;
			}
			size_t k = bytes - off < r->sg[i].length ? bytes - off : r->sg[i].length;
			if (k)
				memcpy(dst, m->buf + off, k);
			off += k;
		}
		if (status == IBV_WC_SUCCESS && off < bytes)
			status = IBV_WC_LOC_LEN_ERR;
		wc_push(q, q->qp.recv_cq, r->wr_id, status,
			m->flags & FAKE_WRITE_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV, m->len,
			status == IBV_WC_SUCCESS ? m : NULL);
		free(r);
		free(m->buf);
		free(m);
		if (status != IBV_WC_SUCCESS)
			fake_qp_error(&q->qp);
	}
}

void qp_arrived(struct fake_qp *q, char *buf, uint32_t len, uint32_t imm, uint32_t flags)
{
	struct fake_msg *m = malloc(sizeof(*m));
	if (!q || q->qp.state == IBV_QPS_ERR || !m) {
		free(buf);
		free(m);
		return;
	}
	*m = (struct fake_msg){.buf = buf, .len = len, .imm = imm, .flags = flags};
	*q->mtail = m;
	q->mtail = &m->next;
	qp_match(q);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_cap *cap = &attr->cap;
	if (attr->qp_type != IBV_QPT_RC || !attr->send_cq || !attr->recv_cq || attr->srq || cap->max_send_wr > (1u << 15) ||
	    cap->max_recv_wr > (1u << 15) || cap->max_send_sge > 32 || cap->max_recv_sge > 32) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.state = IBV_QPS_INIT;
	q->qp.qp_type = IBV_QPT_RC;
	q->sig_all = attr->sq_sig_all;
	q->max_send_wr = cap->max_send_wr ? cap->max_send_wr : 1;
	q->max_recv_wr = cap->max_recv_wr ? cap->max_recv_wr : 1;
	q->max_send_sge = cap->max_send_sge ? cap->max_send_sge : 1;
	q->max_recv_sge = cap->max_recv_sge ? cap->max_recv_sge : 1;
	q->max_inline = cap->max_inline_data > 256 ? cap->max_inline_data : 256;
	q->rtail = &q->rhead;
	q->mtail = &q->mhead;
	q->stail = &q->shead;
	cap->max_send_wr = q->max_send_wr;
	cap->max_recv_wr = q->max_recv_wr;
	cap->max_send_sge = q->max_send_sge;
	cap->max_recv_sge = q->max_recv_sge;
	cap->max_inline_data = q->max_inline;
	fake_lock();
	q->qp.handle = q->qp.qp_num = next_qpn++;
	((struct fake_pd *)pd)->refs++;
	((struct fake_cq *)attr->send_cq)->refs++;
	((struct fake_cq *)attr->recv_cq)->refs++;
	fake_unlock();
	return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	fake_lock();
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		fake_qp_error(qp);
	else if (mask & IBV_QP_STATE)
		fake_qp_set_state(qp, attr->qp_state);
	fake_unlock();
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	fake_lock();
	if (q->link)
		fake_link_attach_qp(q->link, NULL);
	while (q->rhead) {
		struct fake_rwr *r = q->rhead;
		q->rhead = r->next;
		free(r);
	}
	while (q->mhead) {
		struct fake_msg *m = q->mhead;
		q->mhead = m->next;
		free(m->buf);
		free(m);
	}
	while (q->shead) {
		struct fake_swr *s = q->shead;
		q->shead = s->next;
		free(s);
	}
	((struct fake_pd *)qp->pd)->refs--;
	((struct fake_cq *)qp->send_cq)->refs--;
	((struct fake_cq *)qp->recv_cq)->refs--;
	fake_unlock();
	free(q);
	return 0;
}

int qp_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int rc = 0;
	fake_lock();
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_recv_sge) {
			rc = EINVAL;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			wc_push(q, qp->recv_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, NULL);
			continue;
		}
		if (q->nrecv >= q->max_recv_wr) {
			rc = ENOMEM;
			break;
		}
		struct fake_rwr *r = malloc(sizeof(*r) + (size_t)wr->num_sge * sizeof(r->sg[0]));
		if (!r) {
			rc = ENOMEM;
			break;
		}
		r->next = NULL;
		r->wr_id = wr->wr_id;
		r->num_sge = wr->num_sge;
		if (wr->num_sge)
			memcpy(r->sg, wr->sg_list, (size_t)wr->num_sge * sizeof(r->sg[0]));
		*q->rtail = r;
		q->rtail = &r->next;
		q->nrecv++;
	}
	if (rc)
		*bad = wr;
	qp_match(q);
	fake_unlock();
	return rc;
}

/* ---- the send queue ---- */

/* Reports, in posting order, the WRs whose outcome is known, up to the first still under
 * way. Flushing (the QP is in error): all of them, in order; the first still under way and
 * every later one that has not failed complete with WR_FLUSH_ERR. An error completes
 * whether the WR was signaled or not. */
static void sq_report(struct fake_qp *q, int flushing)
{
	int behind = 0; /* one before was under way */
	while (q->shead && (q->shead->done || flushing)) {
		struct fake_swr *s = q->shead;
		if (!(q->shead = s->next))
			q->stail = &q->shead;
		q->nsend--;
		behind |= !s->done;
		if (!s->done || (behind && s->status == IBV_WC_SUCCESS)) {
			s->status = IBV_WC_WR_FLUSH_ERR;
			s->byte_len = 0;
		}
		if (s->signaled || s->status != IBV_WC_SUCCESS)
			wc_push(q, q->qp.send_cq, s->wr_id, s->status, s->op, s->byte_len, NULL);
		free(s);
	}
}

static void sq_flush(struct fake_qp *q) { sq_report(q, 1); }

void sq_done(struct fake_qp *q, struct fake_swr *s, enum ibv_wc_status status, uint32_t byte_len)
{
	s->done = 1;
	s->status = status;
	s->byte_len = byte_len;
	sq_report(q, 0);
	if (status != IBV_WC_SUCCESS)
		fake_qp_error(&q->qp);
}

/* wr at the send queue's tail; len: its message's bytes. A READ keeps its scatter list. */
static struct fake_swr *sq_push(struct fake_qp *q, const struct ibv_send_wr *wr, enum ibv_wc_opcode op, size_t len)
{
	int keep = op == IBV_WC_RDMA_READ ? wr->num_sge : 0;
	struct fake_swr *s = calloc(1, sizeof(*s) + (size_t)keep * sizeof(s->sg[0]));
	if (!s)
		return NULL;
	s->wr_id = wr->wr_id;
	s->op = op;
	s->signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
	s->len = (uint32_t)len;
	s->tag = next_tag++;
	s->num_sge = keep;
	if (keep)
		memcpy(s->sg, wr->sg_list, (size_t)keep * sizeof(s->sg[0]));
	s->next = NULL;
	*q->stail = s;
	q->stail = &s->next;
	q->nsend++;
	return s;
}

/* ---- sends ---- */

/* The completion opcode of a work request's, or -1 when it is not emulated (atomics, ...). */
static int wc_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND:
	case IBV_WR_SEND_WITH_IMM:
		return IBV_WC_SEND;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	default:
		return -1;
	}
}

int qp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int rc = 0;
	fake_lock();
	for (; wr; wr = wr->next) {
		int op = wc_opcode(wr->opcode);
		int inl = (wr->send_flags & IBV_SEND_INLINE) != 0;
		if (op < 0 || (op == IBV_WC_RDMA_READ && inl) || wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > q->max_send_sge || (qp->state != IBV_QPS_ERR && !q->link)) {
			rc = EINVAL;
			break;
		}
		if (q->nsend >= q->max_send_wr) {
			rc = ENOMEM;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			wc_push(q, qp->send_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, op, 0, NULL);
			continue;
		}
		/* Gathered at post time from memory the PD's MRs can read; a READ's scatter list
		 * must be writable (checked again when its bytes come). */
		int access = op == IBV_WC_RDMA_READ ? IBV_ACCESS_LOCAL_WRITE : 0;
		struct iovec v[32];
		size_t len = 0;
		int ok = 1;
		for (int i = 0; i < wr->num_sge; i++) {
			const struct ibv_sge *s = &wr->sg_list[i];
			v[i].iov_len = s->length;
			if (inl)
				v[i].iov_base = (void *)(uintptr_t)s->addr;
			else if (!s->length)
				v[i].iov_base = NULL;
			else if (!(v[i].iov_base = sge_bytes(s, qp->pd, access)))
				ok = 0;
			len += s->length;
		}
		if (inl && len > q->max_inline) {
			rc = EINVAL;
			break;
		}
		struct fake_swr *s = sq_push(q, wr, (enum ibv_wc_opcode)op, len);
		if (!s) {
			rc = ENOMEM;
			break;
		}
		if (!ok || len > FAKE_MAX_MSG) {
			sq_done(q, s, ok ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR, 0);
			continue;
		}
		if (op != IBV_WC_SEND) {
			rdma_post(q, s, wr, v, wr->num_sge, len);
			continue;
		}
		struct fake_frame f = {.type = FAKE_DATA, .len = (uint32_t)len};
		if (wr->opcode == IBV_WR_SEND_WITH_IMM) {
			f.flags = FAKE_WITH_IMM;
			f.imm = wr->imm_data;
		}
		if (link_queue(q->link, &f, v, wr->num_sge, s) < 0) /* else s is done once written */
			sq_done(q, s, IBV_WC_WR_FLUSH_ERR, 0);
	}
	if (rc)
		*bad = wr;
	fake_unlock();
	return rc;
}
