/* The verbs resources of an rdma:// connection and its messages over RDMA (rdma_conn.h;
 * the credits are described in rdma.c). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <unistd.h>

#include "rdma_conn.h"


static int post_recv(struct rdma_conn *c, uint32_t slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)recv_buffer(c, slot), .length = BUFFER_SIZE, .lkey = c->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
	int err = ibv_post_recv(c->id->qp, &wr, &bad);
	return err ? rconn_fail(c, -err, "cannot post a receive") : 0;
}

/* A connection's buffers that could not be registered: most often the pages this process
 * may lock (RLIMIT_MEMLOCK, 8 MiB or less by default) are spent. */
static int registration_failed(struct rdma_conn *c, size_t bytes)
{
	int err = errno ? -errno : -ENOMEM;
	struct rlimit lim;
	char why[200];
	if (!getrlimit(RLIMIT_MEMLOCK, &lim) && lim.rlim_cur != RLIM_INFINITY)
		snprintf(why, sizeof(why),
			 "cannot register the connection's %zu KiB of buffers (this process may lock %llu KiB: "
			 "RLIMIT_MEMLOCK, ulimit -l; each rdma:// connection needs its buffers locked)",
			 bytes >> 10, (unsigned long long)(lim.rlim_cur >> 10));
	else
		snprintf(why, sizeof(why), "cannot register the connection's %zu KiB of buffers", bytes >> 10);
	return rconn_fail(c, err, why);
}

/* Everything the connection's messages need, on id (connected or about to be), with every
 * receive buffer posted. */
int rconn_make_queue_pair(struct rdma_conn *c, struct rdma_cm_id *id)
{
	const struct rm_verbs_api *v = c->v;
	c->id = id;
	size_t bytes = REGISTERED_BYTES;
	if (!(c->pd = v->alloc_pd(id->verbs)))
		return rconn_fail(c, -ENOMEM, "cannot allocate a protection domain");
	if (!(c->cc = v->create_comp_channel(id->verbs)) || rconn_nonblocking(c->cc->fd))
		return rconn_fail(c, -ENOMEM, "cannot make a completion channel");
	if (!(c->cq = v->create_cq(id->verbs, RECV_SLOTS + SEND_SLOTS, c, c->cc, 0)))
		return rconn_fail(c, -ENOMEM, "cannot make a completion queue");
	/* A mapping of their own: a child the program forks (a data loader's workers) neither
	 * gets them nor takes their pages from the device's view by copy-on-write. */
	void *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED)
		return rconn_fail(c, -ENOMEM, "no memory for the buffers");
	c->mem = mem;
	madvise(c->mem, bytes, MADV_DONTFORK);
	if (!(c->mr = v->reg_mr(c->pd, c->mem, bytes, IBV_ACCESS_LOCAL_WRITE)))
		return registration_failed(c, bytes);
	struct ibv_qp_init_attr attr = {
		.send_cq = c->cq,
		.recv_cq = c->cq,
		.cap = {.max_send_wr = SEND_SLOTS + 1, .max_recv_wr = RECV_SLOTS, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	if (v->create_qp(id, c->pd, &attr))
		return rconn_fail(c, -errno ? -errno : -ENOMEM, "cannot make a queue pair");
	c->qp_made = 1;
	for (uint32_t s = 0; s < RECV_SLOTS; s++)
		if (post_recv(c, s))
			return c->broken;
	c->send_free = (1u << SEND_SLOTS) - 1;
	return 0;
}

/* Releases the verbs resources in the reverse order of their acquisition. */
void rconn_release(struct rdma_conn *c)
{
	const struct rm_verbs_api *v = c->v;
	if (c->qp_made)
		v->destroy_qp(c->id);
	if (c->mr)
		v->dereg_mr(c->mr);
	if (c->mem)
		munmap(c->mem, REGISTERED_BYTES);
	if (c->cq)
		v->destroy_cq(c->cq);
	if (c->cc)
		v->destroy_comp_channel(c->cc);
	if (c->pd) {
		rregion_forget_pd(c->pd);
		v->dealloc_pd(c->pd);
	}
	if (c->id)
		v->destroy_id(c->id);
	if (c->listen_id)
		v->destroy_id(c->listen_id);
	if (c->ch)
		v->destroy_event_channel(c->ch);
	c->qp_made = 0;
	c->mr = NULL;
	c->mem = NULL;
	c->cq = NULL;
	c->cc = NULL;
	c->pd = NULL;
	c->id = c->listen_id = NULL;
	c->ch = NULL;
}

int rconn_make_channel(struct rdma_conn *c)
{
	if (!(c->ch = c->v->create_event_channel()))
		return rconn_fail(c, errno == ENODEV || !errno ? -ENODEV : -errno,
			    errno == ENODEV || !errno ? "this host has no RDMA device" : "cannot open the RDMA CM");
	return rconn_nonblocking(c->ch->fd);
}

/* Messages over RDMA. Everything below runs under lock, except where it says. */

int rconn_post_send(struct rdma_conn *c, uint32_t slot, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)send_buffer(c, slot), .length = len, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = RECV_SLOTS + slot, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	int err = ibv_post_send(c->id->qp, &wr, &bad);
	return err ? rconn_fail(c, -err, "cannot post a send") : 0;
}

int rconn_take_send_slot(struct rdma_conn *c)
{
	if (!c->send_free)
		return -1;
	int slot = __builtin_ctz(c->send_free);
	c->send_free &= ~(1u << slot);
	return slot;
}

/* Sends a credit-only message when half the buffers' worth is owed, none is in flight and
 * a slot is free; else a later completion brings it here again. */
static int return_credits(struct rdma_conn *c)
{
	if (c->to_return < BUFFERS / 2 || c->ctrl_sent != c->ctrl_acked || !c->established || c->broken)
		return c->broken;
	int slot = rconn_take_send_slot(c);
	if (slot < 0)
		return 0;
	struct rm_rdma_msg m = {.credits = (uint16_t)c->to_return, .ctrl_seen = c->ctrl_seen, .kind = RM_RDMA_MSG_BYTES};
	rm_rdma_msg_encode(send_buffer(c, (uint32_t)slot), &m);
	int err = rconn_post_send(c, (uint32_t)slot, RM_RDMA_MSG_HEADER_LEN);
	if (!err) {
		c->to_return = 0;
		c->ctrl_sent++;
	}
	return err;
}

/* One completion. */
static int absorb(struct rdma_conn *c, const struct ibv_wc *wc)
{
	if (wc->wr_id == READ_WR_ID) {
		rconn_read_completed(c, wc);
		return c->broken;
	}
	if (wc->status != IBV_WC_SUCCESS) {
		char why[120];
		snprintf(why, sizeof(why), "the connection failed (%s)", c->v->wc_status_str(wc->status));
		return rconn_fail(c, -ECONNRESET, why);
	}
	if (wc->wr_id >= RECV_SLOTS) {
		uint64_t slot = wc->wr_id - RECV_SLOTS;
		if (slot < SEND_SLOTS)
			c->send_free |= 1u << slot;
		return 0;
	}
	uint32_t slot = (uint32_t)wc->wr_id;
	struct rm_rdma_msg m;
	if (!(wc->opcode & IBV_WC_RECV) || rm_rdma_msg_decode(recv_buffer(c, slot), wc->byte_len, BUFFER_SIZE, &m))
		return rconn_fail(c, -EPROTO, "a malformed message");
	if (m.credits > c->peer.buffers - c->credits)
		return rconn_fail(c, -EPROTO, "the peer returned buffers it was never sent");
	c->credits += m.credits;
	c->ctrl_acked = m.ctrl_seen;
	if (m.kind == RM_RDMA_MSG_READ_DONE) { /* its buffer is free again at once */
		if (!c->offer_out)
			return rconn_fail(c, -EPROTO, "a read done for no read offer");
		c->offer_out = 0;
		return post_recv(c, slot);
	}
	if (m.kind == RM_RDMA_MSG_BYTES && !m.len) { /* credit-only: likewise */
		c->ctrl_seen++;
		return post_recv(c, slot);
	}
	struct rm_rdma_read_offer offer = {0};
	if (m.kind == RM_RDMA_MSG_READ_OFFER &&
	    (!c->reads || rm_rdma_read_offer_decode(recv_buffer(c, slot) + RM_RDMA_MSG_HEADER_LEN, &offer)))
		return rconn_fail(c, -EPROTO, c->reads ? "a malformed read offer" : "a read offer on a connection without reads");
	if (c->rq_count == BUFFERS) /* data messages and read offers: one credit each */
		return rconn_fail(c, -EPROTO, "the peer sent past its credits");
	uint32_t tail = (c->rq_head + c->rq_count) % RECV_SLOTS;
	c->rq[tail].slot = slot;
	c->rq[tail].kind = m.kind;
	c->rq[tail].len = m.kind == RM_RDMA_MSG_READ_OFFER ? offer.len : m.len;
	c->rq[tail].pos = 0;
	c->rq[tail].addr = offer.addr;
	c->rq[tail].rkey = offer.rkey;
	c->rq_count++;
	return 0;
}

/* Each side drains only its own eventfd: a shared one, drained by the side that woke
 * first, left the other asleep (poll() looks again after its wake-up). */
static void kick_sleepers(struct rdma_conn *c)
{
	uint64_t one = 1;
	for (int side = 0; side < 2; side++)
		if (c->asleep[side] && write(c->kick[side], &one, sizeof(one)) < 0)
			continue; /* the counter is full: it is readable anyway */
}

int rconn_pump(struct rdma_conn *c)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(c->cq, 16, wc);
	if (n < 0)
		return rconn_fail(c, -EIO, "cannot poll the completion queue");
	for (int i = 0; i < n; i++)
		if (absorb(c, &wc[i]))
			break;
	if (n > 0) {
		c->absorbed += (uint64_t)n;
		return_credits(c);
		kick_sleepers(c);
	}
	return c->broken ? c->broken : n;
}

/* The peer's end: its TCP end (once it sends nothing more there), its disconnect, or our
 * shutdown. */
static int notice_peer(struct rdma_conn *c, const struct pollfd *p)
{
	if (p[4].revents)
		return rconn_fail(c, -ECONNRESET, "shut down");
	if (p[2].revents)
		return rconn_fail(c, -ECONNRESET, "the peer has closed");
	if (p[3].revents) {
		struct rdma_cm_event *e;
		while (!c->v->get_cm_event(c->ch, &e)) {
			int ev = e->event;
			c->v->ack_cm_event(e);
			if (ev == RDMA_CM_EVENT_DISCONNECTED || ev == RDMA_CM_EVENT_DEVICE_REMOVAL ||
			    ev == RDMA_CM_EVENT_TIMEWAIT_EXIT)
				return rconn_fail(c, -ECONNRESET, "the peer has disconnected");
		}
	}
	return 0;
}

enum side { SENDING, RECEIVING };

#define RDMA_YIELD_GAP_NS 1000 /* a spin gives the CPU up about once a microsecond */

struct completion_look {
	struct rdma_conn *c;
	uint64_t seen; /* completions absorbed when the wait began */
};

/* One look of rconn_wait's spin, made without the lock: takes it, and keeps it where
 * completions came in (1) or the connection failed (its error); 0 and unlocked otherwise. */
static int look(void *arg)
{
	struct completion_look *k = arg;
	pthread_mutex_lock(&k->c->lock);
	int n = rconn_pump(k->c);
	if (n || k->c->absorbed != k->seen)
		return n < 0 ? n : 1;
	pthread_mutex_unlock(&k->c->lock);
	return 0;
}

/* Waits, under lock (released meanwhile), until some completion came in: 0, -ETIMEDOUT past
 * deadline (0: none), or the connection's failure. Spins for spin_ns first, then sleeps on
 * the completion channel and on the kick the other side sends once it took completions in.
 * The caller looks again at what it waits for. */
int rconn_wait(struct rdma_conn *c, int side, uint64_t deadline)
{
	uint64_t seen = c->absorbed;
	int n = rconn_pump(c);
	if (n || c->absorbed != seen)
		return n < 0 ? n : 0;
	if (atomic_load_explicit(&c->shut, memory_order_relaxed))
		return rconn_fail(c, -ECONNRESET, "shut down");
	if (c->spin_ns) {
		struct completion_look k = {c, seen};
		pthread_mutex_unlock(&c->lock);
		if ((n = rm_spin(c->spin_ns, 1, RDMA_YIELD_GAP_NS, look, &k)))
			return n < 0 ? n : 0; /* under lock again */
		pthread_mutex_lock(&c->lock);
	}
	c->asleep[side] = 1;
	if (ibv_req_notify_cq(c->cq, 0)) {
		c->asleep[side] = 0;
		return rconn_fail(c, -EIO, "cannot arm the completion queue");
	}
	if ((n = rconn_pump(c)) || c->absorbed != seen) {
		c->asleep[side] = 0;
		return n < 0 ? n : 0;
	}
	struct pollfd p[5] = {{.fd = c->cc->fd, .events = POLLIN},
			      {.fd = c->kick[side], .events = POLLIN},
			      {.fd = c->tcp_in_done ? c->boot_fd : -1, .events = POLLIN},
			      {.fd = c->ch->fd, .events = POLLIN},
			      {.fd = c->wake[0], .events = POLLIN}};
	pthread_mutex_unlock(&c->lock);
	int r = poll(p, 5, poll_ms(deadline));
	int poll_errno = errno, took_event = 0;
	if (r > 0 && p[0].revents) {
		struct ibv_cq *cq;
		void *ctx;
		if ((took_event = !c->v->get_cq_event(c->cc, &cq, &ctx)))
			c->v->ack_cq_events(cq, 1);
	}
	if (r > 0 && p[1].revents) {
		uint64_t count;
		if (read(c->kick[side], &count, sizeof(count)) < 0)
			count = 0;
	}
	pthread_mutex_lock(&c->lock);
	c->asleep[side] = 0;
	/* Both sides sleep on the one channel, and the event this side took may announce the
	 * other's completions: taking them in here kicks the other side, which would otherwise
	 * sleep on with its completion queued and no event left. */
	if (took_event && (n = rconn_pump(c)) < 0)
		return n;
	if (r < 0 && poll_errno != EINTR)
		return rconn_fail(c, -poll_errno, "poll failed");
	if (r == 0)
		return -ETIMEDOUT;
	return r > 0 ? notice_peer(c, p) : 0;
}

/* The sending side (send_lock held, tcp_out_done). Runs of bytes long enough go as read
 * offers (rdma_reads.c), the rest copied into messages. */
int rconn_rdma_sendv(struct rdma_conn *c, const struct iovec *iov, int iovcnt)
{
	size_t off = 0;                   /* into iov[0] */
	const struct iovec *copied = NULL; /* an element that could not be offered: copied whole */
	uint64_t deadline = deadline_in(c->send_timeout_ms);
	int err = 0;
	pthread_mutex_lock(&c->lock);
	uint32_t room = c->peer.size - RM_RDMA_MSG_HEADER_LEN;
	while (iovcnt > 0 && !(err = c->broken)) {
		if (off == iov->iov_len) {
			iov++, iovcnt--, off = 0;
			continue;
		}
		if (iov != copied && rconn_offers(c, iov->iov_len - off)) {
			ssize_t n = rconn_offer(c, (const uint8_t *)iov->iov_base + off, iov->iov_len - off, deadline);
			if (n < 0) {
				err = (int)n;
				break;
			}
			if (n == 0)
				copied = iov;
			off += (size_t)n;
			deadline = deadline_in(c->send_timeout_ms);
			continue;
		}
		int slot = c->credits && c->established ? rconn_take_send_slot(c) : -1;
		if (slot < 0) {
			if ((err = rconn_wait(c, SENDING, deadline)))
				break;
			continue;
		}
		c->credits--;
		pthread_mutex_unlock(&c->lock); /* the slot is this thread's while it fills it */
		uint8_t *p = send_buffer(c, (uint32_t)slot) + RM_RDMA_MSG_HEADER_LEN;
		uint32_t len = 0;
		while (iovcnt > 0 && len < room) {
			size_t n = iov->iov_len - off < room - len ? iov->iov_len - off : room - len;
			memcpy(p + len, (const uint8_t *)iov->iov_base + off, n);
			len += (uint32_t)n;
			off += n;
			if (off == iov->iov_len) {
				iov++, iovcnt--, off = 0;
				if (iovcnt > 0 && rconn_offers(c, iov->iov_len))
					break; /* the next element goes as an offer */
			}
		}
		pthread_mutex_lock(&c->lock);
		struct rm_rdma_msg m = {.len = len, .credits = (uint16_t)c->to_return, .ctrl_seen = c->ctrl_seen,
					.kind = RM_RDMA_MSG_BYTES};
		rm_rdma_msg_encode(p - RM_RDMA_MSG_HEADER_LEN, &m);
		if ((err = rconn_post_send(c, (uint32_t)slot, RM_RDMA_MSG_HEADER_LEN + len)))
			break;
		c->to_return = 0;
		deadline = deadline_in(c->send_timeout_ms); /* the peer took something */
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

int rconn_consume_head(struct rdma_conn *c)
{
	uint32_t slot = c->rq[c->rq_head].slot;
	c->rq_head = (c->rq_head + 1) % RECV_SLOTS;
	c->rq_count--;
	int err = post_recv(c, slot);
	if (!err) {
		c->to_return++;
		err = return_credits(c);
	}
	return err;
}

/* The receiving side (tcp_in_done). */
ssize_t rconn_rdma_recv(struct rdma_conn *c, void *buf, size_t len)
{
	uint64_t deadline = deadline_in(c->recv_timeout_ms);
	pthread_mutex_lock(&c->lock);
	int err = 0;
	while (!c->rq_count && !err)
		err = c->broken ? c->broken : rconn_wait(c, RECEIVING, deadline);
	if (err) {
		pthread_mutex_unlock(&c->lock);
		return err;
	}
	if (c->rq[c->rq_head].kind == RM_RDMA_MSG_READ_OFFER) {
		ssize_t n = rconn_read_offered(c, buf, len, deadline);
		pthread_mutex_unlock(&c->lock);
		return n;
	}
	/* The first message is this thread's: completions only add behind it. */
	uint32_t slot = c->rq[c->rq_head].slot, pos = c->rq[c->rq_head].pos, mlen = c->rq[c->rq_head].len;
	pthread_mutex_unlock(&c->lock);
	size_t n = mlen - pos < len ? mlen - pos : len;
	memcpy(buf, recv_buffer(c, slot) + RM_RDMA_MSG_HEADER_LEN + pos, n);
	pthread_mutex_lock(&c->lock);
	c->rq[c->rq_head].pos += (uint32_t)n;
	if (c->rq[c->rq_head].pos == mlen)
		err = rconn_consume_head(c);
	pthread_mutex_unlock(&c->lock);
	return err ? err : (ssize_t)n;
}
