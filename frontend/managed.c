/* Managed memory (docs/managed-memory.md).
 *
 * cuMemAllocManaged allocates on the daemon (a whole number of RM_MANAGED_ALIGN bytes,
 * zeroed) and maps an anonymous region of this process at the very address the device
 * uses, so that the program's host code and its kernels name the same pointers. The two
 * copies are kept coherent as on a GPU without concurrent managed access, at the points
 * mapped host memory uses (host_memory.c):
 *   - before work that may read managed memory (a kernel or graph launch, a copy from
 *     the device), what the host changed since its copy last went up goes up, found by
 *     comparing with a shadow copy (the bytes as the device last had them): the span from
 *     the first to the last changed byte of each allocation, on the launch's stream;
 *   - after a synchronizing call that succeeded, if work was sent since (any async call,
 *     a copy to the device), each allocation comes down and every byte the device changed
 *     (it differs from the shadow) is written to the host copy; bytes the host changed
 *     meanwhile and the device did not are kept, and go up before the next launch.
 * The host sees the device's writes only after synchronizing, and the device the host's
 * only in work issued after them, as CUDA promises without concurrent managed access.
 * Everything managed of a process is bounded by MANAGED_LIMIT (the shadows double it). */
#include "client.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "api.pb-c.h"
#include "remora.pb-c.h"

#define MANAGED_LIMIT (256u << 20) /* bytes of managed memory per process */

struct managed {
	CUdeviceptr base;
	size_t size;        /* mapped bytes: a whole number of RM_MANAGED_ALIGN */
	CUcontext ctx;      /* current when it was made: its copies are made in it */
	uint8_t *shadow;    /* the contents as the device last had them */
	struct managed *next;
};

/* lock guards the list; coherence orders the copies and a record's removal, and is
 * taken before lock, never inside it. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t coherence = PTHREAD_MUTEX_INITIALIZER;
static struct managed *list;
static size_t total;            /* under lock */
static atomic_int count;        /* allocations */
static atomic_int device_work;  /* work was sent since the device copies last came down */

void rm_managed_note_work(void)
{
	if (atomic_load_explicit(&count, memory_order_relaxed))
		atomic_store(&device_work, 1);
}

/* The record holding [p, p + n), under lock. */
static struct managed *find_locked(CUdeviceptr p, size_t n)
{
	for (struct managed *m = list; m; m = m->next)
		if (p >= m->base && p - m->base < m->size && n <= m->size - (p - m->base))
			return m;
	return NULL;
}

int rm_managed_any(void)
{
	return atomic_load(&count) != 0;
}

int rm_managed_holds(CUdeviceptr p, size_t n)
{
	if (!atomic_load(&count))
		return 0;
	pthread_mutex_lock(&lock);
	int found = find_locked(p, n ? n : 1) != NULL;
	pthread_mutex_unlock(&lock);
	return found;
}

RM_EXPORT CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (!dptr || !bytesize || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	if (bytesize > MANAGED_LIMIT)
		goto too_much;
	size_t size = (bytesize + RM_MANAGED_ALIGN - 1) / RM_MANAGED_ALIGN * RM_MANAGED_ALIGN;
	pthread_mutex_lock(&lock);
	int fits = size <= MANAGED_LIMIT - total;
	if (fits)
		total += size; /* reserved while it is made */
	pthread_mutex_unlock(&lock);
	if (!fits)
		goto too_much;

	struct managed *m = calloc(1, sizeof(*m));
	uint8_t *shadow = calloc(1, size);
	Remora__CuMemAllocManagedReq req = REMORA__CU_MEM_ALLOC_MANAGED__REQ__INIT;
	req.bytesize = bytesize;
	req.flags = flags;
	Remora__CuMemAllocManagedRep *rep = NULL;
	CUresult r = m && shadow ? rm_rpc_simple(RM_OP_cuMemAllocManaged, &req.base,
						 &remora__cu_mem_alloc_managed__rep__descriptor, (ProtobufCMessage **)&rep)
				 : CUDA_ERROR_OUT_OF_MEMORY;
	CUdeviceptr p = r == CUDA_SUCCESS && rep ? (CUdeviceptr)rep->dptr : 0;
	rm_rpc_free(rep ? &rep->base : NULL);
	if (r == CUDA_SUCCESS) {
		void *at = (void *)(uintptr_t)p;
		void *got = p % (CUdeviceptr)sysconf(_SC_PAGESIZE) ? MAP_FAILED
			    : mmap(at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (got != at) {
			int err = got == MAP_FAILED ? errno : EEXIST;
			if (got != MAP_FAILED)
				munmap(got, size); /* an old kernel took MAP_FIXED_NOREPLACE for a hint */
			rm_log(RM_LOG_ERROR, "cuMemAllocManaged: the device's address %#llx (%zu bytes) cannot be mapped in "
			       "this process (%s): managed memory must have the same address on both sides "
			       "(docs/managed-memory.md)", (unsigned long long)p, size, strerror(err));
			cuMemFree_v2(p);
			r = CUDA_ERROR_NOT_SUPPORTED;
		}
	}
	if (r != CUDA_SUCCESS) {
		free(shadow);
		free(m);
		pthread_mutex_lock(&lock);
		total -= size;
		pthread_mutex_unlock(&lock);
		return r;
	}
	m->base = p;
	m->size = size;
	m->ctx = rm_ctx_current();
	m->shadow = shadow;
	pthread_mutex_lock(&lock);
	m->next = list;
	list = m;
	pthread_mutex_unlock(&lock);
	atomic_fetch_add(&count, 1);
	*dptr = p;
	return CUDA_SUCCESS;

too_much:
	rm_log(RM_LOG_ERROR, "cuMemAllocManaged: %zu bytes would pass the %u bytes of managed memory a process may "
	       "hold through Remora (docs/managed-memory.md)", bytesize, MANAGED_LIMIT);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

/* After the daemon freed base: the record and the mapping go, if it was managed. */
void rm_managed_forget(CUdeviceptr base)
{
	if (!atomic_load(&count))
		return;
	pthread_mutex_lock(&coherence);
	pthread_mutex_lock(&lock);
	struct managed **link = &list;
	while (*link && (*link)->base != base)
		link = &(*link)->next;
	struct managed *m = *link;
	if (m) {
		*link = m->next;
		total -= m->size;
	}
	pthread_mutex_unlock(&lock);
	if (m) {
		atomic_fetch_sub(&count, 1);
		munmap((void *)(uintptr_t)m->base, m->size);
		free(m->shadow);
		free(m);
	}
	pthread_mutex_unlock(&coherence);
}

RM_EXPORT CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr)
{
	Remora__CuMemFreeV2Req req = REMORA__CU_MEM_FREE_V2__REQ__INIT;
	req.dptr = dptr;
	CUresult r = rm_rpc_simple(RM_OP_cuMemFree_v2, &req.base, NULL, NULL);
	if (r == CUDA_SUCCESS)
		rm_managed_forget(dptr);
	return r;
}

/* Runs copy on each allocation under the coherence lock, its context current. */
static CUresult each(CUresult (*copy)(struct managed *m, CUstream stream), CUstream stream)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&coherence);
	pthread_mutex_lock(&lock);
	struct managed *m = list; /* records stay while coherence is held; new ones go in front */
	pthread_mutex_unlock(&lock);
	for (; m && r == CUDA_SUCCESS; m = m->next) {
		CUcontext cur = rm_ctx_current();
		int other = m->ctx && cur != m->ctx;
		int pushed = other && cuCtxPushCurrent_v2(m->ctx) == CUDA_SUCCESS;
		r = copy(m, other ? NULL : stream);
		if (pushed)
			cuCtxPopCurrent_v2(&cur);
	}
	pthread_mutex_unlock(&coherence);
	return r;
}

static CUresult push(struct managed *m, CUstream stream)
{
	const uint8_t *host = (const uint8_t *)(uintptr_t)m->base;
	size_t first = 0, last = m->size;
	while (first < m->size && host[first] == m->shadow[first])
		first++;
	if (first == m->size)
		return CUDA_SUCCESS;
	while (last > first && host[last - 1] == m->shadow[last - 1])
		last--;
	memcpy(m->shadow + first, host + first, last - first);
	return rm_copy_to_device(m->base + first, m->shadow + first, last - first, stream, 0);
}

static CUresult pull(struct managed *m, CUstream stream)
{
	(void)stream;
	uint8_t *dev = malloc(m->size);
	if (!dev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = rm_copy_from_device(dev, m->base, m->size);
	size_t both = 0, first = 0;
	if (r == CUDA_SUCCESS) {
		uint8_t *host = (uint8_t *)(uintptr_t)m->base;
		for (size_t i = 0; i < m->size; i++) {
			if (dev[i] == m->shadow[i])
				continue;
			if (host[i] != m->shadow[i] && host[i] != dev[i] && !both++)
				first = i;
			host[i] = m->shadow[i] = dev[i];
		}
	}
	free(dev);
	/* The host and the GPU both changed these bytes since the launch: a concurrent access
	 * this device reports it does not have (concurrentManagedAccess 0), whose host side was
	 * just lost. An error, never a wrong answer. */
	if (both) {
		rm_log(RM_LOG_ERROR, "managed memory at 0x%llx: the host and the GPU both wrote %zu byte(s) of it "
		       "between a launch and its synchronize, which needs concurrent managed access (reported "
		       "absent): the host's writes are lost", (unsigned long long)(m->base + first), both);
		r = CUDA_ERROR_NOT_SUPPORTED;
	}
	return r;
}

CUresult rm_managed_push(CUstream stream)
{
	if (!atomic_load(&count))
		return CUDA_SUCCESS;
	atomic_store(&device_work, 1);
	return each(push, stream);
}

CUresult rm_managed_pull(void)
{
	if (!atomic_load(&count) || !atomic_exchange(&device_work, 0))
		return CUDA_SUCCESS;
	return each(pull, NULL);
}

/* ---- prefetch, advice, attributes ---- */

RM_EXPORT CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr devPtr, size_t count, CUdevice dstDevice, CUstream hStream)
{
	if (!rm_managed_holds(devPtr, count) || !count)
		return CUDA_ERROR_INVALID_VALUE;
	if (dstDevice == CU_DEVICE_CPU) /* to this process: it comes down at the next synchronization */
		return CUDA_SUCCESS;
	Remora__CuMemPrefetchAsyncReq req = REMORA__CU_MEM_PREFETCH_ASYNC__REQ__INIT;
	req.devptr = devPtr;
	req.count = count;
	req.dstdevice = dstDevice;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	return rm_rpc_ordered(RM_OP_cuMemPrefetchAsync, &req.base, req.hstream, 0); /* after its stream's work only */
}

static int location_device(CUmemLocation location)
{
	return location.type == CU_MEM_LOCATION_TYPE_HOST ? CU_DEVICE_CPU
	       : location.type == CU_MEM_LOCATION_TYPE_DEVICE ? location.id : -3;
}

RM_EXPORT CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr devPtr, size_t count, CUmemLocation location,
						 unsigned int flags, CUstream hStream)
{
	int dev = location_device(location);
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (dev == -3)
		return rm_unsupported("cuMemPrefetchAsync_v2 to a location other than the host or a device");
	return cuMemPrefetchAsync(devPtr, count, dev, hStream);
}

RM_EXPORT CUresult CUDAAPI cuMemAdvise(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUdevice device)
{
	if (!rm_managed_holds(devPtr, count) || !count)
		return CUDA_ERROR_INVALID_VALUE;
	if (device == CU_DEVICE_CPU) /* about this process's copy, which is always here */
		return CUDA_SUCCESS;
	Remora__CuMemAdviseReq req = REMORA__CU_MEM_ADVISE__REQ__INIT;
	req.devptr = devPtr;
	req.count = count;
	req.advice = advice;
	req.device = device;
	return rm_rpc_simple(RM_OP_cuMemAdvise, &req.base, NULL, NULL);
}

RM_EXPORT CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr devPtr, size_t count, CUmem_advise advice, CUmemLocation location)
{
	int dev = location_device(location);
	if (dev == -3)
		return rm_unsupported("cuMemAdvise_v2 of a location other than the host or a device");
	return cuMemAdvise(devPtr, count, advice, dev);
}

RM_EXPORT CUresult CUDAAPI cuMemRangeGetAttributes(void **data, size_t *dataSizes, CUmem_range_attribute *attributes,
						   size_t numAttributes, CUdeviceptr devPtr, size_t count)
{
	if (!data || !dataSizes || !attributes || !numAttributes)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < numAttributes; i++) {
		CUresult r = cuMemRangeGetAttribute(data[i], dataSizes[i], attributes[i], devPtr, count);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}
