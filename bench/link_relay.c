/* The link emulator's delay line (scripts/link-emu.sh, docs/performance.md "The emulated
 * link"): a transparent bridge between two interfaces of its network namespace that holds
 * every frame for the one-way delay before passing it on, one thread per direction. This
 * kernel has no netem; tbf on the end hosts sets the rate, this adds the propagation delay.
 *
 * Frames are taken with their virtio-net header (PACKET_VNET_HDR), so a TCP segment the
 * end host left for segmentation offload (up to 64 KiB) and its partial checksum travel
 * as one frame and are sent on as such: the relay moves tens of thousands of frames a
 * second, not millions. A direction may have several lanes, each a thread with its own
 * socket in a fanout group that hashes by flow (PACKET_FANOUT_HASH), so a flow's frames
 * stay on one lane and in order (a FIFO per lane) while copy links spread over cores; a frame arriving when the
 * direction's buffer is full waits in the socket's receive buffer, then is dropped by the
 * kernel, as a real queue would. Below 500 us of delay the threads spin (the timer's
 * wake-up would be a large part of the delay); above they sleep until the next departure. */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "link_tool.h"

#define RING_BYTES (64u << 20)      /* a direction's frames in flight: ≥ 100 Gbit/s × 5 ms */
#define FRAME_MAX (65536u + 64u)    /* virtio-net header + Ethernet header + 64 KiB */
#define SPIN_BELOW_NS 500000ull
#define VNET_HDR_LEN 10 /* struct virtio_net_hdr, before each frame */

struct rec {
	uint64_t due_ns;
	uint32_t len;  /* 0: wrap marker, the next record is at the ring's start */
	uint32_t pad;
};

struct direction {
	int in, out, out_ifindex;
	uint64_t delay_ns;
	int spin;
	uint8_t *ring;
	size_t head, tail; /* head: the oldest record; tail: where the next goes */
};

static volatile sig_atomic_t stopping;

static void on_signal(int sig) { (void)sig; stopping = 1; }

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#ifndef PACKET_FANOUT_FLAG_IGNORE_OUTGOING
#define PACKET_FANOUT_FLAG_IGNORE_OUTGOING 0x4000 /* Linux 6.9; older headers lack it */
#endif

/* A packet socket on ifname with virtio-net headers: with receive, taking every frame that
 * arrives there, in fanout group fanout unless 0 (one lane of several); else sending only. */
static int packet_socket(const char *ifname, int receive, int fanout)
{
	int ifindex = (int)if_nametoindex(ifname), one = 1, rcvbuf = 32 << 20;
	/* The group's own flag: a fanout group would otherwise see the frames the other
	 * direction sends out of this interface, and send them back. */
	int group = fanout | ((PACKET_FANOUT_HASH | PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16);
	if (!ifindex) {
		fprintf(stderr, "remora-link relay: no interface %s: %s\n", ifname, strerror(errno));
		return -1;
	}
	uint16_t proto = receive ? htons(ETH_P_ALL) : 0;
	int fd = socket(AF_PACKET, SOCK_RAW, proto);
	struct sockaddr_ll sll = { .sll_family = AF_PACKET, .sll_protocol = proto, .sll_ifindex = ifindex };
	if (fd < 0 || setsockopt(fd, SOL_PACKET, PACKET_VNET_HDR, &one, sizeof one) ||
	    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) ||
	    bind(fd, (struct sockaddr *)&sll, sizeof sll) ||
	    (fanout && setsockopt(fd, SOL_PACKET, PACKET_FANOUT, &group, sizeof group))) {
		fprintf(stderr, "remora-link relay: packet socket on %s: %s\n", ifname, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &rcvbuf, sizeof rcvbuf);
	return fd;
}

/* Room for a whole frame at the tail (wrapping to the start when the end is too close);
 * NULL when the ring is full. */
static struct rec *reserve(struct direction *d)
{
	size_t need = sizeof(struct rec) + FRAME_MAX + sizeof(struct rec);
	if (d->tail >= d->head) {
		if (RING_BYTES - d->tail >= need)
			return (struct rec *)(d->ring + d->tail);
		if (d->head > need) { /* wrap: leave a marker */
			((struct rec *)(d->ring + d->tail))->len = 0;
			d->tail = 0;
			return (struct rec *)d->ring;
		}
		return NULL;
	}
	return d->head - d->tail > need ? (struct rec *)(d->ring + d->tail) : NULL;
}

static size_t rec_size(uint32_t len) { return (sizeof(struct rec) + len + 7) & ~(size_t)7; }

/* Takes every frame waiting on d->in into the ring, stamped with its departure time. */
static void take(struct direction *d)
{
	for (;;) {
		struct rec *r = reserve(d);
		if (!r)
			return;
		ssize_t n = recv(d->in, r + 1, FRAME_MAX, MSG_DONTWAIT | MSG_TRUNC);
		if (n <= 0)
			return;
		if ((size_t)n > FRAME_MAX) /* cannot happen below a 64 KiB MTU; dropped */
			continue;
		r->len = (uint32_t)n;
		r->due_ns = now_ns() + d->delay_ns;
		d->tail += rec_size(r->len);
	}
}

/* Sends the frames whose time has come; the next departure, or 0 when none waits. */
static uint64_t give(struct direction *d)
{
	while (d->head != d->tail) {
		struct rec *r = (struct rec *)(d->ring + d->head);
		if (!r->len) {
			d->head = 0;
			continue;
		}
		if (r->due_ns > now_ns())
			return r->due_ns;
		/* The frame's EtherType as the protocol: the sending socket is bound to none, and a
		 * segmentation-offload frame needs it known before its virtio-net header is read. */
		const uint8_t *frame = (const uint8_t *)(r + 1);
		struct sockaddr_ll to = { .sll_family = AF_PACKET, .sll_ifindex = d->out_ifindex };
		if (r->len >= VNET_HDR_LEN + 14)
			memcpy(&to.sll_protocol, frame + VNET_HDR_LEN + 12, 2);
		while (sendto(d->out, frame, r->len, 0, (struct sockaddr *)&to, sizeof to) < 0 && errno == ENOBUFS)
			sched_yield(); /* the far end is busy: wait, as a wire's receiver cannot refuse */
		d->head += rec_size(r->len);
		if (d->head == d->tail)
			d->head = d->tail = 0;
	}
	return 0;
}

static void *run_direction(void *arg)
{
	struct direction *d = arg;
	prctl(PR_SET_TIMERSLACK, 1UL);
	while (!stopping) {
		take(d);
		uint64_t next = give(d);
		if (d->spin)
			continue;
		struct pollfd p = { .fd = d->in, .events = POLLIN };
		uint64_t now = now_ns();
		if (next && next <= now)
			continue;
		struct timespec ts = { 0, 0 }, *tsp = NULL;
		uint64_t wait = next ? next - now : 100000000ull; /* 100 ms at most: see stopping */
		ts.tv_sec = (time_t)(wait / 1000000000u);
		ts.tv_nsec = (long)(wait % 1000000000u);
		tsp = &ts;
		if (!reserve(d))
			ppoll(NULL, 0, tsp, NULL); /* full: only sending makes room */
		else
			ppoll(&p, 1, tsp, NULL);
	}
	return NULL;
}

#define MAX_LANES 8

int link_relay_main(int argc, char **argv)
{
	if (argc < 4) {
		fprintf(stderr, "usage: remora-link relay IF_A IF_B ONE_WAY_DELAY_NS [spin|sleep [LANES]]\n");
		return 2;
	}
	uint64_t delay = strtoull(argv[3], NULL, 10);
	int spin = argc > 4 ? !strcmp(argv[4], "spin") : delay < SPIN_BELOW_NS;
	int lanes = argc > 5 ? atoi(argv[5]) : 1;
	if (lanes < 1 || lanes > MAX_LANES) {
		fprintf(stderr, "remora-link relay: 1 to %d lanes a direction\n", MAX_LANES);
		return 2;
	}
	static struct direction dir[2 * MAX_LANES];
	pthread_t t[2 * MAX_LANES];
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	for (int i = 0; i < 2 * lanes; i++) {
		int way = i % 2; /* 0: A to B, fanout group 1; 1: B to A, group 2 */
		struct direction *d = &dir[i];
		d->in = packet_socket(argv[1 + way], 1, lanes > 1 ? 1 + way : 0);
		d->out = packet_socket(argv[2 - way], 0, 0);
		d->out_ifindex = (int)if_nametoindex(argv[2 - way]);
		d->delay_ns = delay;
		d->spin = spin;
		d->ring = malloc(RING_BYTES);
		if (d->in < 0 || d->out < 0)
			return 1;
		if (!d->ring || pthread_create(&t[i], NULL, run_direction, d)) {
			fprintf(stderr, "remora-link relay: out of memory or threads\n");
			return 1;
		}
	}
	printf("relay ready: %s <-> %s, one-way delay %llu ns, %s, %d lane(s) each way\n", argv[1], argv[2],
	       (unsigned long long)delay, spin ? "spinning" : "sleeping", lanes);
	fflush(stdout);
	for (int i = 0; i < 2 * lanes; i++)
		pthread_join(t[i], NULL);
	return 0;
}
