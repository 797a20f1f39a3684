/* param_layout.c - checks a kernel's parameter layout from the GPU host (param_layout.h). */
#include "param_layout.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

size_t rm_param_limit(int driver_version)
{
	return driver_version >= 12010 ? RM_PARAM_LIMIT : RM_PARAM_LIMIT_OLD;
}

int rm_param_layout_check(const size_t *offset, const size_t *len, size_t n, size_t limit, size_t *end,
			  char *why, size_t whylen)
{
	size_t at = 0; /* the end of the parameters before i */
	*end = 0;
	if (n > RM_MAX_KERNEL_PARAMS) {
		snprintf(why, whylen, "more than %d parameters", RM_MAX_KERNEL_PARAMS);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		/* Checked without overflow: the limit first, then the order. */
		if (len[i] == 0 || len[i] > limit || offset[i] > limit - len[i]) {
			snprintf(why, whylen, "parameter %zu at offset %zu, %zu bytes, is not inside the %zu bytes of a "
				 "kernel's parameters", i, offset[i], len[i], limit);
			return -EINVAL;
		}
		/* After the parameters before it: in increasing order, never overlapping. A gap is
		 * allowed, and packed as zeros: real kernels have them (cuDNN's, on an H100: a first
		 * parameter of 2880 bytes at offset 48). */
		if (offset[i] < at) {
			snprintf(why, whylen, "parameter %zu at offset %zu, %zu bytes, overlaps the parameters before it, "
				 "which end at %zu", i, offset[i], len[i], at);
			return -EINVAL;
		}
		at = offset[i] + len[i];
	}
	*end = at;
	return 0;
}

static size_t to_size(uint64_t v)
{
	return v < SIZE_MAX ? (size_t)v : SIZE_MAX; /* beyond any limit, as it was */
}

int rm_param_layout_decode(const uint64_t *offset, size_t n_offset, const uint64_t *size, size_t n_size,
			   int too_many, size_t limit, struct rm_param_layout **out, char *why, size_t whylen)
{
	*out = NULL;
	if (n_offset != n_size || n_offset > RM_MAX_KERNEL_PARAMS || (too_many && n_offset)) {
		snprintf(why, whylen, "%zu offsets and %zu sizes%s: at most %d, as many of each", n_offset, n_size,
			 too_many ? " of too many parameters" : "", RM_MAX_KERNEL_PARAMS);
		return -EPROTO;
	}
	size_t n = n_offset;
	struct rm_param_layout *l = calloc(1, sizeof(*l) + 2 * n * sizeof(size_t));
	if (!l)
		return -ENOMEM;
	l->offset = (size_t *)(l + 1);
	l->len = l->offset + n;
	for (size_t i = 0; i < n; i++) {
		l->offset[i] = to_size(offset[i]);
		l->len[i] = to_size(size[i]);
	}
	if (too_many) {
		snprintf(why, whylen, "more than %d parameters", RM_MAX_KERNEL_PARAMS);
		l->refused = 1;
	} else if (rm_param_layout_check(l->offset, l->len, n, limit, &l->size, why, whylen)) {
		l->refused = 1;
	} else {
		l->count = n;
	}
	*out = l;
	return 0;
}
