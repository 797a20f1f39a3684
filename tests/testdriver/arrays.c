/* Arrays and mipmapped arrays as host buffers, rows packed (copy2d.c copies to and from
 * them; kernels.c reads them through texture objects). Not modelled: formats other than
 * 8-, 16- and 32-bit integers, half and float of 1, 2 or 4 channels
 * (CUDA_ERROR_NOT_SUPPORTED), sparse and deferred-mapping arrays and their properties,
 * planes (cuArrayGetPlane), a layout other than row-major, any charge of array memory
 * against the device's. */
#include "testdriver.h"

#include <stdlib.h>

struct td_mipmap {
	uint32_t magic;
	CUDA_ARRAY3D_DESCRIPTOR desc;
	unsigned levels;
	struct td_array **level;
};

static size_t format_bytes(CUarray_format f)
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

struct td_array *td_array_of(CUarray a)
{
	struct td_array *arr = (struct td_array *)a;
	return arr && arr->magic == TD_MAGIC_ARRAY ? arr : NULL;
}

static CUresult check_desc(const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	if (!d || !d->Width || (d->Depth && !d->Height && !(d->Flags & CUDA_ARRAY3D_LAYERED)))
		return CUDA_ERROR_INVALID_VALUE;
	if (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4)
		return CUDA_ERROR_INVALID_VALUE;
	if ((d->Flags & CUDA_ARRAY3D_CUBEMAP) && (d->Width != d->Height || d->Depth % 6 || !d->Depth))
		return CUDA_ERROR_INVALID_VALUE;
	if (d->Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING))
		return CUDA_ERROR_NOT_SUPPORTED;
	return format_bytes(d->Format) ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult array_new(const CUDA_ARRAY3D_DESCRIPTOR *d, bool level, struct td_array **out)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS || (rc = check_desc(d)) != CUDA_SUCCESS)
		return rc;
	struct td_array *a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	a->desc = *d;
	a->elem = format_bytes(d->Format) * d->NumChannels;
	a->width = d->Width;
	a->height = d->Height ? d->Height : 1;
	a->depth = d->Depth ? d->Depth : 1;
	a->level = level;
	size_t n;
	if (__builtin_mul_overflow(a->elem * a->width, a->height, &n) || __builtin_mul_overflow(n, a->depth, &n) ||
	    !(a->data = calloc(1, n))) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->magic = TD_MAGIC_ARRAY;
	*out = a;
	return CUDA_SUCCESS;
}

static void array_free(struct td_array *a)
{
	a->magic = 0;
	free(a->data);
	free(a);
}

TD_EXPORT CUresult cuArray3DCreate_v2(CUarray *handle, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	return array_new(d, false, (struct td_array **)handle);
}

TD_EXPORT CUresult cuArrayCreate_v2(CUarray *handle, const CUDA_ARRAY_DESCRIPTOR *d)
{
	if (!handle || !d)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = d->Width, .Height = d->Height, .Format = d->Format,
				      .NumChannels = d->NumChannels};
	return array_new(&d3, false, (struct td_array **)handle);
}

TD_EXPORT CUresult cuArrayDestroy(CUarray handle)
{
	struct td_array *a = td_array_of(handle);
	if (!a || a->level)
		return CUDA_ERROR_INVALID_HANDLE;
	struct td_context *ctx = td_current_context();
	if (ctx)
		td_context_synchronize(ctx); /* no queued copy may still use it */
	array_free(a);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR *out, CUarray handle)
{
	struct td_array *a = td_array_of(handle);
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = a->desc;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *out, CUarray handle)
{
	struct td_array *a = td_array_of(handle);
	if (!a)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (CUDA_ARRAY_DESCRIPTOR){.Width = a->desc.Width, .Height = a->desc.Height, .Format = a->desc.Format,
				       .NumChannels = a->desc.NumChannels};
	return CUDA_SUCCESS;
}

static size_t halve(size_t v, unsigned l)
{
	return v ? (v >> l ? v >> l : 1) : 0;
}

TD_EXPORT CUresult cuMipmappedArrayCreate(CUmipmappedArray *handle, const CUDA_ARRAY3D_DESCRIPTOR *d, unsigned levels)
{
	CUresult rc = check_desc(d);
	if (rc != CUDA_SUCCESS)
		return rc;
	size_t big = d->Width > d->Height ? d->Width : d->Height;
	if (!(d->Flags & CUDA_ARRAY3D_LAYERED) && d->Depth > big)
		big = d->Depth;
	unsigned most = 1;
	while (big >> most)
		most++;
	if (!handle || !levels || levels > most)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_mipmap *m = calloc(1, sizeof(*m));
	if (!m || !(m->level = calloc(levels, sizeof(*m->level)))) {
		free(m);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	m->desc = *d;
	for (unsigned l = 0; l < levels && rc == CUDA_SUCCESS; l++, m->levels++) {
		CUDA_ARRAY3D_DESCRIPTOR ld = *d;
		bool layered = d->Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP);
		ld.Width = halve(d->Width, l), ld.Height = halve(d->Height, l);
		ld.Depth = layered ? d->Depth : halve(d->Depth, l);
		rc = array_new(&ld, true, &m->level[l]);
	}
	if (rc != CUDA_SUCCESS) {
		for (unsigned l = 0; l + 1 < m->levels; l++)
			array_free(m->level[l]);
		free(m->level);
		free(m);
		return rc;
	}
	m->magic = TD_MAGIC_MIPMAP;
	*handle = (CUmipmappedArray)m;
	return CUDA_SUCCESS;
}

static struct td_mipmap *mipmap_of(CUmipmappedArray h)
{
	struct td_mipmap *m = (struct td_mipmap *)h;
	return m && m->magic == TD_MAGIC_MIPMAP ? m : NULL;
}

TD_EXPORT CUresult cuMipmappedArrayGetLevel(CUarray *out, CUmipmappedArray h, unsigned level)
{
	struct td_mipmap *m = mipmap_of(h);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!out || level >= m->levels)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (CUarray)m->level[level];
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMipmappedArrayDestroy(CUmipmappedArray h)
{
	struct td_mipmap *m = mipmap_of(h);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	struct td_context *ctx = td_current_context();
	if (ctx)
		td_context_synchronize(ctx);
	m->magic = 0;
	for (unsigned l = 0; l < m->levels; l++)
		array_free(m->level[l]);
	free(m->level);
	free(m);
	return CUDA_SUCCESS;
}

/* The 1-D array copies: one row at a byte offset, as cuMemcpy2D (copy2d.c). */
static CUDA_MEMCPY2D row_copy(size_t n)
{
	CUDA_MEMCPY2D c = {.WidthInBytes = n, .Height = 1};
	return c;
}

TD_EXPORT CUresult cuMemcpyHtoA_v2(CUarray dst, size_t off, const void *src, size_t n)
{
	CUDA_MEMCPY2D c = row_copy(n);
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = dst, c.dstXInBytes = off;
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = src;
	return cuMemcpy2D_v2(&c);
}

TD_EXPORT CUresult cuMemcpyHtoAAsync_v2(CUarray dst, size_t off, const void *src, size_t n, CUstream stream)
{
	CUDA_MEMCPY2D c = row_copy(n);
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = dst, c.dstXInBytes = off;
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = src;
	return cuMemcpy2DAsync_v2(&c, stream);
}

TD_EXPORT CUresult cuMemcpyAtoH_v2(void *dst, CUarray src, size_t off, size_t n)
{
	CUDA_MEMCPY2D c = row_copy(n);
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = src, c.srcXInBytes = off;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = dst;
	return cuMemcpy2D_v2(&c);
}

TD_EXPORT CUresult cuMemcpyAtoHAsync_v2(void *dst, CUarray src, size_t off, size_t n, CUstream stream)
{
	CUDA_MEMCPY2D c = row_copy(n);
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = src, c.srcXInBytes = off;
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = dst;
	return cuMemcpy2DAsync_v2(&c, stream);
}

TD_EXPORT CUresult cuMemcpyDtoA_v2(CUarray dst, size_t off, CUdeviceptr src, size_t n)
{
	CUDA_MEMCPY2D c = row_copy(n);
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = dst, c.dstXInBytes = off;
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = src;
	return cuMemcpy2D_v2(&c);
}

TD_EXPORT CUresult cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t off, size_t n)
{
	CUDA_MEMCPY2D c = row_copy(n);
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = src, c.srcXInBytes = off;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = dst;
	return cuMemcpy2D_v2(&c);
}

TD_EXPORT CUresult cuMemcpyAtoA_v2(CUarray dst, size_t doff, CUarray src, size_t soff, size_t n)
{
	CUDA_MEMCPY2D c = row_copy(n);
	c.srcMemoryType = CU_MEMORYTYPE_ARRAY, c.srcArray = src, c.srcXInBytes = soff;
	c.dstMemoryType = CU_MEMORYTYPE_ARRAY, c.dstArray = dst, c.dstXInBytes = doff;
	return cuMemcpy2D_v2(&c);
}

/* Only an array made with CUDA_ARRAY3D_DEFERRED_MAPPING has memory requirements, and the
 * test driver makes none. */
TD_EXPORT CUresult cuArrayGetMemoryRequirements(CUDA_ARRAY_MEMORY_REQUIREMENTS *out, CUarray handle, CUdevice dev)
{
	(void)out, (void)dev;
	return td_array_of(handle) ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_HANDLE;
}
