/* Compressed copies' chunks (common/zchunk.h): round trips of compressible and random data
 * of several sizes, the sample's decision, the modes, and the headers and payloads a peer
 * must not get past. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "zchunk.h"

static uint32_t rnd = 12345;

static uint8_t next_byte(void)
{
	rnd = rnd * 1103515245u + 12345u;
	return (uint8_t)(rnd >> 16);
}

/* Encodes n bytes of src in chunks of RM_ZCHUNK_MAX into a new buffer (*len bytes). */
static uint8_t *encode_all(const uint8_t *src, size_t n, size_t *len)
{
	size_t cap = (n / RM_ZCHUNK_MAX + 1) * rm_zchunk_bound(RM_ZCHUNK_MAX), off = 0;
	uint8_t *out = malloc(cap);
	for (size_t done = 0; done < n;) {
		size_t raw = n - done < RM_ZCHUNK_MAX ? n - done : RM_ZCHUNK_MAX, got = 0;
		EXPECT(rm_zchunk_encode(src + done, raw, out + off, cap - off, 0, &got) == 0);
		EXPECT(got <= rm_zchunk_bound(raw));
		off += got;
		done += raw;
	}
	*len = off;
	return out;
}

static void round_trip(size_t n, int random_data)
{
	uint8_t *src = malloc(n), *back = malloc(n + 1);
	for (size_t i = 0; i < n; i++)
		src[i] = random_data ? next_byte() : (uint8_t)(i / 4096);
	size_t len;
	uint8_t *enc = encode_all(src, n, &len);
	back[n] = 0x5a;
	EXPECT(rm_zchunk_decode_all(enc, len, back, n) == 0);
	EXPECT(!memcmp(src, back, n));
	EXPECT(back[n] == 0x5a);
	if (rm_zchunk_available() && n >= 4096) /* compressible data shrinks, random data is stored */
		EXPECT(random_data ? len == n + (n + RM_ZCHUNK_MAX - 1) / RM_ZCHUNK_MAX * RM_ZCHUNK_HEADER_LEN
		                   : len < n / 10);
	/* Expecting one byte more or less, or a byte more or less of the stream, is refused. */
	EXPECT(rm_zchunk_decode_all(enc, len, back, n + 1) == -EPROTO);
	EXPECT(rm_zchunk_decode_all(enc, len, back, n - 1) == -EPROTO);
	EXPECT(rm_zchunk_decode_all(enc, len - 1, back, n) == -EPROTO);
	free(enc);
	free(back);
	free(src);
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4); /* the test runs little-endian */
}

static void refusals(void)
{
	uint8_t hdr[RM_ZCHUNK_HEADER_LEN];
	struct rm_zchunk h;
	put32(hdr, 1000);
	put32(hdr + 4, 500);
	EXPECT(rm_zchunk_header(hdr, 1000, 500, &h) == 0 && h.raw == 1000 && h.stored == 500);
	EXPECT(rm_zchunk_header(hdr, 999, 500, &h) == -EPROTO);  /* more than the copy expects */
	EXPECT(rm_zchunk_header(hdr, 1000, 499, &h) == -EPROTO); /* more than the frame holds */
	put32(hdr, RM_ZCHUNK_MAX + 1);
	EXPECT(rm_zchunk_header(hdr, UINT64_MAX, UINT64_MAX, &h) == -EPROTO); /* past a chunk */
	put32(hdr, 0);
	EXPECT(rm_zchunk_header(hdr, UINT64_MAX, UINT64_MAX, &h) == -EPROTO); /* empty */
	put32(hdr, 100);
	put32(hdr + 4, 101);
	EXPECT(rm_zchunk_header(hdr, UINT64_MAX, UINT64_MAX, &h) == -EPROTO); /* stored above raw */
	put32(hdr + 4, 0);
	EXPECT(rm_zchunk_header(hdr, UINT64_MAX, UINT64_MAX, &h) == -EPROTO);

	/* A payload that decodes to more or fewer bytes than its header says, or to nothing. */
	if (rm_zchunk_available()) {
		uint8_t src[4096] = {0}, enc[8192], out[8192];
		size_t len;
		EXPECT(rm_zchunk_encode(src, sizeof src, enc, sizeof enc, 0, &len) == 0 && len < 200);
		struct rm_zchunk lie = {.raw = 4095, .stored = (uint32_t)(len - RM_ZCHUNK_HEADER_LEN)};
		EXPECT(rm_zchunk_decode(&lie, enc + RM_ZCHUNK_HEADER_LEN, out) == -EPROTO);
		lie.raw = 4097;
		EXPECT(rm_zchunk_decode(&lie, enc + RM_ZCHUNK_HEADER_LEN, out) == -EPROTO);
		memset(enc + RM_ZCHUNK_HEADER_LEN, 0xee, len - RM_ZCHUNK_HEADER_LEN);
		lie.raw = 4096;
		EXPECT(rm_zchunk_decode(&lie, enc + RM_ZCHUNK_HEADER_LEN, out) == -EPROTO);
	}
	uint8_t one = 1, buf[64];
	size_t len;
	EXPECT(rm_zchunk_encode(&one, 0, buf, sizeof buf, 0, &len) == -EINVAL);
	EXPECT(rm_zchunk_encode(&one, 1, buf, RM_ZCHUNK_HEADER_LEN, 0, &len) == -EINVAL);
}

static void decisions(void)
{
	enum rm_compress_mode m = RM_COMPRESS_OFF;
	EXPECT(rm_compress_mode_parse("sometimes", &m) == -EINVAL);
	EXPECT(rm_compress_mode_parse(NULL, &m) == 0 && m == (rm_zchunk_available() ? RM_COMPRESS_AUTO : RM_COMPRESS_OFF));
	EXPECT(rm_compress_mode_parse("off", &m) == 0 && m == RM_COMPRESS_OFF);
	uint64_t big = 4u << 20;
	double slow = 1e9 / 8, fast = 25e9 / 8, zstd = 1e9; /* zstd: 1 GB/s measured */
	EXPECT(!rm_compress_wanted(RM_COMPRESS_OFF, 0, slow, zstd, big));
	EXPECT(rm_compress_wanted(RM_COMPRESS_AUTO, 0, slow, zstd, big) == rm_zchunk_available());
	EXPECT(rm_compress_wanted(RM_COMPRESS_AUTO, 0, slow, 0, big) == rm_zchunk_available()); /* speed unknown: try */
	/* 1.25 / 1 GB/s is more than 0.9 / 3.1 GB/s: not even a perfect ratio pays; at 10 GB/s it may. */
	EXPECT(!rm_compress_wanted(RM_COMPRESS_AUTO, 0, fast, zstd, big));
	EXPECT(rm_compress_wanted(RM_COMPRESS_AUTO, 0, fast, 10e9, big) == rm_zchunk_available());
	EXPECT(!rm_compress_wanted(RM_COMPRESS_AUTO, 1, slow, zstd, big)); /* unix, shared memory */
	EXPECT(!rm_compress_wanted(RM_COMPRESS_AUTO, 0, 0, zstd, big));    /* not measured yet */
	EXPECT(!rm_compress_wanted(RM_COMPRESS_AUTO, 0, slow, zstd, RM_ZCHUNK_MIN_COPY - 1));
	EXPECT(!rm_compress_wanted(RM_COMPRESS_ALWAYS, 0, slow, zstd, RM_ZCHUNK_MAX_COPY + 1));
	EXPECT(rm_compress_wanted(RM_COMPRESS_ALWAYS, 1, fast, zstd, big) == rm_zchunk_available());
	/* A sample of 1 MiB: at 0.125 GB/s plain, 1 ms of zstd to a tenth pays (1.25 + 0.8 ms
	 * against 7.5 ms); at 3.1 GB/s plain it does not (1.25 ms against 0.3), nor a sample at
	 * 0.85 of its size however fast, while plain 0 (unknown) leaves the shrink to decide. */
	size_t mib = 1u << 20;
	EXPECT(rm_zchunk_pays_at(mib, mib / 10, 1e-3, slow));
	EXPECT(!rm_zchunk_pays_at(mib, mib / 10, 1e-3, fast));
	EXPECT(rm_zchunk_pays_at(mib, mib / 100, 1e-4, fast));
	EXPECT(!rm_zchunk_pays_at(mib, mib * 85 / 100, 1e-5, slow));
	EXPECT(rm_zchunk_pays_at(mib, mib / 10, 1.0, 0) && !rm_zchunk_pays_at(mib, mib, 1e-6, 0));
	EXPECT(!rm_zchunk_pays_at(mib, mib / 10, 0, slow)); /* no time measured: not known to pay */
	EXPECT(rm_zchunk_pays(1000, 800) && !rm_zchunk_pays(1000, 801) && !rm_zchunk_pays(0, 0));
}

int main(void)
{
	size_t sizes[] = {1, 4096, RM_ZCHUNK_MIN_COPY, RM_ZCHUNK_MAX - 1, RM_ZCHUNK_MAX, RM_ZCHUNK_MAX + 1, 5u << 20};
	for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
		round_trip(sizes[i], 0);
		round_trip(sizes[i], 1);
	}
	refusals();
	decisions();
	printf("zchunk: zstd %s, %d failures\n", rm_zchunk_available() ? "built" : "not built", failures);
	return failures != 0;
}
