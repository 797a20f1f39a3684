/* 2-D and 3-D copies and memsets on linear memory, and pitched allocation (typed bodies,
 * proto/api.spec). A copy's host side arrives or leaves packed as bulk (frontend/copy2d.c):
 * here it is a buffer of width * height * depth bytes, the device side the client's, every
 * row of it checked: the span from its first row's start to its last row's end must lie in
 * one piece of memory the client owns; an array side must be an array of the client's. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "stream_wait.h"

/* Texture-pitch rounding the driver applies at most, for charging before allocating. */
#define PITCH_ROUND 512u

/* Charged first at a bound of its size, then at its size (owned as pitch * height). */
CUresult rm_body_cuMemAllocPitch_v2(struct rm_channel *s, CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
				    size_t Height, unsigned int ElementSizeBytes)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	uint64_t bound;
	if (WidthInBytes > UINT64_MAX - PITCH_ROUND ||
	    __builtin_mul_overflow((WidthInBytes + PITCH_ROUND - 1) / PITCH_ROUND * PITCH_ROUND, Height, &bound))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_session_charge(s, bound);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuMemAllocPitch_v2(dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
	if (r != CUDA_SUCCESS) {
		rm_session_uncharge(s, bound);
		return r;
	}
	uint64_t size;
	if (__builtin_mul_overflow((uint64_t)*pPitch, (uint64_t)Height, &size))
		r = CUDA_ERROR_INVALID_VALUE;
	else if (size > bound)
		r = rm_session_charge(s, size - bound);
	if (r != CUDA_SUCCESS) {
		rm_drv_cuMemFree_v2(*dptr);
		*dptr = 0;
		rm_session_uncharge(s, bound);
		return r;
	}
	if (size < bound)
		rm_session_uncharge(s, bound - size);
	rm_session_own_memory(s, RM_H_MEMORY, *dptr, size, 0);
	return CUDA_SUCCESS;
}

/* The span of h rows of w bytes, d slices of slice_rows rows, at pitch from byte offset
 * (x, y, z) of base: CUDA_SUCCESS with *start, *len, or CUDA_ERROR_INVALID_VALUE on overflow. */
static CUresult span(uint64_t base, uint64_t x, uint64_t y, uint64_t z, uint64_t pitch, uint64_t slice_rows, uint64_t w,
		     uint64_t h, uint64_t d, uint64_t *start, uint64_t *len)
{
	uint64_t slice, off, yoff, zoff, last;
	if (__builtin_mul_overflow(pitch, slice_rows, &slice) || __builtin_mul_overflow(y, pitch, &yoff) ||
	    __builtin_mul_overflow(z, slice, &zoff) || __builtin_add_overflow(x, yoff, &off) ||
	    __builtin_add_overflow(off, zoff, &off) || __builtin_add_overflow(base, off, start))
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t rows, slices;
	if (__builtin_mul_overflow(h - 1, pitch, &rows) || __builtin_mul_overflow(d - 1, slice, &slices) ||
	    __builtin_add_overflow(rows, slices, &last) || __builtin_add_overflow(last, w, len) ||
	    __builtin_add_overflow(*start, *len, &last))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

/* A device side of a copy of w x h x d bytes: every row in memory the client owns, or an
 * array of the client's (its real handle in *array; the driver checks its extents). */
static CUresult device_side(struct rm_channel *s, const Remora__CopySide *sd, int dims, uint64_t w, uint64_t h,
			    uint64_t d, CUarray *array)
{
	*array = NULL;
	if (sd->memory_type == CU_MEMORYTYPE_ARRAY)
		return rm_session_use(s, RM_H_ARRAY, sd->ptr, (void **)array);
	if (sd->memory_type != CU_MEMORYTYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t start, len;
	CUresult r = span(sd->ptr, sd->x_in_bytes, sd->y, dims == 3 ? sd->z : 0, sd->pitch, dims == 3 ? sd->height : 0, w,
			  h, d, &start, &len);
	return r == CUDA_SUCCESS ? rm_session_check_range(s, start, len) : r;
}

/* Fills one side of m: the client's device memory or array (checked), or the daemon's packed
 * host buffer. */
static void fill_side(CUDA_MEMCPY3D *m, int is_dst, const Remora__CopySide *sd, void *host, CUarray array, uint64_t w,
		      uint64_t h)
{
	CUmemorytype type = host ? CU_MEMORYTYPE_HOST : array ? CU_MEMORYTYPE_ARRAY : CU_MEMORYTYPE_DEVICE;
	size_t x = host ? 0 : sd->x_in_bytes, y = host ? 0 : sd->y, z = host ? 0 : sd->z;
	size_t pitch = host ? w : array ? 0 : sd->pitch, height = host ? h : array ? 0 : sd->height;
	CUdeviceptr dev = type == CU_MEMORYTYPE_DEVICE ? (CUdeviceptr)sd->ptr : 0;
	if (is_dst) {
		m->dstMemoryType = type;
		m->dstXInBytes = x, m->dstY = y, m->dstZ = z;
		m->dstHost = host, m->dstDevice = dev, m->dstArray = array;
		m->dstPitch = pitch, m->dstHeight = height;
	} else {
		m->srcMemoryType = type;
		m->srcXInBytes = x, m->srcY = y, m->srcZ = z;
		m->srcHost = host, m->srcDevice = dev, m->srcArray = array;
		m->srcPitch = pitch, m->srcHeight = height;
	}
}

/* Issues m on stream: the 2-D call for a cuMemcpy2D form (its alignment rules are the
 * driver's), the 3-D one otherwise; cuMemcpy2DUnaligned as a 3-D copy, which has none. */
static CUresult issue(uint32_t op, const CUDA_MEMCPY3D *m, CUstream stream, CUcontext src_ctx, CUcontext dst_ctx)
{
	if (src_ctx) { /* a peer copy: the sides' shared contexts */
		CUDA_MEMCPY3D_PEER p = {
			.srcXInBytes = m->srcXInBytes, .srcY = m->srcY, .srcZ = m->srcZ, .srcMemoryType = m->srcMemoryType,
			.srcHost = m->srcHost, .srcDevice = m->srcDevice, .srcArray = m->srcArray, .srcContext = src_ctx,
			.srcPitch = m->srcPitch, .srcHeight = m->srcHeight,
			.dstXInBytes = m->dstXInBytes, .dstY = m->dstY, .dstZ = m->dstZ, .dstMemoryType = m->dstMemoryType,
			.dstHost = m->dstHost, .dstDevice = m->dstDevice, .dstArray = m->dstArray, .dstContext = dst_ctx,
			.dstPitch = m->dstPitch, .dstHeight = m->dstHeight,
			.WidthInBytes = m->WidthInBytes, .Height = m->Height, .Depth = m->Depth,
		};
		return rm_drv_cuMemcpy3DPeerAsync(&p, stream);
	}
	if (op != RM_OP_cuMemcpy2D_v2 && op != RM_OP_cuMemcpy2DAsync_v2)
		return rm_drv_cuMemcpy3DAsync_v2(m, stream);
	CUDA_MEMCPY2D m2 = {
		.srcXInBytes = m->srcXInBytes, .srcY = m->srcY, .srcMemoryType = m->srcMemoryType,
		.srcHost = m->srcHost, .srcDevice = m->srcDevice, .srcArray = m->srcArray, .srcPitch = m->srcPitch,
		.dstXInBytes = m->dstXInBytes, .dstY = m->dstY, .dstMemoryType = m->dstMemoryType,
		.dstHost = m->dstHost, .dstDevice = m->dstDevice, .dstArray = m->dstArray, .dstPitch = m->dstPitch,
		.WidthInBytes = m->WidthInBytes, .Height = m->Height,
	};
	return rm_drv_cuMemcpy2DAsync_v2(&m2, stream);
}

/* What the driver was given where it refused a peer copy: its contexts, the stream's and the
 * current one, and every field, for the operator (a copy the driver takes natively). */
static void log_refused_peer(struct rm_channel *s, CUresult r, const CUDA_MEMCPY3D *m, CUstream stream,
			     CUcontext src_ctx, CUcontext dst_ctx)
{
	CUcontext stream_ctx = NULL, cur = NULL;
	rm_drv_cuStreamGetCtx(stream, &stream_ctx);
	rm_drv_cuCtxGetCurrent(&cur);
	rm_session_log(s, RM_LOG_WARN,
		       "the driver refused a peer copy (%d): contexts src %p dst %p, stream %p of %p, current %p; "
		       "src type %d 0x%llx x %zu y %zu z %zu pitch %zu height %zu; dst type %d 0x%llx x %zu y %zu z %zu "
		       "pitch %zu height %zu; %zu x %zu x %zu",
		       (int)r, (void *)src_ctx, (void *)dst_ctx, (void *)stream, (void *)stream_ctx, (void *)cur,
		       (int)m->srcMemoryType, (unsigned long long)m->srcDevice, m->srcXInBytes, m->srcY, m->srcZ,
		       m->srcPitch, m->srcHeight, (int)m->dstMemoryType, (unsigned long long)m->dstDevice, m->dstXInBytes,
		       m->dstY, m->dstZ, m->dstPitch, m->dstHeight, m->WidthInBytes, m->Height, m->Depth);
}

static CUresult copy3d(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	uint32_t op = rq->frame.op;
	int peer = op == RM_OP_cuMemcpy3DPeer || op == RM_OP_cuMemcpy3DPeerAsync;
	int dims = op == RM_OP_cuMemcpy3D_v2 || op == RM_OP_cuMemcpy3DAsync_v2 || peer ? 3 : 2;
	int wait = op != RM_OP_cuMemcpy2DAsync_v2 && op != RM_OP_cuMemcpy3DAsync_v2 && op != RM_OP_cuMemcpy3DPeerAsync;
	if (!req->src || !req->dst || req->src->lod || req->dst->lod)
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext src_ctx = NULL, dst_ctx = NULL;
	if (peer != (req->src_context && req->dst_context))
		return CUDA_ERROR_INVALID_VALUE;
	if (peer) { /* the client's contexts, each over its GPU's shared one */
		struct rm_session_ctx *named = s->named;
		CUresult r = rm_session_use(s, RM_H_CONTEXT, req->src_context, (void **)&src_ctx);
		if (r == CUDA_SUCCESS)
			r = rm_session_use(s, RM_H_CONTEXT, req->dst_context, (void **)&dst_ctx);
		s->named = named;
		if (r != CUDA_SUCCESS)
			return r;
	}
	/* A 2-D copy's sides have no slices: what is checked is what is copied. */
	if (dims == 2 && (req->depth != 1 || req->src->z || req->dst->z || req->src->height || req->dst->height))
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t w = req->width_in_bytes, h = req->height, d = req->depth, n;
	int src_host = req->src->memory_type == CU_MEMORYTYPE_HOST, dst_host = req->dst->memory_type == CU_MEMORYTYPE_HOST;
	if (src_host && dst_host) /* the client's own business */
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow(w, h, &n) || __builtin_mul_overflow(n, d, &n))
		return CUDA_ERROR_INVALID_VALUE;
	if ((src_host || dst_host) && n > RM_MAX_COPY3D_BULK)
		return CUDA_ERROR_INVALID_VALUE;
	if (src_host != (rq->frame.bulk_len != 0) || (src_host && rq->frame.bulk_len != n))
		return CUDA_ERROR_INVALID_VALUE;
	if (!n)
		return CUDA_SUCCESS;
	CUresult r = CUDA_SUCCESS;
	CUarray src_array = NULL, dst_array = NULL;
	if (!src_host)
		r = device_side(s, req->src, dims, w, h, d, &src_array);
	if (r == CUDA_SUCCESS && !dst_host)
		r = device_side(s, req->dst, dims, w, h, d, &dst_array);
	CUstream stream = NULL;
	if (r == CUDA_SUCCESS)
		r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &stream);
	if (r != CUDA_SUCCESS)
		return r;
	void *buf = NULL;
	if (src_host || dst_host) {
		/* A graph would keep a buffer freed once this returns: not while capturing. */
		CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
		if (rm_drv_cuStreamIsCapturing(stream, &st) == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE)
			return rm_unsupported_use("capturing cuMemcpy2D/3D with a host side");
		if (!(buf = malloc(n)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (src_host && rm_request_read_bulk(s, rq, buf, n)) {
			free(buf);
			return CUDA_ERROR_UNKNOWN; /* the connection is failed */
		}
		wait = 1;
	}
	CUDA_MEMCPY3D m = {.WidthInBytes = w, .Height = h, .Depth = d};
	fill_side(&m, 0, req->src, src_host ? buf : NULL, src_array, w, h);
	fill_side(&m, 1, req->dst, dst_host ? buf : NULL, dst_array, w, h);
	r = issue(op, &m, stream, src_ctx, dst_ctx);
	if (r != CUDA_SUCCESS && src_ctx)
		log_refused_peer(s, r, &m, stream, src_ctx, dst_ctx);
	if (r == CUDA_SUCCESS && wait)
		r = rm_stream_wait(s, stream);
	struct rm_usage *u = &rm_registry()->clients[s->sh->slot].usage;
	if (r == CUDA_SUCCESS && src_host)
		rm_usage_add(&u->bytes_htod, n);
	if (r == CUDA_SUCCESS && dst_host) {
		if (!rm_request_reply_bulk(s, rq, n) && rm_request_send_bulk(s, buf, n))
			rq->fatal = 1;
		if (!rq->fatal)
			rm_usage_add(&u->bytes_dtoh, n);
	}
	free(buf);
	return r;
}

CUresult rm_body_cuMemcpy2D_v2(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	return copy3d(s, rq, req);
}

CUresult rm_body_cuMemcpy2DAsync_v2(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	return copy3d(s, rq, req);
}

CUresult rm_body_cuMemcpy2DUnaligned_v2(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	return copy3d(s, rq, req);
}

CUresult rm_body_cuMemcpy3D_v2(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	return copy3d(s, rq, req);
}

CUresult rm_body_cuMemcpy3DAsync_v2(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	return copy3d(s, rq, req);
}

CUresult rm_body_cuMemcpy3DPeer(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	return copy3d(s, rq, req);
}

CUresult rm_body_cuMemcpy3DPeerAsync(struct rm_channel *s, struct rm_request *rq, const Remora__Memcpy3D *req)
{
	return copy3d(s, rq, req);
}

/* Memsets of Height rows of Width elements of esz bytes at dstPitch: the span
 * dstPitch * (Height - 1) + Width * esz from dst must be the client's. */
static CUresult memset_range(struct rm_channel *s, CUdeviceptr dst, size_t pitch, size_t width, size_t height,
			     unsigned esz)
{
	if (!width || !height)
		return CUDA_SUCCESS;
	uint64_t rows, bytes, len;
	if (__builtin_mul_overflow((uint64_t)height - 1, (uint64_t)pitch, &rows) ||
	    __builtin_mul_overflow((uint64_t)width, (uint64_t)esz, &bytes) || __builtin_add_overflow(rows, bytes, &len))
		return CUDA_ERROR_INVALID_VALUE;
	return rm_session_check_range(s, dst, len);
}

#define MEMSET_2D(BITS, TYPE)                                                                                           \
	CUresult rm_body_cuMemsetD2D##BITS##Async(struct rm_channel *s, CUdeviceptr dstDevice, size_t dstPitch,         \
						  TYPE v, size_t Width, size_t Height, CUstream hStream)                \
	{                                                                                                               \
		CUresult r = memset_range(s, dstDevice, dstPitch, Width, Height, BITS / 8);                             \
		return r == CUDA_SUCCESS ? rm_drv_cuMemsetD2D##BITS##Async(dstDevice, dstPitch, v, Width, Height, hStream) \
					 : r;                                                                           \
	}                                                                                                               \
	CUresult rm_body_cuMemsetD2D##BITS##_v2(struct rm_channel *s, CUdeviceptr dstDevice, size_t dstPitch, TYPE v,   \
						size_t Width, size_t Height)                                            \
	{                                                                                                               \
		CUstream st = NULL;                                                                                     \
		CUresult r = memset_range(s, dstDevice, dstPitch, Width, Height, BITS / 8);                             \
		if (r == CUDA_SUCCESS)                                                                                  \
			r = rm_session_stream_submit(s, 0, 0, &st); /* the client's NULL stream */                                                                        \
		if (r == CUDA_SUCCESS)                                                                                  \
			r = rm_drv_cuMemsetD2D##BITS##Async(dstDevice, dstPitch, v, Width, Height, st);                 \
		return r == CUDA_SUCCESS ? rm_stream_wait(s, st) : r;                                                   \
	}

MEMSET_2D(8, unsigned char)
MEMSET_2D(16, unsigned short)
MEMSET_2D(32, unsigned int)
