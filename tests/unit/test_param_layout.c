/* Kernel parameter layouts from the GPU host (frontend/param_layout.h): those a kernel can
 * have are taken, with the bytes they span; those no kernel has are refused. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "expect.h"
#include "param_layout.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))

static int check(const size_t *off, const size_t *len, size_t n, size_t limit, size_t *end)
{
	char why[200];
	why[0] = 0;
	int err = rm_param_layout_check(off, len, n, limit, end, why, sizeof(why));
	EXPECT(err == 0 || why[0]);
	return err;
}

/* rm_param_layout_decode of these arrays: 0 taken, 1 refused as a layout, or its error.
 * A layout taken must be the same layout, and span what rm_param_layout_check says. */
static int decode(const size_t *off, const size_t *len, size_t n_off, size_t n_len, int too_many)
{
	uint64_t o[RM_MAX_KERNEL_PARAMS + 1], l[RM_MAX_KERNEL_PARAMS + 1];
	for (size_t i = 0; i < n_off; i++)
		o[i] = off[i];
	for (size_t i = 0; i < n_len; i++)
		l[i] = len[i];
	char why[200] = "";
	struct rm_param_layout *got = NULL;
	int err = rm_param_layout_decode(o, n_off, l, n_len, too_many, RM_PARAM_LIMIT, &got, why, sizeof(why));
	EXPECT(err == 0 || (why[0] && !got));
	if (err)
		return err;
	EXPECT(got && (!got->refused || why[0]) && (!got->refused || (got->count == 0 && got->size == 0)));
	int refused = got->refused;
	if (!refused) {
		size_t end;
		EXPECT(got->count == n_off && check(off, len, n_off, RM_PARAM_LIMIT, &end) == 0 && got->size == end);
		for (size_t i = 0; i < got->count; i++)
			EXPECT(got->offset[i] == off[i] && got->len[i] == len[i]);
	}
	free(got);
	return refused;
}

int main(void)
{
	size_t end;
	EXPECT(rm_param_limit(12010) == 32764 && rm_param_limit(12000) == 4096 && rm_param_limit(0) == 4096);

	/* Taken: none; pointer, int, pointer; char then a double2; a 12-byte float3 then an int;
	 * one struct filling the limit; a 32-byte aligned struct after a char. */
	EXPECT(check(NULL, NULL, 0, RM_PARAM_LIMIT, &end) == 0 && end == 0);
	size_t o1[] = {0, 8, 16}, l1[] = {8, 4, 8};
	EXPECT(check(o1, l1, N(o1), RM_PARAM_LIMIT, &end) == 0 && end == 24);
	size_t o2[] = {0, 16}, l2[] = {1, 16};
	EXPECT(check(o2, l2, N(o2), RM_PARAM_LIMIT, &end) == 0 && end == 32);
	size_t o3[] = {0, 12}, l3[] = {12, 4};
	EXPECT(check(o3, l3, N(o3), RM_PARAM_LIMIT, &end) == 0 && end == 16);
	size_t o4[] = {0}, l4[] = {RM_PARAM_LIMIT};
	EXPECT(check(o4, l4, N(o4), RM_PARAM_LIMIT, &end) == 0 && end == RM_PARAM_LIMIT);
	size_t o5[] = {0, 32}, l5[] = {1, 64};
	EXPECT(check(o5, l5, N(o5), RM_PARAM_LIMIT, &end) == 0 && end == 96);

	/* Gaps, and a first one not at 0, as real kernels have (cuDNN's on an H100: 2880
	 * bytes at offset 48): accepted, the gaps packed as zeros. */
	size_t og[] = {48}, lg[] = {2880};
	EXPECT(check(og, lg, N(og), RM_PARAM_LIMIT, &end) == 0 && end == 48 + 2880);
	size_t oh[] = {0, 4096}, lh[] = {8, 8};
	EXPECT(check(oh, lh, N(oh), RM_PARAM_LIMIT, &end) == 0 && end == 4104);

	/* Refused: overlapping (issue 37: every parameter at 0); out of order; an empty one;
	 * past the limit, also by wrapping; past the old limit on an old driver; more than the
	 * most parameters. */
	size_t o6[] = {0, 0}, l6[] = {8, 8};
	EXPECT(check(o6, l6, N(o6), RM_PARAM_LIMIT, &end) && end == 0);
	size_t o7[] = {8, 0}, l7[] = {8, 8};
	EXPECT(check(o7, l7, N(o7), RM_PARAM_LIMIT, &end));
	size_t o11[] = {0, 8}, l11[] = {8, 0};
	EXPECT(check(o11, l11, N(o11), RM_PARAM_LIMIT, &end));
	size_t o12[] = {0}, l12[] = {RM_PARAM_LIMIT + 1};
	EXPECT(check(o12, l12, N(o12), RM_PARAM_LIMIT, &end));
	size_t o13[] = {0, SIZE_MAX - 7}, l13[] = {8, 8};
	EXPECT(check(o13, l13, N(o13), RM_PARAM_LIMIT, &end));
	size_t o14[] = {0}, l14[] = {(size_t)1 << 63};
	EXPECT(check(o14, l14, N(o14), RM_PARAM_LIMIT, &end));
	size_t o15[] = {0}, l15[] = {8192};
	EXPECT(check(o15, l15, N(o15), rm_param_limit(11080), &end));
	static size_t o16[RM_MAX_KERNEL_PARAMS + 1], l16[RM_MAX_KERNEL_PARAMS + 1];
	for (size_t i = 0; i < N(o16); i++)
		o16[i] = i * 8, l16[i] = 8;
	EXPECT(check(o16, l16, RM_MAX_KERNEL_PARAMS, RM_PARAM_LIMIT, &end) == 0 && end == 8 * RM_MAX_KERNEL_PARAMS);
	EXPECT(check(o16, l16, RM_MAX_KERNEL_PARAMS + 1, RM_PARAM_LIMIT, &end));

	/* A reply of rmFuncGetParamLayout: taken; refused as a layout (above), the parameters
	 * unlisted; refused as a reply no host sends (offsets without sizes, more than the
	 * bound, too_many with parameters listed). */
	EXPECT(decode(o1, l1, N(o1), N(l1), 0) == 0);
	EXPECT(decode(o6, l6, N(o6), N(l6), 0) == 1);
	EXPECT(decode(o13, l13, N(o13), N(l13), 0) == 1);
	EXPECT(decode(NULL, NULL, 0, 0, 1) == 1);
	EXPECT(decode(o1, l1, N(o1), N(l1) - 1, 0) == -EPROTO);
	EXPECT(decode(o16, l16, N(o16), N(l16), 0) == -EPROTO);
	EXPECT(decode(o1, l1, N(o1), N(l1), 1) == -EPROTO);
	return failures ? 1 : 0;
}
