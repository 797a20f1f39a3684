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
 * sets its waiting flag and sleeps: first on the flag itself (a futex on the shared page:
 * the other side, after publishing an index, clears the flag and wakes it, one system call
 * each side), and once it has slept SHM_FUTEX_WAIT_NS in vain, in poll() on the socket,
 * the flag saying so: the other side then sends one byte instead. A long wait thus costs
 * nothing while idle and finds a peer's end at once (its socket closes); a short one
 * wakes without the socket's poll, drain and lock (docs/protocol.md). Within a process,
 * one thread polls the socket and wakes the others (a sender and a receiver may wait at
 * once).
 *
 * Passing descriptors (send_fd, recv_fd: shared pinned memory, docs/hotpath.md): a
 * descriptor rides on a wake-up byte of its own (sendmsg, SCM_RIGHTS). Whoever reads the
 * socket (the poller's drain, or recv_fd when nobody polls) reads it with recvmsg and puts
 * the descriptors that came into a small queue, in order; recv_fd takes from the queue, and
 * takes its turn as the poller while it waits, so that no wake-up byte is read by a thread
 * that leaves a waiting one asleep. The byte itself is a wake-up like any other.
 */
#include "shm_conn.h"

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

/* "PATH" or "@NAME" (the abstract namespace) into a socket address. */
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

static void shm_shutdown(struct rm_conn *conn)
{
	struct shm_conn *c = shm(conn);
	atomic_store(&c->shut, 1);
	shutdown(c->fd, SHUT_RDWR); /* wakes a poller here, and tells the peer */
	if (__atomic_load_n(&c->ready, __ATOMIC_ACQUIRE) > 0)
		shm_wake_all(c); /* and the futex sleepers of both */
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
	shm_conn_free(shm(c));
}


/* The dialer's side: a sealed memfd with the layout, passed with the hello. */
static int make_rings(struct shm_conn *c)
{
	uint64_t len[2];
	shm_ring_lens_configured(len);
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
	uint8_t *map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
	if (map == MAP_FAILED) {
		int err = -errno;
		close(memfd);
		return err;
	}
	/* Populated as far as SHM_RING_DEFAULT of each ring: a ring's first lap would
	 * otherwise take a page fault (and a zeroed page) every 4 KiB on each side: 4 KiB
	 * copies to the host in the first 4 MiB took 22 us instead of 14 (H200). The rest of
	 * a larger ring (the calls' ring) is paid for only by a program that fills it. */
	for (int i = 0; i < 2; i++) {
		size_t at = i ? (size_t)off[1] : 0, n = (size_t)(i ? 0 : SHM_HEADER_LEN) +
				(size_t)(len[i] < SHM_RING_DEFAULT ? len[i] : SHM_RING_DEFAULT);
		if (madvise(map + at, n, MADV_POPULATE_WRITE))
			for (size_t p = 0; p < n; p += 4096) /* before Linux 5.14: by touch */
				((volatile uint8_t *)map)[at + p] = 0;
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
	shm_attach_rings(c, len, off);
	c->tx_mapped = c->tx_len < SHM_RING_DEFAULT ? c->tx_len : SHM_RING_DEFAULT;
	c->rx_mapped = c->rx_len < SHM_RING_DEFAULT ? c->rx_len : SHM_RING_DEFAULT;
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
	struct shm_conn *c = shm_conn_new(fd, 0);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	shm_describe_peer(c, addr);
	if ((err = make_rings(c)) || (err = send_hello(c))) {
		shm_conn_free(c);
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
	struct shm_conn *c = shm_conn_new(fd, 1);
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	shm_describe_peer(c, l->path);
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
	int err = shm_ensure_ready(c);
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
	struct shm_conn *c = shm_conn_new(fd, (int)s.acceptor);
	if (!c)
		return -ENOMEM;
	int err = shm_map_peer_memfd(c, extra_fd);
	if (err) {
		c->fd = -1; /* the caller's on failure */
		shm_conn_free(c);
		return err;
	}
	c->rx_tail = atomic_load_explicit(&c->rx_ctl->tail, memory_order_acquire);
	c->tx_head = atomic_load_explicit(&c->tx_ctl->head, memory_order_acquire);
	c->ready = 1;
	shm_describe_peer(c, NULL);
	*out = &c->base;
	return 0;
}

const struct rm_transport rm_transport_shm = {
	.scheme = "unix",
	.flags = RM_TRANSPORT_PATH_ADDRESS | RM_TRANSPORT_MEMORY,
	.limit_peer_buffers = rm_shm_set_ring_max,
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
