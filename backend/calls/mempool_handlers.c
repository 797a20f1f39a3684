/* Stream-ordered allocation and memory pools: typed bodies of generated handlers.
 *
 * Every pool a client uses is its own: the shared context's default pool would mix the
 * clients' freed memory and its attributes would be everyone's. cuDeviceGetDefaultMemPool
 * and cuDeviceGetMemPool give the client's default pool on that GPU, made when first
 * named, and cuMemAllocAsync allocates from it. Each allocation is charged to the
 * client's quotas like cuMemAlloc and owned as device memory; a pool's cached memory
 * (freed allocations it keeps, up to its release threshold) is not charged, so a
 * client's release threshold is held to its memory limit. */
#include "dispatch.h"

#include <pthread.h>
#include <string.h>

#include "ipc.h"
#include "log.h"

/* The session's context on host GPU dev, or NULL (contexts are appended, never moved). */
static struct rm_session_ctx *ctx_of_device(struct rm_channel *s, CUdevice dev)
{
	int n = __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++) /* a created context's pool is its device's too */
		if (s->sh->ctxs[i].dev == dev && !__atomic_load_n(&s->sh->ctxs[i].destroyed, __ATOMIC_ACQUIRE))
			return &s->sh->ctxs[i];
	return NULL;
}

static CUresult make_default_pool(struct rm_channel *s, struct rm_session_ctx *c);

/* The client's default pool on the GPU of context c, made when first named (under the
 * context's order_lock: two threads naming it first make one). */
static CUresult default_pool(struct rm_channel *s, struct rm_session_ctx *c, CUmemoryPool *out)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&c->order_lock);
	if (!c->pool)
		r = make_default_pool(s, c);
	*out = c->pool;
	pthread_mutex_unlock(&c->order_lock);
	return r;
}

static CUresult make_default_pool(struct rm_channel *s, struct rm_session_ctx *c)
{
	{
		CUmemPoolProps props;
		memset(&props, 0, sizeof(props));
		props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
		props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
		props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
		props.location.id = c->dev;
		CUmemoryPool pool;
		CUresult r = rm_drv_cuMemPoolCreate(&pool, &props);
		if (r != CUDA_SUCCESS)
			return r;
		rm_session_own(s, RM_H_MEMPOOL, pool, 0);
		__atomic_store_n(&c->pool, pool, __ATOMIC_RELEASE);
	}
	return CUDA_SUCCESS;
}

/* Also the body of cuDeviceGetMemPool: a client cannot set another (cuDeviceSetMemPool is
 * not forwarded), so its current pool is its default one. */
CUresult rm_body_cuDeviceGetDefaultMemPool(struct rm_channel *s, CUmemoryPool *pool_out, CUdevice dev)
{
	struct rm_session_ctx *c = ctx_of_device(s, dev);
	if (!c) /* its pools live as long as its context of that GPU */
		return CUDA_ERROR_INVALID_CONTEXT;
	return default_pool(s, c, pool_out);
}

/* Charged first, allocated from pool, then owned as device memory of the client's. */
static CUresult alloc_from(struct rm_channel *s, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool, CUstream st)
{
	CUresult r = rm_session_charge(s, bytesize);
	if (r != CUDA_SUCCESS)
		return r;
	int captured = s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 && rm_capture_active(st);
	r = rm_drv_cuMemAllocFromPoolAsync(dptr, bytesize, pool, st);
	if (r == CUDA_SUCCESS && captured) /* an allocation node of the capture's graph */
		rm_graph_memory_own(s, *dptr, bytesize);
	else if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_MEMORY, *dptr, bytesize, 0);
	else
		rm_session_uncharge(s, bytesize);
	return r;
}

CUresult rm_body_cuMemAllocAsync(struct rm_channel *s, CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	CUmemoryPool pool = NULL;
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUresult r = default_pool(s, ctx_of_device(s, s->cur->dev), &pool); /* the device's, whichever context */
	return r == CUDA_SUCCESS ? alloc_from(s, dptr, bytesize, pool, hStream) : r;
}

/* Not from a pool it imported (CUDA IPC), which makes no allocations, as natively. */
CUresult rm_body_cuMemAllocFromPoolAsync(struct rm_channel *s, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
					 CUstream hStream)
{
	if (rm_ipc_imported(s, RM_IPC_POOL, (uint64_t)(uintptr_t)pool))
		return CUDA_ERROR_INVALID_VALUE;
	return s->cur ? alloc_from(s, dptr, bytesize, pool, hStream) : CUDA_ERROR_INVALID_CONTEXT;
}

/* Only an allocation of the client's own (any: cuMemAlloc's too, as CUDA allows); no
 * longer charged once the free is queued. */
CUresult rm_body_cuMemFreeAsync(struct rm_channel *s, CUdeviceptr dptr, CUstream hStream)
{
	/* Taken from the records first: of two threads freeing it, one frees it. */
	struct rm_handle h;
	if (!rm_session_take(s, RM_H_MEMORY, dptr, &h)) {
		CUresult r = rm_graph_memory_free(s, dptr, hStream);
		if (r == CUDA_ERROR_NOT_FOUND) /* an allocation of a pool it imported (CUDA IPC)? */
			r = rm_ipc_free_imported(s, dptr, hStream);
		if (r != CUDA_ERROR_NOT_FOUND)
			return r;
		rm_session_log(s, RM_LOG_WARN, "refused to free 0x%llx, not an allocation of its own",
		               (unsigned long long)dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (rm_ipc_leave(s, RM_IPC_MEMORY, dptr) == RM_IPC_OTHERS_HOLD) { /* opened by another client (CUDA IPC) */
		rm_session_uncharge(s, h.size);
		return CUDA_SUCCESS;
	}
	CUresult r = rm_drv_cuMemFreeAsync(dptr, hStream);
	if (r == CUDA_SUCCESS)
		rm_session_uncharge(s, h.size);
	else
		rm_session_own_memory(s, RM_H_MEMORY, h.value, h.size, h.parent); /* still the client's */
	return r;
}

/* A pool of device memory on one of the client's GPUs, shareable with clients of its worker
 * by a POSIX file descriptor where it asks (CUDA IPC: ipc_handlers.c); its handle types are
 * its record's size. */
CUresult rm_body_cuMemPoolCreate(struct rm_channel *s, CUmemoryPool *pool, const CUmemPoolProps *poolProps)
{
	CUmemPoolProps props;
	memcpy(&props, poolProps, sizeof(props));
	if (props.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    (props.handleTypes & ~(unsigned)CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
		return rm_unsupported_use("cuMemPoolCreate of host memory or with shareable handles but a POSIX file descriptor");
	CUdevice dev;
	CUresult r = rm_session_device(s, props.location.id, &dev);
	if (r != CUDA_SUCCESS)
		return r;
	props.location.id = dev;
	props.win32SecurityAttributes = NULL; /* a pointer of the client's means nothing here */
	r = rm_drv_cuMemPoolCreate(pool, &props);
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_MEMPOOL, (uint64_t)(uintptr_t)*pool, props.handleTypes, 0);
	return r;
}

/* Not the client's default pool, which lives as long as its session, as a device's does.
 * Allocations from the pool stay the client's until freed (the driver frees the pool then).
 * A pool another client holds (CUDA IPC) stays for it: the driver's destroy is the last
 * holder's; imported more than once, one destroy each. */
CUresult rm_body_cuMemPoolDestroy(struct rm_channel *s, CUmemoryPool pool)
{
	int n = __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++)
		if (__atomic_load_n(&s->sh->ctxs[i].pool, __ATOMIC_ACQUIRE) == pool)
			return CUDA_ERROR_INVALID_VALUE;
	uint64_t v = (uint64_t)(uintptr_t)pool;
	int refs = rm_ipc_unref(s, RM_IPC_POOL, v);
	if (refs > 0)
		return CUDA_SUCCESS;
	if (refs == 0 && rm_ipc_leave(s, RM_IPC_POOL, v) == RM_IPC_OTHERS_HOLD) {
		rm_session_disown(s, RM_H_MEMPOOL, pool);
		return CUDA_SUCCESS;
	}
	CUresult r = rm_drv_cuMemPoolDestroy(pool);
	if (r == CUDA_SUCCESS)
		rm_session_disown(s, RM_H_MEMPOOL, pool);
	return r;
}

/* Cached memory is not charged: a client's release threshold is held to its memory limit. */
CUresult rm_body_cuMemPoolSetAttribute(struct rm_channel *s, CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	cuuint64_t v;
	uint64_t limit = rm_session_client_limit(s);
	if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD && limit) {
		memcpy(&v, value, sizeof(v));
		if (v > limit) {
			v = limit;
			value = &v;
		}
	}
	return rm_drv_cuMemPoolSetAttribute(pool, attr, value);
}
