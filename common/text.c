/* Escaping a peer's text (text.h). */
#include "text.h"

char *rm_text_escape(char *dst, size_t cap, const char *src)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;
	for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
		int plain = *p >= 0x20 && *p < 0x7f && *p != '\\';
		size_t need = plain ? 1 : 4;
		if (n + need >= cap)
			break;
		if (plain) {
			dst[n++] = (char)*p;
		} else {
			dst[n++] = '\\';
			dst[n++] = 'x';
			dst[n++] = hex[*p >> 4];
			dst[n++] = hex[*p & 15];
		}
	}
	dst[n] = 0;
	return dst;
}
