/* TCP transport: one stream socket per connection, Nagle off, buffers autotuned.
 *
 * A receive that finds nothing waiting asks again without blocking, giving the CPU up
 * between asks (rm_transport_spin_yields), for up to spin_us
 * (REMORA_TCP_SPIN_US; TCP_SPIN_US_DEFAULT on 4 or more CPUs, else 0; halved after each
 * spin in vain, down to an eighth, whole again after one answered or a wait shorter than a
 * whole spin), then blocks: an
 * answer that comes within it costs no wake-up of a sleeping thread. */
#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define TCP_SPIN_US_DEFAULT 60
#define TCP_SPIN_US_MAX 1000

struct tcp_conn {
	struct rm_conn base;
	int fd;
	struct rm_spin_budget spin; /* what a receive spins (see the top) */
	char peer[64];
};

static struct tcp_conn *tcp(struct rm_conn *c)
{
	return (struct tcp_conn *)c;
}

struct rm_listener {
	int fd;
};

static int resolve(const char *addr, int passive, struct addrinfo **res)
{
	char host[256], port[16];
	int err = rm_transport_split_addr(addr, host, sizeof(host), port, sizeof(port));
	if (err)
		return err;
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				 .ai_flags = passive ? AI_PASSIVE : 0};
	int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, res);
	if (rc) {
		/* A name that does not resolve is not an unreachable host: said as getaddrinfo says it. */
		rm_transport_set_why(-EHOSTUNREACH, "the host name %s does not resolve: %s", host[0] ? host : "(none)",
				     rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	return 0;
}

/* Nagle off: a call's frame must leave at once. The socket buffers are left to
 * the kernel's autotuning (net.ipv4.tcp_rmem/tcp_wmem): setting SO_SNDBUF or
 * SO_RCVBUF turns autotuning off and is capped by net.core.[rw]mem_max, 208 KiB
 * on a default host, a window too small for bulk copies (docs/hotpath.md). */
static void tune(int fd)
{
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static struct rm_conn *conn_new(int fd)
{
	struct tcp_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->base.tp = &rm_transport_tcp;
	c->fd = fd;
	rm_spin_budget_init(&c->spin, rm_transport_spin_ns("REMORA_TCP_SPIN_US", TCP_SPIN_US_DEFAULT, TCP_SPIN_US_MAX));
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[48] = "?", port[8] = "?";
	if (!getpeername(fd, (struct sockaddr *)&ss, &sl))
		getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			    NI_NUMERICHOST | NI_NUMERICSERV);
	snprintf(c->peer, sizeof(c->peer), "%s:%s", host, port);
	return &c->base;
}

/* Connects with a deadline: non-blocking connect, then poll. */
static int connect_one(const struct addrinfo *ai, int timeout_ms)
{
	int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
	if (fd < 0)
		return -errno;
	int err = 0;
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS) {
			err = -errno;
		} else {
			struct pollfd p = {.fd = fd, .events = POLLOUT};
			int n = poll(&p, 1, timeout_ms);
			socklen_t len = sizeof(err);
			if (n == 0)
				err = -ETIMEDOUT;
			else if (n < 0)
				err = -errno;
			else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
				err = -errno;
			else
				err = -err;
		}
	}
	if (err) {
		close(fd);
		return err;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	tune(fd);
	return fd;
}

static int tcp_dial(const char *addr, int timeout_ms, struct rm_conn **out)
{
	struct addrinfo *res;
	int err = resolve(addr, 0, &res);
	if (err)
		return err;
	int fd = -ECONNREFUSED;
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next)
		fd = connect_one(ai, timeout_ms);
	freeaddrinfo(res);
	if (fd < 0)
		return fd;
	*out = conn_new(fd);
	if (!*out) {
		close(fd);
		return -ENOMEM;
	}
	return 0;
}

static int tcp_listen(const char *addr, struct rm_listener **out)
{
	struct addrinfo *res;
	int err = resolve(addr, 1, &res);
	if (err)
		return err;
	int fd = -1;
	err = -EADDRNOTAVAIL;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
		if (fd < 0)
			continue;
		int one = 1;
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 128) == 0)
			break;
		err = -errno;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0)
		return err;
	struct rm_listener *l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		return -ENOMEM;
	}
	l->fd = fd;
	*out = l;
	return 0;
}

static int tcp_listener_addr(struct rm_listener *l, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[48], port[8];
	if (getsockname(l->fd, (struct sockaddr *)&ss, &sl) < 0)
		return -errno;
	if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV))
		return -EINVAL;
	snprintf(buf, len, strchr(host, ':') ? "[%s]:%s" : "%s:%s", host, port);
	return 0;
}

static int tcp_accept(struct rm_listener *l, struct rm_conn **out)
{
	int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return -errno;
	tune(fd);
	*out = conn_new(fd);
	if (!*out) {
		close(fd);
		return -ENOMEM;
	}
	return 0;
}

static void tcp_listener_close(struct rm_listener *l)
{
	close(l->fd);
	free(l);
}

static ssize_t profiled_sendmsg(int fd, const struct msghdr *mh, int flags)
{
	uint64_t t0 = rm_transport_tally_begin();
	ssize_t w = sendmsg(fd, mh, flags);
	int saved = errno;
	rm_transport_tally_end(t0, 0);
	errno = saved;
	return w;
}

static ssize_t profiled_recv(int fd, void *buf, size_t len, int flags)
{
	uint64_t t0 = rm_transport_tally_begin();
	ssize_t r = recv(fd, buf, len, flags);
	int saved = errno;
	rm_transport_tally_end(t0, 1);
	errno = saved;
	return r;
}

static int tcp_sendv(struct rm_conn *conn, const struct iovec *iov_in, int iovcnt)
{
	struct tcp_conn *c = tcp(conn);
	struct iovec iov[64];
	while (iovcnt > 0) {
		int n = iovcnt < 64 ? iovcnt : 64;
		memcpy(iov, iov_in, (size_t)n * sizeof(*iov));
		struct iovec *v = iov;
		int left = n;
		while (left > 0) {
			struct msghdr mh = {.msg_iov = v, .msg_iovlen = (size_t)left};
			ssize_t w = __builtin_expect(rm_transport_profiling, 0) ? profiled_sendmsg(c->fd, &mh, MSG_NOSIGNAL)
									   : sendmsg(c->fd, &mh, MSG_NOSIGNAL);
			if (w < 0) {
				if (errno == EINTR)
					continue;
				return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
			}
			while (left > 0 && (size_t)w >= v->iov_len) {
				w -= (ssize_t)v->iov_len;
				v++;
				left--;
			}
			if (left > 0) {
				v->iov_base = (char *)v->iov_base + w;
				v->iov_len -= (size_t)w;
			}
		}
		iov_in += n;
		iovcnt -= n;
	}
	return 0;
}

static int tcp_readable(struct rm_conn *conn)
{
	struct pollfd p = {.fd = tcp(conn)->fd, .events = POLLIN};
	return poll(&p, 1, 0) > 0;
}

/* POLLOUT: at least a third of the send buffer is free (some KiB), room for a small frame. */
static int tcp_writable(struct rm_conn *conn, size_t len)
{
	struct pollfd p = {.fd = tcp(conn)->fd, .events = POLLOUT};
	(void)len;
	return poll(&p, 1, 0) > 0 && (p.revents & POLLOUT);
}

struct spin_recv {
	int fd;
	void *buf;
	size_t len;
	ssize_t got; /* bytes, or a negative errno */
};

/* One look of the spin: 1 once bytes came or the receive failed, 0 for nothing yet. */
static int look(void *arg)
{
	struct spin_recv *s = arg;
	s->got = recv(s->fd, s->buf, s->len, MSG_DONTWAIT);
	if (s->got == 0)
		s->got = -ECONNRESET;
	else if (s->got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
		s->got = -errno;
	else if (s->got < 0)
		return 0;
	return 1;
}

/* The spin (see the top): bytes, 0 for none in time, or a negative errno. */
static ssize_t spin_recv(struct tcp_conn *c, void *buf, size_t len, uint64_t spin)
{
	struct spin_recv s = {c->fd, buf, len, 0};
	if (rm_spin(spin, 1, 0, look, &s)) {
		if (s.got > 0)
			rm_spin_budget_answered(&c->spin);
		return s.got;
	}
	rm_spin_budget_in_vain(&c->spin, spin);
	return 0;
}

static ssize_t tcp_recv_some(struct rm_conn *conn, void *buf, size_t len)
{
	struct tcp_conn *c = tcp(conn);
	uint64_t spin = rm_spin_budget_next(&c->spin), t0 = 0;
	if (spin && !rm_transport_profiling) {
		t0 = rm_transport_now_ns();
		ssize_t r = spin_recv(c, buf, len, spin);
		if (r)
			return r;
	}
	for (;;) {
		ssize_t r = __builtin_expect(rm_transport_profiling, 0) ? profiled_recv(c->fd, buf, len, 0)
								   : recv(c->fd, buf, len, 0);
		if (r > 0 && t0 && rm_transport_now_ns() - t0 < c->spin.whole) /* a whole spin would have caught it */
			rm_spin_budget_answered(&c->spin);
		if (r > 0)
			return r;
		if (r == 0)
			return -ECONNRESET;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return -ETIMEDOUT; /* silent for the liveness timeout */
		if (errno != EINTR)
			return -errno;
	}
}

static void tcp_shutdown(struct rm_conn *c)
{
	shutdown(tcp(c)->fd, SHUT_RDWR);
}

static int tcp_set_liveness(struct rm_conn *c, int recv_timeout_ms, int send_timeout_ms)
{
	int fd = tcp(c)->fd, on = recv_timeout_ms > 0;
	struct timeval rtv = {.tv_sec = recv_timeout_ms / 1000, .tv_usec = (recv_timeout_ms % 1000) * 1000};
	struct timeval stv = {.tv_sec = send_timeout_ms / 1000, .tv_usec = (send_timeout_ms % 1000) * 1000};
	/* Keepalives: first probe after a third of the timeout of silence, then three more
	 * a ninth apart, so a vanished host is declared dead within about two thirds of it. */
	int idle = recv_timeout_ms / 3000 > 0 ? recv_timeout_ms / 3000 : 1;
	int intvl = recv_timeout_ms / 9000 > 0 ? recv_timeout_ms / 9000 : 1, count = 3;
	unsigned int user_timeout = send_timeout_ms > 0 ? (unsigned int)send_timeout_ms : 0;
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rtv, sizeof(rtv)) ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &stv, sizeof(stv)) ||
	    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on)) ||
	    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout, sizeof(user_timeout)))
		return -errno;
	if (on && (setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle)) ||
		   setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl)) ||
		   setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count))))
		return -errno;
	return 0;
}

static const char *tcp_peer(struct rm_conn *c)
{
	return tcp(c)->peer;
}

static void tcp_close(struct rm_conn *c)
{
	close(tcp(c)->fd);
	free(tcp(c));
}

static int tcp_export_fd(struct rm_conn *c, void *state, size_t *state_len, int *extra_fd)
{
	(void)state;
	(void)extra_fd;
	if (state_len)
		*state_len = 0;
	return tcp(c)->fd;
}

static int tcp_adopt_fd(int fd, int extra_fd, const void *state, size_t state_len, struct rm_conn **out)
{
	if (extra_fd >= 0)
		return -EINVAL;
	(void)state;
	if (state_len)
		return -EINVAL;
	*out = conn_new(fd);
	return *out ? 0 : -ENOMEM;
}

const struct rm_transport rm_transport_tcp = {
	.scheme = "tcp",
	.check_address = rm_transport_check_host_port,
	.dial = tcp_dial,
	.listen = tcp_listen,
	.listener_addr = tcp_listener_addr,
	.accept = tcp_accept,
	.listener_close = tcp_listener_close,
	.sendv = tcp_sendv,
	.recv_some = tcp_recv_some,
	.readable = tcp_readable,
	.writable = tcp_writable,
	.shutdown = tcp_shutdown,
	.set_liveness = tcp_set_liveness,
	.peer = tcp_peer,
	.close = tcp_close,
	.export_fd = tcp_export_fd,
	.adopt_fd = tcp_adopt_fd,
};
