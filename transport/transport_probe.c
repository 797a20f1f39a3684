/* transport-probe: the conformance check and the yardstick of a transport.
 *
 *   transport-probe [--check] [--adopt] [--rtt N] [--mib N] [--tls CERT KEY CA] [URL]
 *
 * Listens on URL (default tcp://127.0.0.1:0), dials itself and measures, through
 * the transport's own ops, what every remote call is compared with:
 *   rtt   N round trips of one 48-byte frame header each way (as a synchronous call),
 *   bulk  N MiB one way, sent in 8 MiB sendv calls and received with recv_some
 *         into one reused 8 MiB buffer (as a copy's payload reaches the staging buffers).
 * --check makes it a test: iovec splitting, bytes arriving exact, shutdown
 * unblocking a reader, a closed peer reported as -ECONNRESET, a connection handed over
 * (export_fd, adopt_fd) carrying on, 16 connections at once carrying sizes from 1 byte to
 * 3 MiB both ways, a sender whose peer stops reading failing within its send timeout
 * (transport.h: every write to a peer has a deadline). --adopt hands the measured connection over
 * before it serves, as remorad's accepting process does (rdma:// upgrades only then).
 * --tls gives both ends of tls:// their files.
 * Prints "rtt_us=", "bulk_mib_per_s=" lines; exits 0 when every check passed.
 */
#include "transport.h"

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

#define HEADER_LEN 48
#define BULK_CHUNK (8u << 20)

struct peer {
	const struct rm_transport *tp;
	struct rm_listener *listener;
	struct rm_conn *conn; /* the accepted side */
	long rtt_rounds;
	uint64_t bulk_bytes;
	int check;
	int adopt;
	int failed;
};

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static uint8_t pattern(uint64_t i)
{
	return (uint8_t)(i * 131u + (i >> 13));
}

static int recv_all(struct rm_conn *c, void *buf, size_t len)
{
	for (size_t got = 0; got < len;) {
		ssize_t n = rm_conn_recv_some(c, (uint8_t *)buf + got, len - got);
		if (n < 0)
			return (int)n;
		got += (size_t)n;
	}
	return 0;
}

/* Hands c over as to another process: its descriptors and state, then adopted again. */
static int hand_over(const struct rm_transport *tp, struct rm_conn **c)
{
	uint8_t state[RM_TRANSPORT_STATE_MAX];
	size_t len = 0;
	int extra = -1;
	int fd = rm_conn_export_fd(*c, state, &len, &extra);
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
	uint8_t *buf = malloc(BULK_CHUNK);
	if (!buf) {
		p->failed = 1;
		return NULL;
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

/* Round trips: reports the median and the mean. */
static int measure_rtt(struct rm_conn *c, long rounds)
{
	double *t = malloc(sizeof(double) * (size_t)(rounds ? rounds : 1));
	uint8_t hdr[HEADER_LEN] = {0};
	if (!t)
		return -ENOMEM;
	double total = 0;
	for (long i = 0; i < rounds; i++) {
		struct iovec v = {hdr, sizeof(hdr)};
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
		printf("rtt_us=%.2f\nrtt_mean_us=%.2f\n", t[rounds / 2] * 1e6, total / (double)rounds * 1e6);
	}
	free(t);
	return 0;
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

struct blocked_reader {
	const struct rm_transport *tp;
	struct rm_conn *conn;
	ssize_t result;
};

static void *read_one(void *arg)
{
	struct blocked_reader *r = arg;
	uint8_t b;
	r->result = rm_conn_recv_some(r->conn, &b, 1);
	return NULL;
}

/* Contract checks beyond the measurements: split iovecs, liveness timeout, shutdown, peer close. */
struct acceptor {
	const struct rm_transport *tp;
	struct rm_listener *l;
	struct rm_conn *conn;
	int err;
};

/* Accepts one connection and writes nothing to it, which ends a handshake that a
 * transport leaves to the first read or write (TLS). */
static void *accept_one(void *arg)
{
	struct acceptor *a = arg;
	if (!(a->err = a->tp->accept(a->l, &a->conn)) && (a->err = rm_conn_sendv(a->conn, NULL, 0))) {
		rm_conn_close(a->conn);
		a->conn = NULL;
	}
	return NULL;
}

struct exact_reader {
	struct rm_conn *conn;
	uint8_t *buf;
	size_t len;
	int err;
};

static void *read_exact(void *arg)
{
	struct exact_reader *r = arg;
	r->err = recv_all(r->conn, r->buf, r->len);
	return NULL;
}

/* A connection handed to another process travels as its descriptor and state: here the
 * accepted end is exported and adopted again, and must carry on the stream exact, both
 * ways. The dialled end is reading while its peer is adopted, as a client waiting for its
 * hello's answer is (an rdma:// connection upgrades then). */
static int check_handover(const struct rm_transport *tp, struct rm_conn *a, struct rm_conn **b)
{
	uint8_t out[300], in[300], back[300];
	for (size_t i = 0; i < sizeof(out); i++)
		out[i] = pattern(i * 3);
	struct iovec v = {out, sizeof(out)};
	if (rm_conn_sendv(a, &v, 1) || recv_all(*b, in, 100)) /* hand over between two records only */
		return -EIO;
	struct exact_reader r = {a, back, sizeof(back), 0};
	pthread_t t;
	pthread_create(&t, NULL, read_exact, &r);
	size_t got = 100;
	int err = hand_over(tp, b);
	if (err == -EBUSY) { /* the record is still being read: finish it, then hand over */
		err = recv_all(*b, in + 100, 200) ? -EIO : hand_over(tp, b);
		got = 300;
	}
	if (err == -ENOTSUP) /* a connection that cannot travel carries on where it is */
		err = 0;
	if (!err && (recv_all(*b, in + got, sizeof(in) - got) || rm_conn_sendv(*b, &v, 1)))
		err = -EIO;
	if (err)
		rm_conn_shutdown(a); /* ends the reader */
	pthread_join(t, NULL);
	if (err)
		return err;
	if (r.err || memcmp(back, out, sizeof(out)) || memcmp(in, out, sizeof(out)) || rm_conn_sendv(a, &v, 1) ||
	    recv_all(*b, in, sizeof(in)) || memcmp(in, out, sizeof(out)) || rm_conn_sendv(*b, &v, 1) ||
	    recv_all(a, in, sizeof(in)) || memcmp(in, out, sizeof(out)))
		return -EIO;
	return 0;
}

/* A transport that passes descriptors: one sent while the peer's reader waits in recv_some
 * (polling the socket the descriptor rides on) arrives, is the same file, and the reader
 * still wakes for the bytes that follow; with none sent, recv_fd times out. Any other
 * transport says -EOPNOTSUPP. */
static int check_fd_passing(struct rm_conn *a, struct rm_conn *b)
{
	if (!rm_conn_passes_fds(a))
		return rm_conn_send_fd(a, 0) == -EOPNOTSUPP && rm_conn_recv_fd(b, 10) == -EOPNOTSUPP ? 0 : -EPROTO;
	int p[2];
	if (pipe(p))
		return -errno;
	struct blocked_reader r = {NULL, b, 0};
	pthread_t t;
	pthread_create(&t, NULL, read_one, &r);
	struct timespec pause = {0, 20 * 1000 * 1000};
	nanosleep(&pause, NULL);
	int err = rm_conn_send_fd(a, p[1]);
	int fd = err ? err : rm_conn_recv_fd(b, 2000);
	uint8_t byte = 7, got = 0;
	struct iovec v = {&byte, 1};
	if (rm_conn_sendv(a, &v, 1)) /* wakes the reader */
		err = -EIO;
	pthread_join(t, NULL);
	if (!err && fd < 0)
		err = fd;
	if (!err && (r.result != 1 || write(fd, "x", 1) != 1 || read(p[0], &got, 1) != 1 || got != 'x'))
		err = -EPROTO;
	if (!err && rm_conn_recv_fd(b, 100) != -ETIMEDOUT)
		err = -EPROTO;
	if (fd >= 0)
		close(fd);
	close(p[0]);
	close(p[1]);
	return err;
}

/* Many connections at once, bytes of every size around the transports' own units (a
 * page, an RDMA buffer, a ring's publishing step) both ways at the same time: each
 * accepted end echoes what it reads while its dialled end writes and reads back on two
 * threads, and every byte must come back in order. */
#define MANY_CONNS 16

static const size_t many_sizes[] = {1, 7, 4095, 4096, 65527, 65528, 65529, 65536, 262145, 1048576, 3145733};
#define MANY_TOTAL (1 + 7 + 4095 + 4096 + 65527 + 65528 + 65529 + 65536 + 262145 + 1048576 + 3145733)

struct many_pair {
	const struct rm_transport *tp;
	struct rm_listener *l;
	int adopt;
	struct rm_conn *dialled, *accepted;
	pthread_t echo;
	int index, echoing;
	int accept_err, echo_err, write_err; /* each thread's own */
};

static uint8_t many_byte(int index, size_t i)
{
	return (uint8_t)(pattern(i) ^ (uint8_t)(index * 29));
}

static void *many_echo(void *arg)
{
	struct many_pair *m = arg;
	uint8_t buf[70000];
	for (size_t done = 0; done < MANY_TOTAL;) {
		ssize_t n = rm_conn_recv_some(m->accepted, buf, sizeof(buf));
		struct iovec v = {buf, n > 0 ? (size_t)n : 0};
		if (n < 0 || rm_conn_sendv(m->accepted, &v, 1)) {
			m->echo_err = n < 0 ? (int)n : -EIO;
			return NULL;
		}
		done += (size_t)n;
	}
	return NULL;
}

static void *many_write(void *arg)
{
	struct many_pair *m = arg;
	uint8_t *out = malloc(MANY_TOTAL);
	if (!out) {
		m->write_err = -ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < MANY_TOTAL; i++)
		out[i] = many_byte(m->index, i);
	size_t off = 0;
	for (size_t k = 0; k < sizeof(many_sizes) / sizeof(many_sizes[0]) && !m->write_err; k++) {
		struct iovec v = {out + off, many_sizes[k]};
		if (rm_conn_sendv(m->dialled, &v, 1))
			m->write_err = -EIO;
		off += many_sizes[k];
	}
	free(out);
	return NULL;
}

static void *many_accept(void *arg)
{
	struct many_pair *pairs = arg;
	for (int i = 0; i < MANY_CONNS; i++) {
		struct many_pair *m = &pairs[i];
		if ((m->accept_err = m->tp->accept(m->l, &m->accepted)) ||
		    (m->adopt && (m->accept_err = hand_over(m->tp, &m->accepted))))
			return NULL;
		m->echoing = pthread_create(&m->echo, NULL, many_echo, m) == 0;
	}
	return NULL;
}

static int check_many(const struct rm_transport *tp, struct rm_listener *l, int adopt, const char *addr)
{
	struct many_pair pairs[MANY_CONNS];
	memset(pairs, 0, sizeof(pairs));
	for (int i = 0; i < MANY_CONNS; i++)
		pairs[i] = (struct many_pair){.tp = tp, .l = l, .adopt = adopt, .index = i};
	pthread_t acceptor, writers[MANY_CONNS];
	pthread_create(&acceptor, NULL, many_accept, pairs);
	int err = 0, nwriters = 0;
	for (int i = 0; i < MANY_CONNS && !err; i++)
		err = tp->dial(addr, 2000, &pairs[i].dialled);
	if (err) { /* the acceptor waits for connections that will not come: leave it */
		pthread_detach(acceptor);
		for (int i = 0; i < MANY_CONNS; i++)
			if (pairs[i].dialled)
				rm_conn_close(pairs[i].dialled);
		return err;
	}
	for (int i = 0; i < MANY_CONNS && !err; i++)
		if (pthread_create(&writers[i], NULL, many_write, &pairs[i]) == 0)
			nwriters++;
	uint8_t *in = err ? NULL : malloc(MANY_TOTAL);
	for (int i = 0; i < MANY_CONNS && in && !err; i++) { /* the echoes, connection by connection */
		for (size_t got = 0; got < MANY_TOTAL && !err;) {
			ssize_t n = rm_conn_recv_some(pairs[i].dialled, in + got, MANY_TOTAL - got);
			if (n < 0)
				err = (int)n;
			else
				got += (size_t)n;
		}
		for (size_t k = 0; k < MANY_TOTAL && !err; k++)
			if (in[k] != many_byte(i, k)) {
				fprintf(stderr, "transport-probe: connection %d: byte %zu of the echo differs\n", i, k);
				err = -EPROTO;
			}
	}
	if (!in && !err)
		err = -ENOMEM;
	free(in);
	/* After an error, ends any thread still blocked. Not otherwise: an echo's last send
	 * may still be waiting for its peer's word that it was read (rdma's reads). */
	for (int i = 0; i < MANY_CONNS && err; i++) {
		if (pairs[i].dialled)
			rm_conn_shutdown(pairs[i].dialled);
		if (pairs[i].accepted)
			rm_conn_shutdown(pairs[i].accepted);
	}
	for (int i = 0; i < nwriters; i++)
		pthread_join(writers[i], NULL);
	pthread_join(acceptor, NULL);
	for (int i = 0; i < MANY_CONNS; i++) {
		if (pairs[i].echoing)
			pthread_join(pairs[i].echo, NULL);
		if (!err)
			err = pairs[i].accept_err ? pairs[i].accept_err : pairs[i].echo_err ? pairs[i].echo_err : pairs[i].write_err;
		if (pairs[i].dialled)
			rm_conn_close(pairs[i].dialled);
		if (pairs[i].accepted)
			rm_conn_close(pairs[i].accepted);
	}
	return err;
}

/* A sender whose peer stops reading fails with -ETIMEDOUT within its send timeout, rather
 * than waiting for ever (transport.h, writes to a peer): on a connection handed over as
 * remorad hands it (rdma's upgrade), the peer reads 1 MiB and then nothing; 16 sends of
 * 32 KiB follow (rdma: every credit spent on messages), then 1 MiB each (rdma: a read offer
 * that must wait for a credit) until one fails, that one within the timeout and a margin
 * for a loaded machine. Until the peer's buffers are full a small frame is writable, after
 * it not (where the transport can tell), unless the connection has failed meanwhile. */
#define SEND_TIMEOUT_MS 300
#define SEND_TIMEOUT_MARGIN_S 5.0

static int check_send_timeout(const struct rm_transport *tp, struct rm_listener *l, const char *addr)
{
	struct acceptor acc = {tp, l, NULL, 0};
	pthread_t at;
	pthread_create(&at, NULL, accept_one, &acc);
	struct rm_conn *a = NULL, *b;
	int err = tp->dial(addr, 2000, &a);
	pthread_join(at, NULL);
	b = acc.conn;
	if (!err)
		err = acc.err;
	if (!err)
		err = check_handover(tp, a, &b);
	uint8_t *buf = err ? NULL : calloc(1, 1u << 20);
	uint8_t *sink = err ? NULL : malloc(1u << 20);
	if (!err && (!buf || !sink))
		err = -ENOMEM;
	if (!err) { /* the peer reads a while, then stops */
		struct exact_reader r = {b, sink, 1u << 20, 0};
		pthread_t rt;
		pthread_create(&rt, NULL, read_exact, &r);
		struct iovec v = {buf, 1u << 20};
		err = rm_conn_sendv(a, &v, 1);
		pthread_join(rt, NULL);
		if (!err)
			err = r.err;
	}
	if (!err)
		err = rm_conn_set_liveness(a, 0, SEND_TIMEOUT_MS);
	if (err) {
		fprintf(stderr, "transport-probe: no connection to check a send timeout on: %s\n", rm_transport_why(err));
	} else if (!rm_conn_writable(a, HEADER_LEN)) {
		fprintf(stderr, "transport-probe: a connection whose peer has taken everything is not writable\n");
		err = -EPROTO;
	} else {
		size_t sent = 0, limit = (size_t)1 << 30;
		double t0 = now_s(), last = 0;
		for (int i = 0; !err && sent < limit; i++) {
			struct iovec v = {buf, i < 16 ? (32u << 10) : (1u << 20)};
			double t = now_s();
			if (!(err = rm_conn_sendv(a, &v, 1)))
				sent += v.iov_len;
			last = now_s() - t;
		}
		double took = now_s() - t0;
		if (err == -ETIMEDOUT && last <= SEND_TIMEOUT_MS / 1000.0 + SEND_TIMEOUT_MARGIN_S && took <= 20) {
			err = 0;
		} else {
			fprintf(stderr, "transport-probe: a sender whose peer stopped reading did not time out within "
				"%d ms: %s after %zu bytes, the last send %.1f s, all %.1f s\n", SEND_TIMEOUT_MS,
				err ? rm_transport_why(err) : "all sent", sent, last, took);
			err = -EPROTO;
		}
		double t = now_s();
		if (!err && tp->writable && rm_conn_writable(a, HEADER_LEN)) {
			/* TCP's user timeout may have ended the connection: then its sends fail at once */
			struct iovec v = {buf, HEADER_LEN};
			int sent_small = rm_conn_sendv(a, &v, 1);
			if (now_s() - t > 1.0) {
				fprintf(stderr, "transport-probe: a connection whose peer takes nothing is writable, and "
					"a small send %s after %.2f s\n", sent_small ? "failed" : "went", now_s() - t);
				err = -EPROTO;
			}
		}
	}
	free(sink);
	free(buf);
	if (a)
		rm_conn_close(a);
	if (b)
		rm_conn_close(b);
	return err;
}

static int check_contract(const struct rm_transport *tp, struct rm_listener *l, const char *addr)
{
	struct rm_conn *a, *b;
	struct acceptor acc = {tp, l, NULL, 0};
	pthread_t at;
	pthread_create(&at, NULL, accept_one, &acc);
	int err = tp->dial(addr, 2000, &a);
	pthread_join(at, NULL);
	if (err || acc.err) {
		if (!err)
			rm_conn_close(a);
		if (acc.conn)
			rm_conn_close(acc.conn);
		return err ? err : acc.err;
	}
	b = acc.conn;
	if ((err = check_handover(tp, a, &b))) {
		fprintf(stderr, "transport-probe: a connection handed over did not carry on: %s\n", strerror(-err));
		rm_conn_close(a);
		if (b)
			rm_conn_close(b);
		return err;
	}
	/* Ten iovecs of odd sizes, some empty, arrive as one exact stream. */
	uint8_t out[4000], in[4000];
	struct iovec v[10];
	size_t off = 0;
	for (int i = 0; i < 10; i++) {
		size_t len = i % 3 == 1 ? 0 : (size_t)(i * 71 + 13);
		v[i] = (struct iovec){out + off, len};
		off += len;
	}
	for (size_t i = 0; i < off; i++)
		out[i] = pattern(i * 7);
	int bad = 0;
	if (rm_conn_sendv(a, v, 10) || recv_all(b, in, off) || memcmp(in, out, off)) {
		fprintf(stderr, "transport-probe: split iovecs did not arrive exact\n");
		bad = 1;
	}
	if (check_fd_passing(a, b)) {
		fprintf(stderr, "transport-probe: passing a descriptor broke its contract\n");
		bad = 1;
	}
	/* With a liveness timeout, a silent peer fails the read with -ETIMEDOUT, not a hang;
	 * turned off, the connection serves on. */
	uint8_t byte;
	ssize_t n;
	if (rm_conn_set_liveness(b, 200, 200) || (n = rm_conn_recv_some(b, &byte, 1)) != -ETIMEDOUT) {
		fprintf(stderr, "transport-probe: a read from a silent peer did not time out\n");
		bad = 1;
	}
	if (rm_conn_set_liveness(b, 0, 0) || rm_conn_sendv(a, v, 1) || recv_all(b, in, v[0].iov_len)) {
		fprintf(stderr, "transport-probe: the connection failed after its liveness timeout\n");
		bad = 1;
	}
	/* shutdown unblocks a reader with an error. */
	struct blocked_reader r = {tp, b, 0};
	pthread_t t;
	pthread_create(&t, NULL, read_one, &r);
	struct timespec pause = {0, 20 * 1000 * 1000};
	nanosleep(&pause, NULL);
	rm_conn_shutdown(b);
	pthread_join(t, NULL);
	if (r.result >= 0) {
		fprintf(stderr, "transport-probe: recv_some returned %zd after shutdown\n", r.result);
		bad = 1;
	}
	/* After the peer closed, the reader gets -ECONNRESET. */
	n = rm_conn_recv_some(a, &byte, 1);
	if (n != -ECONNRESET) {
		fprintf(stderr, "transport-probe: read from a closed peer gave %zd, expected %d\n", n, -ECONNRESET);
		bad = 1;
	}
	rm_conn_close(a);
	rm_conn_close(b);
	return bad ? -EPROTO : 0;
}

int main(int argc, char **argv)
{
	struct peer p = {.rtt_rounds = 20000, .bulk_bytes = 4096ull << 20};
	const char *url = "tcp://127.0.0.1:0";
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--check"))
			p.check = 1;
		else if (!strcmp(argv[i], "--adopt"))
			p.adopt = 1;
		else if (!strcmp(argv[i], "--rtt") && i + 1 < argc)
			p.rtt_rounds = strtol(argv[++i], NULL, 10);
		else if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			p.bulk_bytes = strtoull(argv[++i], NULL, 10) << 20;
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
			fprintf(stderr, "usage: %s [--check] [--adopt] [--rtt N] [--mib N] [--tls CERT KEY CA] [URL]\n", argv[0]);
			return 2;
		}
	}
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
		err = measure_rtt(c, p.rtt_rounds);
	if (!err)
		err = measure_bulk(c, p.bulk_bytes);
	pthread_join(server, NULL);
	if (!err && p.check)
		err = check_contract(p.tp, p.listener, bound);
	if (!err && p.check)
		err = check_send_timeout(p.tp, p.listener, bound);
	if (!err && p.check && (err = check_many(p.tp, p.listener, p.adopt, bound)))
		fprintf(stderr, "transport-probe: %d connections at once did not carry every size exact\n", MANY_CONNS);
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
