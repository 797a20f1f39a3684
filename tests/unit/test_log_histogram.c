/* common/log_histogram.h: buckets in quarter octaves, quantiles read as bucket edges. */
#include <stdint.h>
#include <string.h>

#include "expect.h"
#include "log_histogram.h"

/* One value alone: every quantile is its bucket's upper edge, above it by at most a quarter
 * (by at most 1 below 4). */
static void one_value(uint64_t v)
{
	struct rm_log_histogram h;
	memset(&h, 0, sizeof(h));
	rm_log_histogram_add(&h, v);
	double q = rm_log_histogram_quantile(&h, 1, 0.5);
	EXPECT((long double)q > (long double)v); /* long double: 2^64 - 1 is not a double */
	EXPECT((long double)q <= (long double)v * 1.25L + 1.0L);
	EXPECT(rm_log_histogram_quantile(&h, 1, 0.999) == q);
	EXPECT(rm_log_histogram_quantile(&h, 1, 1.0) == q);
}

int main(void)
{
	for (uint64_t v = 0; v < 5000; v++)
		one_value(v);
	for (unsigned k = 2; k < 64; k++) { /* each octave's edges and middle */
		uint64_t p = 1ull << k;
		one_value(p);
		one_value(p - 1);
		one_value(p + p / 2);
	}
	one_value(UINT64_MAX);
	EXPECT(rm_log_histogram_bucket(UINT64_MAX) == RM_LOG_HISTOGRAM_BUCKETS - 1);
	for (uint64_t v = 4; v < 100000; v++) /* buckets never go down as values go up */
		EXPECT(rm_log_histogram_bucket(v) >= rm_log_histogram_bucket(v - 1));

	/* 990 values of 1000 and 10 of 100000: p50 and p99 in the first one's bucket, p99.9 in
	 * the second's. */
	struct rm_log_histogram h;
	memset(&h, 0, sizeof(h));
	for (int i = 0; i < 990; i++)
		rm_log_histogram_add(&h, 1000);
	for (int i = 0; i < 10; i++)
		rm_log_histogram_add(&h, 100000);
	double p50 = rm_log_histogram_quantile(&h, 1000, 0.5), p99 = rm_log_histogram_quantile(&h, 1000, 0.99);
	double p999 = rm_log_histogram_quantile(&h, 1000, 0.999);
	EXPECT(p50 > 1000 && p50 <= 1250);
	EXPECT(p99 > 100000 && p99 <= 125000); /* the 991st value of 1000 is the first 100000 */
	EXPECT(p999 > 100000 && p999 <= 125000);
	EXPECT(rm_log_histogram_quantile(&h, 1000, 0.98) == p50);
	EXPECT(rm_log_histogram_quantile(&h, 0, 0.5) == 0);
	return failures != 0;
}
