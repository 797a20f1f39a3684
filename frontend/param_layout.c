/* param_layout.c - checks a kernel's parameter layout from the GPU host (param_layout.h). */
#include "param_layout.h"

#include <errno.h>
#include <stdio.h>

size_t rm_param_limit(int driver_version)
{
	return driver_version >= 12010 ? RM_PARAM_LIMIT : RM_PARAM_LIMIT_OLD;
}

/* The largest power of two dividing x, at most RM_PARAM_MAX_ALIGN (x 0: that). */
static size_t alignment_of(size_t x)
{
	size_t a = x & -x;
	return !a || a > RM_PARAM_MAX_ALIGN ? RM_PARAM_MAX_ALIGN : a;
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
		/* Where the ABI puts it: the first offset at or after `at` aligned to the
		 * parameter's alignment, which divides its offset and is at most RM_PARAM_MAX_ALIGN. */
		if (offset[i] < at || offset[i] - at >= alignment_of(offset[i])) {
			snprintf(why, whylen, "parameter %zu at offset %zu, %zu bytes, %s the parameters before it, which "
				 "end at %zu", i, offset[i], len[i], offset[i] < at ? "overlaps" : "does not follow", at);
			return -EINVAL;
		}
		at = offset[i] + len[i];
	}
	*end = at;
	return 0;
}
