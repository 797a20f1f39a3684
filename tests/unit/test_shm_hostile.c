/* The shared-memory transport against a peer that breaks the rules (transport/shm/shm.c):
 * memory it may shrink, a layout it made up, indices it rewrites at any time, a peer
 * that dies or freezes. The accepting end must refuse, fail with -EPROTO, -ECONNRESET or
 * -ETIMEDOUT, and never fault or hang. White-box: the layout is shm.c's own. */
#include "shm/shm.c"

#include <signal.h>
#include <sys/wait.h>

static int failures;
#define EXPECT(cond)                                                                  \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                   \
		}                                                                     \
	} while (0)

struct pair {
	struct rm_listener *l;
	int raw;              /* the hostile dialer's socket */
	struct rm_conn *conn; /* the accepted end under test */
};

static void pair_open(struct pair *p, const char *path)
{
	unlink(path);
	EXPECT(rm_transport_shm.listen(path, &p->l) == 0);
	struct sockaddr_un sa;
	socklen_t sl = 0;
	EXPECT(unix_addr(path, &sa, &sl) == 0);
	p->raw = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	EXPECT(connect(p->raw, (struct sockaddr *)&sa, sl) == 0);
	EXPECT(rm_transport_shm.accept(p->l, &p->conn) == 0);
}

static void pair_close(struct pair *p)
{
	if (p->raw >= 0)
		close(p->raw);
	rm_conn_close(p->conn);
	rm_transport_shm.listener_close(p->l);
}

/* A memfd of len bytes with the given seals and a layout; returns its mapping. */
static struct shm_layout *hostile_memfd(int *fd, size_t len, int seals, uint64_t ring_len)
{
	*fd = memfd_create("hostile", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (ftruncate(*fd, (off_t)len) || (seals && fcntl(*fd, F_ADD_SEALS, seals)))
		return NULL;
	struct shm_layout *l = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	l->magic = SHM_MAGIC;
	l->version = SHM_VERSION;
	l->header_len = SHM_HEADER_LEN;
	l->ring_len[0] = l->ring_len[1] = ring_len;
	l->ring_off[0] = SHM_HEADER_LEN;
	l->ring_off[1] = SHM_HEADER_LEN + ring_len;
	return l;
}

static void send_hello_fd(int sock, int fd)
{
	struct shm_conn fake = {.fd = sock, .memfd = fd};
	EXPECT(send_hello(&fake) == 0);
}

#define SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
#define RING (64u << 10)
#define TOTAL (SHM_HEADER_LEN + 2 * RING)

int main(void)
{
	char path[64];
	snprintf(path, sizeof(path), "/tmp/remora-shm-hostile-%d.sock", (int)getpid());
	uint8_t buf[256];
	struct pair p;
	int fd;
	signal(SIGPIPE, SIG_IGN);

	/* Memory the peer could shrink under the daemon (a fault on access): refused. */
	pair_open(&p, path);
	hostile_memfd(&fd, TOTAL, 0, RING);
	send_hello_fd(p.raw, fd);
	EXPECT(rm_conn_recv_some(p.conn, buf, 1) == -EPROTO);
	close(fd);
	pair_close(&p);

	/* A layout larger than the memory: refused. */
	pair_open(&p, path);
	struct shm_layout *l = hostile_memfd(&fd, TOTAL, 0, 1u << 20);
	fcntl(fd, F_ADD_SEALS, SEALS);
	send_hello_fd(p.raw, fd);
	EXPECT(rm_conn_recv_some(p.conn, buf, 1) == -EPROTO);
	munmap(l, TOTAL), close(fd);
	pair_close(&p);

	/* A ring length not a power of two, or offsets overlapping the header: refused. */
	for (int k = 0; k < 2; k++) {
		pair_open(&p, path);
		l = hostile_memfd(&fd, TOTAL, 0, RING);
		if (k == 0)
			l->ring_len[1] = RING - 8;
		else
			l->ring_off[0] = 0;
		fcntl(fd, F_ADD_SEALS, SEALS);
		send_hello_fd(p.raw, fd);
		EXPECT(rm_conn_recv_some(p.conn, buf, 1) == -EPROTO);
		munmap(l, TOTAL), close(fd);
		pair_close(&p);
	}

	/* No descriptor with the hello: refused. */
	pair_open(&p, path);
	struct shm_hello h = {.magic = SHM_MAGIC, .version = SHM_VERSION};
	EXPECT(send(p.raw, &h, sizeof(h), 0) == (ssize_t)sizeof(h));
	EXPECT(rm_conn_recv_some(p.conn, buf, 1) == -EPROTO);
	pair_close(&p);

	/* A good set-up, then indices rewritten: a head more than a ring ahead, and the
	 * layout changed after set-up (ignored: the geometry was copied once). */
	pair_open(&p, path);
	l = hostile_memfd(&fd, TOTAL, SEALS, RING);
	send_hello_fd(p.raw, fd);
	uint8_t *ring0 = (uint8_t *)l + SHM_HEADER_LEN;
	memcpy(ring0, "hello", 5);
	atomic_store(&l->ring[0].head, 5);
	EXPECT(rm_conn_recv_some(p.conn, buf, sizeof(buf)) == 5 && !memcmp(buf, "hello", 5));
	l->ring_len[0] = 1u << 30; /* too late to matter */
	atomic_store(&l->ring[0].head, 5 + RING);
	EXPECT(rm_conn_recv_some(p.conn, buf, sizeof(buf)) == sizeof(buf)); /* a full ring: allowed */
	atomic_store(&l->ring[0].head, 5 + 3ull * RING);
	EXPECT(rm_conn_recv_some(p.conn, buf, sizeof(buf)) == -EPROTO);
	atomic_store(&l->ring[0].head, 5 + RING + 1);
	EXPECT(rm_conn_recv_some(p.conn, buf, 1) == -EPROTO); /* broken stays broken */
	struct iovec v = {buf, 1};
	EXPECT(rm_conn_sendv(p.conn, &v, 1) == -EPROTO);
	munmap(l, TOTAL), close(fd);
	pair_close(&p);

	/* A tail rewritten ahead of what was written (the daemon's sending side). */
	pair_open(&p, path);
	l = hostile_memfd(&fd, TOTAL, SEALS, RING);
	send_hello_fd(p.raw, fd);
	atomic_store(&l->ring[1].tail, 1000);
	EXPECT(rm_conn_sendv(p.conn, &v, 1) == -EPROTO);
	munmap(l, TOTAL), close(fd);
	pair_close(&p);

	/* A frozen peer: the read times out with the liveness timeout; a dead one (its socket
	 * closed, its memory still mapped here) is found at once. */
	pair_open(&p, path);
	l = hostile_memfd(&fd, TOTAL, SEALS, RING);
	send_hello_fd(p.raw, fd);
	rm_conn_set_liveness(p.conn, 150, 150);
	uint64_t t0 = rm_transport_now_ns();
	EXPECT(rm_conn_recv_some(p.conn, buf, 1) == -ETIMEDOUT);
	uint64_t waited_ms = (rm_transport_now_ns() - t0) / 1000000;
	EXPECT(waited_ms >= 140 && waited_ms < 2000);
	/* A full ring the peer never drains: the send times out likewise. */
	static uint8_t big[2 * RING];
	struct iovec bv = {big, sizeof(big)};
	EXPECT(rm_conn_sendv(p.conn, &bv, 1) == -ETIMEDOUT);
	rm_conn_set_liveness(p.conn, 0, 0);
	if (fork() == 0) { /* the peer dies while the daemon waits */
		usleep(100 * 1000);
		_exit(0);
	}
	close(p.raw); /* now only the child holds the socket */
	p.raw = -1;
	t0 = rm_transport_now_ns();
	EXPECT(rm_conn_recv_some(p.conn, buf, 1) == -ECONNRESET);
	waited_ms = (rm_transport_now_ns() - t0) / 1000000;
	EXPECT(waited_ms < 2000);
	wait(NULL);
	munmap(l, TOTAL), close(fd);
	pair_close(&p);

	unlink(path);
	if (!failures)
		printf("shm hostile peer: all checks passed\n");
	return failures ? 1 : 0;
}
