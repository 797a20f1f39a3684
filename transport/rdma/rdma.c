/* RDMA transport (rdma://HOST:PORT): a TCP connection that the serving process upgrades to
 * an RDMA reliable connection (librdmacm, libibverbs; the bytes are in rdma_wire.h).
 *
 * remorad's accepting process reads a client's hello and hands the connection to a worker
 * process, and a queue pair cannot move between processes. So a connection begins on TCP:
 * dial and accept give one that carries the bytes in chunks over TCP, which can be handed
 * over (export_fd, adopt_fd). adopt_fd, in the process that is to serve it, upgrades it: it
 * listens with rdma_cm on a port of its own, offers that port and a nonce over TCP, and
 * accepts the one connect that brings the nonce back. The client meets the offer in its
 * next receive, connects, and from then on both sides' bytes go over RDMA. The TCP
 * connection stays open beside it: its end is the peer's end, and its keepalives find a
 * peer whose host vanished.
 *
 * On RDMA the bytes go in sends of at most a buffer: each side posts buffers for the
 * other's sends and tells it, in the headers of its own sends, how many it has posted
 * again (credits); a side that has returned half its buffers' worth with nothing to send
 * sends a credit-only message, of which one at a time may be in flight, into the one
 * buffer kept for it. Nothing waits on a peer for ever: the liveness timeouts bound every
 * wait, and the peer's disconnect, its TCP end or a failed completion end the connection.
 *
 * Bulk bytes are copied into and out of registered buffers; sending from and receiving into
 * the program's own memory by RDMA read and write is not built (docs/status.md). */
#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdma_wire.h"
#include "verbs_api.h"

#define BUFFERS 16                  /* data messages a side receives at once */
#define BUFFER_SIZE (64u << 10)     /* a message, header included */
#define RECV_SLOTS (BUFFERS + 1)    /* and one for a credit-only message */
#define SEND_SLOTS (BUFFERS + 2)    /* every send waits for its completion before its slot is reused */
#define UPGRADE_TIMEOUT_MS 10000    /* the whole upgrade, from offer to switch */
#define RESOLVE_TIMEOUT_MS 2000
#define EARLY_MAX (1u << 20)        /* bytes a client may send over TCP after the offer */
#define RDMA_SPIN_US_DEFAULT 60
#define RDMA_SPIN_US_MAX 1000

enum role { CLIENT, SERVER };

struct rdma_conn {
	struct rm_conn base;
	struct rm_conn *boot; /* the TCP connection: the bytes before the upgrade, then the peer's liveness */
	int boot_fd;
	enum role role;
	int upgraded;
	const struct rm_verbs_api *v;

	/* Reading chunks on TCP: the header being read, and the DATA bytes left of the current chunk. */
	uint8_t hdr[RM_RDMA_CHUNK_HEADER_LEN];
	uint32_t hdr_got, chunk_left;
	/* What the client sent over TCP after the offer (the worker reads it before the switch). */
	uint8_t *early;
	size_t early_len, early_pos;
	int switched; /* the worker has read the client's SWITCH */

	/* RDMA, acquired in this order (release() goes back up it). */
	struct rdma_event_channel *ch;
	struct rdma_cm_id *listen_id; /* the worker's, until its client connected */
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	uint8_t *mem; /* RECV_SLOTS receive buffers, then SEND_SLOTS send buffers */
	struct ibv_mr *mr;
	int qp_made;

	struct rm_rdma_geometry peer; /* how the peer receives */
	uint32_t credits;             /* the peer's data buffers this side may fill */
	uint32_t to_return;           /* own data buffers posted again since the peer was last told */
	uint8_t ctrl_sent, ctrl_acked; /* credit-only messages sent, and seen by the peer (mod 256) */
	uint8_t ctrl_seen;             /* the peer's credit-only messages received (mod 256) */
	uint32_t send_free;            /* a bit per free send slot */
	struct {
		uint32_t slot, len, pos;
	} rq[RECV_SLOTS]; /* received data messages in order, the first partly read */
	uint32_t rq_head, rq_count;
	int broken; /* -errno once the connection failed */

	int wake[2]; /* shutdown's pipe */
	_Atomic int shut;
	int recv_timeout_ms, send_timeout_ms;
	uint64_t spin_ns;
	char peer_name[64];
};

static struct rdma_conn *rdma(struct rm_conn *c)
{
	return (struct rdma_conn *)c;
}

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A deadline timeout_ms from now, 0 for none. */
static uint64_t deadline_in(int timeout_ms)
{
	return timeout_ms > 0 ? mono_ms() + (uint64_t)timeout_ms : 0;
}

/* What poll() may wait until deadline: -1 for none, 0 once passed. */
static int poll_ms(uint64_t deadline)
{
	if (!deadline)
		return -1;
	uint64_t now = mono_ms();
	return now >= deadline ? 0 : (int)(deadline - now);
}

static const struct rm_verbs_api *verbs(void)
{
	char why[320];
	const struct rm_verbs_api *v = rm_verbs_api(why, sizeof(why));
	if (!v)
		rm_transport_set_why(-ENOPKG, "%s", why);
	return v;
}

/* Fails the connection with err and why; the first failure is the one kept. */
static int fail(struct rdma_conn *c, int err, const char *why)
{
	if (!c->broken) {
		c->broken = err;
		rm_transport_set_why(err, "rdma: %s", why);
	}
	return c->broken;
}

static uint8_t *recv_buffer(struct rdma_conn *c, uint32_t slot)
{
	return c->mem + (size_t)slot * BUFFER_SIZE;
}

static uint8_t *send_buffer(struct rdma_conn *c, uint32_t slot)
{
	return c->mem + (size_t)(RECV_SLOTS + slot) * BUFFER_SIZE;
}

static int nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static struct rdma_conn *conn_new(struct rm_conn *boot, enum role role, const struct rm_verbs_api *v);
static int keep_early(struct rdma_conn *c);

/* ---- The verbs resources of a connection ---- */

static int post_recv(struct rdma_conn *c, uint32_t slot)
{
	struct ibv_sge sge = {.addr = (uintptr_t)recv_buffer(c, slot), .length = BUFFER_SIZE, .lkey = c->mr->lkey};
	struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
	int err = ibv_post_recv(c->id->qp, &wr, &bad);
	return err ? fail(c, -err, "cannot post a receive") : 0;
}

/* Everything the connection's messages need, on id (connected or about to be), with every
 * receive buffer posted. */
static int make_queue_pair(struct rdma_conn *c, struct rdma_cm_id *id)
{
	const struct rm_verbs_api *v = c->v;
	c->id = id;
	size_t bytes = (size_t)(RECV_SLOTS + SEND_SLOTS) * BUFFER_SIZE;
	if (!(c->pd = v->alloc_pd(id->verbs)))
		return fail(c, -ENOMEM, "cannot allocate a protection domain");
	if (!(c->cc = v->create_comp_channel(id->verbs)) || nonblocking(c->cc->fd))
		return fail(c, -ENOMEM, "cannot make a completion channel");
	if (!(c->cq = v->create_cq(id->verbs, RECV_SLOTS + SEND_SLOTS, c, c->cc, 0)))
		return fail(c, -ENOMEM, "cannot make a completion queue");
	if (posix_memalign((void **)&c->mem, 4096, bytes))
		return fail(c, -ENOMEM, "no memory for the buffers");
	if (!(c->mr = v->reg_mr(c->pd, c->mem, bytes, IBV_ACCESS_LOCAL_WRITE)))
		return fail(c, -errno ? -errno : -ENOMEM, "cannot register the buffers");
	struct ibv_qp_init_attr attr = {
		.send_cq = c->cq,
		.recv_cq = c->cq,
		.cap = {.max_send_wr = SEND_SLOTS, .max_recv_wr = RECV_SLOTS, .max_send_sge = 1, .max_recv_sge = 1},
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	if (v->create_qp(id, c->pd, &attr))
		return fail(c, -errno ? -errno : -ENOMEM, "cannot make a queue pair");
	c->qp_made = 1;
	for (uint32_t s = 0; s < RECV_SLOTS; s++)
		if (post_recv(c, s))
			return c->broken;
	c->send_free = (1u << SEND_SLOTS) - 1;
	return 0;
}

/* Releases the verbs resources in the reverse order of their acquisition. */
static void release(struct rdma_conn *c)
{
	const struct rm_verbs_api *v = c->v;
	if (c->qp_made)
		v->destroy_qp(c->id);
	if (c->mr)
		v->dereg_mr(c->mr);
	free(c->mem);
	if (c->cq)
		v->destroy_cq(c->cq);
	if (c->cc)
		v->destroy_comp_channel(c->cc);
	if (c->pd)
		v->dealloc_pd(c->pd);
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

static int make_channel(struct rdma_conn *c)
{
	if (!(c->ch = c->v->create_event_channel()))
		return fail(c, errno == ENODEV || !errno ? -ENODEV : -errno,
			    errno == ENODEV || !errno ? "this host has no RDMA device" : "cannot open the RDMA CM");
	return nonblocking(c->ch->fd);
}

/* ---- Messages over RDMA ---- */

static int post_send(struct rdma_conn *c, uint32_t slot, uint32_t len)
{
	struct ibv_sge sge = {.addr = (uintptr_t)send_buffer(c, slot), .length = len, .lkey = c->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = RECV_SLOTS + slot, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND,
				 .send_flags = IBV_SEND_SIGNALED},
			   *bad;
	int err = ibv_post_send(c->id->qp, &wr, &bad);
	if (err)
		return fail(c, -err, "cannot post a send");
	c->send_free &= ~(1u << slot);
	return 0;
}

static int take_send_slot(struct rdma_conn *c)
{
	return c->send_free ? __builtin_ctz(c->send_free) : -1;
}

/* One completion. */
static int absorb(struct rdma_conn *c, const struct ibv_wc *wc)
{
	if (wc->status != IBV_WC_SUCCESS) {
		char why[120];
		snprintf(why, sizeof(why), "the connection failed (%s)", c->v->wc_status_str(wc->status));
		return fail(c, -ECONNRESET, why);
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
		return fail(c, -EPROTO, "a malformed message");
	if (m.credits > c->peer.buffers - c->credits)
		return fail(c, -EPROTO, "the peer returned buffers it was never sent");
	c->credits += m.credits;
	c->ctrl_acked = m.ctrl_seen;
	if (!m.len) { /* credit-only: its buffer is free again at once */
		c->ctrl_seen++;
		return post_recv(c, slot);
	}
	if (c->rq_count == RECV_SLOTS)
		return fail(c, -EPROTO, "the peer sent past its credits");
	uint32_t tail = (c->rq_head + c->rq_count) % RECV_SLOTS;
	c->rq[tail].slot = slot;
	c->rq[tail].len = m.len;
	c->rq[tail].pos = 0;
	c->rq_count++;
	return 0;
}

/* Takes in what has completed: the count, or a negative errno. */
static int pump(struct rdma_conn *c)
{
	struct ibv_wc wc[16];
	int n = ibv_poll_cq(c->cq, 16, wc);
	if (n < 0)
		return fail(c, -EIO, "cannot poll the completion queue");
	for (int i = 0; i < n; i++)
		if (absorb(c, &wc[i]))
			return c->broken;
	return n;
}

/* The peer's end: its TCP end, its disconnect, or our shutdown. */
static int notice_peer(struct rdma_conn *c, const struct pollfd *p)
{
	if (p[3].revents)
		return fail(c, -ECONNRESET, "shut down");
	if (p[1].revents)
		return fail(c, -ECONNRESET, "the peer has closed");
	if (p[2].revents) {
		struct rdma_cm_event *e;
		while (!c->v->get_cm_event(c->ch, &e)) {
			int ev = e->event;
			c->v->ack_cm_event(e);
			if (ev == RDMA_CM_EVENT_DISCONNECTED || ev == RDMA_CM_EVENT_DEVICE_REMOVAL ||
			    ev == RDMA_CM_EVENT_TIMEWAIT_EXIT)
				return fail(c, -ECONNRESET, "the peer has disconnected");
		}
	}
	return 0;
}

/* Waits until something completes: 0, -ETIMEDOUT past deadline (0: none), or the
 * connection's failure. Spins for spin_ns first, then sleeps on the completion channel. */
static int wait_progress(struct rdma_conn *c, uint64_t deadline)
{
	if (c->broken)
		return c->broken;
	uint64_t t0 = c->spin_ns ? mono_ns() : 0;
	for (;;) {
		int n = pump(c);
		if (n)
			return n < 0 ? n : 0;
		if (atomic_load_explicit(&c->shut, memory_order_relaxed))
			return fail(c, -ECONNRESET, "shut down");
		if (t0 && mono_ns() - t0 < c->spin_ns)
			continue;
		if (ibv_req_notify_cq(c->cq, 0))
			return fail(c, -EIO, "cannot arm the completion queue");
		if ((n = pump(c)))
			return n < 0 ? n : 0;
		struct pollfd p[4] = {{.fd = c->cc->fd, .events = POLLIN},
				      {.fd = c->boot_fd, .events = POLLIN},
				      {.fd = c->ch->fd, .events = POLLIN},
				      {.fd = c->wake[0], .events = POLLIN}};
		int r = poll(p, 4, poll_ms(deadline));
		if (r < 0 && errno != EINTR)
			return fail(c, -errno, "poll failed");
		if (r == 0)
			return -ETIMEDOUT;
		if (r > 0 && notice_peer(c, p))
			return c->broken;
		if (p[0].revents) {
			struct ibv_cq *cq;
			void *ctx;
			if (!c->v->get_cq_event(c->cc, &cq, &ctx))
				c->v->ack_cq_events(cq, 1);
		}
		t0 = 0;
	}
}

/* Sends a credit-only message when half the buffers' worth is owed and none is in flight. */
static int return_credits(struct rdma_conn *c)
{
	if (c->to_return < BUFFERS / 2 || c->ctrl_sent != c->ctrl_acked)
		return 0;
	int slot = take_send_slot(c);
	while (slot < 0) { /* sends complete without the peer's program: this is short */
		int err = wait_progress(c, deadline_in(c->send_timeout_ms));
		if (err)
			return err;
		slot = take_send_slot(c);
	}
	struct rm_rdma_msg m = {.len = 0, .credits = (uint16_t)c->to_return, .ctrl_seen = c->ctrl_seen};
	rm_rdma_msg_encode(send_buffer(c, (uint32_t)slot), &m);
	int err = post_send(c, (uint32_t)slot, RM_RDMA_MSG_HEADER_LEN);
	if (!err) {
		c->to_return = 0;
		c->ctrl_sent++;
	}
	return err;
}

static int rdma_mode_sendv(struct rdma_conn *c, const struct iovec *iov, int iovcnt)
{
	size_t off = 0; /* into iov[0] */
	uint32_t room = c->peer.size - RM_RDMA_MSG_HEADER_LEN;
	uint64_t deadline = deadline_in(c->send_timeout_ms);
	while (iovcnt > 0) {
		if (off == iov->iov_len) {
			iov++, iovcnt--, off = 0;
			continue;
		}
		int slot = take_send_slot(c);
		if (slot < 0 || !c->credits) {
			int err = wait_progress(c, deadline);
			if (err)
				return err;
			if ((err = return_credits(c)))
				return err;
			continue;
		}
		uint8_t *p = send_buffer(c, (uint32_t)slot) + RM_RDMA_MSG_HEADER_LEN;
		uint32_t len = 0;
		while (iovcnt > 0 && len < room) {
			size_t n = iov->iov_len - off < room - len ? iov->iov_len - off : room - len;
			memcpy(p + len, (const uint8_t *)iov->iov_base + off, n);
			len += (uint32_t)n;
			off += n;
			if (off == iov->iov_len)
				iov++, iovcnt--, off = 0;
		}
		struct rm_rdma_msg m = {.len = len, .credits = (uint16_t)c->to_return, .ctrl_seen = c->ctrl_seen};
		rm_rdma_msg_encode(p - RM_RDMA_MSG_HEADER_LEN, &m);
		int err = post_send(c, (uint32_t)slot, RM_RDMA_MSG_HEADER_LEN + len);
		if (err)
			return err;
		c->credits--;
		c->to_return = 0;
		deadline = deadline_in(c->send_timeout_ms); /* the peer took something */
	}
	return c->broken;
}

static ssize_t rdma_mode_recv(struct rdma_conn *c, void *buf, size_t len)
{
	uint64_t deadline = deadline_in(c->recv_timeout_ms);
	while (!c->rq_count) {
		int err = c->broken ? c->broken : wait_progress(c, deadline);
		if (!err && c->ctrl_sent == c->ctrl_acked)
			err = return_credits(c); /* one owed while the last was in flight */
		if (err)
			return err;
	}
	__typeof__(c->rq[0]) *m = &c->rq[c->rq_head];
	size_t n = m->len - m->pos < len ? m->len - m->pos : len;
	memcpy(buf, recv_buffer(c, m->slot) + RM_RDMA_MSG_HEADER_LEN + m->pos, n);
	m->pos += (uint32_t)n;
	if (m->pos == m->len) {
		c->rq_head = (c->rq_head + 1) % RECV_SLOTS;
		c->rq_count--;
		int err = post_recv(c, m->slot);
		if (err)
			return err;
		c->to_return++;
		if ((err = return_credits(c)))
			return err;
	}
	return (ssize_t)n;
}

/* ---- Chunks over TCP ---- */

static int boot_send_chunk(struct rdma_conn *c, int type, const void *payload, uint32_t len)
{
	uint8_t hdr[RM_RDMA_CHUNK_HEADER_LEN];
	rm_rdma_chunk_encode(hdr, type, len);
	struct iovec v[2] = {{hdr, sizeof(hdr)}, {(void *)payload, len}};
	return rm_conn_sendv(c->boot, v, len ? 2 : 1);
}

static int boot_sendv(struct rdma_conn *c, const struct iovec *iov, int iovcnt)
{
	struct iovec v[33];
	while (iovcnt > 0) {
		int n = iovcnt < 32 ? iovcnt : 32;
		uint64_t total = 0;
		int k = 0;
		for (int i = 0; i < n; i++) {
			if (iov[i].iov_len > UINT32_MAX - total) { /* a chunk's length has 32 bits */
				n = i;
				break;
			}
			total += iov[i].iov_len;
			if (iov[i].iov_len)
				v[1 + k++] = iov[i];
		}
		if (!n) { /* one piece of 4 GiB or more: the first part of it */
			struct iovec part = {iov->iov_base, UINT32_MAX};
			int err = boot_sendv(c, &part, 1);
			if (err)
				return err;
			struct iovec rest = {(uint8_t *)iov->iov_base + UINT32_MAX, iov->iov_len - UINT32_MAX};
			if ((err = boot_sendv(c, &rest, 1)))
				return err;
			iov++, iovcnt--;
			continue;
		}
		if (total) {
			uint8_t hdr[RM_RDMA_CHUNK_HEADER_LEN];
			rm_rdma_chunk_encode(hdr, RM_RDMA_DATA, (uint32_t)total);
			v[0] = (struct iovec){hdr, sizeof(hdr)};
			int err = rm_conn_sendv(c->boot, v, 1 + k);
			if (err)
				return err;
		}
		iov += n;
		iovcnt -= n;
	}
	return 0;
}

static int recv_exact(struct rm_conn *boot, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = rm_conn_recv_some(boot, (uint8_t *)buf + got, len - got);
		if (n < 0)
			return (int)n;
		got += (size_t)n;
	}
	return 0;
}

/* Reads the next chunk's header (resuming one partly read) and, for UPGRADE, its offer. */
static int boot_read_header(struct rdma_conn *c, struct rm_rdma_chunk *ch, struct rm_rdma_offer *offer)
{
	while (c->hdr_got < sizeof(c->hdr)) {
		ssize_t n = rm_conn_recv_some(c->boot, c->hdr + c->hdr_got, sizeof(c->hdr) - c->hdr_got);
		if (n < 0)
			return (int)n;
		c->hdr_got += (uint32_t)n;
	}
	c->hdr_got = 0;
	if (rm_rdma_chunk_decode(c->hdr, ch))
		return fail(c, -EPROTO, "a malformed chunk on TCP");
	if (ch->type == RM_RDMA_DATA)
		c->chunk_left = ch->len;
	if (ch->type == RM_RDMA_UPGRADE) {
		uint8_t raw[RM_RDMA_OFFER_LEN];
		int err = recv_exact(c->boot, raw, sizeof(raw));
		if (err)
			return err;
		if (rm_rdma_offer_decode(raw, sizeof(raw), offer))
			return fail(c, -EPROTO, "a malformed offer");
	}
	return 0;
}

/* ---- The upgrade ---- */

/* Waits for the next CM event on c->ch, or the deadline, or the peer's TCP end. With
 * early set, DATA chunks the client sends meanwhile are kept for the reader. */
static int next_cm_event(struct rdma_conn *c, uint64_t deadline, struct rdma_cm_event **e, int keep)
{
	for (;;) {
		if (!c->v->get_cm_event(c->ch, e))
			return 0;
		if (errno != EAGAIN)
			return fail(c, -errno, "cannot read the RDMA CM's events");
		struct pollfd p[3] = {{.fd = c->ch->fd, .events = POLLIN},
				      {.fd = c->switched ? -1 : c->boot_fd, .events = POLLIN},
				      {.fd = c->wake[0], .events = POLLIN}};
		int r = poll(p, 3, poll_ms(deadline));
		if (r == 0)
			return fail(c, -ETIMEDOUT, "the RDMA connection was not made in time");
		if (r < 0 && errno != EINTR)
			return fail(c, -errno, "poll failed");
		if (p[2].revents)
			return fail(c, -ECONNRESET, "shut down");
		if (p[1].revents) {
			int err = keep ? keep_early(c) : -ECONNRESET; /* the client's bytes, or its end */
			if (err < 0)
				return fail(c, err, "the peer left during the upgrade");
		}
	}
}

/* The worker's side: reads one chunk the client sent over TCP after the offer into early;
 * its SWITCH (which may come before the worker's CM says the connection stands) sets
 * switched. */
static int keep_early(struct rdma_conn *c)
{
	struct rm_rdma_chunk ch;
	struct rm_rdma_offer unused;
	if (c->switched)
		return fail(c, -EPROTO, "bytes on TCP after the switch");
	if (!c->chunk_left) {
		int err = boot_read_header(c, &ch, &unused);
		if (err)
			return err;
		if (ch.type == RM_RDMA_SWITCH) {
			c->switched = 1;
			return 0;
		}
		if (ch.type != RM_RDMA_DATA)
			return fail(c, -EPROTO, "an offer from the client");
	}
	if (c->early_len + c->chunk_left > EARLY_MAX)
		return fail(c, -EMSGSIZE, "the client sent too much before the switch");
	uint8_t *grown = realloc(c->early, c->early_len + c->chunk_left);
	if (!grown)
		return fail(c, -ENOMEM, "no memory for the client's early bytes");
	c->early = grown;
	ssize_t n = rm_conn_recv_some(c->boot, c->early + c->early_len, c->chunk_left);
	if (n < 0)
		return (int)n;
	c->early_len += (size_t)n;
	c->chunk_left -= (uint32_t)n;
	return 0;
}

static int sockaddr_of(int fd, int peer, struct sockaddr_storage *ss)
{
	socklen_t len = sizeof(*ss);
	return (peer ? getpeername(fd, (struct sockaddr *)ss, &len) : getsockname(fd, (struct sockaddr *)ss, &len)) ? -errno : 0;
}

static void set_port(struct sockaddr_storage *ss, uint16_t port)
{
	if (ss->ss_family == AF_INET6)
		((struct sockaddr_in6 *)ss)->sin6_port = htons(port);
	else
		((struct sockaddr_in *)ss)->sin_port = htons(port);
}

static int valid_nonce(const uint8_t *a, const uint8_t *b)
{
	uint8_t d = 0;
	for (int i = 0; i < RM_RDMA_NONCE_LEN; i++)
		d |= a[i] ^ b[i];
	return !d;
}

/* The worker's side (see the top): offer, accept the connect that brings the nonce,
 * read the client's TCP bytes up to its switch. */
static int upgrade_as_server(struct rdma_conn *c)
{
	const struct rm_verbs_api *v = c->v;
	uint64_t deadline = deadline_in(UPGRADE_TIMEOUT_MS);
	struct sockaddr_storage local;
	int err = make_channel(c);
	if (err || (err = sockaddr_of(c->boot_fd, 0, &local)))
		return fail(c, err, "cannot open the RDMA CM");
	set_port(&local, 0);
	if (v->create_id(c->ch, &c->listen_id, c, RDMA_PS_TCP) || v->bind_addr(c->listen_id, (struct sockaddr *)&local) ||
	    v->listen(c->listen_id, 4))
		return fail(c, errno ? -errno : -ENODEV, "no RDMA device serves the address the client came to");
	struct rm_rdma_offer offer = {.port = ntohs(v->get_src_port(c->listen_id)),
				      .geometry = {.buffers = BUFFERS, .size = BUFFER_SIZE}};
	if (getrandom(offer.nonce, sizeof(offer.nonce), 0) != (ssize_t)sizeof(offer.nonce))
		return fail(c, -EIO, "no random bytes for the nonce");
	uint8_t raw[RM_RDMA_OFFER_LEN];
	rm_rdma_offer_encode(raw, &offer);
	if ((err = boot_send_chunk(c, RM_RDMA_UPGRADE, raw, sizeof(raw))))
		return fail(c, err, "cannot send the offer");
	int established = 0;
	while (!established) {
		struct rdma_cm_event *e;
		struct rdma_cm_id *stranger = NULL;
		if ((err = next_cm_event(c, deadline, &e, 1)))
			return err;
		struct rm_rdma_answer a;
		if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST && !c->id &&
		    !rm_rdma_answer_decode(e->param.conn.private_data, e->param.conn.private_data_len, &a) &&
		    valid_nonce(a.nonce, offer.nonce)) {
			c->peer = a.geometry;
			c->credits = a.geometry.buffers;
			struct rdma_conn_param param = {.retry_count = 7, .rnr_retry_count = 7};
			err = make_queue_pair(c, e->id);
			if (!err && v->accept(e->id, &param))
				err = fail(c, errno ? -errno : -ECONNREFUSED, "cannot accept the RDMA connect");
		} else if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) { /* not our client's */
			v->reject(e->id, NULL, 0);
			stranger = e->id;
		} else if (e->event == RDMA_CM_EVENT_ESTABLISHED && c->id && e->id == c->id) {
			established = 1;
		} else if (e->id == c->id || e->id == c->listen_id) {
			char why[96];
			snprintf(why, sizeof(why), "the RDMA connect failed (%s)", v->event_str(e->event));
			err = fail(c, -ECONNREFUSED, why);
		}
		v->ack_cm_event(e);
		if (stranger) /* an id is destroyed only once its events are acknowledged */
			v->destroy_id(stranger);
		if (err)
			return err;
	}
	v->destroy_id(c->listen_id);
	c->listen_id = NULL;
	while (!c->switched) { /* the client's TCP bytes up to its switch */
		struct pollfd p = {.fd = c->boot_fd, .events = POLLIN};
		int r = c->chunk_left || c->hdr_got ? 1 : poll(&p, 1, poll_ms(deadline));
		if (r == 0)
			return fail(c, -ETIMEDOUT, "the client did not switch in time");
		if (r < 0 && errno != EINTR)
			return fail(c, -errno, "poll failed");
		if (r > 0 && (err = keep_early(c)))
			return err;
	}
	return 0;
}

static int expect_event(struct rdma_conn *c, uint64_t deadline, int want)
{
	struct rdma_cm_event *e;
	int err = next_cm_event(c, deadline, &e, 0);
	if (err)
		return err;
	int got = e->event, status = e->status;
	c->v->ack_cm_event(e);
	if (got == want)
		return 0;
	char why[120];
	snprintf(why, sizeof(why), "the RDMA connect failed (%s, status %d)", c->v->event_str(got), status);
	return fail(c, got == RDMA_CM_EVENT_REJECTED ? -ECONNREFUSED : -EHOSTUNREACH, why);
}

/* The client's side: connect to the offered port with the nonce, then switch. */
static int upgrade_as_client(struct rdma_conn *c, const struct rm_rdma_offer *offer)
{
	const struct rm_verbs_api *v = c->v;
	uint64_t deadline = deadline_in(UPGRADE_TIMEOUT_MS);
	struct sockaddr_storage dst;
	int err = make_channel(c);
	if (err || (err = sockaddr_of(c->boot_fd, 1, &dst)))
		return fail(c, err, "cannot open the RDMA CM");
	set_port(&dst, offer->port);
	if (v->create_id(c->ch, &c->id, c, RDMA_PS_TCP))
		return fail(c, -errno, "cannot make an RDMA CM id");
	if (v->resolve_addr(c->id, NULL, (struct sockaddr *)&dst, RESOLVE_TIMEOUT_MS))
		return fail(c, errno ? -errno : -EHOSTUNREACH, "no RDMA device reaches the daemon's address");
	if ((err = expect_event(c, deadline, RDMA_CM_EVENT_ADDR_RESOLVED)))
		return err;
	if (v->resolve_route(c->id, RESOLVE_TIMEOUT_MS))
		return fail(c, errno ? -errno : -EHOSTUNREACH, "no RDMA route to the daemon");
	if ((err = expect_event(c, deadline, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		return err;
	c->peer = offer->geometry;
	c->credits = offer->geometry.buffers;
	if ((err = make_queue_pair(c, c->id)))
		return err;
	struct rm_rdma_answer a = {.geometry = {.buffers = BUFFERS, .size = BUFFER_SIZE}};
	memcpy(a.nonce, offer->nonce, sizeof(a.nonce));
	uint8_t raw[RM_RDMA_ANSWER_LEN];
	rm_rdma_answer_encode(raw, &a);
	struct rdma_conn_param param = {.private_data = raw, .private_data_len = sizeof(raw), .retry_count = 7,
					.rnr_retry_count = 7};
	if (v->connect(c->id, &param))
		return fail(c, errno ? -errno : -ECONNREFUSED, "cannot connect over RDMA");
	if ((err = expect_event(c, deadline, RDMA_CM_EVENT_ESTABLISHED)))
		return err;
	if ((err = boot_send_chunk(c, RM_RDMA_SWITCH, NULL, 0)))
		return fail(c, err, "cannot send the switch");
	return 0;
}

/* Either side's upgrade, with TCP's waits bounded by the upgrade's own timeout meanwhile. */
static int upgrade(struct rdma_conn *c, const struct rm_rdma_offer *offer)
{
	rm_conn_set_liveness(c->boot, UPGRADE_TIMEOUT_MS, UPGRADE_TIMEOUT_MS);
	int err = c->role == SERVER ? upgrade_as_server(c) : upgrade_as_client(c, offer);
	rm_conn_set_liveness(c->boot, c->recv_timeout_ms, c->send_timeout_ms);
	if (!err)
		c->upgraded = 1;
	return err;
}

/* ---- The ops ---- */

static int rdmat_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct rdma_conn *c = rdma(conn);
	struct rm_transport_tally *t = rm_transport_thread_tally;
	uint64_t t0 = __builtin_expect(rm_transport_profiling, 0) && t ? mono_ns() : 0;
	int err = c->broken ? c->broken : c->upgraded ? rdma_mode_sendv(c, iov, iovcnt) : boot_sendv(c, iov, iovcnt);
	if (t0) {
		t->send_ns += mono_ns() - t0;
		t->sends++;
	}
	return err;
}

static ssize_t recv_inner(struct rdma_conn *c, void *buf, size_t len)
{
	if (c->early_pos < c->early_len) {
		size_t n = c->early_len - c->early_pos < len ? c->early_len - c->early_pos : len;
		memcpy(buf, c->early + c->early_pos, n);
		c->early_pos += n;
		if (c->early_pos == c->early_len) {
			free(c->early);
			c->early = NULL;
			c->early_pos = c->early_len = 0;
		}
		return (ssize_t)n;
	}
	if (c->broken)
		return c->broken;
	if (c->upgraded)
		return rdma_mode_recv(c, buf, len);
	while (!c->chunk_left) {
		struct rm_rdma_chunk ch;
		struct rm_rdma_offer offer;
		int err = boot_read_header(c, &ch, &offer);
		if (err)
			return err;
		if (ch.type == RM_RDMA_UPGRADE && c->role == CLIENT) {
			if ((err = upgrade(c, &offer)))
				return err;
			return rdma_mode_recv(c, buf, len);
		}
		if (ch.type != RM_RDMA_DATA)
			return fail(c, -EPROTO, "an unexpected chunk on TCP");
	}
	ssize_t n = rm_conn_recv_some(c->boot, buf, len < c->chunk_left ? len : c->chunk_left);
	if (n > 0)
		c->chunk_left -= (uint32_t)n;
	return n;
}

static ssize_t rdmat_recv_some(struct rm_conn *conn, void *buf, size_t len)
{
	struct rdma_conn *c = rdma(conn);
	struct rm_transport_tally *t = rm_transport_thread_tally;
	uint64_t t0 = __builtin_expect(rm_transport_profiling, 0) && t ? mono_ns() : 0;
	ssize_t n = recv_inner(c, buf, len);
	if (t0) {
		t->recv_ns += mono_ns() - t0;
		t->recvs++;
	}
	return n;
}

static int rdmat_readable(struct rm_conn *conn)
{
	struct rdma_conn *c = rdma(conn);
	if (c->early_pos < c->early_len || c->broken)
		return 1;
	if (!c->upgraded)
		return rm_conn_readable(c->boot);
	if (!c->rq_count)
		pump(c);
	return c->rq_count || c->broken;
}

static void rdmat_shutdown(struct rm_conn *conn)
{
	struct rdma_conn *c = rdma(conn);
	atomic_store(&c->shut, 1);
	ssize_t w = write(c->wake[1], "x", 1);
	(void)w;
	rm_conn_shutdown(c->boot);
}

static int rdmat_set_liveness(struct rm_conn *conn, int recv_timeout_ms, int send_timeout_ms)
{
	struct rdma_conn *c = rdma(conn);
	c->recv_timeout_ms = recv_timeout_ms;
	c->send_timeout_ms = send_timeout_ms;
	/* On TCP: the receive timeout of the bytes before the upgrade, and the keepalives
	 * that find a peer whose host vanished. */
	return rm_conn_set_liveness(c->boot, recv_timeout_ms, send_timeout_ms);
}

static const char *rdmat_peer(struct rm_conn *conn)
{
	return rdma(conn)->peer_name;
}

static void rdmat_close(struct rm_conn *conn)
{
	struct rdma_conn *c = rdma(conn);
	if (c->upgraded && c->id)
		c->v->disconnect(c->id);
	release(c);
	rm_conn_close(c->boot);
	close(c->wake[0]);
	close(c->wake[1]);
	free(c->early);
	free(c);
}

static struct rdma_conn *conn_new(struct rm_conn *boot, enum role role, const struct rm_verbs_api *v)
{
	struct rdma_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	if (pipe2(c->wake, O_CLOEXEC | O_NONBLOCK)) {
		free(c);
		return NULL;
	}
	c->base.tp = &rm_transport_rdma;
	c->boot = boot;
	c->boot_fd = rm_transport_tcp.export_fd(boot, NULL, NULL, NULL);
	c->role = role;
	c->v = v;
	c->spin_ns = rm_transport_spin_ns("REMORA_RDMA_SPIN_US", RDMA_SPIN_US_DEFAULT, RDMA_SPIN_US_MAX);
	snprintf(c->peer_name, sizeof(c->peer_name), "%s", rm_conn_peer(boot));
	return c;
}

/* Whether an RDMA device can serve host (NULL: any): the check behind dial and listen. */
static int device_check(const struct rm_verbs_api *v)
{
	struct rdma_event_channel *ch = v->create_event_channel();
	if (!ch) {
		int err = errno ? -errno : -ENODEV;
		rm_transport_set_why(-ENODEV, "rdma: this host has no RDMA device (%s)", strerror(-err));
		return -ENODEV;
	}
	v->destroy_event_channel(ch);
	return 0;
}

static int rdmat_dial(const char *addr, int timeout_ms, struct rm_conn **out)
{
	const struct rm_verbs_api *v = verbs();
	if (!v)
		return -ENOPKG;
	int err = device_check(v);
	struct rm_conn *boot;
	if (err || (err = rm_transport_tcp.dial(addr, timeout_ms, &boot)))
		return err;
	struct rdma_conn *c = conn_new(boot, CLIENT, v);
	if (!c) {
		rm_conn_close(boot);
		return -ENOMEM;
	}
	*out = &c->base;
	return 0;
}

struct rm_listener {
	struct rm_listener *tcp;
};

static int rdmat_listen(const char *addr, struct rm_listener **out)
{
	const struct rm_verbs_api *v = verbs();
	if (!v)
		return -ENOPKG;
	int err = device_check(v);
	struct rm_listener *l = err ? NULL : calloc(1, sizeof(*l));
	if (err)
		return err;
	if (!l)
		return -ENOMEM;
	if ((err = rm_transport_tcp.listen(addr, &l->tcp))) {
		free(l);
		return err;
	}
	*out = l;
	return 0;
}

static int rdmat_listener_addr(struct rm_listener *l, char *buf, size_t len)
{
	return rm_transport_tcp.listener_addr(l->tcp, buf, len);
}

static int rdmat_accept(struct rm_listener *l, struct rm_conn **out)
{
	struct rm_conn *boot;
	int err = rm_transport_tcp.accept(l->tcp, &boot);
	if (err)
		return err;
	struct rdma_conn *c = conn_new(boot, SERVER, verbs()); /* loaded by listen */
	if (!c) {
		rm_conn_close(boot);
		return -ENOMEM;
	}
	*out = &c->base;
	return 0;
}

static void rdmat_listener_close(struct rm_listener *l)
{
	rm_transport_tcp.listener_close(l->tcp);
	free(l);
}

/* What travels with a connection not yet upgraded: the chunk reader's state. */
struct handed_state {
	uint8_t hdr[RM_RDMA_CHUNK_HEADER_LEN];
	uint32_t hdr_got, chunk_left;
};

static int rdmat_export_fd(struct rm_conn *conn, void *state, size_t *state_len, int *extra_fd)
{
	struct rdma_conn *c = rdma(conn);
	if (c->upgraded || c->role != SERVER || c->early_len || !state || !state_len)
		return -ENOTSUP;
	struct handed_state s = {.hdr_got = c->hdr_got, .chunk_left = c->chunk_left};
	memcpy(s.hdr, c->hdr, sizeof(s.hdr));
	memcpy(state, &s, sizeof(s));
	*state_len = sizeof(s);
	if (extra_fd)
		*extra_fd = -1;
	return c->boot_fd;
}

/* Takes over a connection another process accepted, and upgrades it (see the top). */
static int rdmat_adopt_fd(int fd, int extra_fd, const void *state, size_t state_len, struct rm_conn **out)
{
	struct handed_state s;
	if (extra_fd >= 0 || state_len != sizeof(s))
		return -EINVAL;
	memcpy(&s, state, sizeof(s));
	if (s.hdr_got >= sizeof(s.hdr))
		return -EINVAL;
	const struct rm_verbs_api *v = verbs();
	if (!v)
		return -ENOPKG;
	/* A copy of the descriptor, so that on failure the one passed is still the caller's. */
	int mine = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	struct rm_conn *boot = NULL;
	int err = mine < 0 ? -errno : rm_transport_tcp.adopt_fd(mine, -1, NULL, 0, &boot);
	if (err) {
		if (mine >= 0)
			close(mine);
		return err;
	}
	struct rdma_conn *c = conn_new(boot, SERVER, v);
	if (!c) {
		rm_conn_close(boot);
		return -ENOMEM;
	}
	memcpy(c->hdr, s.hdr, sizeof(s.hdr));
	c->hdr_got = s.hdr_got;
	c->chunk_left = s.chunk_left;
	if ((err = upgrade(c, NULL))) {
		rdmat_close(&c->base);
		return err;
	}
	close(fd);
	*out = &c->base;
	return 0;
}

const struct rm_transport rm_transport_rdma = {
	.scheme = "rdma",
	.dial = rdmat_dial,
	.listen = rdmat_listen,
	.listener_addr = rdmat_listener_addr,
	.accept = rdmat_accept,
	.listener_close = rdmat_listener_close,
	.sendv = rdmat_sendv,
	.recv_some = rdmat_recv_some,
	.readable = rdmat_readable,
	.shutdown = rdmat_shutdown,
	.set_liveness = rdmat_set_liveness,
	.peer = rdmat_peer,
	.close = rdmat_close,
	.export_fd = rdmat_export_fd,
	.adopt_fd = rdmat_adopt_fd,
};
