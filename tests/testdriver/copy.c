/* Copies and memsets, queued on streams.  The synchronous forms queue on the
 * NULL stream and wait; an asynchronous copy whose host side is pageable
 * (not from cuMemHostAlloc) also waits, as CUDA stages pageable memory. */
#include "testdriver.h"

#include <stdlib.h>

enum side { SIDE_HOST, SIDE_DEVICE, SIDE_ANY };

/* A device side must lie inside one allocation; a host side is anything. */
static bool side_ok(enum side side, const void *p, size_t bytes)
{
	return side != SIDE_DEVICE || bytes == 0 || td_device_range_ok(p, bytes);
}

static bool pinned(const void *p, size_t bytes)
{
	struct td_alloc a;
	return td_find_alloc((uintptr_t)p, bytes, &a) && (a.kind == TD_ALLOC_HOST || a.kind == TD_ALLOC_REGISTERED);
}

static CUresult copy(void *dst, enum side dst_side, const void *src, enum side src_side,
		     size_t bytes, CUstream stream, bool async)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS || (rc = td_capture_usable(s)) != CUDA_SUCCESS)
		return rc;
	if (bytes && (!dst || !src))
		return CUDA_ERROR_INVALID_VALUE;
	if (!side_ok(dst_side, dst, bytes) || !side_ok(src_side, src, bytes))
		return CUDA_ERROR_INVALID_VALUE;
	if (bytes == 0)
		return CUDA_SUCCESS;
	if ((dst_side == SIDE_HOST && !pinned(dst, bytes)) || (src_side == SIDE_HOST && !pinned(src, bytes)))
		async = false;
	struct td_op *op = td_op_new(TD_OP_COPY);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.copy.dst = dst;
	op->u.copy.src = src;
	op->u.copy.bytes = bytes;
	uint64_t ticket = td_enqueue(s, op);
	if (!async)
		td_wait_ticket(s, ticket);
	return async ? CUDA_SUCCESS : td_sticky_error();
}

#define DEV(p) ((void *)(uintptr_t)(p))

TD_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t bytes)
{
	return copy(DEV(dst), SIDE_DEVICE, src, SIDE_HOST, bytes, NULL, false);
}

TD_EXPORT CUresult cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t bytes)
{
	return copy(dst, SIDE_HOST, DEV(src), SIDE_DEVICE, bytes, NULL, false);
}

TD_EXPORT CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
	return copy(DEV(dst), SIDE_DEVICE, DEV(src), SIDE_DEVICE, bytes, NULL, false);
}

TD_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
	return copy(DEV(dst), SIDE_ANY, DEV(src), SIDE_ANY, bytes, NULL, false);
}

TD_EXPORT CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t bytes, CUstream stream)
{
	return copy(DEV(dst), SIDE_DEVICE, src, SIDE_HOST, bytes, stream, true);
}

TD_EXPORT CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	return copy(dst, SIDE_HOST, DEV(src), SIDE_DEVICE, bytes, stream, true);
}

TD_EXPORT CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	return copy(DEV(dst), SIDE_DEVICE, DEV(src), SIDE_DEVICE, bytes, stream, true);
}

TD_EXPORT CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	return copy(DEV(dst), SIDE_ANY, DEV(src), SIDE_ANY, bytes, stream, true);
}

static CUresult memset_elements(CUdeviceptr dst, uint32_t value, unsigned width, size_t count,
				CUstream stream, bool async)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS || (rc = td_capture_usable(s)) != CUDA_SUCCESS)
		return rc;
	if (count && (dst % width || !td_device_range_ok(DEV(dst), count * width)))
		return CUDA_ERROR_INVALID_VALUE;
	if (count == 0)
		return CUDA_SUCCESS;
	struct td_op *op = td_op_new(TD_OP_SET);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	op->u.set.dst = DEV(dst);
	op->u.set.value = value;
	op->u.set.width = width;
	op->u.set.count = count;
	uint64_t ticket = td_enqueue(s, op);
	if (!async)
		td_wait_ticket(s, ticket);
	return async ? CUDA_SUCCESS : td_sticky_error();
}

TD_EXPORT CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char value, size_t count)
{
	return memset_elements(dst, value, 1, count, NULL, false);
}

TD_EXPORT CUresult cuMemsetD16_v2(CUdeviceptr dst, unsigned short value, size_t count)
{
	return memset_elements(dst, value, 2, count, NULL, false);
}

TD_EXPORT CUresult cuMemsetD32_v2(CUdeviceptr dst, unsigned int value, size_t count)
{
	return memset_elements(dst, value, 4, count, NULL, false);
}

TD_EXPORT CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char value, size_t count, CUstream stream)
{
	return memset_elements(dst, value, 1, count, stream, true);
}

TD_EXPORT CUresult cuMemsetD16Async(CUdeviceptr dst, unsigned short value, size_t count, CUstream stream)
{
	return memset_elements(dst, value, 2, count, stream, true);
}

TD_EXPORT CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned int value, size_t count, CUstream stream)
{
	return memset_elements(dst, value, 4, count, stream, true);
}
