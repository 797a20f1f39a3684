/* Batches of copies (cuMemcpyBatchAsync, cuMemcpy3DBatchAsync): checked as the driver checks
 * a batch, then each copy issued as its single form on the batch's stream, cuMemcpyAsync (its
 * sides found by unified addressing) or cuMemcpy3DAsync, so that each is checked, and a host
 * side carried, as those are. The copies of a batch have no order among them, so issuing them
 * one by one in stream order is one of the orders CUDA allows. A copy that fails leaves those
 * before it issued (the _v1 forms name it in failIdx). The legacy NULL stream is refused. */
#include "client.h"

#include <stdint.h>
#include <string.h>

static int valid_order(CUmemcpySrcAccessOrder o)
{
	return o == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || o == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL ||
	       o == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}

static CUresult check_attrs(size_t count, const CUmemcpyAttributes *attrs, const size_t *idxs, size_t n)
{
	if (!attrs || !idxs || !n || n > count || idxs[0] != 0)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 0; k < n; k++) {
		if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= count || !valid_order(attrs[k].srcAccessOrder) ||
		    (attrs[k].flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE))
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
		      size_t *attrsIdxs, size_t numAttrs, size_t *failIdx, CUstream hStream)
{
	if (failIdx)
		*failIdx = SIZE_MAX;
	if (!dsts || !srcs || !sizes || !count || hStream == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_attrs(count, attrs, attrsIdxs, numAttrs);
	for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
		if ((r = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], hStream)) != CUDA_SUCCESS && failIdx)
			*failIdx = i;
	}
	return r;
}

RM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
						 CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
						 CUstream hStream)
{
	return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, NULL, hStream);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
					      CUmemcpyAttributes *attrs, size_t *attrsIdxs, size_t numAttrs,
					      size_t *failIdx, CUstream hStream)
{
	return batch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream);
}

/* An array's element size in bytes, or 0. */
static size_t element_bytes(CUarray a)
{
	CUDA_ARRAY3D_DESCRIPTOR d;
	if (!a || cuArray3DGetDescriptor_v2(&d, a) != CUDA_SUCCESS)
		return 0;
	static const struct { CUarray_format f; size_t bytes; } sizes[] = {
		{CU_AD_FORMAT_UNSIGNED_INT8, 1}, {CU_AD_FORMAT_SIGNED_INT8, 1}, {CU_AD_FORMAT_UNSIGNED_INT16, 2},
		{CU_AD_FORMAT_SIGNED_INT16, 2}, {CU_AD_FORMAT_HALF, 2}, {CU_AD_FORMAT_UNSIGNED_INT32, 4},
		{CU_AD_FORMAT_SIGNED_INT32, 4}, {CU_AD_FORMAT_FLOAT, 4},
	};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		if (sizes[i].f == d.Format)
			return sizes[i].bytes * d.NumChannels;
	return 0; /* packed and compressed formats: not by elements here */
}

/* One operand of a 3-D batch copy as a side of a CUDA_MEMCPY3D (elem bytes an element). */
static CUresult side(const CUmemcpy3DOperand *o, const CUextent3D *e, size_t elem, int is_dst, CUDA_MEMCPY3D *m)
{
	CUmemorytype type;
	CUdeviceptr dev = 0;
	void *host = NULL;
	CUarray array = NULL;
	size_t x = 0, y = 0, z = 0, pitch = 0, height = 0;
	if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
		if ((o->op.ptr.rowLength && o->op.ptr.rowLength < e->width) ||
		    (o->op.ptr.layerHeight && o->op.ptr.layerHeight < e->height))
			return CUDA_ERROR_INVALID_VALUE;
		pitch = (o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width) * elem;
		height = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
		int device = rm_on_device(o->op.ptr.ptr, 1);
		type = device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
		dev = device ? o->op.ptr.ptr : 0;
		host = device ? NULL : (void *)(uintptr_t)o->op.ptr.ptr;
	} else if (o->type == CU_MEMCPY_OPERAND_TYPE_ARRAY) {
		type = CU_MEMORYTYPE_ARRAY, array = o->op.array.array;
		x = o->op.array.offset.x * elem, y = o->op.array.offset.y, z = o->op.array.offset.z;
	} else {
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (is_dst) {
		m->dstMemoryType = type, m->dstDevice = dev, m->dstHost = host, m->dstArray = array;
		m->dstXInBytes = x, m->dstY = y, m->dstZ = z, m->dstPitch = pitch, m->dstHeight = height;
	} else {
		m->srcMemoryType = type, m->srcDevice = dev, m->srcHost = host, m->srcArray = array;
		m->srcXInBytes = x, m->srcY = y, m->srcZ = z, m->srcPitch = pitch, m->srcHeight = height;
	}
	return CUDA_SUCCESS;
}

static CUresult op_3d(const CUDA_MEMCPY3D_BATCH_OP *op, CUstream hStream)
{
	const CUextent3D *e = &op->extent;
	if (!e->width || !e->height || !e->depth || !valid_order(op->srcAccessOrder) ||
	    (op->flags & ~(unsigned)CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE))
		return CUDA_ERROR_INVALID_VALUE;
	int src_array = op->src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY;
	int dst_array = op->dst.type == CU_MEMCPY_OPERAND_TYPE_ARRAY;
	size_t elem = 1;
	if (src_array || dst_array) {
		size_t se = src_array ? element_bytes(op->src.op.array.array) : 0;
		size_t de = dst_array ? element_bytes(op->dst.op.array.array) : 0;
		if ((src_array && !se) || (dst_array && !de) || (se && de && se != de))
			return CUDA_ERROR_INVALID_VALUE;
		elem = se ? se : de;
	}
	CUDA_MEMCPY3D m;
	memset(&m, 0, sizeof(m));
	CUresult r = side(&op->src, e, elem, 0, &m);
	if (r == CUDA_SUCCESS)
		r = side(&op->dst, e, elem, 1, &m);
	if (r != CUDA_SUCCESS)
		return r;
	m.WidthInBytes = e->width * elem, m.Height = e->height, m.Depth = e->depth;
	return cuMemcpy3DAsync_v2(&m, hStream);
}

static CUresult batch_3d(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx, unsigned long long flags,
			 CUstream hStream)
{
	if (failIdx)
		*failIdx = SIZE_MAX;
	if (!numOps || !opList || flags || hStream == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	for (size_t i = 0; r == CUDA_SUCCESS && i < numOps; i++)
		if ((r = op_3d(&opList[i], hStream)) != CUDA_SUCCESS && failIdx)
			*failIdx = i;
	return r;
}

RM_EXPORT CUresult CUDAAPI cuMemcpy3DBatchAsync_v2(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList,
						   unsigned long long flags, CUstream hStream)
{
	return batch_3d(numOps, opList, NULL, flags, hStream);
}

RM_EXPORT CUresult CUDAAPI cuMemcpy3DBatchAsync(size_t numOps, CUDA_MEMCPY3D_BATCH_OP *opList, size_t *failIdx,
						unsigned long long flags, CUstream hStream)
{
	return batch_3d(numOps, opList, failIdx, flags, hStream);
}
