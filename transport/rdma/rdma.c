/* RDMA transport (rdma://HOST:PORT): a TCP connection that the serving process upgrades to
 * an RDMA reliable connection (librdmacm, libibverbs; the bytes are in rdma_wire.h).
 *
 * remorad's accepting process reads a client's hello and hands the connection to a worker
 * process, and a queue pair cannot move between processes. So a connection begins on TCP:
 * dial and accept give one that carries the bytes in chunks over TCP, which can be handed
 * over (export_fd, adopt_fd). adopt_fd, in the process that is to serve it, upgrades it: it
 * listens with rdma_cm on a port of its own, offers that port and a nonce over TCP (its
 * last bytes there), and accepts the one connect that brings the nonce back; from then on
 * it sends over RDMA. The client meets the offer in its next receive, connects, reads
 * over RDMA, and sends a SWITCH chunk as its last bytes on TCP, before its first on RDMA;
 * the worker reads the client's TCP bytes up to it, then RDMA. So each direction's bytes
 * keep their order whatever either side's sending thread was doing. The TCP connection
 * stays open beside it: its end is the peer's end, and its keepalives find a peer whose
 * host vanished.
 *
 * On RDMA the bytes go in sends of at most a buffer: each side posts buffers for the
 * other's sends and tells it, in the headers of its own sends, how many it has posted
 * again (credits); a side that has returned half its buffers' worth with nothing to send
 * sends a credit-only message, of which one at a time may be in flight, into the one
 * buffer kept for it. Nothing waits on a peer for ever: the liveness timeouts bound every
 * wait, and the peer's disconnect, its TCP end or a failed completion end the connection.
 *
 * Runs of bulk bytes of REMORA_RDMA_READ_MIN_KB (256 KiB) or more go by RDMA read, from
 * the sender's memory into the receiver's (rdma_reads.c); shorter ones are copied into and
 * out of the registered buffers. */
#include <netdb.h>
#include <stdatomic.h>
#include <sys/eventfd.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rdma_conn.h"

static const struct rm_verbs_api *verbs(void)
{
	char why[320];
	const struct rm_verbs_api *v = rm_verbs_api(why, sizeof(why));
	if (!v)
		rm_transport_set_why(-ENOPKG, "%s", why);
	return v;
}

int rconn_fail(struct rdma_conn *c, int err, const char *why)
{
	int none = 0;
	if (atomic_compare_exchange_strong(&c->broken, &none, err))
		rm_transport_set_why(err, "rdma: %s", why);
	else
		rm_transport_set_why(c->broken, "rdma: %s", why); /* this thread's reason, the first failure's code */
	return c->broken;
}

int rconn_nonblocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static struct rdma_conn *conn_new(struct rm_conn *boot, enum role role, const struct rm_verbs_api *v);

static int rdmat_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct rdma_conn *c = rdma_conn_of(conn);
	uint64_t t0 = rm_transport_tally_begin();
	pthread_mutex_lock(&c->send_lock);
	int err = rconn_switch_if_due(c);
	if (!err)
		err = c->tcp_out_done ? rconn_rdma_sendv(c, iov, iovcnt) : rconn_boot_sendv(c, iov, iovcnt);
	pthread_mutex_unlock(&c->send_lock);
	rm_transport_tally_end(t0, 0);
	return err;
}

static ssize_t rdmat_recv_some(struct rm_conn *conn, void *buf, size_t len)
{
	struct rdma_conn *c = rdma_conn_of(conn);
	uint64_t t0 = rm_transport_tally_begin();
	ssize_t n = c->tcp_in_done ? rconn_rdma_recv(c, buf, len) : rconn_boot_recv(c, buf, len);
	rm_transport_tally_end(t0, 1);
	return n;
}

static int rdmat_readable(struct rm_conn *conn)
{
	struct rdma_conn *c = rdma_conn_of(conn);
	if (!c->tcp_in_done)
		return c->chunk_left || c->hdr_got ? 1 : rm_conn_readable(c->boot);
	pthread_mutex_lock(&c->lock);
	if (!c->rq_count && !c->broken)
		rconn_pump(c);
	int readable = c->rq_count || c->broken;
	pthread_mutex_unlock(&c->lock);
	return readable;
}

/* A small frame takes one send slot and one of the peer's buffers (a credit). */
static int rdmat_writable(struct rm_conn *conn, size_t len)
{
	struct rdma_conn *c = rdma_conn_of(conn);
	if (!c->tcp_out_done)
		return rm_conn_writable(c->boot, len);
	pthread_mutex_lock(&c->lock);
	if (!c->broken && (!c->credits || !c->send_free))
		rconn_pump(c);
	int writable = !c->broken && c->established && c->credits && c->send_free;
	pthread_mutex_unlock(&c->lock);
	return writable;
}

static void rdmat_shutdown(struct rm_conn *conn)
{
	struct rdma_conn *c = rdma_conn_of(conn);
	atomic_store(&c->shut, 1);
	ssize_t w = write(c->wake[1], "x", 1);
	(void)w;
	rm_conn_shutdown(c->boot);
}

static int rdmat_set_liveness(struct rm_conn *conn, int recv_timeout_ms, int send_timeout_ms)
{
	struct rdma_conn *c = rdma_conn_of(conn);
	c->recv_timeout_ms = recv_timeout_ms;
	c->send_timeout_ms = send_timeout_ms;
	/* On TCP: the receive timeout of the bytes before the upgrade, and the keepalives
	 * that find a peer whose host vanished. */
	return rm_conn_set_liveness(c->boot, recv_timeout_ms, send_timeout_ms);
}

static const char *rdmat_peer(struct rm_conn *conn)
{
	return rdma_conn_of(conn)->peer_name;
}

static void rdmat_close(struct rm_conn *conn)
{
	struct rdma_conn *c = rdma_conn_of(conn);
	if (c->established)
		c->v->disconnect(c->id);
	rconn_release(c);
	rm_conn_close(c->boot);
	close(c->kick[0]);
	close(c->kick[1]);
	close(c->wake[0]);
	close(c->wake[1]);
	pthread_mutex_destroy(&c->lock);
	pthread_mutex_destroy(&c->send_lock);
	free(c);
}

/* REMORA_RDMA_READ_MIN_KB: runs of bytes this long or longer go as read offers (0: none). */
static size_t read_min_bytes(void)
{
	const char *e = getenv("REMORA_RDMA_READ_MIN_KB");
	char *end;
	long kb = e && *e ? strtol(e, &end, 10) : READ_MIN_KB_DEFAULT;
	if (e && *e && (*end || kb < 0 || kb > (1L << 30))) {
		fprintf(stderr, "remora: REMORA_RDMA_READ_MIN_KB=%s is not a size in KiB; using %d\n", e,
			READ_MIN_KB_DEFAULT);
		kb = READ_MIN_KB_DEFAULT;
	}
	return (size_t)kb << 10;
}

static struct rdma_conn *conn_new(struct rm_conn *boot, enum role role, const struct rm_verbs_api *v)
{
	struct rdma_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->kick[0] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	c->kick[1] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (c->kick[0] < 0 || c->kick[1] < 0 || pipe2(c->wake, O_CLOEXEC | O_NONBLOCK)) {
		for (int i = 0; i < 2; i++)
			if (c->kick[i] >= 0)
				close(c->kick[i]);
		free(c);
		return NULL;
	}
	pthread_mutex_init(&c->lock, NULL);
	pthread_mutex_init(&c->send_lock, NULL);
	c->base.tp = &rm_transport_rdma;
	c->boot = boot;
	c->boot_fd = rm_transport_tcp.export_fd(boot, NULL, NULL, NULL);
	c->role = role;
	c->v = v;
	c->spin_ns = rm_transport_spin_ns("REMORA_RDMA_SPIN_US", RDMA_SPIN_US_DEFAULT, RDMA_SPIN_US_MAX);
	c->read_min = read_min_bytes();
	snprintf(c->peer_name, sizeof(c->peer_name), "%s", rm_conn_peer(boot));
	return c;
}

/* Whether an RDMA device can serve host (NULL: any): the check behind dial and listen. */
static int device_check(const struct rm_verbs_api *v)
{
	int n = 0;
	struct ibv_device **list = v->get_device_list(&n);
	if (list)
		v->free_device_list(list);
	if (!list || n <= 0) {
		rm_transport_set_why(-ENODEV, "rdma: this host has no RDMA device");
		return -ENODEV;
	}
	return 0;
}

/* Whether an RDMA device serves the address a listener is bound to: an rdma_cm id bound to
 * it (port 0), then let go. */
static int address_check(const struct rm_verbs_api *v, struct rm_listener *tcp)
{
	char bound[96], host[64], port[16];
	if (rm_transport_tcp.listener_addr(tcp, bound, sizeof(bound)) ||
	    rm_transport_split_addr(bound, host, sizeof(host), port, sizeof(port)))
		return -EINVAL;
	struct addrinfo hints = {.ai_flags = AI_NUMERICHOST}, *ai;
	if (getaddrinfo(host, "0", &hints, &ai))
		return -EINVAL;
	struct rdma_event_channel *ch = v->create_event_channel();
	struct rdma_cm_id *id = NULL;
	int err = !ch ? -ENODEV : v->create_id(ch, &id, NULL, RDMA_PS_TCP) ? -errno : v->bind_addr(id, ai->ai_addr) ? -errno : 0;
	if (err)
		rm_transport_set_why(err, "rdma: no RDMA device serves %s (%s)", host, strerror(-err));
	if (id)
		v->destroy_id(id);
	if (ch)
		v->destroy_event_channel(ch);
	freeaddrinfo(ai);
	return err;
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
	if ((err = address_check(v, l->tcp))) {
		rm_transport_tcp.listener_close(l->tcp);
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
	struct rdma_conn *c = rdma_conn_of(conn);
	if (c->tcp_out_done || c->role != SERVER || !state || !state_len)
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
	rm_conn_set_liveness(c->boot, UPGRADE_TIMEOUT_MS, UPGRADE_TIMEOUT_MS); /* until the worker sets its own */
	if ((err = rconn_upgrade_as_server(c))) {
		rdmat_close(&c->base);
		return err;
	}
	close(fd);
	*out = &c->base;
	return 0;
}

const struct rm_transport rm_transport_rdma = {
	.scheme = "rdma",
	.check_address = rm_transport_check_host_port,
	.dial = rdmat_dial,
	.listen = rdmat_listen,
	.listener_addr = rdmat_listener_addr,
	.accept = rdmat_accept,
	.listener_close = rdmat_listener_close,
	.sendv = rdmat_sendv,
	.recv_some = rdmat_recv_some,
	.readable = rdmat_readable,
	.writable = rdmat_writable,
	.shutdown = rdmat_shutdown,
	.set_liveness = rdmat_set_liveness,
	.peer = rdmat_peer,
	.close = rdmat_close,
	.export_fd = rdmat_export_fd,
	.adopt_fd = rdmat_adopt_fd,
	.pin = rm_rdma_pin,
	.unpin = rm_rdma_unpin,
};
