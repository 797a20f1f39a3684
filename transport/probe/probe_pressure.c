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
 * threads, and every byte must come back in order. */

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
