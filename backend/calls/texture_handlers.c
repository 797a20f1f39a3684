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
		return rm_session_check_range(s, d->res.linear.devPtr, d->res.linear.sizeInBytes);
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

CUresult rm_body_cuTexObjectCreate(struct rm_channel *s, CUtexObject *pTexObject, const CUDA_RESOURCE_DESC *pResDesc,
				   const CUDA_TEXTURE_DESC *pTexDesc, const CUDA_RESOURCE_VIEW_DESC *pResViewDesc)
{
	CUresult r = check_resource(s, pResDesc);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuTexObjectCreate(pTexObject, pResDesc, pTexDesc, pResViewDesc);
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
