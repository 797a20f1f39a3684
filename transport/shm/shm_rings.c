/* The shared-memory transport's rings (shm_conn.h): bytes copied in and out, descriptors
 * passed beside them, and the wait (spin, then a futex, then poll on the socket) for either. */
#include "shm_conn.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>

/* Not FUTEX_PRIVATE: the flag is in the memfd both processes map. */
static void futex_wake(_Atomic uint32_t *flag)
{
	syscall(SYS_futex, flag, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Sleeps while *flag is val, at most ns: 0 when woken (or spuriously), -ETIMEDOUT, or
 * -EAGAIN when the flag was no longer val. */
static int futex_wait(_Atomic uint32_t *flag, uint32_t val, uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000u), (long)(ns % 1000000000u)};
	return syscall(SYS_futex, flag, FUTEX_WAIT, val, &ts, NULL, 0) ? -errno : 0;
}

/* Wakes the side waiting on flag, the way it sleeps (shm_conn.h). */
static void ring_bell(struct shm_conn *c, _Atomic uint32_t *waiting)
{
	atomic_thread_fence(memory_order_seq_cst);
	if (!atomic_load_explicit(waiting, memory_order_relaxed))
		return;
	uint32_t how = atomic_exchange(waiting, 0);
	if (how == SHM_SLEEPS_FUTEX)
		futex_wake(waiting);
	else if (how) /* in poll(); EAGAIN: bytes enough are waiting */
		send(c->fd, "", 1, MSG_DONTWAIT | MSG_NOSIGNAL);
}

void shm_wake_all(struct shm_conn *c)
{
	futex_wake(&c->rx_ctl->reader_waiting);
	futex_wake(&c->tx_ctl->writer_waiting);
	futex_wake(&c->tx_ctl->reader_waiting);
	futex_wake(&c->rx_ctl->writer_waiting);
}

/* Whether the peer's end of the socket is gone: notes it in c->eof. Data or descriptors
 * still queued in the socket do not hide it (POLLRDHUP). */
static void peer_check(struct shm_conn *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN | POLLRDHUP};
	if (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
		atomic_store(&c->eof, 1);
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
	uint32_t how = SHM_SLEEPS_FUTEX;
	int woken = 0, refused = 0;
	for (;;) {
		atomic_store(flag, how);
		atomic_thread_fence(memory_order_seq_cst);
		if ((r = ring_check(c, tx, n)) || (r = ended(c, tx)))
			break;
		if (woken) { /* woken with nothing: perhaps the peer's end (shm_wake_all) */
			peer_check(c);
			if ((r = ended(c, tx)))
				break;
			woken = 0;
		}
		int64_t left_ns = deadline ? (int64_t)(deadline - rm_transport_now_ns()) : -1;
		if (deadline && left_ns <= 0) {
			r = -ETIMEDOUT;
			break;
		}
		if (how == SHM_SLEEPS_FUTEX) {
			uint64_t slice = left_ns < 0 || (uint64_t)left_ns > SHM_FUTEX_WAIT_NS ? SHM_FUTEX_WAIT_NS : (uint64_t)left_ns;
			int w = futex_wait(flag, SHM_SLEEPS_FUTEX, slice);
			/* A long wait, or a peer that keeps clearing the flag without a word: on in
			 * poll(), where the socket also tells of the peer's end. */
			if (w == -ETIMEDOUT || (w == -EAGAIN && ++refused > 16))
				how = SHM_SLEEPS_POLL;
			woken = !w;
			continue;
		}
		pthread_mutex_lock(&c->lock);
		if (!c->polling) /* this thread polls for every waiting thread of the process */
			poll_turn(c, deadline ? (int)(left_ns / 1000000 + 1) : -1);
		else
			wait_poller(c, deadline);
		pthread_mutex_unlock(&c->lock);
	}
	atomic_store_explicit(flag, 0, memory_order_relaxed);
	/* Slept for less than a whole spin: spinning whole would have caught it (spin.h). */
	if (r > 0 && spin && rm_transport_now_ns() - t0 < c->spin.whole)
		rm_spin_budget_answered(&c->spin);
	return r < 0 ? r : 0;
}

/* Maps in a ring's pages up to offset upto (whole steps, past it) before they are used: a
 * ring's first lap otherwise faults every 4 KiB, on the writing side and again on the
 * reading side, whose mapping is its own (shm_map_peer_memfd populates nothing). On the H100
 * a 64 KiB copy through the daemon's first lap of the calls' ring spent 18 us in the kernel
 * against 9 over TCP. Pages a step ahead of the writer are allocated a little early: the
 * writer fills them next. Where the kernel has no MADV_POPULATE_WRITE (before 5.14) the
 * pages fault as before. */
static void map_ahead(uint8_t *ring, uint64_t len, uint64_t *mapped, uint64_t upto)
{
	if (upto <= *mapped)
		return;
	uint64_t end = (upto + SHM_MAP_STEP - 1) / SHM_MAP_STEP * SHM_MAP_STEP;
	if (end > len)
		end = len;
	if (madvise(ring + *mapped, (size_t)(end - *mapped), MADV_POPULATE_WRITE))
		end = len; /* not offered (or refused): leave the rest to faults */
	*mapped = end;
}

int shm_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt)
{
	struct shm_conn *c = shm(conn);
	int err = shm_ensure_ready(c);
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
			map_ahead(c->tx, c->tx_len, &c->tx_mapped, at + first); /* a wrap's rest: mapped last lap */
			memcpy(c->tx + at, (const uint8_t *)iov[i].iov_base + off, first);
			memcpy(c->tx, (const uint8_t *)iov[i].iov_base + off + first, n - first);
			put += n;
			off += n;
			while (i < iovcnt && off == iov[i].iov_len)
				i++, off = 0;
			/* A frame's header and message go before its bulk is copied: the reader
			 * takes them and reads the bulk straight into place as it comes. */
			if (i < iovcnt && iov[i].iov_len - off >= SHM_PUBLISH_MAX)
				break;
		}
		c->tx_head += put;
		atomic_store_explicit(&c->tx_ctl->head, c->tx_head, memory_order_release);
		ring_bell(c, &c->tx_ctl->reader_waiting);
	}
	rm_transport_tally_end(t0, 0);
	return err;
}

ssize_t shm_recv_some(struct rm_conn *conn, void *buf, size_t len)
{
	struct shm_conn *c = shm(conn);
	uint64_t t0 = rm_transport_tally_begin();
	uint64_t avail = 0;
	int err = shm_ensure_ready(c);
	if (!err && !len)
		return 0;
	if (!err)
		err = await(c, 0, &avail);
	if (err)
		return err;
	size_t n = avail < len ? (size_t)avail : len;
	uint64_t at = c->rx_tail & (c->rx_len - 1);
	size_t first = n < c->rx_len - at ? n : (size_t)(c->rx_len - at);
	map_ahead(c->rx, c->rx_len, &c->rx_mapped, at + first);
	memcpy(buf, c->rx + at, first);
	memcpy((uint8_t *)buf + first, c->rx, n - first);
	c->rx_tail += n;
	atomic_store_explicit(&c->rx_ctl->tail, c->rx_tail, memory_order_release);
	ring_bell(c, &c->rx_ctl->writer_waiting);
	rm_transport_tally_end(t0, 1);
	return (ssize_t)n;
}

int shm_readable(struct rm_conn *conn)
{
	struct shm_conn *c = shm(conn);
	uint64_t n;
	if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) <= 0)
		return 0;
	if (ring_check(c, 0, &n) || atomic_load(&c->eof) || atomic_load(&c->shut))
		return 1;
	/* The peer gone (wake-up bytes are left for the poller). */
	peer_check(c);
	return atomic_load(&c->eof);
}

int shm_writable(struct rm_conn *conn, size_t len)
{
	struct shm_conn *c = shm(conn);
	uint64_t room;
	if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) <= 0 || ended(c, 1))
		return 0;
	return ring_check(c, 1, &room) > 0 && room >= len;
}

int shm_send_fd(struct rm_conn *conn, int fd)
{
	struct shm_conn *c = shm(conn);
	int err = shm_ensure_ready(c);
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

int shm_recv_fd(struct rm_conn *conn, int timeout_ms)
{
	struct shm_conn *c = shm(conn);
	int err = shm_ensure_ready(c);
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
