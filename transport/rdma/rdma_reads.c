/* Bulk bytes that the receiving side reads from the sending side's memory (rdma_conn.h;
 * docs/protocol.md, "RDMA"), on a connection where both sides have the feature READS.
 *
 * The sending side registers a run of at least read_min bytes of its caller's (at most
 * READ_OFFER_MAX at a time) for remote reads, and sends a read offer (address, key,
 * length) in their place. The receiving side reads the offered bytes by RDMA read as its
 * caller asks for them: straight into the caller's buffer where that is at least
 * READ_DIRECT_MIN and can be registered, else through its bounce buffer. Once it has read
 * them all it sends a read done, and only then is the sender's run its caller's again
 * (transport.h: no op keeps a caller's buffer). So one offer at a time is in flight each
 * way, and a read done needs no credit: it goes into the receive buffer kept for it.
 *
 * Memory pinned for bulk (rm_transport_pin: the program's pinned buffers, remorad's
 * staging) is registered once per connection (rdma_regions.c), and an offer from it may
 * be as long as READ_OFFER_MAX_PINNED. Other memory is registered for the time of one
 * offer or one read, and deregistered before the call returns; where that fails
 * (RLIMIT_MEMLOCK, memory the device cannot map) the bytes are copied as messages. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "rdma_conn.h"

int rconn_offers(const struct rdma_conn *c, size_t len)
{
	return c->reads && c->read_min && len >= c->read_min;
}

/* A failure while the peer may still read the offer, or still be read from: the byte
 * stream cannot go on, so the connection ends with it. */
static int fail_midway(struct rdma_conn *c, int err, const char *why)
{
	return err == c->broken ? err : rconn_fail(c, err, why);
}

/* Waits, under lock, for a free send slot (with a credit: a slot and one of the peer's
 * buffers): 0 with *slot taken, or the connection's failure or -ETIMEDOUT past deadline. */
static int take_slot(struct rdma_conn *c, int with_credit, int receiving, uint64_t deadline, int *slot)
{
	for (;;) {
		int err = c->broken;
		if (err)
			return err;
		if ((!with_credit || (c->credits && c->established)) && (*slot = rconn_take_send_slot(c)) >= 0) {
			if (with_credit)
				c->credits--;
			return 0;
		}
		if ((err = rconn_wait(c, receiving, deadline)))
			return err;
	}
}

ssize_t rconn_offer(struct rdma_conn *c, const uint8_t *p, size_t len, uint64_t deadline)
{
	size_t n = len < READ_OFFER_MAX ? len : READ_OFFER_MAX, in_region;
	void *region = NULL;
	pthread_mutex_unlock(&c->lock);
	struct ibv_mr *mr = rregion_get(c, p, 0, &in_region, &region);
	if (mr) {
		n = len < in_region ? len : in_region;
		n = n < READ_OFFER_MAX_PINNED ? n : READ_OFFER_MAX_PINNED;
	} else { /* registered for this offer alone */
		mr = c->v->reg_mr(c->pd, (void *)p, n, IBV_ACCESS_REMOTE_READ);
	}
	pthread_mutex_lock(&c->lock);
	if (!mr)
		return 0;
	int slot = -1, err = take_slot(c, 1, 0, deadline, &slot);
	if (!err) {
		uint8_t *b = send_buffer(c, (uint32_t)slot);
		struct rm_rdma_msg m = {.len = RM_RDMA_READ_OFFER_LEN, .credits = (uint16_t)c->to_return,
					.ctrl_seen = c->ctrl_seen, .kind = RM_RDMA_MSG_READ_OFFER};
		struct rm_rdma_read_offer o = {.addr = (uintptr_t)p, .rkey = mr->rkey, .len = (uint32_t)n};
		rm_rdma_msg_encode(b, &m);
		rm_rdma_read_offer_encode(b + RM_RDMA_MSG_HEADER_LEN, &o);
		c->offer_out = 1;
		if (!(err = rconn_post_send(c, (uint32_t)slot, RM_RDMA_MSG_HEADER_LEN + RM_RDMA_READ_OFFER_LEN)))
			c->to_return = 0;
	}
	while (!err && c->offer_out)
		err = c->broken ? c->broken : rconn_wait(c, 0, deadline);
	if (err)
		err = fail_midway(c, err, "the peer did not read an offer in time");
	pthread_mutex_unlock(&c->lock);
	if (region)
		rregion_put(region); /* the peer's read is over, or the connection failed */
	else
		c->v->dereg_mr(mr); /* from here the device reads none of p */
	pthread_mutex_lock(&c->lock);
	return err ? err : (ssize_t)n;
}

void rconn_read_completed(struct rdma_conn *c, const struct ibv_wc *wc)
{
	if (wc->status == IBV_WC_SUCCESS) {
		c->read_state = 0;
		return;
	}
	char why[120];
	snprintf(why, sizeof(why), "a read failed (%s)", c->v->wc_status_str(wc->status));
	c->read_state = rconn_fail(c, -ECONNRESET, why);
}

/* Tells the peer its offer is read, waiting for a send slot if every one is in flight. */
static int send_read_done(struct rdma_conn *c, uint64_t deadline)
{
	int slot = -1, err = take_slot(c, 0, 1, deadline, &slot);
	if (err)
		return err;
	struct rm_rdma_msg m = {.credits = (uint16_t)c->to_return, .ctrl_seen = c->ctrl_seen,
				.kind = RM_RDMA_MSG_READ_DONE};
	rm_rdma_msg_encode(send_buffer(c, (uint32_t)slot), &m);
	if (!(err = rconn_post_send(c, (uint32_t)slot, RM_RDMA_MSG_HEADER_LEN)))
		c->to_return = 0;
	return err;
}

ssize_t rconn_read_offered(struct rdma_conn *c, void *buf, size_t len, uint64_t deadline)
{
	/* The first message is this thread's: completions only add behind it. */
	uint32_t h = c->rq_head, left = c->rq[h].len - c->rq[h].pos, rkey = c->rq[h].rkey;
	uint64_t from = c->rq[h].addr + c->rq[h].pos;
	size_t n = len < left ? len : left, in_region;
	struct ibv_mr *mr = NULL;
	void *region = NULL;
	pthread_mutex_unlock(&c->lock);
	if (n >= READ_DIRECT_MIN && (mr = rregion_get(c, buf, 1, &in_region, &region)))
		n = n < in_region ? n : in_region;
	else if (n >= READ_DIRECT_MIN)
		mr = c->v->reg_mr(c->pd, buf, n, IBV_ACCESS_LOCAL_WRITE); /* for this read alone */
	if (!mr && n > BUFFER_SIZE)
		n = BUFFER_SIZE;
	pthread_mutex_lock(&c->lock);
	struct ibv_sge sge = {.addr = mr ? (uintptr_t)buf : (uintptr_t)bounce_buffer(c),
			      .length = (uint32_t)n,
			      .lkey = mr ? mr->lkey : c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = READ_WR_ID, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
				 .send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = from, .rkey = rkey}},
			   *bad;
	int err = c->broken;
	if (!err) {
		c->read_state = 1;
		int posted = ibv_post_send(c->id->qp, &wr, &bad);
		if (posted)
			err = rconn_fail(c, -posted, "cannot post a read");
	}
	while (!err && c->read_state == 1)
		err = c->broken ? c->broken : rconn_wait(c, 1, deadline);
	if (!err && c->read_state < 0)
		err = c->read_state;
	if (err)
		err = fail_midway(c, err, "a read did not complete in time");
	int in_flight = c->read_state == 1;
	pthread_mutex_unlock(&c->lock);
	if (in_flight) /* the queue pair in error: no late bytes into buf */
		c->v->disconnect(c->id);
	if (region)
		rregion_put(region);
	else if (mr)
		c->v->dereg_mr(mr); /* from here the device writes none of buf */
	else if (!err)
		memcpy(buf, bounce_buffer(c), n);
	pthread_mutex_lock(&c->lock);
	if (err)
		return err;
	c->rq[h].pos += (uint32_t)n;
	if (c->rq[h].pos == c->rq[h].len && ((err = rconn_consume_head(c)) || (err = send_read_done(c, deadline))))
		return err;
	return (ssize_t)n;
}
