/* Base64 (base64.h). Input is a peer's: every length is derived from what is read, never trusted. */
#include "base64.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *rm_base64_encode(const unsigned char *in, size_t len)
{
	if (len > (SIZE_MAX - 1) / 4 * 3 - 2)
		return NULL;
	char *out = malloc((len + 2) / 3 * 4 + 1), *o = out;
	if (!out)
		return NULL;
	for (size_t i = 0; i < len; i += 3) {
		unsigned v = (unsigned)in[i] << 16 | (i + 1 < len ? (unsigned)in[i + 1] << 8 : 0) |
			     (i + 2 < len ? in[i + 2] : 0);
		*o++ = alphabet[v >> 18 & 63];
		*o++ = alphabet[v >> 12 & 63];
		*o++ = i + 1 < len ? alphabet[v >> 6 & 63] : '=';
		*o++ = i + 2 < len ? alphabet[v & 63] : '=';
	}
	*o = 0;
	return out;
}

static int sextet(char c)
{
	const char *p = c ? strchr(alphabet, c) : NULL;
	return p ? (int)(p - alphabet) : -1;
}

char *rm_base64_decode_text(const char *in)
{
	size_t chars = strcspn(in, "="), pad = strspn(in + chars, "=");
	if (in[chars + pad] || pad > 2 || (pad && (chars + pad) % 4) || chars % 4 == 1)
		return NULL;
	char *out = malloc(chars / 4 * 3 + (chars % 4 ? chars % 4 - 1 : 0) + 1);
	if (!out)
		return NULL;
	size_t n = 0;
	uint32_t v = 0;
	int bits = 0;
	for (size_t i = 0; i < chars; i++) {
		int s = sextet(in[i]);
		if (s < 0)
			goto bad;
		v = (v << 6 | (uint32_t)s) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (!(out[n++] = (char)(v >> bits & 0xff)))
				goto bad;
		}
	}
	out[n] = 0;
	return out;
bad:
	free(out);
	return NULL;
}
