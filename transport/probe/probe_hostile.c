/* transport-probe --hostile: strangers at the listener, peers that speak none of the
 * transport's bytes, each on a raw socket of the listener's own family (TCP, or the Unix
 * socket of a path address):
 *   - one that connects and closes at once,
 *   - one that sends a burst of bytes no client sends (0xff: no TLS record, no shm hello
 *     with its memfd, no rdma chunk header fits it) and closes,
 *   - one that sends them and stays, silent.
 * An accept may refuse a stranger; an accepted end, with a liveness timeout, must then give
 * no more bytes than the stranger sent (a transport with no framing of its own, tcp, hands
 * them on) and fail within the timeout and a margin: never fault, never hang. A client that
 * dials after them gets in and is served. */
#include "probe.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define STRANGER_BYTES 4096
#define LIVENESS_MS 500
#define MARGIN_S 5.0

enum stranger { CLOSES, GARBLES, STAYS };
static const char *const stranger_names[] = {"one that closes at once", "one that sends garbage",
					     "one that sends garbage and stays"};

/* A raw connection to the listener's address: the descriptor, or a negative errno. */
static int raw_connect(const struct rm_transport *tp, const char *addr)
{
	if (tp->flags & RM_TRANSPORT_PATH_ADDRESS) {
		struct sockaddr_un sa = {.sun_family = AF_UNIX};
		size_t n = strlen(addr);
		if (!n || n >= sizeof(sa.sun_path))
			return -EINVAL;
		memcpy(sa.sun_path, addr, n);
		if (addr[0] == '@')
			sa.sun_path[0] = 0;
		socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (addr[0] == '@' ? 0 : 1));
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len)) {
			int err = -errno;
			if (fd >= 0)
				close(fd);
			return err;
		}
		return fd;
	}
	char host[80], port[16];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	if (rm_transport_split_addr(addr, host, sizeof(host), port, sizeof(port)) ||
	    getaddrinfo(host, port, &hints, &ai))
		return -EINVAL;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), err = 0;
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen))
		err = -errno;
	freeaddrinfo(ai);
	if (err && fd >= 0)
		close(fd);
	return err ? err : fd;
}

static double seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The accepted end of a stranger: reads until it fails. 0 where it kept the rules. */
static int serve_stranger(struct rm_conn *c, enum stranger s)
{
	uint8_t buf[1024];
	size_t got = 0;
	double t0 = seconds();
	ssize_t n = rm_conn_set_liveness(c, LIVENESS_MS, LIVENESS_MS);
	while (n >= 0 && got <= STRANGER_BYTES) {
		n = rm_conn_recv_some(c, buf, sizeof(buf));
		for (ssize_t i = 0; i < n; i++)
			if (buf[i] != 0xff)
				got = STRANGER_BYTES + 1; /* bytes the stranger never sent */
		if (n > 0)
			got += (size_t)n;
	}
	double took = seconds() - t0;
	if (got > STRANGER_BYTES || took > LIVENESS_MS / 1000.0 + MARGIN_S) {
		fprintf(stderr, "transport-probe: a stranger (%s): %zu bytes read, failed after %.1f s (%s)\n",
			stranger_names[s], got, took, n < 0 ? strerror((int)-n) : "no failure");
		return -EPROTO;
	}
	return 0;
}

static int meet(const struct rm_transport *tp, struct rm_listener *l, const char *addr, enum stranger s)
{
	int fd = raw_connect(tp, addr);
	if (fd < 0) {
		fprintf(stderr, "transport-probe: cannot connect to %s as a stranger: %s\n", addr, strerror(-fd));
		return fd;
	}
	uint8_t junk[STRANGER_BYTES];
	memset(junk, 0xff, sizeof(junk));
	if (s != CLOSES && write(fd, junk, sizeof(junk)) < 0)
		s = CLOSES; /* refused already */
	if (s != STAYS) {
		close(fd);
		fd = -1;
	}
	struct rm_conn *c;
	int err = tp->accept(l, &c);
	if (!err) {
		err = serve_stranger(c, s);
		rm_conn_close(c);
	} else if (err == -ENOMEM) {
		fprintf(stderr, "transport-probe: accepting a stranger (%s): %s\n", stranger_names[s], strerror(-err));
	} else {
		err = 0; /* refused: as good as failing later */
	}
	if (fd >= 0)
		close(fd);
	return err;
}

int probe_check_hostile(const struct rm_transport *tp, struct rm_listener *l, const char *addr)
{
	int err = 0;
	for (int s = CLOSES; s <= STAYS && !err; s++)
		err = meet(tp, l, addr, (enum stranger)s);
	if (err)
		return err;
	/* A client after them is served. */
	struct acceptor acc = {tp, l, NULL, 0};
	pthread_t t;
	pthread_create(&t, NULL, accept_one, &acc);
	struct rm_conn *c = NULL;
	err = tp->dial(addr, 2000, &c);
	pthread_join(t, NULL);
	uint8_t out = 42, in = 0;
	struct iovec v = {&out, 1};
	if (!err && !(err = acc.err) && !(err = rm_conn_sendv(c, &v, 1)) && !(err = recv_all(acc.conn, &in, 1)) && in != out)
		err = -EPROTO;
	if (err)
		fprintf(stderr, "transport-probe: a client after the strangers was not served: %s\n", rm_transport_why(err));
	if (c)
		rm_conn_close(c);
	if (acc.conn)
		rm_conn_close(acc.conn);
	return err;
}
