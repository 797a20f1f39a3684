/* Batches of copies: checked as a batch, then each copy done as cuMemcpyAsync or as
 * cuMemcpy3DAsync (pointer operands of unified memory type) on the batch's stream. */
#include "testdriver.h"

#include <string.h>

static bool valid_order(CUmemcpySrcAccessOrder o)
{
	return o == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || o == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL ||
	       o == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}

static CUresult batch(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count, CUmemcpyAttributes *attrs,
		      size_t *idxs, size_t n, size_t *fail, CUstream stream)
{
	if (fail)
		*fail = SIZE_MAX;
	if (!dsts || !srcs || !sizes || !count || !attrs || !idxs || !n || n > count || idxs[0] ||
	    stream == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t k = 0; k < n; k++)
		if ((k && idxs[k] <= idxs[k - 1]) || idxs[k] >= count || !valid_order(attrs[k].srcAccessOrder))
			return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		CUresult rc = cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream);
		if (rc != CUDA_SUCCESS) {
			if (fail)
				*fail = i;
			return rc;
		}
	}
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemcpyBatchAsync_v2(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
					 CUmemcpyAttributes *attrs, size_t *idxs, size_t n, CUstream stream)
{
	return batch(dsts, srcs, sizes, count, attrs, idxs, n, NULL, stream);
}

TD_EXPORT CUresult cuMemcpyBatchAsync(CUdeviceptr *dsts, CUdeviceptr *srcs, size_t *sizes, size_t count,
				      CUmemcpyAttributes *attrs, size_t *idxs, size_t n, size_t *fail, CUstream stream)
{
	return batch(dsts, srcs, sizes, count, attrs, idxs, n, fail, stream);
}

static void side(const CUmemcpy3DOperand *o, const CUextent3D *e, size_t elem, CUmemorytype *type, CUdeviceptr *dev,
		 CUarray *array, size_t *x, size_t *y, size_t *z, size_t *pitch, size_t *height)
{
	if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
		*type = CU_MEMORYTYPE_UNIFIED, *dev = o->op.ptr.ptr;
		*pitch = (o->op.ptr.rowLength ? o->op.ptr.rowLength : e->width) * elem;
		*height = o->op.ptr.layerHeight ? o->op.ptr.layerHeight : e->height;
	} else {
		*type = CU_MEMORYTYPE_ARRAY, *array = o->op.array.array;
		*x = o->op.array.offset.x * elem, *y = o->op.array.offset.y, *z = o->op.array.offset.z;
	}
}

static CUresult op_3d(const CUDA_MEMCPY3D_BATCH_OP *op, CUstream stream)
{
	const CUextent3D *e = &op->extent;
	if (!e->width || !e->height || !e->depth || !valid_order(op->srcAccessOrder))
		return CUDA_ERROR_INVALID_VALUE;
	size_t elem = 1;
	for (int i = 0; i < 2; i++) {
		const CUmemcpy3DOperand *o = i ? &op->dst : &op->src;
		if (o->type != CU_MEMCPY_OPERAND_TYPE_POINTER && o->type != CU_MEMCPY_OPERAND_TYPE_ARRAY)
			return CUDA_ERROR_INVALID_VALUE;
		if (o->type == CU_MEMCPY_OPERAND_TYPE_POINTER &&
		    ((o->op.ptr.rowLength && o->op.ptr.rowLength < e->width) ||
		     (o->op.ptr.layerHeight && o->op.ptr.layerHeight < e->height)))
			return CUDA_ERROR_INVALID_VALUE;
		if (o->type == CU_MEMCPY_OPERAND_TYPE_ARRAY) {
			struct td_array *a = td_array_of(o->op.array.array);
			if (!a)
				return CUDA_ERROR_INVALID_HANDLE;
			if (elem != 1 && elem != a->elem)
				return CUDA_ERROR_INVALID_VALUE;
			elem = a->elem;
		}
	}
	CUDA_MEMCPY3D m;
	memset(&m, 0, sizeof(m));
	side(&op->src, e, elem, &m.srcMemoryType, &m.srcDevice, &m.srcArray, &m.srcXInBytes, &m.srcY, &m.srcZ,
	     &m.srcPitch, &m.srcHeight);
	side(&op->dst, e, elem, &m.dstMemoryType, &m.dstDevice, &m.dstArray, &m.dstXInBytes, &m.dstY, &m.dstZ,
	     &m.dstPitch, &m.dstHeight);
	m.WidthInBytes = e->width * elem, m.Height = e->height, m.Depth = e->depth;
	return cuMemcpy3DAsync_v2(&m, stream);
}

static CUresult batch_3d(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags, CUstream stream)
{
	if (fail)
		*fail = SIZE_MAX;
	if (!n || !ops || flags || stream == CU_STREAM_LEGACY)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n; i++) {
		CUresult rc = op_3d(&ops[i], stream);
		if (rc != CUDA_SUCCESS) {
			if (fail)
				*fail = i;
			return rc;
		}
	}
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemcpy3DBatchAsync_v2(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, unsigned long long flags,
					   CUstream stream)
{
	return batch_3d(n, ops, NULL, flags, stream);
}

TD_EXPORT CUresult cuMemcpy3DBatchAsync(size_t n, CUDA_MEMCPY3D_BATCH_OP *ops, size_t *fail, unsigned long long flags,
					CUstream stream)
{
	return batch_3d(n, ops, fail, flags, stream);
}
