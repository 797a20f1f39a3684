/* Arrays and mipmapped arrays (typed bodies, proto/api.spec): the client's handles, charged
 * to its quota before they are made, at a bound of their size from the descriptor, and
 * uncharged when destroyed (or released with the session, backend/worker/release.c). */
#include "arrays.h"
#include "deferred.h"
#include "dispatch.h"

uint64_t rm_format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8:
	case CU_AD_FORMAT_SIGNED_INT8:
		return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16:
	case CU_AD_FORMAT_SIGNED_INT16:
	case CU_AD_FORMAT_HALF:
		return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32:
	case CU_AD_FORMAT_SIGNED_INT32:
	case CU_AD_FORMAT_FLOAT:
		return 4;
	default:
		return 0;
	}
}

/* What an array of d is charged: its elements (of 16 bytes a channel for the formats not
 * listed), each dimension at least 1, rounded up to a
 * 2 MiB page as the driver allocates; a mipmapped array's levels together are under twice
 * level 0. CUDA_ERROR_INVALID_VALUE when it overflows. */
static CUresult array_charge(const CUDA_ARRAY3D_DESCRIPTOR *d, int mipmapped, uint64_t *out)
{
	uint64_t n = rm_format_bytes(d->Format), page = 2u << 20;
	if (!n) /* 16, the most an element of any other format takes */
		n = 16;
	uint64_t dims[] = {d->Width, d->Height ? d->Height : 1, d->Depth ? d->Depth : 1, d->NumChannels ? d->NumChannels : 1};
	for (int i = 0; i < 4; i++)
		if (__builtin_mul_overflow(n, dims[i], &n))
			return CUDA_ERROR_INVALID_VALUE;
	if ((mipmapped && __builtin_mul_overflow(n, 2, &n)) || n > UINT64_MAX - page)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (n + page - 1) / page * page;
	return CUDA_SUCCESS;
}

/* Charges, makes the array with make, and owns it (kind) or uncharges. */
static CUresult create(struct rm_channel *s, enum rm_handle_kind kind, const CUDA_ARRAY3D_DESCRIPTOR *d, void **out,
		       CUresult (*make)(void **out, const void *arg, unsigned levels), const void *arg, unsigned levels)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	uint64_t bytes;
	CUresult r = array_charge(d, kind == RM_H_MIPMAPPED_ARRAY, &bytes);
	if (r == CUDA_SUCCESS)
		r = rm_session_charge(s, bytes);
	if (r != CUDA_SUCCESS)
		return r;
	r = make(out, arg, levels);
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, kind, (uint64_t)(uintptr_t)*out, bytes, 0);
	else
		rm_session_uncharge(s, bytes);
	return r;
}

static CUresult make_2d(void **out, const void *arg, unsigned levels)
{
	(void)levels;
	return rm_drv_cuArrayCreate_v2((CUarray *)out, arg);
}

static CUresult make_3d(void **out, const void *arg, unsigned levels)
{
	(void)levels;
	return rm_drv_cuArray3DCreate_v2((CUarray *)out, arg);
}

static CUresult make_mipmapped(void **out, const void *arg, unsigned levels)
{
	return rm_drv_cuMipmappedArrayCreate((CUmipmappedArray *)out, arg, levels);
}

CUresult rm_body_cuArrayCreate_v2(struct rm_channel *s, CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *pAllocateArray)
{
	CUDA_ARRAY3D_DESCRIPTOR d = {.Width = pAllocateArray->Width, .Height = pAllocateArray->Height,
				     .Format = pAllocateArray->Format, .NumChannels = pAllocateArray->NumChannels};
	return create(s, RM_H_ARRAY, &d, (void **)pHandle, make_2d, pAllocateArray, 0);
}

CUresult rm_body_cuArray3DCreate_v2(struct rm_channel *s, CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *pAllocateArray)
{
	return create(s, RM_H_ARRAY, pAllocateArray, (void **)pHandle, make_3d, pAllocateArray, 0);
}

CUresult rm_body_cuMipmappedArrayCreate(struct rm_channel *s, CUmipmappedArray *pHandle,
					const CUDA_ARRAY3D_DESCRIPTOR *pMipmappedArrayDesc, unsigned int numMipmapLevels)
{
	return create(s, RM_H_MIPMAPPED_ARRAY, pMipmappedArrayDesc, (void **)pHandle, make_mipmapped,
		      pMipmappedArrayDesc, numMipmapLevels);
}

/* The driver's destroy waits for every client's work in the shared context: the client's
 * own work done, it is made off the client's thread (deferred.h), the array forgotten and
 * uncharged at once. */
static CUresult destroy_after_own_work(struct rm_channel *s, enum rm_deferred_op op, uint64_t v, uint64_t size)
{
	CUresult r = rm_session_synchronize_all(s);
	rm_deferred_release(NULL, op, v, NULL, NULL);
	rm_session_uncharge(s, size);
	return r;
}

/* Only an array of the client's own that is no mipmapped array's level or array's plane. */
CUresult rm_body_cuArrayDestroy(struct rm_channel *s, CUarray hArray)
{
	struct rm_handle h;
	uint64_t v = (uint64_t)(uintptr_t)hArray;
	if (!rm_session_find(s, RM_H_ARRAY, v, &h))
		return CUDA_ERROR_INVALID_HANDLE;
	if (h.parent)
		return CUDA_ERROR_INVALID_VALUE;
	if (!rm_session_take(s, RM_H_ARRAY, v, &h)) /* another thread destroyed it meanwhile */
		return CUDA_ERROR_INVALID_HANDLE;
	return destroy_after_own_work(s, RM_DEFER_ARRAY_DESTROY, v, h.size);
}

/* Its levels are forgotten with it (their parent). */
CUresult rm_body_cuMipmappedArrayDestroy(struct rm_channel *s, CUmipmappedArray hMipmappedArray)
{
	struct rm_handle h;
	uint64_t v = (uint64_t)(uintptr_t)hMipmappedArray;
	if (!rm_session_take(s, RM_H_MIPMAPPED_ARRAY, v, &h))
		return CUDA_ERROR_INVALID_HANDLE;
	return destroy_after_own_work(s, RM_DEFER_MIPMAP_DESTROY, v, h.size);
}
