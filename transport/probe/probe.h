/* transport-probe's parts (transport_probe.c): what its checks share. */
#ifndef REMORA_PROBE_H
#define REMORA_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

/* The byte at offset i of every stream the probe sends. */
static inline uint8_t pattern(uint64_t i)
{
	return (uint8_t)(i * 131u + (i >> 13));
}

#define HEADER_LEN 48 /* a frame header, what a synchronous call sends each way */

/* CLOCK_MONOTONIC in seconds. */
double now_s(void);
/* Reads exactly len bytes: 0, or the first error. */
int recv_all(struct rm_conn *c, void *buf, size_t len);
/* Hands *c over as to another process and adopts it again (as remorad's workers do). */
int hand_over(const struct rm_transport *tp, struct rm_conn **c);

/* One accept on another thread: the connection, or the error. */
struct acceptor {
	const struct rm_transport *tp;
	struct rm_listener *l;
	struct rm_conn *conn;
	int err;
};
/* Accepts one connection and writes nothing to it, which ends a handshake that a
 * transport leaves to the first read or write (TLS). */
void *accept_one(void *arg);

/* probe_contract.c: a connection handed over, split iovecs, descriptors passed, the
 * liveness timeout, shutdown, a closed peer; a sender whose peer stops reading. */
int probe_check_contract(const struct rm_transport *tp, struct rm_listener *l, const char *addr);
int probe_check_send_timeout(const struct rm_transport *tp, struct rm_listener *l, const char *addr);
/* probe_pressure.c: MANY_CONNS connections at once (handed over first where adopt). */
#define MANY_CONNS 16
int probe_check_many(const struct rm_transport *tp, struct rm_listener *l, int adopt, const char *addr);
/* probe_hostile.c: strangers that speak none of the transport's bytes. */
int probe_check_hostile(const struct rm_transport *tp, struct rm_listener *l, const char *addr);

#endif
