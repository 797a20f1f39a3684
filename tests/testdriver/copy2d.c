/* Pitched allocation, 2-D and 3-D copies and 2-D memsets on linear memory: a copy is one
 * queued copy per row, a memset one queued fill per row, so that they are ordered on their
 * stream as any other work. The pitch is the width rounded up to TD_PITCH_ALIGN. An array
 * side is its rows (arrays.c), its extents checked. Not modelled: the 2-D alignment rules of
 * cuMemcpy2D (every pitch and offset is accepted, as by cuMemcpy2DUnaligned). */
#include "testdriver.h"

#include <stdlib.h>

#define TD_PITCH_ALIGN 512

TD_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t width, size_t height, unsigned elem)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || !pitch || !width || !height || (elem != 4 && elem != 8 && elem != 16))
		return CUDA_ERROR_INVALID_VALUE;
	size_t p = (width + TD_PITCH_ALIGN - 1) / TD_PITCH_ALIGN * TD_PITCH_ALIGN;
	if (p < width || height > SIZE_MAX / p)
		return CUDA_ERROR_INVALID_VALUE;
	rc = td_device_alloc(ctx, ctx->device, p * height, dptr);
	if (rc == CUDA_SUCCESS)
		*pitch = p;
	return rc;
}

struct side {
	char *base; /* the side's pointer, offsets not applied */
	bool device;
	struct td_array *array; /* an array side: base its data, pitch and height its own */
	size_t x, y, z, pitch, height;
};

static CUresult side_of(struct side *o, CUmemorytype t, size_t x, size_t y, size_t z, const void *host,
			CUdeviceptr dev, CUarray array, size_t pitch, size_t height)
{
	*o = (struct side){.x = x, .y = y, .z = z, .pitch = pitch, .height = height};
	switch (t) {
	case CU_MEMORYTYPE_HOST:
		o->base = (char *)host;
		break;
	case CU_MEMORYTYPE_DEVICE:
		o->base = (char *)(uintptr_t)dev;
		o->device = true;
		break;
	case CU_MEMORYTYPE_UNIFIED: {
		struct td_alloc a;
		o->base = (char *)(uintptr_t)dev;
		o->device = td_find_alloc(dev, 1, &a) && a.kind != TD_ALLOC_HOST && a.kind != TD_ALLOC_REGISTERED;
		break;
	}
	case CU_MEMORYTYPE_ARRAY: {
		struct td_array *a = td_array_of(array);
		if (!a)
			return CUDA_ERROR_INVALID_HANDLE;
		o->base = a->data;
		o->array = a;
		o->pitch = a->width * a->elem;
		o->height = a->height;
		break;
	}
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return o->base ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static char *row(const struct side *sd, size_t y, size_t z)
{
	return sd->base + (sd->z + z) * sd->pitch * sd->height + (sd->y + y) * sd->pitch + sd->x;
}

static bool pinned(const void *p)
{
	struct td_alloc a;
	return td_find_alloc((uintptr_t)p, 1, &a) && (a.kind == TD_ALLOC_HOST || a.kind == TD_ALLOC_REGISTERED);
}

static CUresult copy(struct side *src, struct side *dst, size_t w, size_t h, size_t d, CUstream stream, bool async)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS || (rc = td_capture_usable(s)) != CUDA_SUCCESS)
		return rc;
	if (!w || !h || !d)
		return CUDA_SUCCESS;
	for (int i = 0; i < 2; i++) { /* rows and slices must not overlap; a device side's every row be memory */
		struct side *sd = i ? dst : src;
		if ((h > 1 && sd->pitch < w) || (d > 1 && sd->height < h))
			return CUDA_ERROR_INVALID_VALUE;
		for (size_t z = 0; sd->device && z < d; z++)
			for (size_t y = 0; y < h; y++)
				if (!td_device_range_ok(row(sd, y, z), w))
					return CUDA_ERROR_INVALID_VALUE;
		if (sd->array && (sd->x > sd->pitch || w > sd->pitch - sd->x || sd->y + h > sd->array->height ||
				  sd->z + d > sd->array->depth))
			return CUDA_ERROR_INVALID_VALUE;
		if (!sd->device && !sd->array && !pinned(sd->base))
			async = false;
	}
	uint64_t ticket = 0;
	for (size_t z = 0; z < d; z++)
		for (size_t y = 0; y < h; y++) {
			struct td_op *op = td_op_new(TD_OP_COPY);
			if (!op)
				return CUDA_ERROR_OUT_OF_MEMORY;
			op->u.copy.dst = row(dst, y, z);
			op->u.copy.src = row(src, y, z);
			op->u.copy.bytes = w;
			ticket = td_enqueue(s, op);
		}
	if (!async)
		td_wait_ticket(s, ticket);
	return async ? CUDA_SUCCESS : td_sticky_error();
}

static CUresult copy_2d(const CUDA_MEMCPY2D *p, CUstream stream, bool async)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	struct side src, dst;
	CUresult rc = side_of(&src, p->srcMemoryType, p->srcXInBytes, p->srcY, 0, p->srcHost, p->srcDevice, p->srcArray,
			      p->srcPitch, 0);
	if (rc == CUDA_SUCCESS)
		rc = side_of(&dst, p->dstMemoryType, p->dstXInBytes, p->dstY, 0, p->dstHost, p->dstDevice, p->dstArray,
			     p->dstPitch, 0);
	return rc == CUDA_SUCCESS ? copy(&src, &dst, p->WidthInBytes, p->Height, 1, stream, async) : rc;
}

static CUresult copy_3d(const CUDA_MEMCPY3D *p, CUstream stream, bool async)
{
	if (!p || p->reserved0 || p->reserved1 || p->srcLOD || p->dstLOD)
		return CUDA_ERROR_INVALID_VALUE;
	struct side src, dst;
	CUresult rc = side_of(&src, p->srcMemoryType, p->srcXInBytes, p->srcY, p->srcZ, p->srcHost, p->srcDevice,
			      p->srcArray, p->srcPitch, p->srcHeight);
	if (rc == CUDA_SUCCESS)
		rc = side_of(&dst, p->dstMemoryType, p->dstXInBytes, p->dstY, p->dstZ, p->dstHost, p->dstDevice,
			     p->dstArray, p->dstPitch, p->dstHeight);
	return rc == CUDA_SUCCESS ? copy(&src, &dst, p->WidthInBytes, p->Height, p->Depth, stream, async) : rc;
}

TD_EXPORT CUresult cuMemcpy2D_v2(const CUDA_MEMCPY2D *p)
{
	return copy_2d(p, NULL, false);
}

TD_EXPORT CUresult cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *p)
{
	return copy_2d(p, NULL, false);
}

TD_EXPORT CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *p, CUstream stream)
{
	return copy_2d(p, stream, true);
}

TD_EXPORT CUresult cuMemcpy3D_v2(const CUDA_MEMCPY3D *p)
{
	return copy_3d(p, NULL, false);
}

TD_EXPORT CUresult cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *p, CUstream stream)
{
	return copy_3d(p, stream, true);
}

/* Whether a device side of a peer copy lies on its context's device, as the driver checks
 * (arrays and host sides: their context is not used). */
static bool on_device_of(CUmemorytype t, CUdeviceptr dev, const struct td_context *ctx)
{
	struct td_alloc a;
	if (t != CU_MEMORYTYPE_DEVICE)
		return true;
	return td_find_alloc(dev, 1, &a) && a.kind != TD_ALLOC_HOST && a.kind != TD_ALLOC_REGISTERED &&
	       a.device == ctx->device;
}

/* One address space: a peer copy is a 3-D copy between valid contexts, each device side on
 * its context's device. */
static CUresult copy_3d_peer(const CUDA_MEMCPY3D_PEER *p, CUstream stream, bool async)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (!td_context_valid((struct td_context *)p->srcContext) || !td_context_valid((struct td_context *)p->dstContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!on_device_of(p->srcMemoryType, p->srcDevice, (const struct td_context *)p->srcContext) ||
	    !on_device_of(p->dstMemoryType, p->dstDevice, (const struct td_context *)p->dstContext))
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_MEMCPY3D m = {
		.srcXInBytes = p->srcXInBytes, .srcY = p->srcY, .srcZ = p->srcZ, .srcMemoryType = p->srcMemoryType,
		.srcHost = p->srcHost, .srcDevice = p->srcDevice, .srcArray = p->srcArray, .srcPitch = p->srcPitch,
		.srcHeight = p->srcHeight, .dstXInBytes = p->dstXInBytes, .dstY = p->dstY, .dstZ = p->dstZ,
		.dstMemoryType = p->dstMemoryType, .dstHost = p->dstHost, .dstDevice = p->dstDevice,
		.dstArray = p->dstArray, .dstPitch = p->dstPitch, .dstHeight = p->dstHeight,
		.WidthInBytes = p->WidthInBytes, .Height = p->Height, .Depth = p->Depth,
	};
	return copy_3d(&m, stream, async);
}

TD_EXPORT CUresult cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *p)
{
	return copy_3d_peer(p, NULL, false);
}

TD_EXPORT CUresult cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *p, CUstream stream)
{
	return copy_3d_peer(p, stream, true);
}

/* Height rows of width elements of esz bytes, pitch apart. */
static CUresult memset_2d(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned esz, size_t width, size_t height,
			  CUstream stream, bool async)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS || (rc = td_capture_usable(s)) != CUDA_SUCCESS)
		return rc;
	if (!width || !height)
		return CUDA_SUCCESS;
	if (dst % esz || (height > 1 && pitch < width * esz))
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t y = 0; y < height; y++)
		if (!td_device_range_ok((void *)(uintptr_t)(dst + y * pitch), width * esz))
			return CUDA_ERROR_INVALID_VALUE;
	uint64_t ticket = 0;
	for (size_t y = 0; y < height; y++) {
		struct td_op *op = td_op_new(TD_OP_SET);
		if (!op)
			return CUDA_ERROR_OUT_OF_MEMORY;
		op->u.set.dst = (void *)(uintptr_t)(dst + y * pitch);
		op->u.set.value = value;
		op->u.set.width = esz;
		op->u.set.count = width;
		ticket = td_enqueue(s, op);
	}
	if (!async)
		td_wait_ticket(s, ticket);
	return async ? CUDA_SUCCESS : td_sticky_error();
}

TD_EXPORT CUresult cuMemsetD2D8_v2(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h)
{
	return memset_2d(dst, pitch, v, 1, w, h, NULL, false);
}

TD_EXPORT CUresult cuMemsetD2D16_v2(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h)
{
	return memset_2d(dst, pitch, v, 2, w, h, NULL, false);
}

TD_EXPORT CUresult cuMemsetD2D32_v2(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h)
{
	return memset_2d(dst, pitch, v, 4, w, h, NULL, false);
}

TD_EXPORT CUresult cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char v, size_t w, size_t h, CUstream s)
{
	return memset_2d(dst, pitch, v, 1, w, h, s, true);
}

TD_EXPORT CUresult cuMemsetD2D16Async(CUdeviceptr dst, size_t pitch, unsigned short v, size_t w, size_t h, CUstream s)
{
	return memset_2d(dst, pitch, v, 2, w, h, s, true);
}

TD_EXPORT CUresult cuMemsetD2D32Async(CUdeviceptr dst, size_t pitch, unsigned int v, size_t w, size_t h, CUstream s)
{
	return memset_2d(dst, pitch, v, 4, w, h, s, true);
}
