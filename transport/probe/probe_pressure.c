/* transport-probe --check: many connections at once (probe.h). */
#include "probe.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Many connections at once, bytes of every size around the transports' own units (a
 * page, an RDMA buffer, a ring's publishing step) both ways at the same time: each
 * accepted end echoes what it reads while its dialled end writes and reads back on two
 * threads, and every byte must come back in order. Every dialled end reads from the
 * start, as a client waiting for its replies does: an rdma:// connection upgrades only
 * once its client reads, and the acceptor hands the connections over one by one. */

static const size_t many_sizes[] = {1, 7, 4095, 4096, 65527, 65528, 65529, 65536, 262145, 1048576, 3145733};
#define MANY_TOTAL (1 + 7 + 4095 + 4096 + 65527 + 65528 + 65529 + 65536 + 262145 + 1048576 + 3145733)

struct many_pair {
	const struct rm_transport *tp;
	struct rm_listener *l;
	int adopt;
	struct rm_conn *dialled, *accepted;
	pthread_t echo;
	int index, echoing;
	int accept_err, echo_err, write_err, read_err; /* each thread's own */
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

/* Reads the echo back and compares it. */
static void *many_read(void *arg)
{
	struct many_pair *m = arg;
	uint8_t *in = malloc(MANY_TOTAL);
	if (!in) {
		m->read_err = -ENOMEM;
		return NULL;
	}
	for (size_t got = 0; got < MANY_TOTAL && !m->read_err;) {
		ssize_t n = rm_conn_recv_some(m->dialled, in + got, MANY_TOTAL - got);
		if (n < 0)
			m->read_err = (int)n;
		else
			got += (size_t)n;
	}
	for (size_t k = 0; k < MANY_TOTAL && !m->read_err; k++)
		if (in[k] != many_byte(m->index, k)) {
			fprintf(stderr, "transport-probe: connection %d: byte %zu of the echo differs\n", m->index, k);
			m->read_err = -EPROTO;
		}
	free(in);
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

/* After an error, ends every thread still blocked on a connection. Not otherwise: an
 * echo's last send may still be waiting for its peer's word that it was read (rdma's
 * reads). */
static void many_stop(struct many_pair *pairs)
{
	for (int i = 0; i < MANY_CONNS; i++) {
		if (pairs[i].dialled)
			rm_conn_shutdown(pairs[i].dialled);
		if (pairs[i].accepted)
			rm_conn_shutdown(pairs[i].accepted);
	}
}

int probe_check_many(const struct rm_transport *tp, struct rm_listener *l, int adopt, const char *addr)
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
	int nreaders = 0;
	pthread_t readers[MANY_CONNS];
	for (int i = 0; i < MANY_CONNS; i++) {
		if (pthread_create(&readers[i], NULL, many_read, &pairs[i]))
			break;
		nreaders++;
		if (pthread_create(&writers[i], NULL, many_write, &pairs[i]))
			break;
		nwriters++;
	}
	if (nreaders < MANY_CONNS || nwriters < MANY_CONNS) {
		err = -EAGAIN;
		many_stop(pairs);
	}
	for (int i = 0; i < nreaders; i++) { /* the echoes, each on its own thread */
		pthread_join(readers[i], NULL);
		if (!err && (err = pairs[i].read_err))
			many_stop(pairs);
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
