/* Loopback TCP on this machine: what any TCP transport is bounded by.
 * Both run a sender and a receiver thread of this process over one
 * 127.0.0.1 connection; both return 0 or -errno. */
#ifndef REMORA_BENCH_LOOPBACK_H
#define REMORA_BENCH_LOOPBACK_H

#include <stddef.h>

/* One stream of write_bytes-sized writes for about `seconds` after a warm-up;
 * the receiver's bytes per second, in GB/s (1e9 bytes). */
int bench_tcp_throughput(double seconds, size_t write_bytes, double *gbps);

/* Buffers for the cold figures: span bytes to send from and a distinct span
 * to receive into, both first touched (every page present) but far larger
 * than a cache, as a large copy's source and destination are. */
struct bench_tcp_cold {
	char *src, *dst;
	size_t span;
};
int bench_tcp_cold_init(struct bench_tcp_cold *b, size_t span);
void bench_tcp_cold_free(struct bench_tcp_cold *b);

/* nstreams connections at once, each with a sender and a receiver thread and
 * its own 1/nstreams of both buffers, which it walks in write_bytes-sized
 * writes and reads, wrapping around; after the warm-up, for `seconds`, the
 * bytes all receivers got, in GB/s (1e9 bytes). */
int bench_tcp_throughput_cold(const struct bench_tcp_cold *b, int nstreams, double seconds, size_t write_bytes,
			      double *gbps);

/* `count` round trips of msg_bytes each way with TCP_NODELAY, after a
 * warm-up; the mean round trip in µs. */
int bench_tcp_round_trip(int count, size_t msg_bytes, double *rtt_us);

#endif
