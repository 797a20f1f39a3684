/* The client's compressed copies (common/zchunk.h, docs/performance.md "Compression"):
 * whether a copy goes compressed, its bytes encoded for the daemon, and a compressed
 * reply's bytes decoded into the program's buffer. */
#ifndef REMORA_FRONTEND_COMPRESS_H
#define REMORA_FRONTEND_COMPRESS_H

#include <stddef.h>
#include <stdint.h>

struct rm_link;

/* The hello's answer: whether the daemon takes compressed copies, and the transport's
 * scheme and address: unix sockets, shared memory and loopback addresses are local, never
 * compressed (a loaded loopback may measure slow). */
void rm_compress_peer(int daemon_takes, const char *scheme, const char *addr);
/* Whether a copy of n bytes (to_host 1: device to host) should go compressed: REMORA_COMPRESS,
 * the daemon, the link and its measured rate in that direction. */
int rm_compress_for(int to_host, uint64_t n);
/* The rate a compressed copy of n bytes must beat (rm_copy_links_plain_bps; 0 with
 * REMORA_COMPRESS=always, so that the shrink alone decides). */
double rm_compress_plain_bps(int to_host, uint64_t n);
/* A copy of n bytes that rm_compress_for let try went compressed (1) or raw (0): after a
 * raw one, the direction's next copies skip trying for a while (compress.c). */
void rm_compress_outcome(int to_host, int compressed, uint64_t n);
/* Encodes n bytes of src into *out (malloc'd, *len bytes): 0, or 1 when the sample (the
 * first chunk) does not shrink enough (nothing allocated: the copy goes raw), or -errno. */
int rm_compress_encode(const void *src, uint64_t n, uint8_t **out, size_t *len);

/* A device-to-host copy's reply bulk, taken compressed (rm_rpc_call.read_bulk). */
struct rm_compress_in {
	uint8_t *dst;
	uint64_t n;
	int compressed; /* out: the bulk was compressed */
};
/* Reads a reply bulk of len bytes (at most in->n; exactly n: raw) into in->dst: 0, or
 * -EPROTO for chunks out of bounds or that do not decode to their length. */
int rm_compress_read_bulk(void *in, struct rm_link *l, uint64_t len);

#endif
