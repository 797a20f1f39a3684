/* A histogram of durations (or any non-negative counts) in quarter octaves, for tails:
 * bucket 4k + j (k >= 2) holds [2^k (1 + j/4), 2^k (1 + (j+1)/4)); buckets 0 to 3 hold 0 to
 * 3 exactly. A quantile read from it is the upper edge of its bucket: above the true value
 * by at most a quarter of it (or by 1 below 4). 1 KiB; adding is a few instructions. */
#ifndef REMORA_LOG_HISTOGRAM_H
#define REMORA_LOG_HISTOGRAM_H

#include <stdint.h>

#define RM_LOG_HISTOGRAM_BUCKETS 256

struct rm_log_histogram {
	uint32_t n[RM_LOG_HISTOGRAM_BUCKETS];
};

static inline unsigned rm_log_histogram_bucket(uint64_t v)
{
	if (v < 4)
		return (unsigned)v;
	unsigned k = 63u - (unsigned)__builtin_clzll(v);
	return 4 * k + (unsigned)((v >> (k - 2)) & 3); /* at most 4 * 63 + 3 = 255 */
}

static inline void rm_log_histogram_add(struct rm_log_histogram *h, uint64_t v)
{
	uint32_t *n = &h->n[rm_log_histogram_bucket(v)];
	if (*n != UINT32_MAX)
		(*n)++;
}

/* The upper edge of the bucket holding quantile q (0 to 1) of the count values added;
 * 0 when count is 0. */
static inline double rm_log_histogram_quantile(const struct rm_log_histogram *h, uint64_t count, double q)
{
	uint64_t want = (uint64_t)((double)count * q), seen = 0;
	if (want >= count)
		want = count ? count - 1 : 0;
	for (unsigned b = 0; count && b < RM_LOG_HISTOGRAM_BUCKETS; b++) {
		seen += h->n[b];
		if (seen > want) {
			if (b < 4)
				return (double)(b + 1);
			unsigned k = b / 4, j = b % 4;
			return (double)(1ull << k) * (1.0 + (double)(j + 1) / 4.0);
		}
	}
	return 0;
}

#endif
