/* Byte sizes as people write them: digits with an optional K, M, G or T suffix
 * (powers of 1024), optionally followed by B or iB: 64M, 8GiB, 4096. */
#ifndef REMORA_SIZE_H
#define REMORA_SIZE_H

#include <stdint.h>

/* 0 and *out set, or -1 for a malformed or overflowing text. */
int rm_parse_size(const char *s, uint64_t *out);

#endif
