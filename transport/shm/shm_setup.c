/* The shared-memory transport's connections (shm_conn.h): made and freed, and the peer's
 * memfd checked and mapped, once, before anything of it is used. */
#include "shm_conn.h"

/* REMORA_SHM_SPIN_US: how long a waiting side spins before it sleeps (0 to 1000;
 * rm_transport_spin_ns). */
static uint64_t spin_ns_configured(void)
{
	return rm_transport_spin_ns("REMORA_SHM_SPIN_US", SHM_SPIN_US_DEFAULT, SHM_SPIN_US_MAX);
}

void shm_ring_lens_configured(uint64_t len[2])
{
	const char *v = getenv("REMORA_SHM_RING_KIB");
	char *end;
	unsigned long long kib = v && *v ? strtoull(v, &end, 10) : 0;
	uint64_t set = v && *v && !*end ? (uint64_t)kib << 10 : 0;
	if (set < SHM_RING_MIN || set > SHM_RING_MAX || (set & (set - 1)))
		set = 0;
	len[0] = set ? set : SHM_CALL_RING_DEFAULT;
	len[1] = set ? set : SHM_RING_DEFAULT;
}


struct shm_conn *shm_conn_new(int fd, int acceptor)
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

void shm_conn_free(struct shm_conn *c)
{
	if (c->ready > 0)
		shm_wake_all(c); /* the peer's futex sleeper finds the end now, not at its next poll */
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

void shm_describe_peer(struct shm_conn *c, const char *path)
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
void shm_attach_rings(struct shm_conn *c, const uint64_t len[2], const uint64_t off[2])
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
 * kept. Not populated at once: this end maps pages in a step ahead of its use
 * (shm_rings.c), so a peer's rings cost this process little more than what goes through
 * them (and the bound). */
int shm_map_peer_memfd(struct shm_conn *c, int memfd)
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
	shm_attach_rings(c, len, off);
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
		err = shm_map_peer_memfd(c, memfd);
	if (err && memfd >= 0)
		close(memfd);
	return err;
}

int shm_ensure_ready(struct shm_conn *c)
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
