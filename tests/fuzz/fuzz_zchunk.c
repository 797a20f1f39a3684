/* Fuzz target `zchunk` (common/zchunk.c), over a compressed copy's bytes as a peer sends
 * them: the first 4 bytes (little-endian) are the raw length the copy expects (at most
 * 4 MiB here), the rest the run of chunks. Whatever decodes must fill exactly that length,
 * and encoding it again must decode to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "zchunk.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 4)
		return 0;
	size_t raw = ((size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24) % (4u << 20);
	if (raw == 0)
		return 0;
	uint8_t *out = malloc(raw);
	if (!out)
		return 0;
	if (rm_zchunk_decode_all(data + 4, size - 4, out, raw) == 0) {
		size_t cap = (raw / RM_ZCHUNK_MAX + 1) * rm_zchunk_bound(RM_ZCHUNK_MAX), off = 0;
		uint8_t *enc = malloc(cap), *back = malloc(raw);
		for (size_t done = 0; enc && back && done < raw;) {
			size_t n = raw - done < RM_ZCHUNK_MAX ? raw - done : RM_ZCHUNK_MAX, got;
			if (rm_zchunk_encode(out + done, n, enc + off, cap - off, 0, &got))
				abort();
			off += got;
			done += n;
		}
		if (enc && back && (rm_zchunk_decode_all(enc, off, back, raw) || memcmp(out, back, raw)))
			abort();
		free(back);
		free(enc);
	}
	free(out);
	return 0;
}
