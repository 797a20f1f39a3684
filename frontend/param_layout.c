/* param_layout.c - checks a kernel's parameter layout from the GPU host (param_layout.h). */
#include "param_layout.h"

#include <errno.h>
#include <stdio.h>

size_t rm_param_limit(int driver_version)
{
	return driver_version >= 12010 ? RM_PARAM_LIMIT : RM_PARAM_LIMIT_OLD;
}

int rm_param_layout_check(const size_t *offset, const size_t *len, size_t n, size_t limit, size_t *end,
			  char *why, size_t whylen)
{
	size_t at = 0; /* the end of the parameters before i */
	*end = 0;
	if (n > RM_PARAM_MAX_COUNT) {
		snprintf(why, whylen, "more than %d parameters", RM_PARAM_MAX_COUNT);
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
