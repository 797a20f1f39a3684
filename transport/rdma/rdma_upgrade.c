/* An rdma:// connection's chunks over TCP, and its upgrade to RDMA (rdma_conn.h; rdma.c
 * and docs/protocol.md, "RDMA", describe both). */
#include <arpa/inet.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdma_conn.h"

static int keep_early(struct rdma_conn *c);


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
int rconn_boot_read_header(struct rdma_conn *c, struct rm_rdma_chunk *ch, struct rm_rdma_offer *offer)
{
	while (c->hdr_got < sizeof(c->hdr)) {
		ssize_t n = rm_conn_recv_some(c->boot, c->hdr + c->hdr_got, sizeof(c->hdr) - c->hdr_got);
		if (n < 0)
			return (int)n;
		c->hdr_got += (uint32_t)n;
	}
	c->hdr_got = 0;
	if (rm_rdma_chunk_decode(c->hdr, ch))
		return rconn_fail(c, -EPROTO, "a malformed chunk on TCP");
	if (ch->type == RM_RDMA_DATA)
		c->chunk_left = ch->len;
	if (ch->type == RM_RDMA_UPGRADE) {
		uint8_t raw[RM_RDMA_OFFER_LEN];
		int err = recv_exact(c->boot, raw, sizeof(raw));
		if (err)
			return err;
		if (rm_rdma_offer_decode(raw, sizeof(raw), offer))
			return rconn_fail(c, -EPROTO, "a malformed offer");
	}
	return 0;
}

/* The upgrade. */

/* Waits for the next CM event on c->ch, or the deadline, or the peer's TCP end. With
 * early set, DATA chunks the client sends meanwhile are kept for the reader. */
static int next_cm_event(struct rdma_conn *c, uint64_t deadline, struct rdma_cm_event **e, int keep)
{
	for (;;) {
		if (!c->v->get_cm_event(c->ch, e))
			return 0;
		if (errno != EAGAIN)
			return rconn_fail(c, -errno, "cannot read the RDMA CM's events");
		struct pollfd p[3] = {{.fd = c->ch->fd, .events = POLLIN},
				      {.fd = c->switched ? -1 : c->boot_fd, .events = POLLIN},
				      {.fd = c->wake[0], .events = POLLIN}};
		int r = poll(p, 3, poll_ms(deadline));
		if (r == 0)
			return rconn_fail(c, -ETIMEDOUT, "the RDMA connection was not made in time");
		if (r < 0 && errno != EINTR)
			return rconn_fail(c, -errno, "poll failed");
		if (p[2].revents)
			return rconn_fail(c, -ECONNRESET, "shut down");
		if (p[1].revents) {
			int err = keep ? keep_early(c) : -ECONNRESET; /* the client's bytes, or its end */
			if (err < 0)
				return rconn_fail(c, err, "the peer left during the upgrade");
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
		return rconn_fail(c, -EPROTO, "bytes on TCP after the switch");
	if (!c->chunk_left) {
		int err = rconn_boot_read_header(c, &ch, &unused);
		if (err)
			return err;
		if (ch.type == RM_RDMA_SWITCH) {
			c->switched = 1;
			return 0;
		}
		if (ch.type != RM_RDMA_DATA)
			return rconn_fail(c, -EPROTO, "an offer from the client");
	}
	if (c->early_len + c->chunk_left > EARLY_MAX)
		return rconn_fail(c, -EMSGSIZE, "the client sent too much before the switch");
	uint8_t *grown = realloc(c->early, c->early_len + c->chunk_left);
	if (!grown)
		return rconn_fail(c, -ENOMEM, "no memory for the client's early bytes");
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
	int err = rconn_make_channel(c);
	if (err || (err = sockaddr_of(c->boot_fd, 0, &local)))
		return rconn_fail(c, err, "cannot open the RDMA CM");
	set_port(&local, 0);
	if (v->create_id(c->ch, &c->listen_id, c, RDMA_PS_TCP) || v->bind_addr(c->listen_id, (struct sockaddr *)&local) ||
	    v->listen(c->listen_id, 4))
		return rconn_fail(c, errno ? -errno : -ENODEV, "no RDMA device serves the address the client came to");
	struct rm_rdma_offer offer = {.port = ntohs(v->get_src_port(c->listen_id)),
				      .geometry = {.buffers = BUFFERS, .size = BUFFER_SIZE}};
	if (getrandom(offer.nonce, sizeof(offer.nonce), 0) != (ssize_t)sizeof(offer.nonce))
		return rconn_fail(c, -EIO, "no random bytes for the nonce");
	uint8_t raw[RM_RDMA_OFFER_LEN];
	rm_rdma_offer_encode(raw, &offer);
	if ((err = boot_send_chunk(c, RM_RDMA_UPGRADE, raw, sizeof(raw))))
		return rconn_fail(c, err, "cannot send the offer");
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
			err = rconn_make_queue_pair(c, e->id);
			if (!err && v->accept(e->id, &param))
				err = rconn_fail(c, errno ? -errno : -ECONNREFUSED, "cannot accept the RDMA connect");
		} else if (e->event == RDMA_CM_EVENT_CONNECT_REQUEST) { /* not our client's */
			v->reject(e->id, NULL, 0);
			stranger = e->id;
		} else if (e->event == RDMA_CM_EVENT_ESTABLISHED && c->id && e->id == c->id) {
			established = 1;
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
	while (!c->switched) { /* the client's TCP bytes up to its switch */
		struct pollfd p = {.fd = c->boot_fd, .events = POLLIN};
		int r = c->chunk_left || c->hdr_got ? 1 : poll(&p, 1, poll_ms(deadline));
		if (r == 0)
			return rconn_fail(c, -ETIMEDOUT, "the client did not switch in time");
		if (r < 0 && errno != EINTR)
			return rconn_fail(c, -errno, "poll failed");
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
	return rconn_fail(c, got == RDMA_CM_EVENT_REJECTED ? -ECONNREFUSED : -EHOSTUNREACH, why);
}

/* The client's side: connect to the offered port with the nonce, then switch. */
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
	c->peer = offer->geometry;
	c->credits = offer->geometry.buffers;
	if ((err = rconn_make_queue_pair(c, c->id)))
		return err;
	struct rm_rdma_answer a = {.geometry = {.buffers = BUFFERS, .size = BUFFER_SIZE}};
	memcpy(a.nonce, offer->nonce, sizeof(a.nonce));
	uint8_t raw[RM_RDMA_ANSWER_LEN];
	rm_rdma_answer_encode(raw, &a);
	struct rdma_conn_param param = {.private_data = raw, .private_data_len = sizeof(raw), .retry_count = 7,
					.rnr_retry_count = 7};
	if (v->connect(c->id, &param))
		return rconn_fail(c, errno ? -errno : -ECONNREFUSED, "cannot connect over RDMA");
	if ((err = expect_event(c, deadline, RDMA_CM_EVENT_ESTABLISHED)))
		return err;
	if ((err = boot_send_chunk(c, RM_RDMA_SWITCH, NULL, 0)))
		return rconn_fail(c, err, "cannot send the switch");
	return 0;
}

/* Either side's upgrade, with TCP's waits bounded by the upgrade's own timeout meanwhile. */
int rconn_upgrade(struct rdma_conn *c, const struct rm_rdma_offer *offer)
{
	rm_conn_set_liveness(c->boot, UPGRADE_TIMEOUT_MS, UPGRADE_TIMEOUT_MS);
	int err = c->role == SERVER ? upgrade_as_server(c) : upgrade_as_client(c, offer);
	rm_conn_set_liveness(c->boot, c->recv_timeout_ms, c->send_timeout_ms);
	if (!err)
		c->upgraded = 1;
	return err;
}
