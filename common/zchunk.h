/* Compressed copies (docs/performance.md "Compression"): a copy's bytes as a run of
 * chunks, each an 8-byte header (little-endian u32 raw length, u32 stored length) and
 * its payload: zstd level 1 when it shrank, else the raw bytes (stored == raw). Chunks
 * carry at most RM_ZCHUNK_MAX raw bytes; a copy is compressed only where its first chunk
 * shrinks to RM_ZCHUNK_PAYS of its size or less, fast enough that the copy beats the link.
 *
 * Every header is the peer's: rm_zchunk_header refuses one whose raw length passes what the
 * copy still expects or RM_ZCHUNK_MAX, or whose stored length passes the bytes left in the
 * frame or the bound of a chunk; rm_zchunk_decode refuses a payload that does not give
 * exactly the raw length. Built without libzstd (RM_HAVE_ZSTD undefined), nothing is
 * compressed and a compressed chunk is refused. Functions return 0 or -errno. */
#ifndef REMORA_ZCHUNK_H
#define REMORA_ZCHUNK_H

#include <stddef.h>
#include <stdint.h>

#define RM_ZCHUNK_HEADER_LEN 8
#define RM_ZCHUNK_MAX (1u << 20)              /* raw bytes in a chunk at most */
#define RM_ZCHUNK_MIN_COPY (256u << 10)       /* copies smaller than this go raw */
#define RM_ZCHUNK_MAX_COPY (256ull << 20)     /* and larger ones (a side holds the copy's bytes) */
#define RM_ZCHUNK_PAYS 0.8                    /* a sample must shrink to this of its size */
/* A compressed copy is not pipelined: n/C compressing, n·ratio/L on the link, about a
 * quarter of n/C decoding. It goes compressed only where that is at most RM_ZCHUNK_GAIN
 * of n/L, the copy sent plain (L the link's measured rate, C the sample's speed). */
#define RM_ZCHUNK_DECODE_SHARE 0.25
#define RM_ZCHUNK_GAIN 0.9
/* The most a chunk's payload may take: zstd's bound for RM_ZCHUNK_MAX (compressBound). */
#define RM_ZCHUNK_STORED_MAX (RM_ZCHUNK_MAX + (RM_ZCHUNK_MAX >> 8) + 64)

enum rm_compress_mode { RM_COMPRESS_OFF, RM_COMPRESS_AUTO, RM_COMPRESS_ALWAYS };

struct rm_zchunk {
	uint32_t raw, stored; /* stored == raw: the payload is the raw bytes */
};

/* REMORA_COMPRESS's value: auto (or unset), off, always (tests only: compress whatever the
 * link); -EINVAL for anything else. Always RM_COMPRESS_OFF without libzstd. */
int rm_compress_mode_parse(const char *s, enum rm_compress_mode *mode);
/* Whether libzstd was built in. */
int rm_zchunk_available(void);
/* Whether a copy of n bytes should try compression: mode, whether the link is local (unix,
 * shared memory: never), the measured rate of a copy sent plain in bytes/s (0: not yet
 * measured: no) and the speed of zstd measured on earlier samples (0: none yet): a
 * compression that fast could pay even at a ratio of 0 (rm_zchunk_pays_at). */
int rm_compress_wanted(enum rm_compress_mode mode, int local_link, double plain_bps, double zstd_bps, uint64_t n);

/* The most bytes rm_zchunk_encode may write for raw bytes (header included). */
size_t rm_zchunk_bound(size_t raw);
/* Encodes raw (1..RM_ZCHUNK_MAX) bytes of src as one chunk at dst (cap bytes); returns the
 * chunk's length in *len. force_raw: store without trying. */
int rm_zchunk_encode(const void *src, size_t raw, void *dst, size_t cap, int force_raw, size_t *len);
/* Whether a sample's chunk (raw bytes encoded in len) shrank enough for its copy to be compressed. */
int rm_zchunk_pays(size_t raw, size_t len);
/* The same, and that the copy compressed at the sample's speed (raw bytes in sample_s
 * seconds) beats it sent plain at plain_bps (bytes/s; 0: unknown, the shrink alone decides). */
int rm_zchunk_pays_at(size_t raw, size_t len, double sample_s, double plain_bps);
/* Reads and checks a header: expect the copy's raw bytes still due, left the frame's bytes
 * after the header. -EPROTO for a header out of bounds. */
int rm_zchunk_header(const uint8_t *hdr, uint64_t expect, uint64_t left, struct rm_zchunk *h);
/* Decodes h's payload (h->stored bytes at src) into dst, exactly h->raw bytes, or -EPROTO. */
int rm_zchunk_decode(const struct rm_zchunk *h, const void *src, void *dst);
/* A whole run of chunks: src (len bytes) must decode to exactly raw bytes at dst. */
int rm_zchunk_decode_all(const void *src, size_t len, void *dst, size_t raw);

#endif
