/* The fake libibverbs.so.1's QPs (tests only): RC QPs whose SENDs travel over a link
 * (link.c). Create, modify and destroy; post_recv, and the matching of arrived SENDs to
 * posted receives; post_send. */
#include "verbs_private.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static uint32_t next_qpn = 0x40;

/* ---- QPs ---- */

struct fake_rwr { /* a posted receive */
	struct fake_rwr *next;
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge sg[];
};

struct fake_msg { /* an arrived SEND no receive has taken yet */
	struct fake_msg *next;
	char *buf;
	uint32_t len, imm, flags;
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
	qp_flush_sends(q);
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
		size_t off = 0;
		for (int i = 0; i < r->num_sge && off < m->len; i++) {
			char *dst = r->sg[i].length ? sge_bytes(&r->sg[i], q->qp.pd, IBV_ACCESS_LOCAL_WRITE) : NULL;
			if (r->sg[i].length && !dst) {
				status = IBV_WC_LOC_PROT_ERR;
				break;
			}
			size_t k = m->len - off < r->sg[i].length ? m->len - off : r->sg[i].length;
			if (k)
				memcpy(dst, m->buf + off, k);
			off += k;
		}
		if (status == IBV_WC_SUCCESS && off < m->len)
			status = IBV_WC_LOC_LEN_ERR;
		wc_push(q, q->qp.recv_cq, r->wr_id, status, IBV_WC_RECV, m->len, status == IBV_WC_SUCCESS ? m : NULL);
		free(r);
		free(m->buf);
		free(m);
		if (status != IBV_WC_SUCCESS)
			fake_qp_error(&q->qp);
	}
}

void qp_arrived(struct fake_qp *q, char *buf, const struct fake_frame *f)
{
	struct fake_msg *m = malloc(sizeof(*m));
	if (!q || q->qp.state == IBV_QPS_ERR || !m) {
		free(buf);
		free(m);
		return;
	}
	*m = (struct fake_msg){.buf = buf, .len = f->len, .imm = f->imm, .flags = f->flags};
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

/* ---- sends ---- */

int qp_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int rc = 0;
	fake_lock();
	for (; wr; wr = wr->next) {
		if ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) || wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > q->max_send_sge || (qp->state != IBV_QPS_ERR && !q->link)) {
			rc = EINVAL;
			break;
		}
		if (q->nsend >= q->max_send_wr) {
			rc = ENOMEM;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			wc_push(q, qp->send_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, NULL);
			continue;
		}
		struct iovec v[32];
		size_t len = 0;
		int ok = 1;
		for (int i = 0; i < wr->num_sge; i++) {
			const struct ibv_sge *s = &wr->sg_list[i];
			v[i].iov_len = s->length;
			if (wr->send_flags & IBV_SEND_INLINE)
				v[i].iov_base = (void *)(uintptr_t)s->addr;
			else if (!s->length)
				v[i].iov_base = NULL;
			else if (!(v[i].iov_base = sge_bytes(s, qp->pd, 0)))
				ok = 0;
			len += s->length;
		}
		if ((wr->send_flags & IBV_SEND_INLINE) && len > q->max_inline) {
			rc = EINVAL;
			break;
		}
		if (!ok || len > FAKE_MAX_FRAME) {
			wc_push(q, qp->send_cq, wr->wr_id, ok ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR, IBV_WC_SEND,
				0, NULL);
			fake_qp_error(qp);
			continue;
		}
		struct fake_frame f = {.type = FAKE_DATA, .len = (uint32_t)len};
		if (wr->opcode == IBV_WR_SEND_WITH_IMM) {
			f.flags = FAKE_WITH_IMM;
			f.imm = wr->imm_data;
		}
		int signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
		link_queue(q->link, &f, v, wr->num_sge, 1, signaled, wr->wr_id);
	}
	if (rc)
		*bad = wr;
	fake_unlock();
	return rc;
}
