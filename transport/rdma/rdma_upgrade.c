/* An rdma:// connection's chunks over TCP, and its upgrade to RDMA (rdma_conn.h; rdma.c
 * and docs/protocol.md, "RDMA", describe both). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "rdma_conn.h"

static int boot_send_chunk(struct rdma_conn *c, int type, const void *payload, uint32_t len)
{
	uint8_t hdr[RM_RDMA_CHUNK_HEADER_LEN];
	rm_rdma_chunk_encode(hdr, type, len);
	struct iovec v[2] = {{hdr, sizeof(hdr)}, {(void *)payload, len}};
	return rm_conn_sendv(c->boot, v, len ? 2 : 1);
}

int rconn_boot_sendv(struct rdma_conn *c, const struct iovec *iov, int iovcnt)
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
			int err = rconn_boot_sendv(c, &part, 1);
			if (err)
				return err;
			struct iovec rest = {(uint8_t *)iov->iov_base + UINT32_MAX, iov->iov_len - UINT32_MAX};
			if ((err = rconn_boot_sendv(c, &rest, 1)))
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
static int read_header(struct rdma_conn *c, struct rm_rdma_chunk *ch, struct rm_rdma_offer *offer)
{
	while (c->hdr_got < sizeof(c->hdr)) {
		ssize_t n = rm_conn_recv_some(c->boot, c->hdr + c->hdr_got, sizeof(c->hdr) - c->hdr_got);
		if (n < 0)
			return (int)n;
		c->hdr_got += (uint32_t)n;
	}
	c->hdr_got = 0;
	if (rm_rdma_chunk_decode(c->hdr, ch))
		return -EPROTO;
	if (ch->type == RM_RDMA_DATA)
		c->chunk_left = ch->len;
	if (ch->type == RM_RDMA_UPGRADE) {
		uint8_t raw[RM_RDMA_OFFER_LEN];
		int err = recv_exact(c->boot, raw, sizeof(raw));
		if (err)
			return err;
		if (rm_rdma_offer_decode(raw, sizeof(raw), offer))
			return -EPROTO;
	}
	return 0;
}

/* The upgrade. */

/* Waits for the next CM event on c->ch, or the deadline, or shutdown; the client also for
 * the worker's TCP end (it sends nothing on TCP after its offer). */
static int next_cm_event(struct rdma_conn *c, uint64_t deadline, struct rdma_cm_event **e)
{
	for (;;) {
		if (!c->v->get_cm_event(c->ch, e))
			return 0;
		if (errno != EAGAIN)
			return -errno;
		struct pollfd p[3] = {{.fd = c->ch->fd, .events = POLLIN},
				      {.fd = c->role == CLIENT ? c->boot_fd : -1, .events = POLLIN},
				      {.fd = c->wake[0], .events = POLLIN}};
		int r = poll(p, 3, poll_ms(deadline));
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (p[1].revents || p[2].revents)
			return -ECONNRESET;
	}
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

/* One thread alone uses c here: adopt_fd's. */
int rconn_upgrade_as_server(struct rdma_conn *c)
{
	const struct rm_verbs_api *v = c->v;
	uint64_t deadline = deadline_in(UPGRADE_TIMEOUT_MS);
	struct sockaddr_storage local;
	int err = rconn_make_channel(c);
	if (err || (err = sockaddr_of(c->boot_fd, 0, &local)))
		return rconn_fail(c, err, "cannot open the RDMA CM");
	set_port(&local, 0);
	if (v->create_id(c->ch, &c->listen_id, c, RDMA_PS_TCP) || v->bind_addr(c->listen_id, (struct sockaddr *)&local) ||
	    v->listen(c->listen_id, 4))
		return rconn_fail(c, errno ? -errno : -ENODEV, "no RDMA device serves the address the client came to");
	struct rm_rdma_offer offer = {.port = ntohs(v->get_src_port(c->listen_id)),
				      .features = RM_RDMA_FEATURE_READS,
				      .geometry = {.buffers = BUFFERS, .size = BUFFER_SIZE}};
	if (getrandom(offer.nonce, sizeof(offer.nonce), 0) != (ssize_t)sizeof(offer.nonce))
		return rconn_fail(c, -EIO, "no random bytes for the nonce");
	uint8_t raw[RM_RDMA_OFFER_LEN];
	rm_rdma_offer_encode(raw, &offer);
	if ((err = boot_send_chunk(c, RM_RDMA_UPGRADE, raw, sizeof(raw))))
		return rconn_fail(c, err, "cannot send the offer");
	c->tcp_out_done = 1;
	while (!c->established) {
		struct rdma_cm_event *e;
		if ((err = next_cm_event(c, deadline, &e)))
			return rconn_fail(c, err, err == -ETIMEDOUT ? "the client did not connect over RDMA in time"
								    : "the RDMA connection was not made");
		struct rdma_cm_id *stranger = NULL;
		struct rm_rdma_answer a;
		if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST && !c->id &&
		    !rm_rdma_answer_decode(e->param.conn.private_data, e->param.conn.private_data_len, &a) &&
		    valid_nonce(a.nonce, offer.nonce)) {
			c->peer = a.geometry;
			c->credits = a.geometry.buffers;
			c->reads = !!(a.features & RM_RDMA_FEATURE_READS);
			struct rdma_conn_param param = {.retry_count = 7, .rnr_retry_count = 7, .initiator_depth = 1,
							.responder_resources = 1};
			err = rconn_make_queue_pair(c, e->id);
			if (!err && v->accept(e->id, &param))
				err = rconn_fail(c, errno ? -errno : -ECONNREFUSED, "cannot accept the RDMA connect");
		} else if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) { /* not our client's */
			v->reject(e->id, NULL, 0);
			stranger = e->id;
		} else if (e->event == RDMA_CM_EVENT_ESTABLISHED && c->id && e->id == c->id) {
			c->established = 1;
		} else if (e->id == c->id || e->id == c->listen_id) {
			char why[96];
			snprintf(why, sizeof(why), "the RDMA connect failed (%s)", v->event_str(e->event));
			err = rconn_fail(c, -ECONNREFUSED, why);
		}
		v->ack_cm_event(e);
		if (stranger) /* an id is destroyed only once its events are acknowledged */
			v->destroy_id(stranger);
		if (err)
			return err;
	}
	v->destroy_id(c->listen_id);
	c->listen_id = NULL;
	return 0;
}

static int expect_event(struct rdma_conn *c, uint64_t deadline, int want)
{
	struct rdma_cm_event *e;
	int err = next_cm_event(c, deadline, &e);
	if (err)
		return rconn_fail(c, err, err == -ETIMEDOUT ? "the RDMA connection was not made in time"
							    : "the daemon left during the upgrade");
	int got = e->event, status = e->status;
	c->v->ack_cm_event(e);
	if (got == want)
		return 0;
	char why[120];
	snprintf(why, sizeof(why), "the RDMA connect failed (%s, status %d)", c->v->event_str(got), status);
	return rconn_fail(c, got == RDMA_CM_EVENT_REJECTED ? -ECONNREFUSED : -EHOSTUNREACH, why);
}

/* The client's side, on its receiving thread: connect to the offered port with the nonce,
 * then send SWITCH after whatever the sending thread is sending on TCP. */
static int upgrade_as_client(struct rdma_conn *c, const struct rm_rdma_offer *offer)
{
	const struct rm_verbs_api *v = c->v;
	uint64_t deadline = deadline_in(UPGRADE_TIMEOUT_MS);
	struct sockaddr_storage dst;
	int err = rconn_make_channel(c);
	if (err || (err = sockaddr_of(c->boot_fd, 1, &dst)))
		return rconn_fail(c, err, "cannot open the RDMA CM");
	set_port(&dst, offer->port);
	if (v->create_id(c->ch, &c->id, c, RDMA_PS_TCP))
		return rconn_fail(c, -errno, "cannot make an RDMA CM id");
	if (v->resolve_addr(c->id, NULL, (struct sockaddr *)&dst, RESOLVE_TIMEOUT_MS))
		return rconn_fail(c, errno ? -errno : -EHOSTUNREACH, "no RDMA device reaches the daemon's address");
	if ((err = expect_event(c, deadline, RDMA_CM_EVENT_ADDR_RESOLVED)))
		return err;
	if (v->resolve_route(c->id, RESOLVE_TIMEOUT_MS))
		return rconn_fail(c, errno ? -errno : -EHOSTUNREACH, "no RDMA route to the daemon");
	if ((err = expect_event(c, deadline, RDMA_CM_EVENT_ROUTE_RESOLVED)))
		return err;
	pthread_mutex_lock(&c->lock);
	c->peer = offer->geometry;
	c->credits = offer->geometry.buffers;
	c->reads = !!(offer->features & RM_RDMA_FEATURE_READS);
	pthread_mutex_unlock(&c->lock);
	if ((err = rconn_make_queue_pair(c, c->id)))
		return err;
	struct rm_rdma_answer a = {.geometry = {.buffers = BUFFERS, .size = BUFFER_SIZE},
				   .features = RM_RDMA_FEATURE_READS};
	memcpy(a.nonce, offer->nonce, sizeof(a.nonce));
	uint8_t raw[RM_RDMA_ANSWER_LEN];
	rm_rdma_answer_encode(raw, &a);
	struct rdma_conn_param param = {.private_data = raw, .private_data_len = sizeof(raw), .retry_count = 7,
					.rnr_retry_count = 7, .initiator_depth = 1, .responder_resources = 1};
	if (v->connect(c->id, &param))
		return rconn_fail(c, errno ? -errno : -ECONNREFUSED, "cannot connect over RDMA");
	if ((err = expect_event(c, deadline, RDMA_CM_EVENT_ESTABLISHED)))
		return err;
	pthread_mutex_lock(&c->lock);
	c->established = 1;
	pthread_mutex_unlock(&c->lock);
	c->tcp_in_done = 1; /* the worker's offer was its last chunk */
	c->switch_due = 1;
	if (pthread_mutex_trylock(&c->send_lock) == 0) {
		err = rconn_switch_if_due(c);
		pthread_mutex_unlock(&c->send_lock);
	}
	return err;
}

int rconn_switch_if_due(struct rdma_conn *c)
{
	if (c->tcp_out_done || !c->switch_due)
		return 0;
	int err = boot_send_chunk(c, RM_RDMA_SWITCH, NULL, 0);
	if (err)
		return rconn_fail(c, err, "cannot send the switch");
	c->tcp_out_done = 1;
	return 0;
}

ssize_t rconn_boot_recv(struct rdma_conn *c, void *buf, size_t len)
{
	while (!c->chunk_left && !c->tcp_in_done) {
		struct rm_rdma_chunk ch;
		struct rm_rdma_offer offer;
		int err = read_header(c, &ch, &offer);
		if (err)
			return err == -EPROTO ? rconn_fail(c, err, "a malformed chunk on TCP") : err;
		if (ch.type == RM_RDMA_UPGRADE && c->role == CLIENT) {
			/* TCP's waits bounded by the upgrade's own timeout meanwhile */
			rm_conn_set_liveness(c->boot, UPGRADE_TIMEOUT_MS, c->send_timeout_ms);
			err = upgrade_as_client(c, &offer);
			rm_conn_set_liveness(c->boot, c->recv_timeout_ms, c->send_timeout_ms);
			if (err)
				return err;
		} else if (ch.type == RM_RDMA_SWITCH && c->role == SERVER) {
			c->tcp_in_done = 1;
		} else if (ch.type != RM_RDMA_DATA) {
			return rconn_fail(c, -EPROTO, "an unexpected chunk on TCP");
		}
	}
	if (c->tcp_in_done)
		return rconn_rdma_recv(c, buf, len);
	ssize_t n = rm_conn_recv_some(c->boot, buf, len < c->chunk_left ? len : c->chunk_left);
	if (n > 0)
		c->chunk_left -= (uint32_t)n;
	return n;
}
