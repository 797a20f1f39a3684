/* The fake libibverbs.so.1's one-sided operations (tests only): RDMA READ and RDMA WRITE
 * (with or without immediate) of an RC QP, as the verbs contract has them.
 *
 * The requester (rdma_post) sends a READ_REQ or a WRITE (the WRITE's bytes gathered at
 * post time) on the QP's link, in posting order with its SENDs. The responder is the peer
 * process's progress thread (rdma_serve): under the lock it finds the range in its MR table
 * and copies, so an MR deregistered meanwhile is either found whole or not at all, and
 * answers with a READ_RESP (the bytes) or an ACK (a WRITE placed, or a refusal). Answers
 * come back in the order of the requests; the requester (rdma_answered) matches each to
 * its oldest READ or WRITE under way, scatters a READ's bytes, and completes the work
 * request through the send queue (qp.c), which reports completions in posting order.
 * The responder's application sees nothing, except a WRITE's immediate. */
#include "verbs_private.h"

#include <string.h>

void rdma_post(struct fake_qp *q, struct fake_swr *s, const struct ibv_send_wr *wr, const struct iovec *v, int n,
	       size_t len)
{
	struct fake_rdma_op op = {
		.addr = wr->wr.rdma.remote_addr,
		.rkey = wr->wr.rdma.rkey,
		.len = (uint32_t)len,
		.tag = s->tag,
	};
	struct fake_frame f = {.type = FAKE_READ_REQ, .len = sizeof(op)};
	struct iovec pieces[1 + 32] = {{&op, sizeof(op)}};
	int k = 1;
	if (s->op == IBV_WC_RDMA_WRITE) {
		f.type = FAKE_WRITE;
		f.len += (uint32_t)len;
		for (int i = 0; i < n && i < 32; i++)
			pieces[k++] = v[i];
		if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
			f.flags = FAKE_WITH_IMM;
			f.imm = wr->imm_data;
		}
	}
	if (link_queue(q->link, &f, pieces, k, s) < 0)
		sq_done(q, s, IBV_WC_WR_FLUSH_ERR, 0);
}

/* ---- the responder ---- */

int rdma_serve(struct fake_link *l, struct fake_qp *q, const char *buf, const struct fake_frame *f)
{
	struct fake_rdma_op op;
	int read = f->type == FAKE_READ_REQ;
	if (f->len < sizeof(op))
		return -1;
	memcpy(&op, buf, sizeof(op));
	uint32_t carried = f->len - (uint32_t)sizeof(op);
	if (read ? carried != 0 || op.len > FAKE_MAX_MSG : carried != op.len)
		return -1;

	enum ibv_wc_status status = IBV_WC_SUCCESS;
	char *mem = NULL;
	if (!q || q->qp.state == IBV_QPS_ERR)
		/* Nobody answers on hardware: the requester retries and gives up. */
		status = IBV_WC_RETRY_EXC_ERR;
	else if (op.len && !(mem = mr_bytes(op.rkey, op.addr, op.len, q->qp.pd,
					    read ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE)))
		/* Not inside one MR of the QP's PD under that rkey with that access (a range
		 * wrapping past 2^64 never is). A zero-length op checks no rkey, as on IB. */
		status = IBV_WC_REM_ACCESS_ERR;

	struct fake_rdma_ack ack = {.tag = op.tag, .status = (uint32_t)status};
	struct fake_frame a = {.type = FAKE_ACK, .len = sizeof(ack)};
	struct iovec v[2] = {{&ack, sizeof(ack)}, {mem, 0}};
	if (status == IBV_WC_SUCCESS && read) {
		a.type = FAKE_READ_RESP;
		a.len += op.len;
		v[1].iov_len = op.len; /* copied now, under the lock */
	} else if (status == IBV_WC_SUCCESS && op.len) {
		memcpy(mem, buf + sizeof(op), op.len);
	}
	link_queue(l, &a, v, 2, NULL); /* a broken link reports itself */
	if (status == IBV_WC_REM_ACCESS_ERR)
		fake_qp_error(&q->qp); /* the responder's QP too, as on hardware */
	else if (status == IBV_WC_SUCCESS && !read && (f->flags & FAKE_WITH_IMM))
		qp_arrived(q, NULL, op.len, f->imm, FAKE_WITH_IMM | FAKE_WRITE_IMM);
	return 0;
}

/* ---- the requester ---- */

/* Where the bytes of s, a READ, go: its scatter list, in order, still writable. */
static enum ibv_wc_status scatter(struct fake_qp *q, const struct fake_swr *s, const char *bytes)
{
	size_t off = 0;
	for (int i = 0; i < s->num_sge; i++) {
		const struct ibv_sge *sg = &s->sg[i];
		if (!sg->length)
			continue;
		char *dst = sge_bytes(sg, q->qp.pd, IBV_ACCESS_LOCAL_WRITE);
		if (!dst) /* deregistered since the post */
			return IBV_WC_LOC_PROT_ERR;
		memcpy(dst, bytes + off, sg->length);
		off += sg->length;
	}
	return IBV_WC_SUCCESS;
}

int rdma_answered(struct fake_qp *q, const char *buf, const struct fake_frame *f)
{
	struct fake_rdma_ack ack;
	if (f->len < sizeof(ack))
		return -1;
	memcpy(&ack, buf, sizeof(ack));
	uint32_t carried = f->len - (uint32_t)sizeof(ack);
	if (f->type == FAKE_READ_RESP ? ack.status != IBV_WC_SUCCESS : carried != 0)
		return -1;

	/* Answers come in the order of the requests: the oldest READ or WRITE under way. A tag
	 * that is not its own answers one flushed meanwhile, or a QP before this one. */
	struct fake_swr *s = q ? q->shead : NULL;
	while (s && (s->done || s->op == IBV_WC_SEND))
		s = s->next;
	if (!s || s->tag != ack.tag)
		return 0;

	enum ibv_wc_status status = IBV_WC_SUCCESS;
	uint32_t byte_len = 0;
	int read = s->op == IBV_WC_RDMA_READ;
	if (ack.status == IBV_WC_REM_ACCESS_ERR || ack.status == IBV_WC_RETRY_EXC_ERR)
		status = (enum ibv_wc_status)ack.status;
	else if (ack.status != IBV_WC_SUCCESS || read != (f->type == FAKE_READ_RESP) || carried != (read ? s->len : 0))
		status = IBV_WC_BAD_RESP_ERR; /* not an answer to this request */
	else if (read && (status = scatter(q, s, buf + sizeof(ack))) == IBV_WC_SUCCESS)
		byte_len = s->len;
	sq_done(q, s, status, byte_len);
	return 0;
}
