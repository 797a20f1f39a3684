/* The link emulator's probe (link_tool.h): what the emulated link really does, measured
 * between its two ends, so that every figure over it carries the link it ran on. The
 * round trip is the median (and the least) of 64-byte TCP ping-pongs (TCP_NODELAY, at most 0.5 s of them
 * after 10 warm-ups); the rate one TCP stream's, 1 MiB writes for the given seconds, timed
 * until the server has counted the last byte. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "link_tool.h"

#define PING_BYTES 64
#define MAX_PINGS 4000
#define CHUNK (1u << 20)

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int full(int fd, void *buf, size_t len, int reading)
{
	for (size_t done = 0; done < len;) {
		ssize_t n = reading ? read(fd, (char *)buf + done, len - done) : write(fd, (char *)buf + done, len - done);
		if (n <= 0) {
			if (n < 0 && errno == EINTR)
				continue;
			return -1;
		}
		done += (size_t)n;
	}
	return 0;
}

static int address(const char *host, const char *port, struct sockaddr_in *sa)
{
	*sa = (struct sockaddr_in){ .sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port)) };
	return inet_pton(AF_INET, host, &sa->sin_addr) == 1 ? 0 : -1;
}

static void serve(int c)
{
	char mode, buf[PING_BYTES];
	int one = 1;
	setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (full(c, &mode, 1, 1))
		return;
	if (mode == 'p') {
		while (!full(c, buf, sizeof buf, 1) && !full(c, buf, sizeof buf, 0))
			;
		return;
	}
	static char sink[CHUNK];
	uint64_t total = 0;
	ssize_t n;
	while ((n = read(c, sink, sizeof sink)) > 0)
		total += (uint64_t)n;
	full(c, &total, sizeof total, 0);
}

int link_probe_server_main(int argc, char **argv)
{
	struct sockaddr_in sa;
	int one = 1, s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (argc < 3 || address(argv[1], argv[2], &sa) || s < 0 ||
	    setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) || bind(s, (struct sockaddr *)&sa, sizeof sa) ||
	    listen(s, 4)) {
		fprintf(stderr, "remora-link probe-server ADDR PORT: %s\n", strerror(errno));
		return 1;
	}
	printf("probe-server ready\n");
	fflush(stdout);
	for (;;) {
		int c = accept(s, NULL, NULL);
		if (c < 0)
			continue;
		serve(c);
		close(c);
	}
}

static int dial(const struct sockaddr_in *sa, char mode)
{
	int one = 1, s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	for (int tries = 0; connect(s, (const struct sockaddr *)sa, sizeof *sa); tries++) {
		if (tries == 50) {
			close(s);
			return -1;
		}
		usleep(100000);
		close(s);
		if ((s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
			return -1;
	}
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	if (full(s, &mode, 1, 0)) {
		close(s);
		return -1;
	}
	return s;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int link_probe_main(int argc, char **argv)
{
	struct sockaddr_in sa;
	if (argc < 4 || address(argv[1], argv[2], &sa)) {
		fprintf(stderr, "usage: remora-link probe ADDR PORT SECONDS\n");
		return 2;
	}
	double seconds = atof(argv[3]);
	static double rtts[MAX_PINGS];
	char buf[PING_BYTES] = { 0 };
	int s = dial(&sa, 'p'), n = 0;
	if (s < 0) {
		fprintf(stderr, "remora-link probe: cannot reach %s:%s: %s\n", argv[1], argv[2], strerror(errno));
		return 1;
	}
	for (int i = 0; i < 10; i++)
		if (full(s, buf, sizeof buf, 0) || full(s, buf, sizeof buf, 1))
			return 1;
	double until = now_s() + 0.5;
	while (n < MAX_PINGS && now_s() < until) {
		double t0 = now_s();
		if (full(s, buf, sizeof buf, 0) || full(s, buf, sizeof buf, 1))
			return 1;
		rtts[n++] = now_s() - t0;
	}
	close(s);
	qsort(rtts, (size_t)n, sizeof rtts[0], cmp_double);

	static char chunk[CHUNK];
	uint64_t sent = 0, counted = 0;
	if ((s = dial(&sa, 's')) < 0)
		return 1;
	double t0 = now_s();
	while (now_s() - t0 < seconds) {
		if (full(s, chunk, sizeof chunk, 0))
			return 1;
		sent += sizeof chunk;
	}
	shutdown(s, SHUT_WR);
	if (full(s, &counted, sizeof counted, 1) || counted != sent) {
		fprintf(stderr, "remora-link probe: the server counted %llu of %llu bytes\n", (unsigned long long)counted,
			(unsigned long long)sent);
		return 1;
	}
	double took = now_s() - t0;
	close(s);
	printf("rtt_us=%.1f rtt_min_us=%.1f gbps=%.3f pings=%d\n", rtts[n / 2] * 1e6, rtts[0] * 1e6,
	       sent * 8 / took / 1e9, n);
	return 0;
}
