/* Memory: device memory is host memory from aligned allocations, tracked in
 * one table so that pointers can be checked and the device total enforced. */
#include "testdriver.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

static struct td_alloc *allocs;       /* guarded by td_lock */
static size_t alloc_count, alloc_capacity;
static size_t device_used[TD_MAX_DEVICES];
static uint64_t next_buffer_id = 1;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static size_t page_size(void)
{
	long size = sysconf(_SC_PAGESIZE);
	return size > 0 ? (size_t)size : 4096;
}

/* Caller holds td_lock. */
static struct td_alloc *find_locked(uintptr_t addr, size_t bytes)
{
	for (size_t i = 0; i < alloc_count; i++) {
		struct td_alloc *a = &allocs[i];
		if (addr >= a->base && addr - a->base < a->size && bytes <= a->size - (addr - a->base))
			return a;
	}
	return NULL;
}

bool td_find_alloc(uintptr_t addr, size_t bytes, struct td_alloc *out)
{
	pthread_mutex_lock(&td_lock);
	struct td_alloc *a = find_locked(addr, bytes ? bytes : 1);
	if (a && out)
		*out = *a;
	pthread_mutex_unlock(&td_lock);
	return a != NULL;
}

bool td_device_range_ok(const void *addr, size_t bytes)
{
	return td_find_alloc((uintptr_t)addr, bytes, NULL);
}

CUresult td_track(void *base, size_t size, enum td_alloc_kind kind, struct td_context *ctx, int device)
{
	pthread_mutex_lock(&td_lock);
	if (alloc_count == alloc_capacity) {
		size_t capacity = alloc_capacity ? alloc_capacity * 2 : 64;
		struct td_alloc *grown = realloc(allocs, capacity * sizeof *grown);
		if (!grown) {
			pthread_mutex_unlock(&td_lock);
			return CUDA_ERROR_OUT_OF_MEMORY;
		}
		allocs = grown;
		alloc_capacity = capacity;
	}
	allocs[alloc_count++] = (struct td_alloc){
		.base = (uintptr_t)base, .size = size, .kind = kind, .ctx = ctx,
		.device = device, .buffer_id = next_buffer_id++,
	};
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

/* Removes the entry at index; caller holds td_lock and frees the memory. */
static void untrack_locked(size_t index)
{
	if (allocs[index].kind == TD_ALLOC_DEVICE || allocs[index].kind == TD_ALLOC_MANAGED)
		device_used[allocs[index].device] -= allocs[index].size;
	allocs[index] = allocs[--alloc_count];
}

bool td_untrack(uintptr_t base, enum td_alloc_kind kind)
{
	bool found = false;
	pthread_mutex_lock(&td_lock);
	for (size_t i = 0; i < alloc_count && !found; i++)
		if (allocs[i].base == base && allocs[i].kind == kind) {
			allocs[i] = allocs[--alloc_count];
			found = true;
		}
	pthread_mutex_unlock(&td_lock);
	return found;
}

bool td_device_reserve(int device, size_t size)
{
	pthread_mutex_lock(&td_lock);
	bool fits = size <= td_device_total_mem(device) - device_used[device];
	if (fits)
		device_used[device] += size;
	pthread_mutex_unlock(&td_lock);
	return fits;
}

void td_device_unreserve(int device, size_t size)
{
	pthread_mutex_lock(&td_lock);
	device_used[device] -= size;
	pthread_mutex_unlock(&td_lock);
}

void td_set_alloc_flags(uintptr_t base, unsigned int flags)
{
	pthread_mutex_lock(&td_lock);
	for (size_t i = 0; i < alloc_count; i++)
		if (allocs[i].base == base)
			allocs[i].flags = flags;
	pthread_mutex_unlock(&td_lock);
}

void td_set_alloc_pool(uintptr_t base, struct td_pool *pool)
{
	pthread_mutex_lock(&td_lock);
	for (size_t i = 0; i < alloc_count; i++)
		if (allocs[i].base == base)
			allocs[i].pool = pool;
	pthread_mutex_unlock(&td_lock);
}

struct td_pool *td_alloc_pool(uintptr_t ptr)
{
	struct td_alloc a;
	return td_find_alloc(ptr, 1, &a) ? a.pool : NULL;
}

/* Device memory takes whole granules of address space, aligned, as a GPU's allocations of
 * 2 MiB or more do: a freed allocation's range is then free for a reservation there
 * (live migration moves a client back to addresses it had). NULL: none. */
#define DEVICE_GRANULE (2ul << 20)

/* Device memory is laid out in a window of the process's address space of its own, at a
 * random 1 GiB slot from 32 TiB, away from host mappings (a GPU's address space is its
 * own): a moved client's addresses, another process's device memory, are then free here
 * (live migration), not a thread's stack. Past the window, or where a hint is taken, the
 * kernel places it. */
#define DEVICE_WINDOW_BASE (32ull << 40)
#define DEVICE_WINDOW_SLOTS 8192u      /* of 1 GiB */
#define DEVICE_WINDOW_SIZE (1ull << 40) /* a process's window */
static uint64_t window_next, window_end;
static pthread_once_t window_once = PTHREAD_ONCE_INIT;

/* REMORA_TESTDRIVER_DEVICE_SLOT=N: the slot, the same in every process that sets it, as
 * every process's device addresses on a GPU begin at the same place. */
static void window_init(void)
{
	uint32_t r = 0;
	const char *slot = getenv("REMORA_TESTDRIVER_DEVICE_SLOT");
	if (slot && *slot)
		r = (uint32_t)strtoul(slot, NULL, 10);
	else if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
		r = (uint32_t)getpid() * 2654435761u;
	window_next = DEVICE_WINDOW_BASE + (uint64_t)(r % DEVICE_WINDOW_SLOTS) * (1ull << 30);
	window_end = window_next + DEVICE_WINDOW_SIZE;
}

static void *window_map(size_t span)
{
	pthread_once(&window_once, window_init);
	uint64_t at = __atomic_fetch_add(&window_next, span, __ATOMIC_RELAXED);
	if (at + span > window_end)
		return NULL;
	void *m = mmap((void *)(uintptr_t)at, span, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	if ((uintptr_t)m != at) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
		munmap(m, span);
		return NULL;
	}
	return m;
}

static void *device_map(size_t size)
{
	size_t span = round_up(size, DEVICE_GRANULE);
	void *w = window_map(span);
	if (w)
		return w;
	char *m = mmap(NULL, span + DEVICE_GRANULE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		       -1, 0);
	if (m == MAP_FAILED)
		return NULL;
	uintptr_t base = round_up((uintptr_t)m, DEVICE_GRANULE);
	if (base > (uintptr_t)m)
		munmap(m, base - (uintptr_t)m);
	munmap((char *)base + span, (uintptr_t)m + span + DEVICE_GRANULE - (base + span));
	return (void *)base;
}

CUresult td_device_alloc(struct td_context *ctx, int device, size_t bytes, CUdeviceptr *out)
{
	size_t size = round_up(bytes, TD_DEVICE_ALIGN);
	pthread_mutex_lock(&td_lock);
	bool fits = size <= td_device_total_mem(device) - device_used[device];
	if (fits)
		device_used[device] += size;   /* reserved now, so concurrent allocations cannot overshoot */
	pthread_mutex_unlock(&td_lock);
	if (!fits)
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *memory = device_map(size);
	CUresult rc = memory ? td_track(memory, size, TD_ALLOC_DEVICE, ctx, device) : CUDA_ERROR_OUT_OF_MEMORY;
	if (rc != CUDA_SUCCESS) {
		pthread_mutex_lock(&td_lock);
		device_used[device] -= size;
		pthread_mutex_unlock(&td_lock);
		if (memory)
			munmap(memory, round_up(size, DEVICE_GRANULE));
		return rc;
	}
	*out = (CUdeviceptr)(uintptr_t)memory;
	return CUDA_SUCCESS;
}

bool td_managed_update(uintptr_t ptr, void (*update)(struct td_alloc *a, const void *arg), const void *arg)
{
	pthread_mutex_lock(&td_lock);
	struct td_alloc *a = find_locked(ptr, 1);
	bool found = a && a->kind == TD_ALLOC_MANAGED;
	if (found)
		update(a, arg);
	pthread_mutex_unlock(&td_lock);
	return found;
}

/* Gives an allocation's memory back: managed memory is a mapping of its own. */
static void release_memory(const struct td_alloc *a)
{
	if (a->kind == TD_ALLOC_DEVICE) {
		munmap((void *)a->base, round_up(a->size, DEVICE_GRANULE));
	} else if (a->kind == TD_ALLOC_MANAGED) {
		munmap((void *)a->base, a->size);
	} else if (a->kind == TD_ALLOC_HOST) {
		free((void *)a->base);
	}
}

void td_free_device_range(uintptr_t base)
{
	pthread_mutex_lock(&td_lock);
	for (size_t i = 0; i < alloc_count; i++) {
		if (allocs[i].base == base) {
			struct td_alloc a = allocs[i];
			untrack_locked(i);
			release_memory(&a);
			break;
		}
	}
	pthread_mutex_unlock(&td_lock);
}

void td_free_context_allocs(struct td_context *ctx)
{
	pthread_mutex_lock(&td_lock);
	for (size_t i = 0; i < alloc_count;) {
		if (allocs[i].ctx == ctx) {
			struct td_alloc a = allocs[i];
			untrack_locked(i);
			release_memory(&a);
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&td_lock);
}

/* ---- allocation entry points ---- */

TD_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytes)
{
	td_crash_if_asked("cuMemAlloc_v2");
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	return td_device_alloc(ctx, ctx->device, bytes, dptr);
}

TD_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr)
		return CUDA_SUCCESS;
	int graph = td_graph_mem_release(dptr);
	if (graph)
		return graph > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (td_ipc_close_mem(dptr, true)) /* an allocation of an imported pool */
		return CUDA_SUCCESS;
	struct td_alloc a;
	if (!td_find_alloc(dptr, 1, &a) || a.base != dptr || (a.kind != TD_ALLOC_DEVICE && a.kind != TD_ALLOC_MANAGED) ||
	    !a.ctx)
		return CUDA_ERROR_INVALID_VALUE;
	/* Like cudaFree: no queued work may still use it. */
	td_context_synchronize(a.ctx);
	if (a.pool)
		td_pool_freed(a.pool, a.size);
	td_free_device_range(a.base);
	if (a.kind == TD_ALLOC_DEVICE)
		td_freed_va_record(a.base);
	return CUDA_SUCCESS;
}

/* Stream-ordered free: only the stream's earlier work must be done, not the context's.
 * Modelled by waiting for that stream, then freeing. */
TD_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream handle)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr)
		return CUDA_ERROR_INVALID_VALUE;
	int graph = td_graph_mem_release(dptr);
	if (graph)
		return graph > 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	struct td_alloc a;
	if (!td_find_alloc(dptr, 1, &a) || a.base != dptr || a.kind != TD_ALLOC_DEVICE || !a.ctx)
		return CUDA_ERROR_INVALID_VALUE;
	td_stream_synchronize(s);
	if (td_ipc_close_mem(dptr, true)) /* an allocation of an imported pool */
		return CUDA_SUCCESS;
	if (a.pool)
		td_pool_freed(a.pool, a.size);
	td_free_device_range(a.base);
	td_freed_va_record(a.base);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!free_bytes || !total_bytes)
		return CUDA_ERROR_INVALID_VALUE;
	size_t total = td_device_total_mem(ctx->device);
	pthread_mutex_lock(&td_lock);
	*free_bytes = total - device_used[ctx->device];
	pthread_mutex_unlock(&td_lock);
	*total_bytes = total;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_alloc a;
	if (!td_find_alloc(dptr, 1, &a) || a.kind != TD_ALLOC_DEVICE)
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = a.base;
	if (psize)
		*psize = a.size;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytes, unsigned int flags)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pp || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	size_t page = page_size(), size = round_up(bytes, page);
	void *memory = aligned_alloc(page, size);
	if (!memory)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = td_track(memory, size, TD_ALLOC_HOST, ctx, ctx->device);
	if (rc != CUDA_SUCCESS) {
		free(memory);
		return rc;
	}
	td_set_alloc_flags((uintptr_t)memory, flags);
	*pp = memory;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytes)
{
	if (td_fail_now(TD_FAIL_MEM_ALLOC_HOST))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return cuMemHostAlloc(pp, bytes, 0);
}

TD_EXPORT CUresult cuMemFreeHost(void *p)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_alloc a;
	if (!p || !td_find_alloc((uintptr_t)p, 1, &a) || a.base != (uintptr_t)p || a.kind != TD_ALLOC_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	td_context_synchronize(ctx);
	td_free_device_range(a.base);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemHostGetFlags(unsigned int *flags, void *p)
{
	struct td_alloc a;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!flags || !td_find_alloc((uintptr_t)p, 1, &a) || (a.kind != TD_ALLOC_HOST && a.kind != TD_ALLOC_REGISTERED))
		return CUDA_ERROR_INVALID_VALUE;
	*flags = a.flags;
	return CUDA_SUCCESS;
}

/* Registered host memory: recorded, never freed here. */
TD_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytes, unsigned int flags)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!p || bytes == 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (td_find_alloc((uintptr_t)p, 1, NULL))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	rc = td_track(p, bytes, TD_ALLOC_REGISTERED, ctx, ctx->device);
	if (rc == CUDA_SUCCESS)
		td_set_alloc_flags((uintptr_t)p, flags);
	return rc;
}

TD_EXPORT CUresult cuMemHostRegister(void *p, size_t bytes, unsigned int flags)
{
	return cuMemHostRegister_v2(p, bytes, flags);
}

TD_EXPORT CUresult cuMemHostUnregister(void *p)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	td_context_synchronize(ctx);
	return td_untrack((uintptr_t)p, TD_ALLOC_REGISTERED) ? CUDA_SUCCESS : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
}

/* Unified addressing: pinned memory's device pointer is its host pointer (a kernel of
 * this driver reaches any tracked allocation). */
TD_EXPORT CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_alloc a;
	if (!pdptr || flags || !td_find_alloc((uintptr_t)p, 1, &a) ||
	    (a.kind != TD_ALLOC_HOST && a.kind != TD_ALLOC_REGISTERED))
		return CUDA_ERROR_INVALID_VALUE;
	*pdptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct td_alloc a;
	if (!data)
		return CUDA_ERROR_INVALID_VALUE;
	if (!td_find_alloc(ptr, 1, &a))
		return CUDA_ERROR_INVALID_VALUE;
	bool host = a.kind == TD_ALLOC_HOST || a.kind == TD_ALLOC_REGISTERED;
	switch (attribute) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
		*(CUcontext *)data = (CUcontext)a.ctx;
		break;
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
		*(unsigned *)data = host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
		*(CUdeviceptr *)data = ptr;
		break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
		if (!host && a.kind != TD_ALLOC_MANAGED)
			return CUDA_ERROR_INVALID_VALUE;
		*(void **)data = (void *)(uintptr_t)ptr;
		break;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
		*(unsigned long long *)data = a.buffer_id;
		break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
		*(int *)data = a.kind == TD_ALLOC_MANAGED;
		break;
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
		*(int *)data = 0;
		break;
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
		*(int *)data = a.kind == TD_ALLOC_DEVICE;
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		*(int *)data = a.device;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
		*(CUdeviceptr *)data = a.base;
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
		*(size_t *)data = a.size;
		break;
	case CU_POINTER_ATTRIBUTE_MAPPED:
		*(int *)data = 1;
		break;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
		*(int *)data = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE;
		break;
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
		*(unsigned long long *)data = CU_MEM_HANDLE_TYPE_NONE;
		break;
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		if (!a.pool)
			return CUDA_ERROR_INVALID_VALUE;
		*(CUmemoryPool *)data = (CUmemoryPool)a.pool;
		break;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* As the driver's: an attribute that does not apply, and every attribute of memory it
 * does not know, get zero, not an error; but unknown memory's host pointer is itself. */
TD_EXPORT CUresult cuPointerGetAttributes(unsigned int count, CUpointer_attribute *attributes, void **data,
					  CUdeviceptr ptr)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!attributes || !data)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < count; i++) {
		size_t size = attributes[i] == CU_POINTER_ATTRIBUTE_P2P_TOKENS ? sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS) : 8;
		if (attributes[i] == CU_POINTER_ATTRIBUTE_MEMORY_TYPE || attributes[i] == CU_POINTER_ATTRIBUTE_IS_MANAGED ||
		    attributes[i] == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL || attributes[i] == CU_POINTER_ATTRIBUTE_MAPPED ||
		    attributes[i] == CU_POINTER_ATTRIBUTE_SYNC_MEMOPS || attributes[i] == CU_POINTER_ATTRIBUTE_ACCESS_FLAGS ||
		    attributes[i] == CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE ||
		    attributes[i] == CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE ||
		    attributes[i] == CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE)
			size = 4;
		if (!data[i])
			return CUDA_ERROR_INVALID_VALUE;
		if (cuPointerGetAttribute(data[i], attributes[i], ptr) != CUDA_SUCCESS)
			memset(data[i], 0, size);
		if (attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER && !td_find_alloc(ptr, 1, NULL))
			*(CUdeviceptr *)data[i] = ptr; /* unknown memory: a host pointer, as the driver says */
	}
	return CUDA_SUCCESS;
}
