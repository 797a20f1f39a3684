/* What the array and texture bodies share (array_handlers.c, texture_handlers.c). */
#ifndef REMORA_ARRAYS_H
#define REMORA_ARRAYS_H

#include <cuda.h>
#include <stdint.h>

/* Bytes of one channel of an element of format f; 0 for the formats not listed (packed,
 * compressed and video formats). */
uint64_t rm_format_bytes(CUarray_format f);

#endif
