/* Legacy texture references (typed bodies, proto/api.spec): the pitched memory a reference
 * is bound to must be the client's, every row of it. The other calls are generated: their
 * handles are checked as the client's and a linear binding's bytes as its memory. */
#include "arrays.h"
#include "dispatch.h"

/* Height rows of Width elements, Pitch apart: the last ends at Pitch * (Height - 1) + its bytes. */
static CUresult check_pitched(struct rm_channel *s, const CUDA_ARRAY_DESCRIPTOR *desc, CUdeviceptr dptr, size_t Pitch)
{
	if (!desc || !desc->Width || !desc->Height)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t elem = rm_format_bytes(desc->Format), rows, bytes, len;
	if (!elem)
		return rm_unsupported_use("a pitched texture reference of a packed or compressed format");
	if (__builtin_mul_overflow((uint64_t)desc->Height - 1, (uint64_t)Pitch, &rows) ||
	    __builtin_mul_overflow(elem, (uint64_t)desc->NumChannels, &elem) ||
	    __builtin_mul_overflow(elem, (uint64_t)desc->Width, &bytes) || __builtin_add_overflow(rows, bytes, &len))
		return CUDA_ERROR_INVALID_VALUE;
	return rm_session_check_range(s, dptr, len);
}

CUresult rm_body_cuTexRefSetAddress2D_v3(struct rm_channel *s, CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR *desc,
					  CUdeviceptr dptr, size_t Pitch)
{
	CUresult r = check_pitched(s, desc, dptr, Pitch);
	return r == CUDA_SUCCESS ? rm_drv_cuTexRefSetAddress2D_v3(hTexRef, desc, dptr, Pitch) : r;
}

CUresult rm_body_cuTexRefSetAddress2D_v2(struct rm_channel *s, CUtexref hTexRef, const CUDA_ARRAY_DESCRIPTOR *desc,
					  CUdeviceptr dptr, size_t Pitch)
{
	CUresult r = check_pitched(s, desc, dptr, Pitch);
	return r == CUDA_SUCCESS ? rm_drv_cuTexRefSetAddress2D_v2(hTexRef, desc, dptr, Pitch) : r;
}
