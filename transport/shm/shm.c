/* Shared-memory transport (unix:PATH): for a client on the GPU host itself.
 *
 * A connection is a Unix stream socket and one memfd that the dialer creates, seals
 * against shrinking and passes over the socket (SCM_RIGHTS) in its first message. The
 * memfd holds two byte rings, one each way; the socket carries nothing after that first
 * message but wake-up bytes, and its end-of-file tells either side that the other is gone.
 *
 *   page 0   struct shm_layout: geometry (written once by the dialer) and per ring a
 *            control block: head (bytes written, the producer's), tail (bytes read, the
 *            consumer's) and a waiting flag each, every word on its own cache line
 *   ring 0   dialer -> acceptor, ring_len[0] bytes (a power of two)
 *   ring 1   acceptor -> dialer, ring_len[1] bytes
 *
 * The peer can write any of it at any time. Each side keeps its own index (the tail it
 * consumed to, the head it produced to) privately and only publishes it; the peer's index
 * is loaded once, checked (no more than a ring ahead) and used from that copy; geometry is
 * read once at set-up, checked against the memfd's sealed size, and kept privately too.
 * Bytes are copied out of the ring once, into the caller's buffer.
 *
 * Waiting: a side that finds nothing to read (or no room to write) spins for up to spin_us
 * (REMORA_SHM_SPIN_US, default SHM_SPIN_US_DEFAULT on 4 or more CPUs; halved after each
 * spin in vain, down to an eighth, whole again after one answered or a wait shorter than a
 * whole spin; giving the CPU up about once a microsecond, rm_transport_spin_yields), then
 * sets its waiting flag and
 * sleeps in poll() on the socket; the other side, after publishing an index, sends one
 * byte if the flag was set. Within a process, one waiting thread polls the socket and
 * wakes the others (a sender and a receiver may wait at once). docs/protocol.md.
 *
 * Passing descriptors (send_fd, recv_fd: shared pinned memory, docs/hotpath.md): a
 * descriptor rides on a wake-up byte of its own (sendmsg, SCM_RIGHTS). Whoever reads the
 * socket (the poller's drain, or recv_fd when nobody polls) reads it with recvmsg and puts
 * the descriptors that came into a small queue, in order; recv_fd takes from the queue, and
 * takes its turn as the poller while it waits, so that no wake-up byte is read by a thread
 * that leaves a waiting one asleep. The byte itself is a wake-up like any other.
 */
#include "transport.h"
#include "shm.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define SHM_MAGIC 0x314e5248534d5252ull /* "RRMSHRN1" */
#define SHM_VERSION 1
#define SHM_HEADER_LEN 4096u
#define SHM_RING_MIN (64u << 10)
#define SHM_RING_MAX (64u << 20)
#define SHM_RING_DEFAULT (4u << 20)
#define SHM_PUBLISH_MAX (256u << 10) /* a large send publishes at least this often */
#define SHM_SPIN_US_DEFAULT 60 /* H100 host: event record + sync 23 -> 11 us, 4 KiB copies 21-38 -> 11-19, against 20 */
#define SHM_SPIN_US_MAX 1000
#define SPIN_LOOKS_PER_CLOCK 16
#define SHM_SETUP_TIMEOUT_MS 10000
#define SHM_FDQ_MAX 8 /* descriptors passed and not yet taken; more are closed */

struct shm_ring_ctl {
	_Alignas(64) _Atomic uint64_t head;
	_Alignas(64) _Atomic uint32_t reader_waiting;
	_Alignas(64) _Atomic uint64_t tail;
	_Alignas(64) _Atomic uint32_t writer_waiting;
};

struct shm_layout {
	uint64_t magic;
	uint32_t version;
	uint32_t header_len;
	uint64_t ring_len[2];
	uint64_t ring_off[2];
	_Alignas(64) struct shm_ring_ctl ring[2];
};
_Static_assert(sizeof(struct shm_layout) <= SHM_HEADER_LEN, "the layout fits page 0");

/* The dialer's first message, with the memfd. */
struct shm_hello {
	uint64_t magic;
	uint32_t version;
	uint32_t reserved;
};

/* What travels with a connection handed to another process (export_fd), besides the
 * socket and the memfd. The indices do not: the adopting end takes the ones last
 * published in the rings (the exporting end may read on after export_fd, as from a TCP
 * socket, until it closes). The peer could have rewritten them meanwhile; that garbles
 * only its own stream, since every later index is checked against them. */
struct shm_state {
	uint64_t magic;
	uint32_t acceptor;
	uint32_t reserved;
};
_Static_assert(sizeof(struct shm_state) <= RM_TRANSPORT_STATE_MAX, "state fits");

struct shm_conn {
	struct rm_conn base;
	int fd, memfd;
	int acceptor;      /* 1: this end accepted (ring 1 is ours to write) */
	int ready;         /* the mapping is set up; an accepted end sets it up on first use */
	uint8_t *map;
	size_t map_len;
	struct shm_ring_ctl *tx_ctl, *rx_ctl;
	uint8_t *tx, *rx;
	uint64_t tx_len, rx_len; /* private copies, checked */
	uint64_t tx_head, rx_tail; /* this end's indices: trusted, published to the peer */
	int recv_ms, send_ms;
	struct rm_spin_budget spin; /* what the next wait spins */
	atomic_int shut;
	atomic_int eof;      /* the socket reported end-of-file or an error */
	atomic_int broken;   /* the peer wrote an impossible index: -EPROTO from now on */
	pthread_mutex_t lock; /* set-up, and the wait below */
	pthread_cond_t rung;
	int polling;         /* a thread of this process is in poll() on fd */
	int fdq[SHM_FDQ_MAX]; /* descriptors the peer passed, oldest first (under lock) */
	int nfdq;
	char peer[120];
};

struct rm_listener {
	int fd;
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int unlink_on_close;
};

static struct shm_conn *shm(struct rm_conn *c)
{
	return (struct shm_conn *)c;
}

/* REMORA_SHM_SPIN_US: how long a waiting side spins before it sleeps (0 to 1000;
 * rm_transport_spin_ns). */
static uint64_t spin_ns_configured(void)
{
	return rm_transport_spin_ns("REMORA_SHM_SPIN_US", SHM_SPIN_US_DEFAULT, SHM_SPIN_US_MAX);
}

/* REMORA_SHM_RING_KIB: each ring's size (a power of two, 64 KiB to 64 MiB). */
static uint64_t ring_len_configured(void)
{
	const char *v = getenv("REMORA_SHM_RING_KIB");
	char *end;
	unsigned long long kib = v && *v ? strtoull(v, &end, 10) : 0;
	uint64_t len = v && *v && !*end ? (uint64_t)kib << 10 : SHM_RING_DEFAULT;
	if (len < SHM_RING_MIN || len > SHM_RING_MAX || (len & (len - 1)))
		len = SHM_RING_DEFAULT;
	return len;
}

/* "PATH" or "@NAME" (the abstract namespace) into a socket address. */
/* unix:PATH, and unix://PATH as well. */
static const char *shm_claim(const char *url)
{
	if (strncmp(url, "unix:", 5))
		return NULL;
	return url + (strncmp(url + 5, "//", 2) ? 5 : 7);
}

/* A socket path, or @NAME in the abstract namespace. */
static int shm_check_address(const char *url, const char *addr, int port_zero_ok, char *why, size_t whylen)
{
	size_t n = strlen(addr);
	(void)port_zero_ok;
	if (n == 0 || n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		snprintf(why, whylen, "'%s': a Unix socket path of 1 to %zu bytes", url,
			 sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return -EINVAL;
	}
	return 0;
}

static int unix_addr(const char *addr, struct sockaddr_un *sa, socklen_t *len)
{
	size_t n = strlen(addr);
	memset(sa, 0, sizeof(*sa));
	sa->sun_family = AF_UNIX;
	if (!n || n >= sizeof(sa->sun_path))
		return -EINVAL;
	memcpy(sa->sun_path, addr, n);
	if (addr[0] == '@')
		sa->sun_path[0] = 0;
	*len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (addr[0] == '@' ? 0 : 1));
	return 0;
}

static struct shm_conn *conn_new(int fd, int acceptor)
{
	struct shm_conn *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->base.tp = &rm_transport_shm;
	c->fd = fd;
	c->memfd = -1;
	c->acceptor = acceptor;
	rm_spin_budget_init(&c->spin, spin_ns_configured());
	pthread_mutex_init(&c->lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* await's deadlines are monotonic */
	pthread_cond_init(&c->rung, &ca);
	pthread_condattr_destroy(&ca);
	return c;
}

static void conn_free(struct shm_conn *c)
{
	for (int i = 0; i < c->nfdq; i++)
		close(c->fdq[i]);
	if (c->map)
		munmap(c->map, c->map_len);
	if (c->memfd >= 0)
		close(c->memfd);
	if (c->fd >= 0)
		close(c->fd);
	pthread_cond_destroy(&c->rung);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

static void describe_peer(struct shm_conn *c, const char *path)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);
	if (c->acceptor && !getsockopt(c->fd, SOL_SOCKET, SO_PEERCRED, &cred, &len))
		/* host "local.uidN": auth.c slows down and serialises each user's credentials apart */
		snprintf(c->peer, sizeof(c->peer), "local.uid%u:%d", (unsigned)cred.uid, (int)cred.pid);
	else
		snprintf(c->peer, sizeof(c->peer), "unix:%s", path ? path : "?");
}

/* Points the connection at its rings, from geometry already checked. */
static void attach_rings(struct shm_conn *c, const uint64_t len[2], const uint64_t off[2])
{
	struct shm_layout *l = (struct shm_layout *)c->map;
	int tx = c->acceptor ? 1 : 0, rx = !tx;
	c->tx_ctl = &l->ring[tx];
	c->rx_ctl = &l->ring[rx];
	c->tx = c->map + off[tx];
	c->rx = c->map + off[rx];
	c->tx_len = len[tx];
	c->rx_len = len[rx];
}

static uint64_t peer_ring_max = SHM_RING_MAX;

void rm_shm_set_ring_max(uint64_t bytes)
{
	peer_ring_max = bytes < SHM_RING_MIN ? SHM_RING_MIN : bytes > SHM_RING_MAX ? SHM_RING_MAX : bytes;
}

/* Maps a memfd the peer made: sealed against shrinking (so no access can fault), no larger
 * than two rings of peer_ring_max, with a header whose geometry is read once, checked and
 * kept. Not populated: this end faults in only the pages it uses, so a peer's rings cost
 * this process no more than what goes through them (and the bound). */
static int map_peer_memfd(struct shm_conn *c, int memfd)
{
	int seals = fcntl(memfd, F_GET_SEALS);
	struct stat st;
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || !(seals & F_SEAL_SEAL)) {
		rm_transport_set_why(-EPROTO, "shm: the peer's ring memory is not a sealed memfd");
		return -EPROTO;
	}
	if (fstat(memfd, &st) || !S_ISREG(st.st_mode) || st.st_size < (off_t)SHM_HEADER_LEN)
		return -EPROTO;
	if ((uint64_t)st.st_size > SHM_HEADER_LEN + 2ull * peer_ring_max) {
		rm_transport_set_why(-EMSGSIZE, "shm: the peer's rings (%llu bytes) are larger than this end takes "
				     "(two of %llu bytes: shm_ring_max)", (unsigned long long)st.st_size - SHM_HEADER_LEN,
				     (unsigned long long)peer_ring_max);
		return -EMSGSIZE;
	}
	size_t map_len = (size_t)st.st_size;
	uint8_t *map = mmap(NULL, map_len, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (map == MAP_FAILED)
		return -errno;
	const volatile struct shm_layout *l = (const volatile struct shm_layout *)map;
	uint64_t magic = l->magic, len[2] = {l->ring_len[0], l->ring_len[1]}, off[2] = {l->ring_off[0], l->ring_off[1]};
	uint32_t version = l->version, header_len = l->header_len;
	int ok = magic == SHM_MAGIC && version == SHM_VERSION && header_len == SHM_HEADER_LEN;
	for (int i = 0; ok && i < 2; i++)
		ok = len[i] >= SHM_RING_MIN && len[i] <= peer_ring_max && !(len[i] & (len[i] - 1));
	ok = ok && off[0] == SHM_HEADER_LEN && off[1] == off[0] + len[0] && off[1] + len[1] <= map_len;
	if (!ok) {
		munmap(map, map_len);
		rm_transport_set_why(-EPROTO, "shm: the peer's ring layout is not one this end knows");
		return -EPROTO;
	}
	c->map = map;
	c->map_len = map_len;
	c->memfd = memfd;
	attach_rings(c, len, off);
	return 0;
}

/* The accepting end's set-up, on first use: the dialer's hello and memfd. */
static int accept_setup(struct shm_conn *c)
{
	struct shm_hello h;
	size_t got = 0;
	int memfd = -1, err = 0;
	uint64_t deadline = rm_transport_now_ns() + (uint64_t)(c->recv_ms > 0 ? c->recv_ms : SHM_SETUP_TIMEOUT_MS) * 1000000u;
	while (!err && got < sizeof(h)) {
		union {
			char buf[CMSG_SPACE(4 * sizeof(int))];
			struct cmsghdr align;
		} cb;
		struct iovec v = {(char *)&h + got, sizeof(h) - got};
		struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = cb.buf, .msg_controllen = sizeof(cb.buf)};
		int64_t left = (int64_t)(deadline - rm_transport_now_ns());
		struct pollfd p = {.fd = c->fd, .events = POLLIN};
		if (left <= 0 || poll(&p, 1, (int)(left / 1000000 + 1)) == 0) {
			err = -ETIMEDOUT;
			break;
		}
		if (atomic_load(&c->shut)) {
			err = -ECONNRESET;
			break;
		}
		ssize_t n = recvmsg(c->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0) {
			err = n == 0 ? -ECONNRESET : -errno;
			break;
		}
		for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			int nfd = (int)((cm->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			for (int i = 0; i < nfd; i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(cm) + (size_t)i * sizeof(int), sizeof(int));
				if (memfd < 0 && got == 0 && i == 0)
					memfd = fd;
				else
					close(fd); /* only one descriptor, with the first byte */
			}
		}
		if (m.msg_flags & MSG_CTRUNC)
			err = -EPROTO;
		got += (size_t)n;
	}
	if (!err && (h.magic != SHM_MAGIC || h.version != SHM_VERSION || memfd < 0)) {
		rm_transport_set_why(-EPROTO, "shm: the peer does not speak this shared-memory transport");
		err = -EPROTO;
	}
	if (!err)
		err = map_peer_memfd(c, memfd);
	if (err && memfd >= 0)
		close(memfd);
	return err;
}

static int ensure_ready(struct shm_conn *c)
{
	if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) > 0)
		return 0;
	pthread_mutex_lock(&c->lock);
	int err = c->ready < 0 ? -EPROTO : 0;
	if (!c->ready) {
		err = accept_setup(c);
		__atomic_store_n(&c->ready, err ? -1 : 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&c->lock);
	return err;
}

static void ring_bell(struct shm_conn *c, _Atomic uint32_t *waiting)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(waiting, memory_order_relaxed) && atomic_exchange(waiting, 0))
		send(c->fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL); /* EAGAIN: bytes enough are waiting */
}

/* Bytes to read (rx) or room to write (tx): 1 with *n set, 0 for none, -EPROTO for an
 * index the peer cannot rightly have written. */
static int ring_check(struct shm_conn *c, int tx, uint64_t *n)
{
	if (tx) {
		uint64_t tail = atomic_load_explicit(&c->tx_ctl->tail, memory_order_acquire);
		uint64_t used = c->tx_head - tail;
		if (used > c->tx_len)
			goto broken;
		*n = c->tx_len - used;
	} else {
		uint64_t head = atomic_load_explicit(&c->rx_ctl->head, memory_order_acquire);
		*n = head - c->rx_tail;
		if (*n > c->rx_len)
			goto broken;
	}
	return *n > 0;
broken:
	atomic_store(&c->broken, 1);
	rm_transport_set_why(-EPROTO, "shm: the peer wrote a ring index out of bounds");
	return -EPROTO;
}

/* Queues a descriptor the peer passed; past SHM_FDQ_MAX it is closed. Under c->lock. */
static void fdq_push(struct shm_conn *c, int fd)
{
	if (c->nfdq < SHM_FDQ_MAX)
		c->fdq[c->nfdq++] = fd;
	else
		close(fd);
}

/* Empties the socket of wake-up bytes, notes its end, and gives the descriptors that rode
 * on them (at most cap, the rest closed) in fds; returns their count. Called by the poller
 * without c->lock. */
static int drain(struct shm_conn *c, int *fds, int cap)
{
	char buf[256];
	int n = 0;
	for (;;) {
		union {
			char buf[CMSG_SPACE(SHM_FDQ_MAX * sizeof(int))];
			struct cmsghdr align;
		} cb;
		struct iovec v = {buf, sizeof(buf)};
		struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = cb.buf, .msg_controllen = sizeof(cb.buf)};
		ssize_t r = recvmsg(c->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		for (struct cmsghdr *cm = r > 0 ? CMSG_FIRSTHDR(&m) : NULL; cm; cm = CMSG_NXTHDR(&m, cm)) {
			if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;
				memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
				if (n < cap)
					fds[n++] = fd;
				else
					close(fd);
			}
		}
		if (r > 0)
			continue;
		if (r == 0 || (errno != EAGAIN && errno != EINTR))
			atomic_store(&c->eof, 1);
		if (r < 0 && errno == EINTR)
			continue;
		return n;
	}
}

/* The poller's turn, with c->lock held on entry and on return: polls the socket for up
 * to timeout_ms (-1: for ever), drains it, queues what descriptors came and wakes the
 * threads waiting for the poller. */
static void poll_turn(struct shm_conn *c, int timeout_ms)
{
	int fds[SHM_FDQ_MAX], nfds = 0;
	c->polling = 1;
	pthread_mutex_unlock(&c->lock);
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	if (poll(&p, 1, timeout_ms) > 0)
		nfds = drain(c, fds, SHM_FDQ_MAX);
	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < nfds; i++)
		fdq_push(c, fds[i]);
	c->polling = 0;
	pthread_cond_broadcast(&c->rung);
}

/* Waits on c->rung (held) until the poller's turn ends, or deadline (0: none) passes. */
static void wait_poller(struct shm_conn *c, uint64_t deadline)
{
	if (!deadline) {
		pthread_cond_wait(&c->rung, &c->lock);
		return;
	}
	struct timespec ts = {(time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u)};
	pthread_cond_timedwait(&c->rung, &c->lock, &ts);
}

static int ended(struct shm_conn *c, int tx)
{
	if (atomic_load(&c->broken))
		return -EPROTO;
	if (atomic_load(&c->shut))
		return tx ? -EPIPE : -ECONNRESET;
	if (atomic_load(&c->eof))
		return tx ? -EPIPE : -ECONNRESET;
	return 0;
}

struct ring_look {
	struct shm_conn *c;
	int tx;
	uint64_t *n;
	int r; /* ring_check's answer */
};

/* One look of the spin: nonzero once the ring has something (or is broken), or this end
 * was shut down. */
static int look(void *arg)
{
	struct ring_look *k = arg;
	return (k->r = ring_check(k->c, k->tx, k->n)) || atomic_load_explicit(&k->c->shut, memory_order_relaxed);
}

/* Waits until there is something to read (tx 0) or room to write (tx 1), *n set to it. */
static int await(struct shm_conn *c, int tx, uint64_t *n)
{
	int r = ended(c, tx);
	if (r)
		return r;
	if ((r = ring_check(c, tx, n)))
		return r < 0 ? r : 0;
	uint64_t spin = rm_spin_budget_next(&c->spin), t0 = spin ? rm_transport_now_ns() : 0;
	if (spin) {
		/* The ring is looked at after every pause (one PAUSE is some 140 cycles on recent
		 * Intel cores: 32 between looks left an answer unseen for up to 2 us), the clock
		 * every SPIN_LOOKS_PER_CLOCK looks. */
		struct ring_look k = {c, tx, n, 0};
		if (rm_spin(spin, SPIN_LOOKS_PER_CLOCK, 0, look, &k) && k.r) {
			rm_spin_budget_answered(&c->spin);
			return k.r < 0 ? k.r : 0;
		}
		rm_spin_budget_in_vain(&c->spin, spin);
	}
	_Atomic uint32_t *flag = tx ? &c->tx_ctl->writer_waiting : &c->rx_ctl->reader_waiting;
	int timeout_ms = tx ? c->send_ms : c->recv_ms;
	uint64_t deadline = timeout_ms > 0 ? rm_transport_now_ns() + (uint64_t)timeout_ms * 1000000u : 0;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		atomic_store(flag, 1);
		atomic_thread_fence(memory_order_seq_cst);
		if ((r = ring_check(c, tx, n)) || (r = ended(c, tx)))
			break;
		int64_t left_ns = deadline ? (int64_t)(deadline - rm_transport_now_ns()) : -1;
		if (deadline && left_ns <= 0) {
			r = -ETIMEDOUT;
			break;
		}
		if (!c->polling) /* this thread polls for every waiting thread of the process */
			poll_turn(c, deadline ? (int)(left_ns / 1000000 + 1) : -1);
		else
			wait_poller(c, deadline);
	}
	pthread_mutex_unlock(&c->lock);
	atomic_store_explicit(flag, 0, memory_order_relaxed);
	/* Slept for less than a whole spin: spinning whole would have caught it (spin.h). */
	if (r > 0 && spin && rm_transport_now_ns() - t0 < c->spin.whole)
		rm_spin_budget_answered(&c->spin);
	return r < 0 ? r : 0;
}

static int shm_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct shm_conn *c = shm(conn);
	int err = ensure_ready(c);
	int i = 0;
	size_t off = 0; /* into iov[i] */
	uint64_t t0 = rm_transport_tally_begin();
	while (!err) {
		while (i < iovcnt && off == iov[i].iov_len)
			i++, off = 0;
		if (i == iovcnt)
			break;
		uint64_t room;
		if ((err = await(c, 1, &room)))
			break;
		if (room > SHM_PUBLISH_MAX)
			room = SHM_PUBLISH_MAX;
		uint64_t put = 0;
		while (put < room && i < iovcnt) {
			size_t n = iov[i].iov_len - off;
			if (n > room - put)
				n = (size_t)(room - put);
			uint64_t at = (c->tx_head + put) & (c->tx_len - 1);
			size_t first = n < c->tx_len - at ? n : (size_t)(c->tx_len - at);
			memcpy(c->tx + at, (const uint8_t *)iov[i].iov_base + off, first);
			memcpy(c->tx, (const uint8_t *)iov[i].iov_base + off + first, n - first);
			put += n;
			off += n;
			while (i < iovcnt && off == iov[i].iov_len)
				i++, off = 0;
		}
		c->tx_head += put;
		atomic_store_explicit(&c->tx_ctl->head, c->tx_head, memory_order_release);
		ring_bell(c, &c->tx_ctl->reader_waiting);
	}
	rm_transport_tally_end(t0, 0);
	return err;
}

static ssize_t shm_recv_some(struct rm_conn *conn, void *buf, size_t len)
{
	struct shm_conn *c = shm(conn);
	uint64_t t0 = rm_transport_tally_begin();
	uint64_t avail = 0;
	int err = ensure_ready(c);
	if (!err && !len)
		return 0;
	if (!err)
		err = await(c, 0, &avail);
	if (err)
		return err;
	size_t n = avail < len ? (size_t)avail : len;
	uint64_t at = c->rx_tail & (c->rx_len - 1);
	size_t first = n < c->rx_len - at ? n : (size_t)(c->rx_len - at);
	memcpy(buf, c->rx + at, first);
	memcpy((uint8_t *)buf + first, c->rx, n - first);
	c->rx_tail += n;
	atomic_store_explicit(&c->rx_ctl->tail, c->rx_tail, memory_order_release);
	ring_bell(c, &c->rx_ctl->writer_waiting);
	rm_transport_tally_end(t0, 1);
	return (ssize_t)n;
}

static int shm_readable(struct rm_conn *conn)
{
	struct shm_conn *c = shm(conn);
	uint64_t n;
	if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) <= 0)
		return 0;
	if (ring_check(c, 0, &n) || atomic_load(&c->eof) || atomic_load(&c->shut))
		return 1;
	/* The peer gone: a peek sees the end (wake-up bytes are left for the poller). */
	char b;
	return recv(c->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

static int shm_writable(struct rm_conn *conn, size_t len)
{
	struct shm_conn *c = shm(conn);
	uint64_t room;
	if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) <= 0 || ended(c, 1))
		return 0;
	return ring_check(c, 1, &room) > 0 && room >= len;
}

static int shm_send_fd(struct rm_conn *conn, int fd)
{
	struct shm_conn *c = shm(conn);
	int err = ensure_ready(c);
	if (err)
		return err;
	if ((err = ended(c, 1)))
		return err;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cb;
	memset(&cb, 0, sizeof(cb));
	struct iovec v = {"", 1};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = cb.buf, .msg_controllen = sizeof(cb.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	ssize_t n;
	do /* blocking: the peer drains its socket whenever it waits, so this is brief */
		n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : n < 0 ? -errno : -EIO;
}

static int shm_recv_fd(struct rm_conn *conn, int timeout_ms)
{
	struct shm_conn *c = shm(conn);
	int err = ensure_ready(c);
	if (err)
		return err;
	uint64_t deadline = rm_transport_now_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000u;
	int fd = -1;
	pthread_mutex_lock(&c->lock);
	for (;;) {
		if (c->nfdq) {
			fd = c->fdq[0];
			memmove(c->fdq, c->fdq + 1, (size_t)--c->nfdq * sizeof(int));
			break;
		}
		if ((err = ended(c, 0)))
			break;
		int64_t left_ns = (int64_t)(deadline - rm_transport_now_ns());
		if (left_ns <= 0) {
			err = -ETIMEDOUT;
			break;
		}
		if (!c->polling) /* the descriptor is in the socket already, or never comes */
			poll_turn(c, (int)(left_ns / 1000000 + 1));
		else
			wait_poller(c, deadline);
	}
	pthread_mutex_unlock(&c->lock);
	if (err == -ETIMEDOUT)
		rm_transport_set_why(err, "shm: no descriptor came from the peer");
	return err ? err : fd;
}

static void shm_shutdown(struct rm_conn *conn)
{
	struct shm_conn *c = shm(conn);
	atomic_store(&c->shut, 1);
	shutdown(c->fd, SHUT_RDWR); /* wakes a poller here, and tells the peer */
}

static int shm_set_liveness(struct rm_conn *conn, int recv_timeout_ms, int send_timeout_ms)
{
	struct shm_conn *c = shm(conn);
	/* Same host: a peer whose process ends closes the socket, found at once; a frozen
	 * one is found by these timeouts, as over TCP. */
	c->recv_ms = recv_timeout_ms > 0 ? recv_timeout_ms : 0;
	c->send_ms = send_timeout_ms > 0 ? send_timeout_ms : 0;
	return 0;
}

/* The ring this end writes: pages it faults in (transport.h, held). */
static size_t shm_held(struct rm_conn *conn)
{
	struct shm_conn *c = shm(conn);
	return c->ready > 0 ? (size_t)c->tx_len : 0;
}

static const char *shm_peer(struct rm_conn *c)
{
	return shm(c)->peer;
}

static void shm_close(struct rm_conn *c)
{
	conn_free(shm(c));
}

/* The dialer's side: a sealed memfd with the layout, passed with the hello. */
static int make_rings(struct shm_conn *c)
{
	uint64_t len[2] = {ring_len_configured(), ring_len_configured()};
	uint64_t off[2] = {SHM_HEADER_LEN, SHM_HEADER_LEN + len[0]};
	size_t total = (size_t)(off[1] + len[1]);
	int memfd = memfd_create("remora-shm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (memfd < 0)
		return -errno;
	if (ftruncate(memfd, (off_t)total) ||
	    fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)) {
		int err = -errno;
		close(memfd);
		return err;
	}
	/* Populated: a ring's first lap would otherwise take a page fault (and a zeroed
	 * page) every 4 KiB on each side: 4 KiB copies to the host in the first 4 MiB took
	 * 22 us instead of 14 (H200). */
	uint8_t *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, memfd, 0);
	if (map == MAP_FAILED) {
		int err = -errno;
		close(memfd);
		return err;
	}
	struct shm_layout *l = (struct shm_layout *)map;
	l->magic = SHM_MAGIC;
	l->version = SHM_VERSION;
	l->header_len = SHM_HEADER_LEN;
	for (int i = 0; i < 2; i++)
		l->ring_len[i] = len[i], l->ring_off[i] = off[i];
	c->map = map;
	c->map_len = total;
	c->memfd = memfd;
	attach_rings(c, len, off);
	return 0;
}

static int send_hello(struct shm_conn *c)
{
	struct shm_hello h = {.magic = SHM_MAGIC, .version = SHM_VERSION};
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} cb;
	memset(&cb, 0, sizeof(cb));
	struct iovec v = {&h, sizeof(h)};
	struct msghdr m = {.msg_iov = &v, .msg_iovlen = 1, .msg_control = cb.buf, .msg_controllen = sizeof(cb.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &c->memfd, sizeof(int));
	ssize_t n;
	do
		n = sendmsg(c->fd, &m, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(h) ? 0 : n < 0 ? -errno : -EIO;
}

static int shm_dial(const char *addr, int timeout_ms, struct rm_conn **out)
{
	struct sockaddr_un sa;
	socklen_t sl;
	int err = unix_addr(addr, &sa, &sl);
	if (err)
		return err;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	/* A Unix connect does not wait for the server's accept (the backlog takes it); it
	 * fails at once where nobody listens. timeout_ms bounds a full backlog. */
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sl) < 0) {
		err = errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT : -errno;
		close(fd);
		return err;
	}
	struct timeval none = {0, 0};
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &none, sizeof(none));
	struct shm_conn *c = conn_new(fd, 0);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	describe_peer(c, addr);
	if ((err = make_rings(c)) || (err = send_hello(c))) {
		conn_free(c);
		return err;
	}
	c->ready = 1;
	*out = &c->base;
	return 0;
}

static int shm_listen(const char *addr, struct rm_listener **out)
{
	struct sockaddr_un sa;
	socklen_t sl;
	int err = unix_addr(addr, &sa, &sl);
	if (err)
		return err;
	struct rm_listener *l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	snprintf(l->path, sizeof(l->path), "%s", addr);
	l->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (l->fd < 0) {
		err = -errno;
		free(l);
		return err;
	}
	int rc = bind(l->fd, (struct sockaddr *)&sa, sl);
	if (rc < 0 && errno == EADDRINUSE && addr[0] != '@') {
		/* A socket file nobody listens on any more (a daemon that was killed): replace it. */
		int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		struct stat st;
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sa, sl) < 0 && errno == ECONNREFUSED &&
		    !lstat(addr, &st) && S_ISSOCK(st.st_mode) && !unlink(addr))
			rc = bind(l->fd, (struct sockaddr *)&sa, sl);
		else
			errno = EADDRINUSE;
		if (probe >= 0)
			close(probe);
	}
	if (rc < 0 || listen(l->fd, 128) < 0) {
		err = -errno;
		close(l->fd);
		free(l);
		return err;
	}
	l->unlink_on_close = addr[0] != '@';
	*out = l;
	return 0;
}

static int shm_listener_addr(struct rm_listener *l, char *buf, size_t len)
{
	return snprintf(buf, len, "%s", l->path) < (int)len ? 0 : -ENAMETOOLONG;
}

static int shm_accept(struct rm_listener *l, struct rm_conn **out)
{
	int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return -errno;
	struct shm_conn *c = conn_new(fd, 1);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	describe_peer(c, l->path);
	*out = &c->base; /* the hello and memfd are read on first use, in the caller's thread */
	return 0;
}

static void shm_listener_close(struct rm_listener *l)
{
	close(l->fd);
	if (l->unlink_on_close)
		unlink(l->path);
	free(l);
}

static int shm_export_fd(struct rm_conn *conn, void *state, size_t *state_len, int *extra_fd)
{
	struct shm_conn *c = shm(conn);
	int err = ensure_ready(c);
	if (err)
		return err;
	if (!state || !extra_fd)
		return -ENOTSUP; /* the rings' memfd and indices must travel */
	struct shm_state s = {.magic = SHM_MAGIC, .acceptor = (uint32_t)c->acceptor};
	memcpy(state, &s, sizeof(s));
	*state_len = sizeof(s);
	*extra_fd = c->memfd;
	return c->fd;
}

static int shm_adopt_fd(int fd, int extra_fd, const void *state, size_t state_len, struct rm_conn **out)
{
	struct shm_state s;
	if (state_len != sizeof(s) || extra_fd < 0)
		return -EINVAL;
	memcpy(&s, state, sizeof(s));
	if (s.magic != SHM_MAGIC || s.acceptor > 1)
		return -EINVAL;
	struct shm_conn *c = conn_new(fd, (int)s.acceptor);
	if (!c)
		return -ENOMEM;
	int err = map_peer_memfd(c, extra_fd);
	if (err) {
		c->fd = -1; /* the caller's on failure */
		conn_free(c);
		return err;
	}
	c->rx_tail = atomic_load_explicit(&c->rx_ctl->tail, memory_order_acquire);
	c->tx_head = atomic_load_explicit(&c->tx_ctl->head, memory_order_acquire);
	c->ready = 1;
	describe_peer(c, NULL);
	*out = &c->base;
	return 0;
}

const struct rm_transport rm_transport_shm = {
	.scheme = "unix",
	.flags = RM_TRANSPORT_PATH_ADDRESS,
	.claim = shm_claim,
	.check_address = shm_check_address,
	.dial = shm_dial,
	.listen = shm_listen,
	.listener_addr = shm_listener_addr,
	.accept = shm_accept,
	.listener_close = shm_listener_close,
	.sendv = shm_sendv,
	.recv_some = shm_recv_some,
	.readable = shm_readable,
	.writable = shm_writable,
	.shutdown = shm_shutdown,
	.set_liveness = shm_set_liveness,
	.peer = shm_peer,
	.close = shm_close,
	.export_fd = shm_export_fd,
	.adopt_fd = shm_adopt_fd,
	.send_fd = shm_send_fd,
	.recv_fd = shm_recv_fd,
	.held = shm_held,
};
