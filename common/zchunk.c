/* Compressed copies' chunks (zchunk.h). */
#include "zchunk.h"

#include <errno.h>
#include <string.h>

#ifdef RM_HAVE_ZSTD
#include <zstd.h>
#endif

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

int rm_zchunk_available(void)
{
#ifdef RM_HAVE_ZSTD
	return 1;
#else
	return 0;
#endif
}

int rm_compress_mode_parse(const char *s, enum rm_compress_mode *mode)
{
	enum rm_compress_mode m;
	if (!s || !*s || !strcmp(s, "auto"))
		m = RM_COMPRESS_AUTO;
	else if (!strcmp(s, "off"))
		m = RM_COMPRESS_OFF;
	else if (!strcmp(s, "always"))
		m = RM_COMPRESS_ALWAYS;
	else
		return -EINVAL;
	*mode = rm_zchunk_available() ? m : RM_COMPRESS_OFF;
	return 0;
}

/* The time of a copy compressed, per raw byte, against plain: at most RM_ZCHUNK_GAIN. */
static int beats(double zstd_bps, double ratio, double plain_bps)
{
	return (1 + RM_ZCHUNK_DECODE_SHARE) / zstd_bps + ratio / plain_bps <= RM_ZCHUNK_GAIN / plain_bps;
}

int rm_compress_wanted(enum rm_compress_mode mode, int local_link, double plain_bps, double zstd_bps, uint64_t n)
{
	if (mode == RM_COMPRESS_OFF || !rm_zchunk_available() || n < RM_ZCHUNK_MIN_COPY || n > RM_ZCHUNK_MAX_COPY)
		return 0;
	if (mode == RM_COMPRESS_ALWAYS)
		return 1;
	return !local_link && plain_bps > 0 && (zstd_bps <= 0 || beats(zstd_bps, 0, plain_bps));
}

size_t rm_zchunk_bound(size_t raw)
{
	size_t b = raw;
#ifdef RM_HAVE_ZSTD
	b = ZSTD_compressBound(raw);
	if (b < raw)
		b = raw;
#endif
	return RM_ZCHUNK_HEADER_LEN + b;
}

int rm_zchunk_encode(const void *src, size_t raw, void *dst, size_t cap, int force_raw, size_t *len)
{
	if (raw == 0 || raw > RM_ZCHUNK_MAX || cap < RM_ZCHUNK_HEADER_LEN + raw)
		return -EINVAL;
	uint8_t *out = dst;
	size_t stored = raw;
#ifdef RM_HAVE_ZSTD
	if (!force_raw) {
		size_t z = ZSTD_compress(out + RM_ZCHUNK_HEADER_LEN, cap - RM_ZCHUNK_HEADER_LEN, src, raw, 1);
		if (!ZSTD_isError(z) && z < raw)
			stored = z;
	}
#endif
	if (stored == raw)
		memcpy(out + RM_ZCHUNK_HEADER_LEN, src, raw);
	put32(out, (uint32_t)raw);
	put32(out + 4, (uint32_t)stored);
	*len = RM_ZCHUNK_HEADER_LEN + stored;
	return 0;
}

int rm_zchunk_pays(size_t raw, size_t len)
{
	return raw && (double)len <= RM_ZCHUNK_PAYS * (double)raw;
}

int rm_zchunk_pays_at(size_t raw, size_t len, double sample_s, double plain_bps)
{
	if (!rm_zchunk_pays(raw, len))
		return 0;
	if (plain_bps <= 0)
		return 1;
	return sample_s > 0 && beats((double)raw / sample_s, (double)len / (double)raw, plain_bps);
}

int rm_zchunk_header(const uint8_t *hdr, uint64_t expect, uint64_t left, struct rm_zchunk *h)
{
	uint32_t raw = get32(hdr), stored = get32(hdr + 4);
	if (raw == 0 || raw > RM_ZCHUNK_MAX || raw > expect || stored == 0 || stored > left ||
	    stored > RM_ZCHUNK_STORED_MAX || stored > raw)
		return -EPROTO;
	*h = (struct rm_zchunk){.raw = raw, .stored = stored};
	return 0;
}

int rm_zchunk_decode(const struct rm_zchunk *h, const void *src, void *dst)
{
	if (h->stored == h->raw) {
		memcpy(dst, src, h->raw);
		return 0;
	}
#ifdef RM_HAVE_ZSTD
	/* The frame must say its own size, and say raw: a frame that claims more is refused
	 * before a byte is written past raw. */
	unsigned long long said = ZSTD_getFrameContentSize(src, h->stored);
	if (said != h->raw)
		return -EPROTO;
	size_t got = ZSTD_decompress(dst, h->raw, src, h->stored);
	if (ZSTD_isError(got) || got != h->raw)
		return -EPROTO;
	return 0;
#else
	return -EPROTO;
#endif
}

int rm_zchunk_decode_all(const void *src, size_t len, void *dst, size_t raw)
{
	const uint8_t *in = src;
	uint8_t *out = dst;
	while (raw > 0) {
		struct rm_zchunk h;
		if (len < RM_ZCHUNK_HEADER_LEN || rm_zchunk_header(in, raw, len - RM_ZCHUNK_HEADER_LEN, &h))
			return -EPROTO;
		in += RM_ZCHUNK_HEADER_LEN;
		len -= RM_ZCHUNK_HEADER_LEN;
		if (rm_zchunk_decode(&h, in, out))
			return -EPROTO;
		in += h.stored;
		len -= h.stored;
		out += h.raw;
		raw -= h.raw;
	}
	return len == 0 ? 0 : -EPROTO;
}
