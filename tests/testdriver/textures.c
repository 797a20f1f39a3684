/* Texture and surface objects: a table of what each was made with, numbered from 1, which
 * the CPU kernels (kernels.c, texFetch2D and surfWrite2D) read through. Modelled: textures of
 * arrays and of pitched memory, point filtering, unnormalized coordinates, element reads,
 * the clamp and border address modes; surfaces of arrays. Not modelled, refused at creation
 * with CUDA_ERROR_NOT_SUPPORTED: linear filtering, normalized coordinates, the wrap and
 * mirror modes, sRGB, mipmapped arrays as textures; and no CPU kernel reads a linear
 * (tex1Dfetch) texture or anything but one-channel float texels. */
#include "testdriver.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define TD_MAX_OBJECTS 4096

struct object {
	bool used, surface;
	CUDA_RESOURCE_DESC res;
	CUDA_TEXTURE_DESC tex;
	CUDA_RESOURCE_VIEW_DESC view;
};

static struct object objects[TD_MAX_OBJECTS + 1]; /* [0] unused: 0 is no object */
static pthread_mutex_t objects_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult check_resource(const CUDA_RESOURCE_DESC *r)
{
	switch (r->resType) {
	case CU_RESOURCE_TYPE_ARRAY:
		return td_array_of(r->res.array.hArray) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	case CU_RESOURCE_TYPE_LINEAR:
		return td_device_range_ok((void *)(uintptr_t)r->res.linear.devPtr, r->res.linear.sizeInBytes)
			       ? CUDA_SUCCESS
			       : CUDA_ERROR_INVALID_VALUE;
	case CU_RESOURCE_TYPE_PITCH2D:
		if (!r->res.pitch2D.width || !r->res.pitch2D.height || r->res.pitch2D.pitchInBytes < r->res.pitch2D.width)
			return CUDA_ERROR_INVALID_VALUE;
		return td_device_range_ok((void *)(uintptr_t)r->res.pitch2D.devPtr,
					  r->res.pitch2D.pitchInBytes * r->res.pitch2D.height)
			       ? CUDA_SUCCESS
			       : CUDA_ERROR_INVALID_VALUE;
	case CU_RESOURCE_TYPE_MIPMAPPED_ARRAY:
		return CUDA_ERROR_NOT_SUPPORTED;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

static CUresult add(unsigned long long *out, const struct object *o)
{
	pthread_mutex_lock(&objects_lock);
	unsigned long long i = 1;
	while (i <= TD_MAX_OBJECTS && objects[i].used)
		i++;
	if (i <= TD_MAX_OBJECTS)
		objects[i] = *o;
	pthread_mutex_unlock(&objects_lock);
	if (i > TD_MAX_OBJECTS)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = i;
	return CUDA_SUCCESS;
}

/* A copy of object v of its sort: false if there is none. */
static bool find(unsigned long long v, bool surface, struct object *out)
{
	pthread_mutex_lock(&objects_lock);
	bool ok = v && v <= TD_MAX_OBJECTS && objects[v].used && objects[v].surface == surface;
	if (ok)
		*out = objects[v];
	pthread_mutex_unlock(&objects_lock);
	return ok;
}

static CUresult drop(unsigned long long v, bool surface)
{
	pthread_mutex_lock(&objects_lock);
	bool ok = v && v <= TD_MAX_OBJECTS && objects[v].used && objects[v].surface == surface;
	if (ok)
		objects[v].used = false;
	pthread_mutex_unlock(&objects_lock);
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuTexObjectCreate(CUtexObject *out, const CUDA_RESOURCE_DESC *res, const CUDA_TEXTURE_DESC *tex,
				     const CUDA_RESOURCE_VIEW_DESC *view)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out || !res || !tex)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = check_resource(res)) != CUDA_SUCCESS)
		return rc;
	for (int i = 0; i < 2; i++) /* the third dimension's mode is never read (no 3-D fetch) */
		if (tex->addressMode[i] != CU_TR_ADDRESS_MODE_CLAMP && tex->addressMode[i] != CU_TR_ADDRESS_MODE_BORDER)
			return CUDA_ERROR_NOT_SUPPORTED;
	if (tex->filterMode != CU_TR_FILTER_MODE_POINT || (tex->flags & (CU_TRSF_NORMALIZED_COORDINATES | CU_TRSF_SRGB)))
		return CUDA_ERROR_NOT_SUPPORTED;
	struct object o = {.used = true, .res = *res, .tex = *tex};
	if (view)
		o.view = *view;
	return add(out, &o);
}

TD_EXPORT CUresult cuTexObjectDestroy(CUtexObject v)
{
	return drop(v, false);
}

TD_EXPORT CUresult cuTexObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUtexObject v)
{
	struct object o;
	if (!out || !find(v, false, &o))
		return CUDA_ERROR_INVALID_VALUE;
	*out = o.res;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexObjectGetTextureDesc(CUDA_TEXTURE_DESC *out, CUtexObject v)
{
	struct object o;
	if (!out || !find(v, false, &o))
		return CUDA_ERROR_INVALID_VALUE;
	*out = o.tex;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexObjectGetResourceViewDesc(CUDA_RESOURCE_VIEW_DESC *out, CUtexObject v)
{
	struct object o;
	if (!out || !find(v, false, &o))
		return CUDA_ERROR_INVALID_VALUE;
	*out = o.view;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuSurfObjectCreate(CUsurfObject *out, const CUDA_RESOURCE_DESC *res)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out || !res || res->resType != CU_RESOURCE_TYPE_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = check_resource(res)) != CUDA_SUCCESS)
		return rc;
	struct object o = {.used = true, .surface = true, .res = *res};
	return add(out, &o);
}

TD_EXPORT CUresult cuSurfObjectDestroy(CUsurfObject v)
{
	return drop(v, true);
}

TD_EXPORT CUresult cuSurfObjectGetResourceDesc(CUDA_RESOURCE_DESC *out, CUsurfObject v)
{
	struct object o;
	if (!out || !find(v, true, &o))
		return CUDA_ERROR_INVALID_VALUE;
	*out = o.res;
	return CUDA_SUCCESS;
}

/* The float texel of a 2-D texture at (u, v), point-sampled: CUDA_ERROR_NOT_SUPPORTED for
 * what is not modelled, CUDA_ERROR_ILLEGAL_ADDRESS for no texture. */
CUresult td_texture_fetch2d(unsigned long long tex, float u, float v, float *out)
{
	struct object o;
	if (!find(tex, false, &o))
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	const char *base;
	size_t w, h, pitch;
	CUarray_format format;
	unsigned channels;
	if (o.res.resType == CU_RESOURCE_TYPE_ARRAY) {
		struct td_array *a = td_array_of(o.res.res.array.hArray);
		if (!a)
			return CUDA_ERROR_ILLEGAL_ADDRESS;
		base = a->data, w = a->width, h = a->height, pitch = a->width * a->elem;
		format = a->desc.Format, channels = a->desc.NumChannels;
	} else if (o.res.resType == CU_RESOURCE_TYPE_PITCH2D) {
		base = (const char *)(uintptr_t)o.res.res.pitch2D.devPtr;
		w = o.res.res.pitch2D.width, h = o.res.res.pitch2D.height, pitch = o.res.res.pitch2D.pitchInBytes;
		format = o.res.res.pitch2D.format, channels = o.res.res.pitch2D.numChannels;
	} else {
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (format != CU_AD_FORMAT_FLOAT || channels != 1)
		return CUDA_ERROR_NOT_SUPPORTED;
	long long x = (long long)floorf(u), y = (long long)floorf(v);
	bool xout = x < 0 || x >= (long long)w, yout = y < 0 || y >= (long long)h;
	if (xout || yout) {
		if ((xout && o.tex.addressMode[0] == CU_TR_ADDRESS_MODE_BORDER) ||
		    (yout && o.tex.addressMode[1] == CU_TR_ADDRESS_MODE_BORDER)) {
			*out = o.tex.borderColor[0];
			return CUDA_SUCCESS;
		}
		x = x < 0 ? 0 : x >= (long long)w ? (long long)w - 1 : x;
		y = y < 0 ? 0 : y >= (long long)h ? (long long)h - 1 : y;
	}
	memcpy(out, base + (size_t)y * pitch + (size_t)x * 4, 4);
	return CUDA_SUCCESS;
}

/* Element (x, y) of a surface's array for a 4-byte write: its address, or NULL out of range. */
void *td_surface_element(unsigned long long surf, long long xbytes, long long y, size_t size)
{
	struct object o;
	if (!find(surf, true, &o))
		return NULL;
	struct td_array *a = td_array_of(o.res.res.array.hArray);
	size_t row = a ? a->width * a->elem : 0;
	if (!a || xbytes < 0 || y < 0 || (size_t)xbytes + size > row || (size_t)y >= a->height)
		return NULL;
	return a->data + (size_t)y * row + (size_t)xbytes;
}
