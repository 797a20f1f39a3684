/* Transports: how frames move between the client library and remorad.
 *
 * A transport is an ops table. Every op returns 0 (or a byte count) on success
 * and -errno on failure; none keeps a pointer to a caller's buffer after it
 * returns. A connection knows its transport: callers use it through the rm_conn_*
 * wrappers below. One thread may send (sendv, send_fd) while another receives (recv_some,
 * readable, recv_fd): remorad's heartbeats go out while a session thread reads a call's
 * bytes. Callers serialise each direction, and everything else; shutdown may come from
 * any thread.
 *
 * Writes to a peer, the rule for callers (issue 37): a peer may stop reading at any time,
 * and nothing it does may hold up a thread that serves others.
 *   - Every write to a peer has a deadline: a connection's send timeout (set_liveness) is
 *     set before its first write, whoever writes (a greeting's refusal too).
 *   - No lock is held across a write to a peer but that connection's own send
 *     serialisation, and no other thread waits on that one without a bound: it tries it
 *     (trylock, a timed lock) and skips the connection when its writer is busy.
 *   - A thread that serves several peers (remorad's heartbeats) writes only what the
 *     connection takes at once (writable), so that one peer's full buffer costs it nothing.
 * transport-probe --check holds every transport to the deadline.
 *
 * Closing, the rule for callers:
 *   - close frees the connection: no other thread may be inside, or come to call, any op
 *     of it. A thread that wants another out of recv_some, sendv, recv_fd or send_fd calls
 *     shutdown (any thread, any time, more than once), which makes those calls return an
 *     error at once and every later one fail; the owner closes once they have returned.
 *   - close after export_fd leaves the exported descriptors open, the receiving process's.
 *   - listener_close frees the listener likewise: it is called by the thread that accepts,
 *     once no accept is running on it. A thread blocked in accept is brought out by a
 *     signal (accept returns -EINTR; remorad's stop signals), not by closing the listener
 *     under it. Connections already accepted live on after it.
 */
#ifndef REMORA_TRANSPORT_H
#define REMORA_TRANSPORT_H

#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>

#include "spin.h" /* the spin loop every waiting side shares */

struct rm_transport;
struct rm_listener;

/* What every transport's connection begins with. */
struct rm_conn {
	const struct rm_transport *tp;
};

/* What a transport is, for callers that must choose by it rather than by its name. */
enum rm_transport_flags {
	/* Encrypts on the CPU: a connection's throughput is one core's, so copies spread over
	 * as many links as there are cores to spare (frontend/copy_links.c). */
	RM_TRANSPORT_ENCRYPTS = 1u << 0,
	/* Its address is a socket file's path (or @NAME, Linux's abstract namespace): the
	 * listening process that changes user gives the file to that user. */
	RM_TRANSPORT_PATH_ADDRESS = 1u << 1,
	/* Moves bytes by memcpy through memory both ends map (shm): one connection carries a
	 * copy at about one core's memcpy rate with a round trip of a few us, so striping pays
	 * only for shares of RM_TRANSPORT_MEMORY_SHARE and more (frontend/copy_links.c). */
	RM_TRANSPORT_MEMORY = 1u << 2,
};
#define RM_TRANSPORT_MEMORY_SHARE (1u << 20)

struct rm_transport {
	const char *scheme; /* its name, and the address prefix: "tcp" in tcp://host:port */
	unsigned flags;     /* rm_transport_flags */
	/* The address part of url where url is this transport's (its own prefix: claimed),
	 * else NULL. Optional (NULL: url begins with scheme://). */
	const char *(*claim)(const char *url);
	/* Whether addr, the part of url after the prefix, is an address this transport can
	 * dial (port_zero_ok: or listen on, port 0 picking one): 0, or -EINVAL with why
	 * filled in one line naming url. */
	int (*check_address)(const char *url, const char *addr, int port_zero_ok, char *why, size_t whylen);

	/* Connects to addr (host:port). Blocks until connected, refused, or timeout_ms passed. */
	int (*dial)(const char *addr, int timeout_ms, struct rm_conn **out);

	/* Binds and listens on addr (host:port; port 0 picks one). */
	int (*listen)(const char *addr, struct rm_listener **out);
	/* Writes the bound address as host:port into buf. */
	int (*listener_addr)(struct rm_listener *l, char *buf, size_t len);
	/* Blocks until a client connects. -EINTR/-ECONNABORTED are transient. */
	int (*accept)(struct rm_listener *l, struct rm_conn **out);
	void (*listener_close)(struct rm_listener *l);
	/* The listening end's keys, for a transport that authenticates it (tls): certificate
	 * chain and key (PEM), and the CA that must have signed every client's certificate
	 * (NULL: none asked for). Called once, before listen. 0, or -1 with why filled; on 0,
	 * why holds a warning for the log (an expiring certificate) or "".
	 * Optional (NULL: nothing to configure). */
	int (*configure_listener)(const char *cert, const char *key, const char *client_ca, char *why, size_t whylen);
	/* What follows the bound address in the daemon's "listening on" log line, "" for
	 * nothing: " (TLS 1.3)". Optional (NULL: ""). */
	const char *(*describe)(struct rm_listener *l);

	/* Writes every byte of iov. Blocks until all is handed to the transport;
	 * the buffers are the caller's again when it returns. */
	int (*sendv)(struct rm_conn *c, const struct iovec *iov, int iovcnt);
	/* Reads at least 1 and at most len bytes. Blocks until some arrive.
	 * Returns the count, or -ECONNRESET once the peer has closed. */
	ssize_t (*recv_some)(struct rm_conn *c, void *buf, size_t len);
	/* Whether recv_some would return at once (bytes waiting, or the peer closed): 1 or 0.
	 * Optional (NULL: unknown). */
	int (*readable)(struct rm_conn *c);
	/* Unblocks any thread inside recv_some/sendv of c; they return an error. */
	void (*shutdown)(struct rm_conn *c);
	/* From now on recv_some fails with -ETIMEDOUT once the peer has sent nothing for
	 * recv_timeout_ms, and an idle connection is probed so that a peer whose host vanished
	 * is found within about that; sendv fails likewise once the peer has taken nothing, or
	 * acknowledged nothing, for send_timeout_ms. 0: wait for ever. A sender whose peer may
	 * rightly stop reading for long (it waits on the GPU) leaves send_timeout_ms 0.
	 * Liveness of a peer that is alive but busy is the caller's (heartbeats, protocol.md). */
	int (*set_liveness)(struct rm_conn *c, int recv_timeout_ms, int send_timeout_ms);
	/* Whether a sendv of len bytes (a small frame, at most RM_TRANSPORT_SMALL_SEND) would
	 * return now without waiting for the peer to take anything: 1 or 0. Called by the
	 * connection's sender, under its send serialisation. Optional (NULL: unknown, taken
	 * as 1; its sends still end within the send timeout). */
	int (*writable)(struct rm_conn *c, size_t len);
	/* Describes the peer for log lines. */
	const char *(*peer)(struct rm_conn *c);
	void (*close)(struct rm_conn *c);
	/* Hand-over to another process (remorad's workers): export_fd gives the descriptor
	 * to pass and writes what else must travel with it (a TLS connection's record state,
	 * secret: pass it only to a process that is to serve the connection) into state, at
	 * most RM_TRANSPORT_STATE_MAX bytes, its length into *state_len (state may be NULL
	 * where the caller knows the transport keeps none); a connection that holds a second
	 * descriptor (shm: its rings' memfd) writes it into *extra_fd, else -1 (extra_fd may
	 * be NULL where the caller knows there is none: -ENOTSUP if there is). The caller then
	 * closes c, which leaves the descriptors open in flight. adopt_fd wraps a passed
	 * descriptor with that state and second descriptor (-1: none); on failure both remain
	 * the caller's. -ENOTSUP where the connection cannot travel. */
	int (*export_fd)(struct rm_conn *c, void *state, size_t *state_len, int *extra_fd);
	int (*adopt_fd)(int fd, int extra_fd, const void *state, size_t state_len, struct rm_conn **out);
	/* The peer's verified identity: the common name of the certificate it presented and
	 * this end verified, or NULL (no certificate, or a transport without any). Optional. */
	const char *(*identity)(struct rm_conn *c);
	/* Passing a descriptor to the peer process (shm only: docs/hotpath.md, "Shared pinned
	 * memory"). Optional: NULL where the peer may be on another host (TCP, TLS), and the
	 * wrappers below then return -EOPNOTSUPP. send_fd hands fd over beside the byte stream:
	 * fd stays the caller's, the peer gets a copy. It is on its way once send_fd returns, so a
	 * frame sent after it finds it at the peer; the caller serialises send_fd with its sends
	 * (one thread at a time, as for sendv). recv_fd gives the next descriptor the peer passed,
	 * in the order sent, now the caller's; it blocks at most timeout_ms, and is to be called
	 * only when the protocol says one was sent before a frame already read (-ETIMEDOUT
	 * otherwise). Descriptors passed and never received are closed with the connection. */
	int (*send_fd)(struct rm_conn *c, int fd);
	int (*recv_fd)(struct rm_conn *c, int timeout_ms);
	/* Host memory this end may come to hold for the connection beyond its own buffers, in
	 * bytes the peer chose: shm, the ring this end writes in the peer's memfd, whose pages it
	 * faults in. For the caller's accounting (remorad charges it to the client). Optional
	 * (NULL: 0); never blocks. */
	size_t (*held)(struct rm_conn *c);
	/* Memory this process keeps page-locked for bulk copies (rm_transport_pin below), for
	 * a transport that moves bytes straight from and into registered memory (rdma).
	 * Process-wide, not a connection's; never block. Optional (NULL: nothing to do). */
	void (*pin)(void *addr, size_t len);
	void (*unpin)(void *addr);
	/* The most host memory, in bytes, a peer may have this process hold for one of its
	 * connections' buffers (shm: the ring the peer writes in; clamped to the transport's
	 * own bounds). Process-wide, set before listening; never blocks. Optional (NULL: the
	 * transport's buffers do not depend on the peer). */
	void (*limit_peer_buffers)(uint64_t bytes);
};

#define RM_TRANSPORT_STATE_MAX 160
#define RM_TRANSPORT_SMALL_SEND 512 /* the most a writable op answers for */

extern const struct rm_transport rm_transport_tcp;
#ifdef RM_HAVE_TLS
extern const struct rm_transport rm_transport_tls;
#endif
#ifdef RM_HAVE_SHM
extern const struct rm_transport rm_transport_shm; /* unix:PATH, shm/shm.c */
#endif
#ifdef RM_HAVE_RDMA
extern const struct rm_transport rm_transport_rdma; /* rdma://HOST:PORT, rdma/rdma.c */
#endif

/* Bytes this process's connections carried, counted while rm_transport_bytes points at
 * them (the client's REMORA_STATS, frontend/stats.c): the callers' bytes, before any
 * transport's own framing or encryption. Off (NULL), one branch a call. */
struct rm_transport_bytes {
	uint64_t sent, received;
};
extern struct rm_transport_bytes *rm_transport_bytes;

static inline int rm_conn_sendv(struct rm_conn *c, const struct iovec *iov, int iovcnt)
{
	int err = c->tp->sendv(c, iov, iovcnt);
	struct rm_transport_bytes *b = rm_transport_bytes;
	if (__builtin_expect(b != NULL, 0) && !err) {
		uint64_t n = 0;
		for (int i = 0; i < iovcnt; i++)
			n += iov[i].iov_len;
		__atomic_add_fetch(&b->sent, n, __ATOMIC_RELAXED);
	}
	return err;
}
static inline ssize_t rm_conn_recv_some(struct rm_conn *c, void *buf, size_t len)
{
	ssize_t n = c->tp->recv_some(c, buf, len);
	struct rm_transport_bytes *b = rm_transport_bytes;
	if (__builtin_expect(b != NULL, 0) && n > 0)
		__atomic_add_fetch(&b->received, (uint64_t)n, __ATOMIC_RELAXED);
	return n;
}
static inline void rm_conn_shutdown(struct rm_conn *c) { c->tp->shutdown(c); }
static inline int rm_conn_readable(struct rm_conn *c) { return c->tp->readable ? c->tp->readable(c) : 0; }
static inline int rm_conn_set_liveness(struct rm_conn *c, int recv_timeout_ms, int send_timeout_ms)
{
	return c->tp->set_liveness(c, recv_timeout_ms, send_timeout_ms);
}
static inline int rm_conn_writable(struct rm_conn *c, size_t len)
{
	return c->tp->writable ? c->tp->writable(c, len) : 1;
}
static inline const char *rm_conn_peer(struct rm_conn *c) { return c->tp->peer(c); }
static inline void rm_conn_close(struct rm_conn *c) { c->tp->close(c); }
static inline int rm_conn_export_fd(struct rm_conn *c, void *state, size_t *state_len, int *extra_fd)
{
	if (extra_fd)
		*extra_fd = -1;
	return c->tp->export_fd ? c->tp->export_fd(c, state, state_len, extra_fd) : -ENOTSUP;
}
static inline const char *rm_conn_identity(struct rm_conn *c) { return c->tp->identity ? c->tp->identity(c) : NULL; }
static inline int rm_conn_send_fd(struct rm_conn *c, int fd)
{
	return c->tp->send_fd ? c->tp->send_fd(c, fd) : -EOPNOTSUPP;
}
static inline int rm_conn_recv_fd(struct rm_conn *c, int timeout_ms)
{
	return c->tp->recv_fd ? c->tp->recv_fd(c, timeout_ms) : -EOPNOTSUPP;
}
static inline size_t rm_conn_held(struct rm_conn *c) { return c->tp->held ? c->tp->held(c) : 0; }
/* What follows l's bound address in a log line (describe); "" for nothing. */
static inline const char *rm_transport_describe(const struct rm_transport *tp, struct rm_listener *l)
{
	return tp->describe ? tp->describe(l) : "";
}
/* Whether c can pass descriptors (its peer is a process on this host). */
static inline int rm_conn_passes_fds(const struct rm_conn *c) { return c->tp->send_fd != NULL; }

/* One line saying why the calling thread's last transport call failed with err, where
 * the transport knew more than errno says (a TLS handshake's reason); strerror(-err)
 * otherwise. Transports record it with rm_transport_set_why. */
const char *rm_transport_why(int err);
/* The calling thread's last recorded reason, whatever call failed; "" for none. */
const char *rm_transport_last_why(void);
void rm_transport_set_why(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Profiling a thread's transport calls (common/copy_profile.h): while
 * rm_transport_profiling is nonzero, every transport times and counts the send and
 * receive calls of a thread whose rm_transport_thread_tally is set. Off, one branch a call. */
struct rm_transport_tally {
	uint64_t send_ns, sends;
	uint64_t recv_ns, recvs;
};
extern int rm_transport_profiling;
extern __thread struct rm_transport_tally *rm_transport_thread_tally;

/* CLOCK_MONOTONIC in ns. */
static inline uint64_t rm_transport_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A transport's send or receive call, timed for the thread's tally: begin gives its start
 * (0 where it is not profiled), end adds it as a receive or a send. */
static inline uint64_t rm_transport_tally_begin(void)
{
	return __builtin_expect(rm_transport_profiling, 0) && rm_transport_thread_tally ? rm_transport_now_ns() : 0;
}

static inline void rm_transport_tally_end(uint64_t t0, int receive)
{
	struct rm_transport_tally *t = rm_transport_thread_tally;
	if (!t0 || !t)
		return;
	uint64_t took = rm_transport_now_ns() - t0;
	if (receive)
		t->recv_ns += took, t->recvs++;
	else
		t->send_ns += took, t->sends++;
}

/* Memory this process keeps page-locked for bulk copies from the time it is pinned until
 * it is unpinned (the client library: the program's pinned allocations and registrations;
 * remorad: its staging buffers), told to every transport of the build that has a pin op.
 * A transport that can move bytes straight from and into registered memory (rdma)
 * registers it once, at its first use on a connection, instead of for each copy. addr must
 * stay mapped until rm_transport_unpin(addr), which is called before the memory is freed. */
void rm_transport_pin(void *addr, size_t len);
void rm_transport_unpin(void *addr);

/* Told to every transport of the build that has a limit_peer_buffers op (remorad:
 * shm_ring_max, remorad.conf(5)). */
void rm_transport_limit_peer_buffers(uint64_t bytes);

/* Splits host:port ([v6]:port too) into host and port: 0, or -EINVAL where there is no
 * port or a part does not fit. */
int rm_transport_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen);

/* Picks the transport that claims url ("tcp://host:port" or plain "host:port"; "unix:PATH"
 * or "unix://PATH" for shared memory) and points *addr at the part after its prefix. NULL
 * for an unknown scheme, or one this build lacks. */
const struct rm_transport *rm_transport_for(const char *url, const char **addr);

/* The check_address of transports whose address is host:port ([v6]:port too). */
int rm_transport_check_host_port(const char *url, const char *addr, int port_zero_ok, char *why, size_t whylen);

#endif
