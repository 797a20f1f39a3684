/* transport-probe --check: the contract of one connection's ops, and a sender whose peer
 * stops reading (probe.h). */
#include "probe.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

void *accept_one(void *arg)
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

int probe_check_contract(const struct rm_transport *tp, struct rm_listener *l, const char *addr)
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

/* A sender whose peer stops reading fails with -ETIMEDOUT within its send timeout, rather
 * than waiting for ever (transport.h, writes to a peer): on a connection handed over as
 * remorad hands it (rdma's upgrade), the peer reads 1 MiB and then nothing; 16 sends of
 * 32 KiB follow (rdma: every credit spent on messages), then 1 MiB each (rdma: a read offer
 * that must wait for a credit) until one fails, that one within the timeout and a margin
 * for a loaded machine. Until the peer's buffers are full a small frame is writable, after
 * it not (where the transport can tell), unless the connection has failed meanwhile. */
#define SEND_TIMEOUT_MS 300
#define SEND_TIMEOUT_MARGIN_S 5.0

int probe_check_send_timeout(const struct rm_transport *tp, struct rm_listener *l, const char *addr)
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
