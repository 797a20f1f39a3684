/* Copies between the program's memory and the GPU, and host allocations.
 * Copy data travels as bulk, straight from or into the program's buffer. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "remora.pb-c.h"

static CUresult copy_to_device(uint32_t op, CUdeviceptr dst, const void *src, size_t n, CUstream stream)
{
	if (!n)
		return CUDA_SUCCESS;
	if (!src)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__MemcpyHtoD req = REMORA__MEMCPY_HTO_D__INIT;
	req.dst = dst;
	req.stream = (uint64_t)(uintptr_t)stream;
	struct iovec data = {(void *)src, n};
	struct rm_rpc_call c = {.op = op, .req = &req.base, .bulk_out = &data, .nbulk_out = 1};
	return rm_rpc(&c);
}

static CUresult copy_from_device(uint32_t op, void *dst, CUdeviceptr src, size_t n, CUstream stream)
{
	if (!n)
		return CUDA_SUCCESS;
	if (!dst)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__MemcpyDtoH req = REMORA__MEMCPY_DTO_H__INIT;
	req.src = src;
	req.count = n;
	req.stream = (uint64_t)(uintptr_t)stream;
	struct rm_rpc_call c = {.op = op, .req = &req.base, .bulk_in = dst, .bulk_in_len = n};
	return rm_rpc(&c);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	return copy_to_device(RM_OP_cuMemcpyHtoD_v2, dstDevice, srcHost, ByteCount, NULL);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount,
						 CUstream hStream)
{
	return copy_to_device(RM_OP_cuMemcpyHtoDAsync_v2, dstDevice, srcHost, ByteCount, hStream);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	return copy_from_device(RM_OP_cuMemcpyDtoH_v2, dstHost, srcDevice, ByteCount, NULL);
}

/* The data must land in the program's memory, so this returns once it has:
 * stronger than CUDA promises, never weaker. */
RM_EXPORT CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount,
						 CUstream hStream)
{
	return copy_from_device(RM_OP_cuMemcpyDtoHAsync_v2, dstHost, srcDevice, ByteCount, hStream);
}

/* Host allocations: page-aligned and locked where the limits allow, tracked
 * so cuMemFreeHost and cuMemHostGetFlags know them. */
struct host_alloc {
	void *p;
	size_t size;
	unsigned int flags;
	struct host_alloc *next;
};

static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_alloc *host_allocs;

RM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (!pp || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	struct host_alloc *a = malloc(sizeof(*a));
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *p = NULL;
	if (!a || posix_memalign(&p, page, bytesize)) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	mlock(p, bytesize); /* best effort: RLIMIT_MEMLOCK may refuse */
	a->p = p;
	a->size = bytesize;
	a->flags = Flags;
	pthread_mutex_lock(&host_lock);
	a->next = host_allocs;
	host_allocs = a;
	pthread_mutex_unlock(&host_lock);
	*pp = p;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return cuMemHostAlloc(pp, bytesize, 0);
}

RM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	pthread_mutex_lock(&host_lock);
	struct host_alloc **link = &host_allocs;
	while (*link && (*link)->p != p)
		link = &(*link)->next;
	struct host_alloc *a = *link;
	if (a)
		*link = a->next;
	pthread_mutex_unlock(&host_lock);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	munlock(a->p, a->size);
	free(a->p);
	free(a);
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	if (!pFlags)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&host_lock);
	for (struct host_alloc *a = host_allocs; a; a = a->next)
		if ((char *)p >= (char *)a->p && (char *)p < (char *)a->p + a->size) {
			*pFlags = a->flags;
			r = CUDA_SUCCESS;
			break;
		}
	pthread_mutex_unlock(&host_lock);
	return r;
}
