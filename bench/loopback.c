/* Loopback TCP throughput and round trip, measured in-process. */
#include "loopback.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define WARMUP_SECONDS 0.2
#define WARMUP_ROUND_TRIPS 1000

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A connected pair of loopback sockets: fds[0] the connecting end, fds[1] the accepted one. */
static int tcp_pair(int fds[2], bool nodelay)
{
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof addr;
	int rc = 0, one = 1;
	int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	fds[0] = fds[1] = -1;
	if (listener < 0)
		return -errno;
	if (bind(listener, (struct sockaddr *)&addr, sizeof addr) || listen(listener, 1) ||
	    getsockname(listener, (struct sockaddr *)&addr, &len)) {
		rc = -errno;
		goto out;
	}
	fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&addr, sizeof addr)) {
		rc = -errno;
		goto out;
	}
	fds[1] = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
	if (fds[1] < 0) {
		rc = -errno;
		goto out;
	}
	if (nodelay && (setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) ||
			setsockopt(fds[1], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one)))
		rc = -errno;
out:
	close(listener);
	if (rc) {
		if (fds[0] >= 0)
			close(fds[0]);
		if (fds[1] >= 0)
			close(fds[1]);
	}
	return rc;
}

struct sender {
	int fd;
	size_t write_bytes;
	double seconds; /* warm-up included */
	int error;      /* -errno, or 0 */
};

/* Writes until the time is up, then shuts its side down so the receiver sees EOF. */
static void *send_stream(void *arg)
{
	struct sender *s = arg;
	char *buf = calloc(1, s->write_bytes);
	if (!buf) {
		s->error = -ENOMEM;
	} else {
		double end = now_s() + s->seconds;
		while (!s->error && now_s() < end) {
			for (size_t off = 0; off < s->write_bytes;) {
				ssize_t n = send(s->fd, buf + off, s->write_bytes - off, MSG_NOSIGNAL);
				if (n < 0 && errno != EINTR) {
					s->error = -errno;
					break;
				}
				off += n > 0 ? (size_t)n : 0;
			}
		}
	}
	free(buf);
	shutdown(s->fd, SHUT_WR);
	return NULL;
}

int bench_tcp_throughput(double seconds, size_t write_bytes, double *gbps)
{
	int fds[2], rc = tcp_pair(fds, false);
	if (rc)
		return rc;
	struct sender s = { fds[0], write_bytes, WARMUP_SECONDS + seconds, 0 };
	pthread_t thread;
	char *buf = malloc(write_bytes);
	if (!buf) {
		rc = -ENOMEM;
		goto out_fds;
	}
	if ((rc = -pthread_create(&thread, NULL, send_stream, &s)))
		goto out_buf;
	double start = now_s(), counted_from = 0, last = start;
	unsigned long long counted = 0;
	for (;;) {
		ssize_t n = recv(fds[1], buf, write_bytes, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			rc = -errno;
			break;
		}
		if (n == 0)
			break;
		last = now_s();
		if (counted_from == 0 && last - start >= WARMUP_SECONDS)
			counted_from = last; /* the bytes of this read count as warm-up */
		else if (counted_from)
			counted += (unsigned long long)n;
	}
	pthread_join(thread, NULL);
	if (!rc)
		rc = s.error;
	if (!rc && (counted == 0 || last <= counted_from))
		rc = -EIO;
	if (!rc)
		*gbps = (double)counted / (last - counted_from) / 1e9;
out_buf:
	free(buf);
out_fds:
	close(fds[0]);
	close(fds[1]);
	return rc;
}

static int read_full(int fd, char *buf, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t got = recv(fd, buf + off, n - off, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			return got < 0 ? -errno : -EPIPE;
		off += (size_t)got;
	}
	return 0;
}

static int write_full(int fd, const char *buf, size_t n)
{
	for (size_t off = 0; off < n;) {
		ssize_t put = send(fd, buf + off, n - off, MSG_NOSIGNAL);
		if (put < 0 && errno == EINTR)
			continue;
		if (put < 0)
			return -errno;
		off += (size_t)put;
	}
	return 0;
}

struct echo {
	int fd;
	size_t msg_bytes;
	int error;
};

/* Echoes each message back until the other side closes. */
static void *echo_messages(void *arg)
{
	struct echo *e = arg;
	char *buf = malloc(e->msg_bytes);
	if (!buf)
		e->error = -ENOMEM;
	while (buf && read_full(e->fd, buf, e->msg_bytes) == 0)
		if ((e->error = write_full(e->fd, buf, e->msg_bytes)))
			break;
	free(buf);
	shutdown(e->fd, SHUT_RDWR);
	return NULL;
}

int bench_tcp_round_trip(int count, size_t msg_bytes, double *rtt_us)
{
	int fds[2], rc = tcp_pair(fds, true);
	if (rc)
		return rc;
	struct echo e = { fds[1], msg_bytes, 0 };
	pthread_t thread;
	char *buf = calloc(1, msg_bytes);
	if (!buf) {
		rc = -ENOMEM;
		goto out_fds;
	}
	if ((rc = -pthread_create(&thread, NULL, echo_messages, &e)))
		goto out_buf;
	double start = 0;
	for (int i = 0; i < WARMUP_ROUND_TRIPS + count && !rc; i++) {
		if (i == WARMUP_ROUND_TRIPS)
			start = now_s();
		rc = write_full(fds[0], buf, msg_bytes);
		if (!rc)
			rc = read_full(fds[0], buf, msg_bytes);
	}
	double elapsed = now_s() - start;
	shutdown(fds[0], SHUT_WR);
	pthread_join(thread, NULL);
	if (!rc)
		rc = e.error;
	if (!rc)
		*rtt_us = elapsed * 1e6 / count;
out_buf:
	free(buf);
out_fds:
	close(fds[0]);
	close(fds[1]);
	return rc;
}

/* One stream of the cold figures: a sender and a receiver thread, each over its
 * own slice of the shared buffers, wrapping around it. */
struct cold_stream {
	int fds[2];
	const char *src; /* the sender's slice */
	char *dst;       /* the receiver's slice */
	size_t slice, write_bytes;
	double warm_from, end; /* the counted window, shared by all streams */
	unsigned long long counted;
	int send_error, recv_error;
	pthread_t sender, receiver;
	bool sender_started, receiver_started;
};

static void *cold_send(void *arg)
{
	struct cold_stream *c = arg;
	size_t off = 0;
	while (!c->send_error && now_s() < c->end) {
		size_t len = c->slice - off < c->write_bytes ? c->slice - off : c->write_bytes;
		if ((c->send_error = write_full(c->fds[0], c->src + off, len)))
			break;
		off = off + len == c->slice ? 0 : off + len;
	}
	shutdown(c->fds[0], SHUT_WR);
	return NULL;
}

/* Receives into its slice until end of file, counting what arrives within the window. */
static void *cold_receive(void *arg)
{
	struct cold_stream *c = arg;
	size_t off = 0;
	for (;;) {
		size_t len = c->slice - off < c->write_bytes ? c->slice - off : c->write_bytes;
		ssize_t n = recv(c->fds[1], c->dst + off, len, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			c->recv_error = n < 0 ? -errno : 0;
			shutdown(c->fds[1], SHUT_RDWR); /* a sender still writing gets an error, not a full window */
			break;
		}
		double t = now_s();
		if (t >= c->warm_from && t <= c->end)
			c->counted += (unsigned long long)n;
		off = off + (size_t)n == c->slice ? 0 : off + (size_t)n;
	}
	return NULL;
}

int bench_tcp_cold_init(struct bench_tcp_cold *b, size_t span)
{
	b->span = span;
	b->src = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b->dst = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (b->src == MAP_FAILED || b->dst == MAP_FAILED) {
		int rc = -errno;
		bench_tcp_cold_free(b);
		return rc;
	}
	/* First touch: every page present before anything is timed. */
	memset(b->src, 0x5a, span);
	memset(b->dst, 0, span);
	return 0;
}

void bench_tcp_cold_free(struct bench_tcp_cold *b)
{
	if (b->src && b->src != MAP_FAILED)
		munmap(b->src, b->span);
	if (b->dst && b->dst != MAP_FAILED)
		munmap(b->dst, b->span);
	b->src = b->dst = NULL;
}

int bench_tcp_throughput_cold(const struct bench_tcp_cold *b, int nstreams, double seconds, size_t write_bytes,
			      double *gbps)
{
	if (nstreams < 1 || b->span / (size_t)nstreams < write_bytes)
		return -EINVAL;
	struct cold_stream *c = calloc((size_t)nstreams, sizeof *c);
	if (!c)
		return -ENOMEM;
	int rc = 0, i;
	for (i = 0; i < nstreams && !rc; i++)
		rc = tcp_pair(c[i].fds, false);
	int npairs = rc ? i - 1 : i;
	double start = now_s();
	for (i = 0; i < npairs && !rc; i++) {
		size_t slice = b->span / (size_t)nstreams;
		c[i].src = b->src + (size_t)i * slice;
		c[i].dst = b->dst + (size_t)i * slice;
		c[i].slice = slice;
		c[i].write_bytes = write_bytes;
		c[i].warm_from = start + WARMUP_SECONDS;
		c[i].end = start + WARMUP_SECONDS + seconds;
		if (!(rc = -pthread_create(&c[i].receiver, NULL, cold_receive, &c[i])))
			c[i].receiver_started = true;
		if (!rc && !(rc = -pthread_create(&c[i].sender, NULL, cold_send, &c[i])))
			c[i].sender_started = true;
	}
	unsigned long long counted = 0;
	for (i = 0; i < npairs; i++) {
		if (c[i].sender_started)
			pthread_join(c[i].sender, NULL);
		else
			shutdown(c[i].fds[0], SHUT_WR); /* lets its receiver end */
		if (c[i].receiver_started)
			pthread_join(c[i].receiver, NULL);
		if (!rc)
			rc = c[i].send_error ? c[i].send_error : c[i].recv_error;
		counted += c[i].counted;
		close(c[i].fds[0]);
		close(c[i].fds[1]);
	}
	if (!rc && counted == 0)
		rc = -EIO;
	if (!rc)
		*gbps = (double)counted / seconds / 1e9;
	free(c);
	return rc;
}
