/* Compressed copies of the client (compress.h). */
#include "compress.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "copy_links.h"
#include "link.h"
#include "log.h"
#include "transport.h"
#include "zchunk.h"

static int daemon_takes = 0, local = 1;

/* Whether addr ([scheme://]host:port) names this host's loopback. */
static int loopback(const char *addr)
{
	const char *host = strstr(addr, "://");
	host = host ? host + 3 : addr;
	return !strncmp(host, "127.", 4) || !strncmp(host, "localhost:", 10) || !strcmp(host, "localhost") ||
	       !strncmp(host, "[::1]", 5);
}

void rm_compress_peer(int takes, const char *scheme, const char *addr)
{
	daemon_takes = takes;
	local = !strcmp(scheme, "unix") || loopback(addr);
}

static enum rm_compress_mode mode(void)
{
	static int parsed = 0;
	static enum rm_compress_mode m = RM_COMPRESS_OFF;
	if (!__atomic_load_n(&parsed, __ATOMIC_ACQUIRE)) {
		enum rm_compress_mode got = RM_COMPRESS_OFF;
		if (rm_compress_mode_parse(getenv("REMORA_COMPRESS"), &got)) /* checked at start (environment.c) */
			got = RM_COMPRESS_OFF;
		m = got;
		__atomic_store_n(&parsed, 1, __ATOMIC_RELEASE);
	}
	return m;
}

/* zstd's speed on this host's samples, bytes/s (0: none yet): a running mean, each sample
 * weighing 1/4. Copies are not tried where even a perfect ratio at that speed cannot pay. */
static pthread_mutex_t speed_lock = PTHREAD_MUTEX_INITIALIZER;
static double zstd_bps;

static double zstd_speed(void)
{
	pthread_mutex_lock(&speed_lock);
	double v = zstd_bps;
	pthread_mutex_unlock(&speed_lock);
	return v;
}

static void zstd_sample(size_t raw, uint64_t ns)
{
	if (!ns)
		return;
	double v = (double)raw / ((double)ns * 1e-9);
	pthread_mutex_lock(&speed_lock);
	zstd_bps = zstd_bps > 0 ? zstd_bps + (v - zstd_bps) / 4 : v;
	pthread_mutex_unlock(&speed_lock);
}

/* A direction whose last try went raw (the sample did not pay) tries again only after
 * copies of k times that copy's bytes went untried, k 4 after the first such try, doubling
 * to 32: a try that goes raw costs the sample and, from the device, the daemon's whole
 * unpipelined copy, so data that does not shrink pays it on about one copy in 33 at most,
 * while a large copy after small ones that did not shrink is tried again soon. */
#define BACKOFF_FIRST 4
#define BACKOFF_MAX 32
static uint32_t backoff[2];   /* under speed_lock */
static uint64_t skip_left[2]; /* bytes of copies still to go untried */

void rm_compress_outcome(int to_host, int compressed, uint64_t n)
{
	int d = !!to_host;
	pthread_mutex_lock(&speed_lock);
	backoff[d] = compressed ? 0 : !backoff[d] ? BACKOFF_FIRST : backoff[d] * 2 > BACKOFF_MAX ? BACKOFF_MAX : backoff[d] * 2;
	skip_left[d] = backoff[d] * n;
	pthread_mutex_unlock(&speed_lock);
}

/* Whether a copy of n bytes skips trying (the backoff above); counts it. */
static int backing_off(int to_host, uint64_t n)
{
	int d = !!to_host, skip = 0;
	pthread_mutex_lock(&speed_lock);
	if (skip_left[d]) {
		skip_left[d] -= n < skip_left[d] ? n : skip_left[d];
		skip = 1;
	}
	pthread_mutex_unlock(&speed_lock);
	return skip;
}

double rm_compress_plain_bps(int to_host, uint64_t n)
{
	return mode() == RM_COMPRESS_ALWAYS ? 0 : rm_copy_links_plain_bps(to_host, n);
}

int rm_compress_for(int to_host, uint64_t n)
{
	if (!daemon_takes)
		return 0;
	if (!rm_compress_wanted(mode(), local, rm_copy_links_plain_bps(to_host, n), zstd_speed(), n))
		return 0;
	return mode() == RM_COMPRESS_ALWAYS || !backing_off(to_host, n);
}

int rm_compress_encode(const void *src, uint64_t n, uint8_t **out, size_t *len)
{
	const uint8_t *in = src;
	size_t first = n < RM_ZCHUNK_MAX ? (size_t)n : RM_ZCHUNK_MAX, got;
	uint64_t chunks = (n + RM_ZCHUNK_MAX - 1) / RM_ZCHUNK_MAX;
	size_t cap = (size_t)chunks * rm_zchunk_bound(RM_ZCHUNK_MAX);
	uint8_t *buf = malloc(cap);
	if (!buf)
		return -ENOMEM;
	/* The sample is the first chunk, encoded where it stays if the copy is compressed; it
	 * must shrink, fast enough for the copy to beat the link (zchunk.h). */
	uint64_t t0 = rm_transport_now_ns();
	int bad = rm_zchunk_encode(in, first, buf, cap, 0, &got);
	uint64_t took = rm_transport_now_ns() - t0;
	if (!bad)
		zstd_sample(first, took);
	if (bad || !rm_zchunk_pays_at(first, got, (double)took * 1e-9, rm_compress_plain_bps(0, n))) {
		free(buf);
		rm_log(RM_LOG_DEBUG, "a copy of %llu bytes to the device goes uncompressed: its first %zu bytes "
		       "took %zu compressed", (unsigned long long)n, first, got);
		return 1;
	}
	size_t off = got;
	for (uint64_t done = first; done < n; done += RM_ZCHUNK_MAX) {
		size_t raw = n - done < RM_ZCHUNK_MAX ? (size_t)(n - done) : RM_ZCHUNK_MAX;
		if (rm_zchunk_encode(in + done, raw, buf + off, cap - off, 0, &got)) {
			free(buf);
			return -EINVAL;
		}
		off += got;
	}
	rm_log(RM_LOG_DEBUG, "a copy of %llu bytes to the device goes compressed in %zu", (unsigned long long)n, off);
	*out = buf;
	*len = off;
	return 0;
}

int rm_compress_read_bulk(void *arg, struct rm_link *l, uint64_t len)
{
	struct rm_compress_in *in = arg;
	if (len == in->n)
		return rm_link_read(l, in->dst, len);
	uint8_t *stored = malloc(RM_ZCHUNK_STORED_MAX);
	if (!stored)
		return -ENOMEM;
	uint64_t done = 0;
	int err = 0;
	while (!err && done < in->n) {
		uint8_t hdr[RM_ZCHUNK_HEADER_LEN];
		struct rm_zchunk h;
		if (len < sizeof(hdr) || (err = rm_link_read(l, hdr, sizeof(hdr))))
			break;
		len -= sizeof(hdr);
		if (rm_zchunk_header(hdr, in->n - done, len, &h) || (err = rm_link_read(l, stored, h.stored)))
			break;
		len -= h.stored;
		if (rm_zchunk_decode(&h, stored, in->dst + done))
			break;
		done += h.raw;
	}
	free(stored);
	if (err)
		return err;
	if (done != in->n || len) {
		rm_log(RM_LOG_ERROR, "a compressed copy from the device is malformed at byte %llu", (unsigned long long)done);
		return -EPROTO;
	}
	in->compressed = 1;
	rm_log(RM_LOG_DEBUG, "a copy of %llu bytes from the device came compressed", (unsigned long long)in->n);
	return 0;
}
