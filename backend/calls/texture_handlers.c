/* Texture and surface objects (typed bodies, proto/api.spec). The resource an object names
 * must be the client's: an array or mipmapped array of its own, or linear or pitched memory
 * whose every byte it owns. An object is recorded as the client's (its value: CUtexObject
 * and CUsurfObject are integers, not handles the generator knows) and every later call
 * names one of its own. */
#include "arrays.h"
#include "dispatch.h"

#include "log.h"

static CUresult check_resource(struct rm_channel *s, const CUDA_RESOURCE_DESC *d)
{
	void *real;
	switch (d->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		return rm_session_use(s, RM_H_ARRAY, (uint64_t)(uintptr_t)d->res.array.hArray, &real);
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		return rm_session_use(s, RM_H_MIPMAPPED_ARRAY, (uint64_t)(uintptr_t)d->res.mipmap.hMipmappedArray, &real);
	case CU_RESOURCE_TYPE_LINEAR:
		return rm_session_owned_run(s, d->res.linear.devPtr, 1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_RESOURCE_TYPE_PITCH2D: {
		/* Rows of width elements, pitch apart: the last ends at pitch * (height - 1) + its bytes. */
		uint64_t elem = rm_format_bytes(d->res.pitch2D.format), rows, bytes, len;
		if (!elem)
			return rm_unsupported_use("a pitched texture of a packed or compressed format");
		if (!d->res.pitch2D.height || !d->res.pitch2D.width)
			return CUDA_ERROR_INVALID_VALUE;
		if (__builtin_mul_overflow((uint64_t)d->res.pitch2D.height - 1, (uint64_t)d->res.pitch2D.pitchInBytes, &rows) ||
		    __builtin_mul_overflow(elem, (uint64_t)d->res.pitch2D.numChannels, &elem) ||
		    __builtin_mul_overflow(elem, (uint64_t)d->res.pitch2D.width, &bytes) ||
		    __builtin_add_overflow(rows, bytes, &len))
			return CUDA_ERROR_INVALID_VALUE;
		return rm_session_check_range(s, d->res.pitch2D.devPtr, len);
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult owned(struct rm_channel *s, enum rm_handle_kind kind, unsigned long long v)
{
	return rm_session_find(s, kind, v, NULL) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

/* A linear texture reaching past the client's memory (natively it reads whatever lies
 * there, here another client's memory may): it ends where the client's memory does, in
 * whole elements, so that a fetch past it reads 0, as one past the texture's end does. */
static CUresult clamp_linear(struct rm_channel *s, CUDA_RESOURCE_DESC *d)
{
	uint64_t want = d->res.linear.sizeInBytes, elem = rm_format_bytes(d->res.linear.format);
	uint64_t run = rm_session_owned_run(s, d->res.linear.devPtr, want);
	if (run == want)
		return CUDA_SUCCESS;
	if (!elem || __builtin_mul_overflow(elem, (uint64_t)d->res.linear.numChannels, &elem) || !elem || run < elem)
		return rm_session_check_range(s, d->res.linear.devPtr, want); /* refused, with its line */
	d->res.linear.sizeInBytes = (size_t)(run - run % elem);
	rm_session_log(s, RM_LOG_INFO, "a linear texture of %llu bytes at 0x%llx ends at the client's memory's end, after "
		       "%llu bytes (fetches past it read 0)", (unsigned long long)want,
		       (unsigned long long)d->res.linear.devPtr, (unsigned long long)d->res.linear.sizeInBytes);
	return CUDA_SUCCESS;
}

CUresult rm_body_cuTexObjectCreate(struct rm_channel *s, CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
				   const CUDA_TEXTURE_DESC *pTexDesc, const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
	CUDA_RESOURCE_DESC res = *pResDesc;
	CUresult r = check_resource(s, &res);
	if (r == CUDA_SUCCESS && res.resType == CU_RESOURCE_TYPE_LINEAR)
		r = clamp_linear(s, &res);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuTexObjectCreate(pTexObject, &res, pTexDesc, pResViewDesc);
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_TEXOBJECT, *pTexObject, 0, 0);
	return r;
}

CUresult rm_body_cuTexObjectDestroy(struct rm_channel *s, CUtexObject texObject)
{
	if (!rm_session_take(s, RM_H_TEXOBJECT, texObject, NULL))
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = rm_drv_cuTexObjectDestroy(texObject);
	if (r != CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_TEXOBJECT, texObject, 0, 0);
	return r;
}

CUresult rm_body_cuTexObjectGetResourceDesc(struct rm_channel *s, CUDA_RESOURCE_DESC *pResDesc, CUtexObject texObject)
{
	CUresult r = owned(s, RM_H_TEXOBJECT, texObject);
	return r == CUDA_SUCCESS ? rm_drv_cuTexObjectGetResourceDesc(pResDesc, texObject) : r;
}

CUresult rm_body_cuTexObjectGetTextureDesc(struct rm_channel *s, CUDA_TEXTURE_DESC *pTexDesc, CUtexObject texObject)
{
	CUresult r = owned(s, RM_H_TEXOBJECT, texObject);
	return r == CUDA_SUCCESS ? rm_drv_cuTexObjectGetTextureDesc(pTexDesc, texObject) : r;
}

CUresult rm_body_cuTexObjectGetResourceViewDesc(struct rm_channel *s, CUDA_RESOURCE_VIEW_DESC *pResViewDesc,
						CUtexObject texObject)
{
	CUresult r = owned(s, RM_H_TEXOBJECT, texObject);
	return r == CUDA_SUCCESS ? rm_drv_cuTexObjectGetResourceViewDesc(pResViewDesc, texObject) : r;
}

/* A surface names an array. */
CUresult rm_body_cuSurfObjectCreate(struct rm_channel *s, CUsurfObject *pSurfObject, const CUDA_RESOURCE_DESC *pResDesc)
{
	CUresult r = pResDesc->resType == CU_RESOURCE_TYPE_ARRAY ? check_resource(s, pResDesc) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuSurfObjectCreate(pSurfObject, pResDesc);
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_SURFOBJECT, *pSurfObject, 0, 0);
	return r;
}

CUresult rm_body_cuSurfObjectDestroy(struct rm_channel *s, CUsurfObject surfObject)
{
	if (!rm_session_take(s, RM_H_SURFOBJECT, surfObject, NULL))
		return CUDA_ERROR_INVALID_HANDLE;
	CUresult r = rm_drv_cuSurfObjectDestroy(surfObject);
	if (r != CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_SURFOBJECT, surfObject, 0, 0);
	return r;
}

CUresult rm_body_cuSurfObjectGetResourceDesc(struct rm_channel *s, CUDA_RESOURCE_DESC *pResDesc, CUsurfObject surfObject)
{
	CUresult r = owned(s, RM_H_SURFOBJECT, surfObject);
	return r == CUDA_SUCCESS ? rm_drv_cuSurfObjectGetResourceDesc(pResDesc, surfObject) : r;
}
