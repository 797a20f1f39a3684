/* The shared-memory transport's private parts (shm.c, shm_setup.c, shm_rings.c): the
 * memfd's layout, a connection's state, and what the three files share. */
#ifndef REMORA_SHM_CONN_H
#define REMORA_SHM_CONN_H

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
#define SHM_VERSION 2 /* 2: a waiting flag says how its side sleeps (SHM_SLEEPS_*) */
#define SHM_HEADER_LEN 4096u
#define SHM_RING_MIN (64u << 10)
#define SHM_RING_MAX (64u << 20)
#define SHM_RING_DEFAULT (4u << 20)
/* The calls' ring (client to daemon): a program's async calls run ahead of the GPU as far
 * as it holds, as over TCP into the socket buffers. 4 MiB filled at some 40 000 launches,
 * which then waited on remorad: a stream of 100 000 launches was issued at 0.38-0.46 us a
 * launch against 0.16-0.30 with 16 MiB, TCP 0.21-0.48 (2-CPU test machine, test driver). */
#define SHM_CALL_RING_DEFAULT (16u << 20)
/* A large send publishes at least this often, so that the reader copies out of the ring while
 * the writer copies the rest in (256 KiB: a 256 KiB copy reached remorad whole, and was
 * copied out once into its read buffer and again into staging, one after the other). */
#define SHM_PUBLISH_MAX (64u << 10)
#define SHM_SPIN_US_DEFAULT 60 /* H100 host: event record + sync 23 -> 11 us, 4 KiB copies 21-38 -> 11-19, against 20 */
#define SHM_SPIN_US_MAX 1000
#define SPIN_LOOKS_PER_CLOCK 16
#define SHM_SETUP_TIMEOUT_MS 10000
#define SHM_FDQ_MAX 8 /* descriptors passed and not yet taken; more are closed */
#define SHM_FUTEX_WAIT_NS 10000000ull /* a sleep on the futex longer than this goes on in poll() */
#define SHM_MAP_STEP (256u << 10) /* a ring's first lap is mapped in ahead of use in steps of this */

/* A ring's waiting flag: 0 awake; else how the waiting side sleeps, so that its peer
 * wakes it the one way it listens (shm_rings.c): on the flag itself (futex: a wait of a
 * few ms at most, the reply of a call), or in poll() on the socket (a long wait). */
enum { SHM_SLEEPS_FUTEX = 1, SHM_SLEEPS_POLL = 2 };

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
	/* Bytes of each ring, from its start, this end has mapped in (shm_map_ahead): the
	 * first lap's page faults, one per 4 KiB on each side, taken SHM_MAP_STEP at a time. */
	uint64_t tx_mapped, rx_mapped;
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

static inline struct shm_conn *shm(struct rm_conn *c)
{
	return (struct shm_conn *)c;
}

/* shm_setup.c: a connection's birth and end, and the mapping of its rings. */
/* The rings' sizes, [0] dialer to acceptor: REMORA_SHM_RING_KIB for both (a power of two,
 * 64 KiB to 64 MiB), else SHM_CALL_RING_DEFAULT and SHM_RING_DEFAULT. */
void shm_ring_lens_configured(uint64_t len[2]);
struct shm_conn *shm_conn_new(int fd, int acceptor);
void shm_conn_free(struct shm_conn *c);
/* The peer, for log lines: its user and process (an accepted end), else the socket's path. */
void shm_describe_peer(struct shm_conn *c, const char *path);
/* Points the connection at its rings, from geometry already checked. */
void shm_attach_rings(struct shm_conn *c, const uint64_t len[2], const uint64_t off[2]);
/* Maps a memfd the peer made once its seals, size and geometry are checked: 0 or -errno. */
int shm_map_peer_memfd(struct shm_conn *c, int memfd);
/* An accepted end sets up on its first use: 0 once the rings are mapped. */
int shm_ensure_ready(struct shm_conn *c);

/* shm_rings.c: bytes and descriptors each way, and waiting for them (transport.h's ops). */
/* Wakes every side sleeping on c's four flags (a shutdown, a close): this end's waits and
 * the peer's, which then find the end. */
void shm_wake_all(struct shm_conn *c);
int shm_sendv(struct rm_conn *conn, const struct iovec *iov, int iovcnt);
ssize_t shm_recv_some(struct rm_conn *conn, void *buf, size_t len);
int shm_readable(struct rm_conn *conn);
int shm_writable(struct rm_conn *conn, size_t len);
int shm_send_fd(struct rm_conn *conn, int fd);
int shm_recv_fd(struct rm_conn *conn, int timeout_ms);

#endif
