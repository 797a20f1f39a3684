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
	int registered; /* the program's own memory, given by cuMemHostRegister */
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
	a->registered = 0;
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

/* Unlinks the allocation starting at p of the given origin, or returns NULL. */
static struct host_alloc *take_host_alloc(void *p, int registered)
{
	pthread_mutex_lock(&host_lock);
	struct host_alloc **link = &host_allocs;
	while (*link && ((*link)->p != p || (*link)->registered != registered))
		link = &(*link)->next;
	struct host_alloc *a = *link;
	if (a)
		*link = a->next;
	pthread_mutex_unlock(&host_lock);
	return a;
}

RM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	struct host_alloc *a = take_host_alloc(p, 0);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	munlock(a->p, a->size);
	free(a->p);
	free(a);
	return CUDA_SUCCESS;
}

/* Copies from and to registered memory already go straight from the program's
 * buffer; registering locks it where the limits allow and records it. */
RM_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (rm_host_alloc_find(p, NULL, NULL, NULL))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	struct host_alloc *a = malloc(sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mlock(p, bytesize);
	*a = (struct host_alloc){.p = p, .size = bytesize, .flags = Flags, .registered = 1};
	pthread_mutex_lock(&host_lock);
	a->next = host_allocs;
	host_allocs = a;
	pthread_mutex_unlock(&host_lock);
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	return cuMemHostRegister_v2(p, bytesize, Flags);
}

RM_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	struct host_alloc *a = take_host_alloc(p, 1);
	if (!a)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	munlock(a->p, a->size);
	free(a);
	return CUDA_SUCCESS;
}

int rm_host_alloc_find(const void *p, void **base, size_t *size, unsigned int *flags)
{
	int found = 0;
	pthread_mutex_lock(&host_lock);
	for (struct host_alloc *a = host_allocs; a && !found; a = a->next)
		if ((const char *)p >= (char *)a->p && (const char *)p < (char *)a->p + a->size) {
			if (base)
				*base = a->p;
			if (size)
				*size = a->size;
			if (flags)
				*flags = a->flags;
			found = 1;
		}
	pthread_mutex_unlock(&host_lock);
	return found;
}

RM_EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	if (!pFlags)
		return CUDA_ERROR_INVALID_VALUE;
	return rm_host_alloc_find(p, NULL, NULL, pFlags) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
