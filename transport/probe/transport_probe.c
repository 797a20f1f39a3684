/* transport-probe: the conformance check and the yardstick of a transport.
 *
 *   transport-probe [--check] [--adopt] [--hostile] [--rtt N] [--mib N] [--tls CERT KEY CA] [URL]
 *
 * Listens on URL (default tcp://127.0.0.1:0), dials itself and measures, through
 * the transport's own ops, what every remote call is compared with:
 *   rtt   N round trips of one 48-byte frame header each way (as a synchronous call),
 *   bulk  N MiB one way, sent in 8 MiB sendv calls and received with recv_some
 *         into one reused 8 MiB buffer (as a copy's payload reaches the staging buffers),
 *   copy  with --copy-kib N: round trips of N KiB out, all of it received, and one
 *         frame header back (as a copy that waits for its reply), --copies of them.
 * --check makes it a test: iovec splitting, bytes arriving exact, shutdown
 * unblocking a reader, a closed peer reported as -ECONNRESET, a connection handed over
 * (export_fd, adopt_fd) carrying on, 16 connections at once carrying sizes from 1 byte to
 * 3 MiB both ways, a sender whose peer stops reading failing within its send timeout
 * (transport.h: every write to a peer has a deadline). --adopt hands the measured connection over
 * before it serves, as remorad's accepting process does (rdma:// upgrades only then), and
 * the 16 connections too. --hostile adds strangers at the listener (probe_hostile.c).
 * --tls gives both ends of tls:// their files.
 * Prints "rtt_us=", "copy_us=", "bulk_mib_per_s=" lines; exits 0 when every check passed.
 */
#include "probe.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef RM_HAVE_TLS
#include "tls.h"
#endif

#define BULK_CHUNK (8u << 20)

struct peer {
	const struct rm_transport *tp;
	struct rm_listener *listener;
	struct rm_conn *conn; /* the accepted side */
	long rtt_rounds;
	long copy_rounds;
	size_t copy_bytes;
	uint64_t bulk_bytes;
	int check;
	int adopt;
	int hostile;
	int failed;
};

double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int recv_all(struct rm_conn *c, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = rm_conn_recv_some(c, (uint8_t *)buf + got, len - got);
		if (n < 0)
			return (int)n;
		got += (size_t)n;
	}
	return 0;
}

/* Hands c over as to another process: its descriptors and state, then adopted again. As
 * remorad, which hands a connection over once it read the client's hello, it ends first a
 * handshake that the transport leaves to the first read or write (TLS). */
int hand_over(const struct rm_transport *tp, struct rm_conn **c)
{
	uint8_t state[RM_TRANSPORT_STATE_MAX];
	size_t len = 0;
	int extra = -1;
	int fd = rm_conn_sendv(*c, NULL, 0);
	if (!fd)
		fd = rm_conn_export_fd(*c, state, &len, &extra);
	if (fd < 0)
		return fd;
	int dup_fd = dup(fd), dup_extra = extra >= 0 ? dup(extra) : -1;
	rm_conn_close(*c); /* closes fd (and extra); the copies live on, as in the worker */
	*c = NULL;
	int err = tp->adopt_fd(dup_fd, dup_extra, state, len, c);
	if (err) {
		close(dup_fd);
		if (dup_extra >= 0)
			close(dup_extra);
	}
	return err;
}

/* The accepted side: echoes headers, then swallows (and with --check verifies) the bulk. */
static void *serve(void *arg)
{
	struct peer *p = arg;
	uint8_t hdr[HEADER_LEN];
	if (p->tp->accept(p->listener, &p->conn) || (p->adopt && hand_over(p->tp, &p->conn))) {
		p->failed = 1;
		return NULL;
	}
	for (long i = 0; i < p->rtt_rounds; i++) {
		struct iovec v = {hdr, sizeof(hdr)};
		if (recv_all(p->conn, hdr, sizeof(hdr)) || rm_conn_sendv(p->conn, &v, 1)) {
			p->failed = 1;
			return NULL;
		}
	}
	uint8_t *buf = malloc(BULK_CHUNK > p->copy_bytes ? BULK_CHUNK : p->copy_bytes);
	if (!buf) {
		p->failed = 1;
		return NULL;
	}
	for (long i = 0; i < p->copy_rounds; i++) {
		struct iovec v = {hdr, sizeof(hdr)};
		if (recv_all(p->conn, buf, p->copy_bytes) || rm_conn_sendv(p->conn, &v, 1)) {
			p->failed = 1;
			free(buf);
			return NULL;
		}
	}
	for (uint64_t got = 0; got < p->bulk_bytes;) {
		uint64_t left = p->bulk_bytes - got;
		ssize_t n = rm_conn_recv_some(p->conn, buf, left < BULK_CHUNK ? (size_t)left : BULK_CHUNK);
		if (n < 0) {
			p->failed = 1;
			break;
		}
		for (ssize_t k = 0; p->check && k < n; k++)
			if (buf[k] != pattern((got + (uint64_t)k) % BULK_CHUNK)) {
				fprintf(stderr, "transport-probe: byte %llu differs\n", (unsigned long long)(got + k));
				p->failed = 1;
				break;
			}
		got += (uint64_t)n;
	}
	free(buf);
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Round trips of out_len bytes out (out: NULL for a frame header) and a frame header
 * back: reports the median and the mean as NAME_us= and NAME_mean_us=. */
static int measure_round_trips(struct rm_conn *c, long rounds, const uint8_t *out, size_t out_len, const char *name)
{
	double *t = malloc(sizeof(double) * (size_t)(rounds ? rounds : 1));
	uint8_t hdr[HEADER_LEN] = {0};
	if (!t)
		return -ENOMEM;
	double total = 0;
	for (long i = 0; i < rounds; i++) {
		struct iovec v = {out ? (void *)out : hdr, out ? out_len : sizeof(hdr)};
		double t0 = now_s();
		int err = rm_conn_sendv(c, &v, 1);
		if (!err)
			err = recv_all(c, hdr, sizeof(hdr));
		if (err) {
			free(t);
			return err;
		}
		t[i] = now_s() - t0;
		total += t[i];
	}
	if (rounds) {
		qsort(t, (size_t)rounds, sizeof(double), cmp_double);
		printf("%s_us=%.2f\n%s_mean_us=%.2f\n", name, t[rounds / 2] * 1e6, name, total / (double)rounds * 1e6);
	}
	free(t);
	return 0;
}

static int measure_copies(struct rm_conn *c, long rounds, size_t bytes)
{
	uint8_t *buf = malloc(bytes ? bytes : 1);
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < bytes; i++)
		buf[i] = pattern(i);
	int err = measure_round_trips(c, rounds, buf, bytes, "copy");
	free(buf);
	return err;
}

static int measure_bulk(struct rm_conn *c, uint64_t bytes)
{
	uint8_t *buf = malloc(BULK_CHUNK);
	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < BULK_CHUNK; i++)
		buf[i] = pattern(i);
	double t0 = now_s();
	int err = 0;
	for (uint64_t sent = 0; !err && sent < bytes;) {
		uint64_t left = bytes - sent;
		struct iovec v = {buf, left < BULK_CHUNK ? (size_t)left : BULK_CHUNK};
		err = rm_conn_sendv(c, &v, 1);
		sent += v.iov_len;
	}
	double dt = now_s() - t0;
	free(buf);
	if (!err && bytes)
		printf("bulk_mib_per_s=%.0f\n", (double)bytes / (1 << 20) / dt);
	return err;
}

int main(int argc, char **argv)
{
	struct peer p = {.rtt_rounds = 20000, .bulk_bytes = 4096ull << 20, .copy_rounds = 1000};
	const char *url = "tcp://127.0.0.1:0";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--check"))
			p.check = 1;
		else if (!strcmp(argv[i], "--adopt"))
			p.adopt = 1;
		else if (!strcmp(argv[i], "--hostile"))
			p.hostile = 1;
		else if (!strcmp(argv[i], "--rtt") && i + 1 < argc)
			p.rtt_rounds = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			p.bulk_bytes = strtoull(argv[++i], NULL, 10) << 20;
		else if (!strcmp(argv[i], "--copy-kib") && i + 1 < argc)
			p.copy_bytes = strtoull(argv[++i], NULL, 10) << 10;
		else if (!strcmp(argv[i], "--copies") && i + 1 < argc)
			p.copy_rounds = strtol(argv[++i], NULL, 10);
#ifdef RM_HAVE_TLS
		else if (!strcmp(argv[i], "--tls") && i + 3 < argc) { /* CERT KEY CA: both ends */
			char why[300];
			if (rm_tls_server_configure(argv[i + 1], argv[i + 2], NULL, why, sizeof(why)) ||
			    rm_tls_client_configure(argv[i + 3], NULL, NULL, why, sizeof(why))) {
				fprintf(stderr, "transport-probe: %s\n", why);
				return 2;
			}
			i += 3;
		}
#endif
		else if (argv[i][0] != '-')
			url = argv[i];
		else {
			fprintf(stderr, "usage: %s [--check] [--adopt] [--hostile] [--rtt N] [--copy-kib N [--copies N]] [--mib N] [--tls CERT KEY CA] [URL]\n", argv[0]);
			return 2;
		}
	}
	if (!p.copy_bytes)
		p.copy_rounds = 0; /* no copies asked for */
	const char *addr;
	p.tp = rm_transport_for(url, &addr);
	if (!p.tp) {
		fprintf(stderr, "transport-probe: no transport for %s\n", url);
		return 2;
	}
	char bound[96];
	int err = p.tp->listen(addr, &p.listener);
	if (!err)
		err = p.tp->listener_addr(p.listener, bound, sizeof(bound));
	if (err) {
		fprintf(stderr, "transport-probe: cannot listen on %s: %s\n", url, rm_transport_why(err));
		return 1;
	}
	pthread_t server;
	pthread_create(&server, NULL, serve, &p);
	struct rm_conn *c = NULL;
	err = p.tp->dial(bound, 2000, &c);
	if (!err)
		err = measure_round_trips(c, p.rtt_rounds, NULL, 0, "rtt");
	if (!err)
		err = measure_copies(c, p.copy_rounds, p.copy_bytes);
	if (!err)
		err = measure_bulk(c, p.bulk_bytes);
	pthread_join(server, NULL);
	if (!err && p.check)
		err = probe_check_contract(p.tp, p.listener, bound);
	if (!err && p.check)
		err = probe_check_send_timeout(p.tp, p.listener, bound);
	if (!err && p.check && (err = probe_check_many(p.tp, p.listener, p.adopt, bound)))
		fprintf(stderr, "transport-probe: %d connections at once did not carry every size exact\n", MANY_CONNS);
	if (!err && p.hostile)
		err = probe_check_hostile(p.tp, p.listener, bound);
	if (!err && p.failed)
		err = -EPROTO;
	if (err)
		fprintf(stderr, "transport-probe: %s\n", rm_transport_why(err));
	if (c)
		rm_conn_close(c);
	if (p.conn)
		rm_conn_close(p.conn);
	p.tp->listener_close(p.listener);
	return err ? 1 : 0;
}
