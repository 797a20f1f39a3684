/* Base64 (RFC 4648, standard alphabet), as etcd's JSON gateway carries keys and values. */
#ifndef REMORA_POOL_BASE64_H
#define REMORA_POOL_BASE64_H

#include <stddef.h>

/* Encodes len bytes into a malloc'd NUL-terminated string, padded; NULL when out of memory. */
char *rm_base64_encode(const unsigned char *in, size_t len);

/* Decodes base64 text, padded or not, into a malloc'd NUL-terminated string. NULL when
 * out of memory or the text is not base64: a character outside the alphabet, data after
 * padding, a length no encoding has, or a decoded NUL (the pool's keys and values are text). */
char *rm_base64_decode_text(const char *in);

#endif
