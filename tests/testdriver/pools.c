/* Stream-ordered allocation and memory pools. A pool is a record of its device,
 * attributes and usage; its allocations are ordinary device allocations marked with
 * it. An allocation is usable at once (the stream's order is kept trivially); the
 * pool keeps nothing cached, so reserved memory is used memory. A pool made with
 * CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is exported as a memfd naming it (its process and
 * address); imported, it is a record of that, making no allocations; an allocation of it is
 * exported as CUDA IPC memory is (ipc.c), and imported into a pool that names its own. */
#include "testdriver.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define TD_MAGIC_POOL 0x504f4f4c /* "POOL" */

struct td_pool {
	uint32_t magic;
	int device;
	bool is_default;
	cuuint64_t release_threshold;
	int reuse[3];              /* FOLLOW_EVENT_DEPENDENCIES, ALLOW_OPPORTUNISTIC, ALLOW_INTERNAL_DEPENDENCIES */
	cuuint64_t used, used_high; /* guarded by td_lock */
	struct td_pool *next_destroyed;
	unsigned handle_types;     /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: exportable */
	uint32_t import_pid;       /* imported: the exporting process and its pool, else 0 */
	uint64_t import_pool;
};

/* Destroyed pools' records, kept (their allocations may still name them) and reachable. */
static struct td_pool *destroyed_pools;

static struct td_pool default_pools[TD_MAX_DEVICES];
static struct td_pool *current_pools[TD_MAX_DEVICES];

static struct td_pool *default_pool(int device)
{
	struct td_pool *p = &default_pools[device];
	pthread_mutex_lock(&td_lock);
	if (!p->magic)
		*p = (struct td_pool){.magic = TD_MAGIC_POOL, .device = device, .is_default = true, .reuse = {1, 1, 1}};
	pthread_mutex_unlock(&td_lock);
	return p;
}

static CUresult pool_of(CUmemoryPool handle, struct td_pool **out)
{
	struct td_pool *p = (struct td_pool *)handle;
	if (!p || p->magic != TD_MAGIC_POOL)
		return CUDA_ERROR_INVALID_VALUE;
	*out = p;
	return CUDA_SUCCESS;
}

static CUresult device_ok(CUdevice dev)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return dev >= 0 && dev < td_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

TD_EXPORT CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CUresult rc = device_ok(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	*pool = (CUmemoryPool)default_pool(dev);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetMemPool(CUmemoryPool *pool, CUdevice dev)
{
	CUresult rc = device_ok(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	struct td_pool *p = current_pools[dev];
	pthread_mutex_unlock(&td_lock);
	*pool = (CUmemoryPool)(p ? p : default_pool(dev));
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
	struct td_pool *p;
	CUresult rc = device_ok(dev);
	if (rc == CUDA_SUCCESS)
		rc = pool_of(pool, &p);
	if (rc == CUDA_SUCCESS && p->device != dev)
		rc = CUDA_ERROR_INVALID_DEVICE;
	if (rc == CUDA_SUCCESS) {
		pthread_mutex_lock(&td_lock);
		current_pools[dev] = p;
		pthread_mutex_unlock(&td_lock);
	}
	return rc;
}

TD_EXPORT CUresult cuMemPoolCreate(CUmemoryPool *pool, const CUmemPoolProps *props)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pool || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	if (device_ok(props->location.id) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_DEVICE;
	struct td_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (struct td_pool){.magic = TD_MAGIC_POOL, .device = props->location.id, .reuse = {1, 1, 1},
			      .handle_types = props->handleTypes};
	*pool = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

/* The record stays (its allocations name it, on destroyed_pools) but is no longer a pool. */
TD_EXPORT CUresult cuMemPoolDestroy(CUmemoryPool pool)
{
	struct td_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (p->is_default)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	if (current_pools[p->device] == p)
		current_pools[p->device] = NULL;
	p->magic = 0;
	p->next_destroyed = destroyed_pools;
	destroyed_pools = p;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	struct td_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value;
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: p->release_threshold = *(cuuint64_t *)value; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH: /* only resetting to 0 is allowed */
		if (*(cuuint64_t *)value)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			p->used_high = p->used;
		break;
	default: rc = CUDA_ERROR_INVALID_VALUE; break;
	}
	pthread_mutex_unlock(&td_lock);
	return rc;
}

TD_EXPORT CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	struct td_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	switch (attr) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		*(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
		break;
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD: *(cuuint64_t *)value = p->release_threshold; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT: *(cuuint64_t *)value = p->used; break;
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH: *(cuuint64_t *)value = p->used_high; break;
	default: rc = CUDA_ERROR_INVALID_VALUE; break;
	}
	pthread_mutex_unlock(&td_lock);
	return rc;
}

TD_EXPORT CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	(void)minBytesToKeep;
	struct td_pool *p;
	return pool_of(pool, &p); /* nothing is cached */
}

static CUresult alloc_from(struct td_pool *p, CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || !bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p)
		p = default_pool(s->ctx->device);
	if (p->device != s->ctx->device)
		return CUDA_ERROR_INVALID_VALUE;
	rc = td_device_alloc(s->ctx, p->device, bytes, dptr);
	if (rc != CUDA_SUCCESS)
		return rc;
	td_set_alloc_pool(*dptr, p);
	struct td_alloc a;
	td_find_alloc(*dptr, 1, &a);
	pthread_mutex_lock(&td_lock);
	p->used += a.size;
	if (p->used > p->used_high)
		p->used_high = p->used;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytes, CUstream stream)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&td_lock);
	struct td_pool *p = current_pools[ctx->device];
	pthread_mutex_unlock(&td_lock);
	return alloc_from(p, dptr, bytes, stream);
}

TD_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytes, CUmemoryPool pool, CUstream stream)
{
	struct td_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc == CUDA_SUCCESS && p->import_pid)
		return CUDA_ERROR_INVALID_VALUE; /* an imported pool makes no allocations */
	return rc == CUDA_SUCCESS ? alloc_from(p, dptr, bytes, stream) : rc;
}

void td_pool_freed(struct td_pool *p, size_t size)
{
	pthread_mutex_lock(&td_lock);
	p->used -= size;
	pthread_mutex_unlock(&td_lock);
}

/* Access to a pool's memory from each device: its own device always reads and writes;
 * the others have what cuMemPoolSetAccess gave them (none at first). */
/* [pool's device][accessor]: kept per device, not per pool, which is all the tests need. */
static CUmemAccess_flags peer_access[TD_MAX_DEVICES][TD_MAX_DEVICES];

TD_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	struct td_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!map && count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++) {
		const CUmemLocation *l = &map[i].location;
		if (l->type != CU_MEM_LOCATION_TYPE_DEVICE || device_ok(l->id) != CUDA_SUCCESS ||
		    (unsigned)map[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE ||
		    map[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ)
			return CUDA_ERROR_INVALID_VALUE;
		if (l->id == p->device && map[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
			return CUDA_ERROR_INVALID_DEVICE; /* a pool's own device keeps its access */
	}
	pthread_mutex_lock(&td_lock);
	for (size_t i = 0; i < count; i++)
		peer_access[p->device][map[i].location.id] = map[i].flags;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemPoolGetAccess(CUmemAccess_flags *flags, CUmemoryPool memPool, CUmemLocation *location)
{
	struct td_pool *p;
	CUresult rc = pool_of(memPool, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags || !location || location->type != CU_MEM_LOCATION_TYPE_DEVICE || device_ok(location->id) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	*flags = location->id == p->device ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : peer_access[p->device][location->id];
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

/* ---- pools shared between processes ---- */

#define POOL_MAGIC 0x4c4f4f50u     /* "POOL" backwards: a pool's memfd */
#define POINTER_MAGIC 0x50544450u  /* "PDTP": CUmemPoolPtrExportData */

struct pool_share {
	uint32_t magic, pid;
	uint64_t pool;
	int32_t device;
};

struct pointer_share {
	uint32_t magic, pid;
	uint64_t pool, base, size, id;
	int32_t fd;
};
_Static_assert(sizeof(struct pointer_share) <= sizeof(CUmemPoolPtrExportData), "export data fits");

TD_EXPORT CUresult cuMemPoolExportToShareableHandle(void *handle_out, CUmemoryPool pool,
						    CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct td_pool *p;
	CUresult rc = pool_of(pool, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!handle_out || flags || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
	    !(p->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) || p->import_pid)
		return CUDA_ERROR_INVALID_VALUE;
	struct pool_share sh = {POOL_MAGIC, (uint32_t)getpid(), (uint64_t)(uintptr_t)p, p->device};
	int fd = memfd_create("td-pool", MFD_CLOEXEC);
	if (fd < 0 || pwrite(fd, &sh, sizeof(sh), 0) != (ssize_t)sizeof(sh)) {
		if (fd >= 0)
			close(fd);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*(int *)handle_out = fd;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemPoolImportFromShareableHandle(CUmemoryPool *pool_out, void *handle,
						      CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct pool_share sh;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pool_out || flags || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_INVALID_VALUE;
	if (pread((int)(intptr_t)handle, &sh, sizeof(sh), 0) != (ssize_t)sizeof(sh) || sh.magic != POOL_MAGIC ||
	    device_ok(sh.device) != CUDA_SUCCESS)
		return CUDA_ERROR_INVALID_HANDLE;
	if (sh.pid == (uint32_t)getpid())
		return CUDA_ERROR_INVALID_VALUE;
	struct td_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (struct td_pool){.magic = TD_MAGIC_POOL, .device = sh.device, .reuse = {1, 1, 1},
			      .handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, .import_pid = sh.pid,
			      .import_pool = sh.pool};
	*pool_out = (CUmemoryPool)p;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemPoolExportPointer(CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
	struct td_alloc a;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!shareData_out || !td_find_alloc(ptr, 1, &a) || a.base != ptr || !a.pool ||
	    !(a.pool->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) || a.pool->import_pid)
		return CUDA_ERROR_INVALID_VALUE;
	int fd = td_ipc_share_alloc(&a);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct pointer_share sh = {POINTER_MAGIC, (uint32_t)getpid(), (uint64_t)(uintptr_t)a.pool, a.base, a.size,
				   a.buffer_id, fd};
	memset(shareData_out, 0, sizeof(*shareData_out));
	memcpy(shareData_out->reserved, &sh, sizeof(sh));
	return CUDA_SUCCESS;
}

/* Freed by cuMemFree(Async) (memory.c: td_ipc_close_mem). */
TD_EXPORT CUresult cuMemPoolImportPointer(CUdeviceptr *ptr_out, CUmemoryPool pool, CUmemPoolPtrExportData *shareData)
{
	struct td_context *ctx;
	struct td_pool *p;
	struct pointer_share sh;
	CUresult rc = td_require_context(&ctx);
	if (rc == CUDA_SUCCESS)
		rc = pool_of(pool, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!ptr_out || !shareData)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(&sh, shareData->reserved, sizeof(sh));
	if (sh.magic != POINTER_MAGIC || !p->import_pid || sh.pid != p->import_pid || sh.pool != p->import_pool)
		return CUDA_ERROR_INVALID_VALUE;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/fd/%d", sh.pid, sh.fd);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return CUDA_ERROR_INVALID_HANDLE;
	return td_ipc_open_mem(sh.pid, sh.base, sh.id, sh.size, fd, true, ptr_out);
}
