/* 2-D and 3-D copies (cuMemcpy2D*, cuMemcpy3D*). A copy between host and device travels in
 * pieces of whole rows (or of one row's bytes, for a row past the limit), at most
 * RM_MAX_COPY3D_BULK bytes each: a host side's rows are packed, without the pitch's gaps,
 * as the request's or the reply's bulk, and the daemon's driver copies them with the
 * device side's own pitch. A copy between device sides is one message, done by the daemon;
 * one between host sides is done here. Every copy with a host side returns once done
 * (stronger than an Async form promises); a device-to-device Async copy is sent async. */
#include "client.h"
#include "client_stubs.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "remora.pb-c.h"
#include "wire.h"

struct side {
	CUmemorytype type; /* HOST, DEVICE or ARRAY (UNIFIED resolved) */
	size_t x, y, z;
	char *host;
	uint64_t ptr; /* device pointer or array */
	size_t pitch, height;
	unsigned lod;
};

struct copy {
	struct side src, dst;
	size_t width, height, depth;
	int dims; /* 2: a cuMemcpy2D form (the sides have no z, height) */
	CUcontext src_ctx, dst_ctx; /* a cuMemcpy3DPeer form's */
};

/* A unified pointer is host memory where it is the program's pinned memory; otherwise the
 * daemon's (device, or managed memory at the device's address). */
static CUresult side_of(struct side *o, CUmemorytype t, size_t x, size_t y, size_t z, const void *host,
			CUdeviceptr dev, CUarray array, size_t pitch, size_t height, unsigned lod)
{
	*o = (struct side){.type = t, .x = x, .y = y, .z = z, .pitch = pitch, .height = height, .lod = lod};
	if (t == CU_MEMORYTYPE_UNIFIED) {
		o->type = rm_host_alloc_find((void *)(uintptr_t)dev, NULL, NULL, NULL) ? CU_MEMORYTYPE_HOST
											: CU_MEMORYTYPE_DEVICE;
		host = (const void *)(uintptr_t)dev;
	}
	switch (o->type) {
	case CU_MEMORYTYPE_HOST:
		o->host = (char *)host;
		return host ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	case CU_MEMORYTYPE_DEVICE:
		o->ptr = dev;
		return CUDA_SUCCESS;
	case CU_MEMORYTYPE_ARRAY:
		o->ptr = (uint64_t)(uintptr_t)array;
		return array ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

/* Row r of slice z of a piece's host side, which starts dx bytes into the copy's rows. */
static char *host_row(const struct copy *c, const struct side *h, size_t dx, size_t y, size_t z)
{
	size_t slice = c->dims == 3 ? h->pitch * h->height : 0;
	return h->host + (h->z + z) * slice + (h->y + y) * h->pitch + h->x + dx;
}

static void side_msg(Remora__CopySide *m, const struct side *sd, size_t dx, size_t y, size_t z)
{
	m->memory_type = sd->type;
	m->x_in_bytes = sd->x + dx;
	m->y = sd->y + y;
	m->z = sd->z + z;
	m->ptr = sd->ptr;
	m->pitch = sd->pitch;
	m->height = sd->height;
	m->lod = sd->lod;
}

/* One piece: w bytes of h rows of d slices, from byte dx, row y and slice z of the copy. The
 * host side's rows are packed in buf (NULL where they lie packed already). */
static CUresult piece(uint32_t op, const struct copy *c, size_t dx, size_t y, size_t z, size_t w, size_t h,
		      size_t d, CUstream stream, char *buf)
{
	Remora__CopySide src = REMORA__COPY_SIDE__INIT, dst = REMORA__COPY_SIDE__INIT;
	side_msg(&src, &c->src, dx, y, z);
	side_msg(&dst, &c->dst, dx, y, z);
	Remora__Memcpy3D req = REMORA__MEMCPY3_D__INIT;
	req.src = &src;
	req.dst = &dst;
	req.width_in_bytes = w;
	req.height = h;
	req.depth = d;
	req.stream = (uint64_t)(uintptr_t)stream;
	req.src_context = (uint64_t)(uintptr_t)c->src_ctx;
	req.dst_context = (uint64_t)(uintptr_t)c->dst_ctx;
	struct rm_rpc_call call = {.op = op, .req = &req.base};
	const struct side *hs = c->src.type == CU_MEMORYTYPE_HOST ? &c->src : &c->dst;
	size_t n = w * h * d;
	char *packed = buf ? buf : host_row(c, hs, dx, y, z);
	if (buf && hs == &c->src)
		for (size_t k = 0; k < d; k++)
			for (size_t r = 0; r < h; r++)
				memcpy(buf + (k * h + r) * w, host_row(c, hs, dx, y + r, z + k), w);
	struct iovec v = {packed, n};
	if (hs == &c->src) {
		call.bulk_out = &v;
		call.nbulk_out = 1;
	} else {
		call.bulk_in = packed;
		call.bulk_in_len = n;
	}
	CUresult res = rm_rpc(&call);
	if (res == CUDA_SUCCESS && buf && hs == &c->dst)
		for (size_t k = 0; k < d; k++)
			for (size_t r = 0; r < h; r++)
				memcpy(host_row(c, hs, dx, y + r, z + k), buf + (k * h + r) * w, w);
	return res;
}

/* Whether a host side's rows of a whole piece lie packed in the program's memory. */
static int packed(const struct copy *c, const struct side *hs, size_t w, size_t h, size_t d)
{
	if (h == 1 && d == 1)
		return 1;
	return hs->pitch == w && w == c->width && (d == 1 || hs->height == h);
}

/* Between host and device: in pieces of at most RM_MAX_COPY3D_BULK bytes, whole slices,
 * whole rows or a row's bytes. */
static CUresult host_device(uint32_t op, const struct copy *c, CUstream stream)
{
	const size_t max = RM_MAX_COPY3D_BULK;
	size_t w = c->width, h = c->height, d = 1;
	if (w > max) {
		w = max;
		h = 1;
	} else if (h > max / w) {
		h = max / w;
	} else {
		d = max / (w * h) < c->depth ? max / (w * h) : c->depth;
	}
	const struct side *hs = c->src.type == CU_MEMORYTYPE_HOST ? &c->src : &c->dst;
	char *buf = NULL;
	CUresult r = CUDA_SUCCESS;
	for (size_t z = 0; r == CUDA_SUCCESS && z < c->depth; z += d) {
		size_t dn = c->depth - z < d ? c->depth - z : d;
		for (size_t y = 0; r == CUDA_SUCCESS && y < c->height; y += h) {
			size_t hn = c->height - y < h ? c->height - y : h;
			for (size_t dx = 0; r == CUDA_SUCCESS && dx < c->width; dx += w) {
				size_t wn = c->width - dx < w ? c->width - dx : w;
				char *use = NULL;
				if (!packed(c, hs, wn, hn, dn)) {
					if (!buf && !(buf = malloc(w * h * d)))
						return CUDA_ERROR_OUT_OF_MEMORY;
					use = buf;
				}
				r = piece(op, c, dx, y, z, wn, hn, dn, stream, use);
			}
		}
	}
	free(buf);
	return r;
}

static CUresult host_host(const struct copy *c)
{
	for (size_t z = 0; z < c->depth; z++)
		for (size_t y = 0; y < c->height; y++)
			memmove(host_row(c, &c->dst, 0, y, z), host_row(c, &c->src, 0, y, z), c->width);
	return CUDA_SUCCESS;
}

static CUresult copy(uint32_t op, const struct copy *c, CUstream stream, int async)
{
	if (!c->width || !c->height || !c->depth)
		return CUDA_SUCCESS;
	for (int i = 0; i < 2; i++) { /* a host side's rows (and slices) must not overlap */
		const struct side *sd = i ? &c->dst : &c->src;
		if (sd->type == CU_MEMORYTYPE_HOST &&
		    ((c->height > 1 && sd->pitch < c->width) || (c->depth > 1 && sd->height < c->height)))
			return CUDA_ERROR_INVALID_VALUE;
	}
	int src_host = c->src.type == CU_MEMORYTYPE_HOST, dst_host = c->dst.type == CU_MEMORYTYPE_HOST;
	if (src_host && dst_host)
		return host_host(c);
	CUresult r = rm_managed_push(stream); /* what the host wrote in managed memory the copy reads */
	if (r != CUDA_SUCCESS)
		return r;
	rm_managed_note_work();
	if (src_host || dst_host)
		return host_device(op, c, stream);
	Remora__CopySide src = REMORA__COPY_SIDE__INIT, dst = REMORA__COPY_SIDE__INIT;
	side_msg(&src, &c->src, 0, 0, 0);
	side_msg(&dst, &c->dst, 0, 0, 0);
	Remora__Memcpy3D req = REMORA__MEMCPY3_D__INIT;
	req.src = &src;
	req.dst = &dst;
	req.width_in_bytes = c->width;
	req.height = c->height;
	req.depth = c->depth;
	req.stream = (uint64_t)(uintptr_t)stream;
	req.src_context = (uint64_t)(uintptr_t)c->src_ctx;
	req.dst_context = (uint64_t)(uintptr_t)c->dst_ctx;
	struct rm_rpc_call call = {.op = op, .req = &req.base, .async = async};
	if (async) { /* ordered after its stream's earlier work only (memory.c, order_by_stream) */
		call.order[0] = (uint64_t)(uintptr_t)stream;
		call.ordered = 1;
	}
	return rm_rpc(&call);
}

static CUresult copy_2d(uint32_t op, const CUDA_MEMCPY2D *p, CUstream stream, int async)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	struct copy c = {.width = p->WidthInBytes, .height = p->Height, .depth = 1, .dims = 2};
	CUresult r = side_of(&c.src, p->srcMemoryType, p->srcXInBytes, p->srcY, 0, p->srcHost, p->srcDevice, p->srcArray,
			     p->srcPitch, 0, 0);
	if (r == CUDA_SUCCESS)
		r = side_of(&c.dst, p->dstMemoryType, p->dstXInBytes, p->dstY, 0, p->dstHost, p->dstDevice, p->dstArray,
			    p->dstPitch, 0, 0);
	return r == CUDA_SUCCESS ? copy(op, &c, stream, async) : r;
}

static CUresult copy_3d(uint32_t op, const CUDA_MEMCPY3D *p, CUstream stream, int async)
{
	if (!p || p->reserved0 || p->reserved1)
		return CUDA_ERROR_INVALID_VALUE;
	struct copy c = {.width = p->WidthInBytes, .height = p->Height, .depth = p->Depth, .dims = 3};
	CUresult r = side_of(&c.src, p->srcMemoryType, p->srcXInBytes, p->srcY, p->srcZ, p->srcHost, p->srcDevice,
			     p->srcArray, p->srcPitch, p->srcHeight, (unsigned)p->srcLOD);
	if (r == CUDA_SUCCESS)
		r = side_of(&c.dst, p->dstMemoryType, p->dstXInBytes, p->dstY, p->dstZ, p->dstHost, p->dstDevice,
			    p->dstArray, p->dstPitch, p->dstHeight, (unsigned)p->dstLOD);
	return r == CUDA_SUCCESS ? copy(op, &c, stream, async) : r;
}

/* Between the contexts of one host's GPUs: the daemon checks they are the client's. */
static CUresult copy_3d_peer(uint32_t op, const CUDA_MEMCPY3D_PEER *p, CUstream stream, int async)
{
	if (!p || !p->srcContext || !p->dstContext)
		return CUDA_ERROR_INVALID_VALUE;
	struct copy c = {.width = p->WidthInBytes, .height = p->Height, .depth = p->Depth, .dims = 3,
			 .src_ctx = p->srcContext, .dst_ctx = p->dstContext};
	CUresult r = side_of(&c.src, p->srcMemoryType, p->srcXInBytes, p->srcY, p->srcZ, p->srcHost, p->srcDevice,
			     p->srcArray, p->srcPitch, p->srcHeight, (unsigned)p->srcLOD);
	if (r == CUDA_SUCCESS)
		r = side_of(&c.dst, p->dstMemoryType, p->dstXInBytes, p->dstY, p->dstZ, p->dstHost, p->dstDevice,
			    p->dstArray, p->dstPitch, p->dstHeight, (unsigned)p->dstLOD);
	return r == CUDA_SUCCESS ? copy(op, &c, stream, async) : r;
}

CUresult rm_client_body_cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER *pCopy)
{
	return copy_3d_peer(RM_OP_cuMemcpy3DPeer, pCopy, NULL, 0);
}

CUresult rm_client_body_cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER *pCopy, CUstream hStream)
{
	return copy_3d_peer(RM_OP_cuMemcpy3DPeerAsync, pCopy, hStream, 1);
}

CUresult rm_client_body_cuMemcpy2D_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy_2d(RM_OP_cuMemcpy2D_v2, pCopy, NULL, 0);
}

CUresult rm_client_body_cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D *pCopy)
{
	return copy_2d(RM_OP_cuMemcpy2DUnaligned_v2, pCopy, NULL, 0);
}

CUresult rm_client_body_cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D *pCopy, CUstream hStream)
{
	return copy_2d(RM_OP_cuMemcpy2DAsync_v2, pCopy, hStream, 1);
}

CUresult rm_client_body_cuMemcpy3D_v2(const CUDA_MEMCPY3D *pCopy)
{
	return copy_3d(RM_OP_cuMemcpy3D_v2, pCopy, NULL, 0);
}

CUresult rm_client_body_cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D *pCopy, CUstream hStream)
{
	return copy_3d(RM_OP_cuMemcpy3DAsync_v2, pCopy, hStream, 1);
}

/* The 1-D array copies (cuMemcpy*A*): one row of ByteCount bytes at a byte offset of the
 * array's, as cuMemcpy2DUnaligned (the Async ones as cuMemcpy2DAsync). */
static CUDA_MEMCPY2D row_copy(size_t n)
{
	CUDA_MEMCPY2D c;
	memset(&c, 0, sizeof(c));
	c.WidthInBytes = n;
	c.Height = 1;
	return c;
}

#define SRC_ARRAY(c, a, off) ((c).srcMemoryType = CU_MEMORYTYPE_ARRAY, (c).srcArray = (a), (c).srcXInBytes = (off))
#define DST_ARRAY(c, a, off) ((c).dstMemoryType = CU_MEMORYTYPE_ARRAY, (c).dstArray = (a), (c).dstXInBytes = (off))

RM_EXPORT CUresult CUDAAPI cuMemcpyHtoA_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount)
{
	CUDA_MEMCPY2D c = row_copy(ByteCount);
	DST_ARRAY(c, dstArray, dstOffset);
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = srcHost;
	return cuMemcpy2DUnaligned_v2(&c);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyAtoH_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
	CUDA_MEMCPY2D c = row_copy(ByteCount);
	SRC_ARRAY(c, srcArray, srcOffset);
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = dstHost;
	return cuMemcpy2DUnaligned_v2(&c);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyHtoAAsync_v2(CUarray dstArray, size_t dstOffset, const void *srcHost, size_t ByteCount,
						 CUstream hStream)
{
	CUDA_MEMCPY2D c = row_copy(ByteCount);
	DST_ARRAY(c, dstArray, dstOffset);
	c.srcMemoryType = CU_MEMORYTYPE_HOST, c.srcHost = srcHost;
	return cuMemcpy2DAsync_v2(&c, hStream);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyAtoHAsync_v2(void *dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
						 CUstream hStream)
{
	CUDA_MEMCPY2D c = row_copy(ByteCount);
	SRC_ARRAY(c, srcArray, srcOffset);
	c.dstMemoryType = CU_MEMORYTYPE_HOST, c.dstHost = dstHost;
	return cuMemcpy2DAsync_v2(&c, hStream);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyDtoA_v2(CUarray dstArray, size_t dstOffset, CUdeviceptr srcDevice, size_t ByteCount)
{
	CUDA_MEMCPY2D c = row_copy(ByteCount);
	DST_ARRAY(c, dstArray, dstOffset);
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE, c.srcDevice = srcDevice;
	return cuMemcpy2DUnaligned_v2(&c);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyAtoD_v2(CUdeviceptr dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount)
{
	CUDA_MEMCPY2D c = row_copy(ByteCount);
	SRC_ARRAY(c, srcArray, srcOffset);
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE, c.dstDevice = dstDevice;
	return cuMemcpy2DUnaligned_v2(&c);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyAtoA_v2(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
					    size_t ByteCount)
{
	CUDA_MEMCPY2D c = row_copy(ByteCount);
	SRC_ARRAY(c, srcArray, srcOffset);
	DST_ARRAY(c, dstArray, dstOffset);
	return cuMemcpy2DUnaligned_v2(&c);
}
