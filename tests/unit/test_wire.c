/* Frame headers (common/wire.c) and stripe geometry (common/wire.h): encoding round trips
 * byte for byte, and a header past any bound is refused before anything is allocated. */
#include "wire.h"

#include <stdio.h>
#include <string.h>

#include "expect.h"

static struct rm_frame good(void)
{
	return (struct rm_frame){.magic = RM_WIRE_MAGIC, .op = 0x10001, .seq = 0x0102030405060708ull,
				 .msg_len = RM_MAX_MSG_LEN, .flags = RM_F_ASYNC | RM_F_PER_THREAD,
				 .bulk_len = RM_MAX_BULK_LEN, .ctx = ~0ull, .result = -1, .async_result = 719};
}

int main(void)
{
	uint8_t b[RM_FRAME_LEN];
	struct rm_frame f = good(), g;
	rm_frame_encode(&f, b);
	EXPECT(b[0] == 0x31 && b[3] == 0x52); /* little-endian "RMR1" */
	EXPECT(b[8] == 0x08 && b[15] == 0x01);
	EXPECT(rm_frame_decode(b, &g) == 0);
	EXPECT(!memcmp(&f, &g, sizeof(f)));

	f = good();
	f.magic ^= 1;
	rm_frame_encode(&f, b);
	EXPECT(rm_frame_decode(b, &g) < 0);
	f = good();
	f.msg_len = RM_MAX_MSG_LEN + 1;
	rm_frame_encode(&f, b);
	EXPECT(rm_frame_decode(b, &g) < 0);
	f = good();
	f.bulk_len = RM_MAX_BULK_LEN + 1;
	rm_frame_encode(&f, b);
	EXPECT(rm_frame_decode(b, &g) < 0);
	f.bulk_len = ~0ull;
	rm_frame_encode(&f, b);
	EXPECT(rm_frame_decode(b, &g) < 0);

	/* Stripes: the shares of every link add up to the copy, for sizes around chunk edges. */
	static const uint64_t sizes[] = {1, RM_STRIPE_MIN_CHUNK - 1, RM_STRIPE_MIN_CHUNK, RM_STRIPE_MIN_CHUNK * 3 + 1,
					 (1ull << 30) + 12345, 1ull << 40};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		for (uint32_t links = 1; links <= RM_MAX_COPY_LINKS; links++) {
			uint64_t sum = 0;
			for (uint32_t j = 0; j < links; j++)
				sum += rm_stripe_share(sizes[i], links, 0, j);
			EXPECT(sum == sizes[i]);
			EXPECT(rm_stripe_chunk(sizes[i], links) >= RM_STRIPE_MIN_CHUNK);
			EXPECT(rm_stripe_chunk_ok(sizes[i], links, 0));
		}
	/* A chunk the request names: aligned, at most 256 a link; the shares still add up. */
	EXPECT(!rm_stripe_chunk_ok(1 << 20, 2, 1000));
	EXPECT(!rm_stripe_chunk_ok(1 << 20, 9, RM_STRIPE_CHUNK_ALIGN));
	EXPECT(!rm_stripe_chunk_ok(1ull << 30, 2, RM_STRIPE_CHUNK_ALIGN));
	EXPECT(rm_stripe_chunk_ok(1ull << 25, 2, RM_STRIPE_CHUNK_ALIGN));
	EXPECT(rm_stripe_chunk_ok(12345, 4, RM_STRIPE_CHUNK_ALIGN));
	EXPECT(!rm_stripe_chunk_ok(12345, 4, 2 * RM_STRIPE_CHUNK_ALIGN));
	EXPECT(!rm_stripe_chunk_ok(1 << 20, 2, ~0ull - RM_STRIPE_CHUNK_ALIGN + 1)); /* n + chunk would wrap */
	EXPECT(!rm_stripe_chunk_ok(~0ull, 2, RM_STRIPE_CHUNK_ALIGN));
	for (uint64_t n = 1; n < (8ull << 20); n = n * 3 + 7)
		for (uint32_t links = 2; links <= RM_MAX_COPY_LINKS; links++) {
			uint64_t chunk = ((n / links) / RM_STRIPE_CHUNK_ALIGN + 1) * RM_STRIPE_CHUNK_ALIGN, sum = 0;
			for (uint32_t j = 0; j < links; j++)
				sum += rm_stripe_share(n, links, chunk, j);
			EXPECT(sum == n && rm_stripe_chunk_ok(n, links, chunk));
		}
	if (!failures)
		printf("wire: ok\n");
	return failures ? 1 : 0;
}
