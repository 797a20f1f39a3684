/* Loopback TCP throughput and round trip, measured in-process. */
#include "loopback.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
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
