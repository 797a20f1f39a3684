/* Fuzz target `param_layout`: a rmFuncGetParamLayout reply as the client decodes it
 * (frontend/param_layout.c), from a server it does not trust. Input: the first byte says
 * the host's driver (even: CUDA 12.1 or later, a 32764-byte limit; odd: before, 4096); the
 * rest is the reply message, remora.FuncGetParamLayoutReply. A layout taken must be one a
 * kernel can have (param_layout.h): at most RM_MAX_KERNEL_PARAMS parameters, each of a byte
 * or more, in order without overlap, all inside the limit, spanning exactly its size. */
#include "../../frontend/param_layout.c"

#include <errno.h>

#include "remora.pb-c.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	size_t limit = rm_param_limit(data[0] & 1 ? 12000 : 12010);
	Remora__FuncGetParamLayoutReply *rep = remora__func_get_param_layout_reply__unpack(NULL, size - 1, data + 1);
	if (!rep)
		return 0;
	struct rm_param_layout *l = NULL;
	char why[200];
	int err = rm_param_layout_decode(rep->offset, rep->n_offset, rep->size, rep->n_size, rep->too_many, limit, &l,
					 why, sizeof(why));
	if (err == 0) {
		if (!l || l->count > RM_MAX_KERNEL_PARAMS || (l->refused && (l->count || l->size)))
			abort();
		size_t at = 0;
		for (size_t i = 0; i < l->count; i++) {
			if (l->len[i] == 0 || l->offset[i] < at || l->offset[i] > limit || l->len[i] > limit - l->offset[i] ||
			    l->offset[i] != rep->offset[i] || l->len[i] != rep->size[i])
				abort();
			at = l->offset[i] + l->len[i];
		}
		if (l->size != at)
			abort();
	} else if (l || (err != -EPROTO && err != -ENOMEM) ||
		   (err == -EPROTO && rep->n_offset == rep->n_size && rep->n_offset <= RM_MAX_KERNEL_PARAMS &&
		    !(rep->too_many && rep->n_offset))) {
		abort();
	}
	free(l);
	remora__func_get_param_layout_reply__free_unpacked(rep, NULL);
	return 0;
}
