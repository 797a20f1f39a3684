/* varint.h - protobuf's base-128 varint, as packed on the wire. */
#ifndef REMORA_VARINT_H
#define REMORA_VARINT_H

#include <stddef.h>
#include <stdint.h>

/* Writes v into out (10 bytes at most): how many bytes. */
static inline size_t rm_varint_put(uint8_t *out, uint64_t v)
{
	size_t n = 0;
	do {
		out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

#endif
