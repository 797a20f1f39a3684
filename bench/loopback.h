/* Loopback TCP on this machine: what any TCP transport is bounded by.
 * Both run a sender and a receiver thread of this process over one
 * 127.0.0.1 connection; both return 0 or -errno. */
#ifndef REMORA_BENCH_LOOPBACK_H
#define REMORA_BENCH_LOOPBACK_H

#include <stddef.h>

/* One stream of write_bytes-sized writes for about `seconds` after a warm-up;
 * the receiver's bytes per second, in GB/s (1e9 bytes). */
int bench_tcp_throughput(double seconds, size_t write_bytes, double *gbps);

/* `count` round trips of msg_bytes each way with TCP_NODELAY, after a
 * warm-up; the mean round trip in µs. */
int bench_tcp_round_trip(int count, size_t msg_bytes, double *rtt_us);

#endif
