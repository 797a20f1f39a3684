/* Contexts: every client of a GPU shares the daemon's primary context of it; a context
 * the client creates is its own record over that one (contexts.h).
 * Retain and release only track the client's use; synchronize waits for the
 * client's own streams, never for other clients' work.
 *
 * Typed bodies of generated handlers (proto/api.spec, daemon_handlers.h): devices
 * arrive as the host's GPUs, contexts as the client's own. */
#include "dispatch.h"

#include "gpus.h"
#include "log.h"
#include "peer_access.h"
#include "remora.pb-c.h"

/* A client's CUdevice is its own ordinal; the handler maps the host's GPU back to it. */
CUresult rm_body_cuDeviceGet(struct rm_channel *s, CUdevice *device, int ordinal)
{
	return rm_session_device(s, ordinal, device);
}

/* The GPUs the client sees (REMORA_VISIBLE_DEVICES narrows them at connect). */
CUresult rm_body_cuDeviceGetCount(struct rm_channel *s, int *count)
{
	*count = s->sh->ndevices;
	return CUDA_SUCCESS;
}

/* The session records the context itself (pctx=new:body): once per device, with the
 * client's default stream in it. */
CUresult rm_body_cuDevicePrimaryCtxRetain(struct rm_channel *s, CUcontext *pctx, CUdevice dev)
{
	return rm_session_add_ctx(s, dev, pctx);
}

/* Active is this client's view: whether it has retained the device's context, not whether
 * another client has. */
CUresult rm_body_cuDevicePrimaryCtxGetState(struct rm_channel *s, CUdevice dev, unsigned int *flags, int *active)
{
	CUresult r = rm_drv_cuDevicePrimaryCtxGetState(dev, flags, active);
	if (r == CUDA_SUCCESS) {
		/* Contexts are appended, never moved: read up to the count published last. */
		int n = __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE);
		*active = 0;
		for (int i = 0; i < n; i++)
			*active |= s->sh->ctxs[i].dev == dev && !s->sh->ctxs[i].created;
	}
	return r;
}

/* The session keeps its use of the context until it ends: releasing is only checked. */
CUresult rm_body_cuDevicePrimaryCtxRelease_v2(struct rm_channel *s, CUdevice dev)
{
	return CUDA_SUCCESS;
}

/* Scheduling flags only change how the daemon's threads wait; the shared
 * context keeps the flags it was created with. */
CUresult rm_body_cuDevicePrimaryCtxSetFlags_v2(struct rm_channel *s, CUdevice dev, unsigned int flags)
{
	if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX))
		return CUDA_ERROR_INVALID_VALUE;
	rm_session_log(s, RM_LOG_DEBUG, "primary context flags 0x%x noted; the shared context keeps its own", flags);
	return CUDA_SUCCESS;
}

/* Resetting the shared context would end every client's work: a reset frees
 * what this client holds instead, as a reset would for it. */
CUresult rm_body_cuDevicePrimaryCtxReset_v2(struct rm_channel *s, CUdevice dev)
{
	rm_session_release_all(s);
	return CUDA_SUCCESS;
}

/* Waits for the client's own streams of ctx (NULL: the current context): ctx is the
 * driver's context, the session's context it stands for is s->named. */
CUresult rm_body_cuCtxSynchronize_v2(struct rm_channel *s, CUcontext ctx)
{
	CUresult r = ctx && s->named ? rm_session_enter(s, s->named->handle) : CUDA_SUCCESS;
	return r == CUDA_SUCCESS ? rm_session_synchronize(s) : r;
}

/* The flags a context may be created with; coredumps are the host's business. */
#define CREATE_FLAGS (CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS)

/* A context of the client's own over the shared context of the device (contexts.h): its
 * flags are recorded (the shared context's scheduling is the daemon's), and those the
 * shared context has regardless, as mapped host memory, are answered with them. */
CUresult rm_body_cuCtxCreate_v4(struct rm_channel *s, struct rm_request *rq, const Remora__CtxCreate *req,
				Remora__CtxCreateReply *rep)
{
	(void)rq;
	CUdevice dev;
	unsigned sched = req->flags & CU_CTX_SCHED_MASK;
	if (req->flags & ~(unsigned)CREATE_FLAGS || (sched & (sched - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_session_device(s, req->dev, &dev);
	struct rm_session_ctx *c = NULL;
	if (r == CUDA_SUCCESS)
		r = rm_session_create_ctx(s, dev, &c);
	if (r != CUDA_SUCCESS)
		return r;
	unsigned shared = 0;
	if (rm_session_enter(s, c->handle) == CUDA_SUCCESS && rm_drv_cuCtxGetFlags(&shared) != CUDA_SUCCESS)
		shared = 0;
	rep->ctx = c->handle;
	rep->id = c->id;
	rep->flags = req->flags | (shared & (CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX));
	return CUDA_SUCCESS;
}

CUresult rm_body_cuCtxDestroy_v2(struct rm_channel *s, struct rm_request *rq, const Remora__CtxDestroy *req)
{
	(void)rq;
	CUresult r = CUDA_ERROR_INVALID_CONTEXT;
	struct rm_session_ctx *c = rm_session_ctx_of(s, req->ctx, &r);
	return c ? rm_session_destroy_ctx(s, c) : r;
}

/* What a limit set to value holds on the device for the client, above a fresh context's
 * value: the malloc heap and the printf FIFO their bytes; the stack its bytes for every
 * thread the GPU holds at once, for which the driver reserves local memory. Other limits
 * hold none of the client's memory. */
static uint64_t limit_bytes(CUdevice dev, CUlimit limit, size_t value)
{
	size_t fresh = 0;
	if (limit != CU_LIMIT_STACK_SIZE && limit != CU_LIMIT_PRINTF_FIFO_SIZE && limit != CU_LIMIT_MALLOC_HEAP_SIZE)
		return 0;
	rm_gpu_default_limit(dev, limit, &fresh); /* unknown: 0, the whole value charged */
	uint64_t above = value > fresh ? value - fresh : 0;
	int sms = 0, per_sm = 0;
	if (limit != CU_LIMIT_STACK_SIZE || !above ||
	    rm_drv_cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS ||
	    rm_drv_cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev) != CUDA_SUCCESS ||
	    sms <= 0 || per_sm <= 0)
		return above;
	uint64_t threads = (uint64_t)sms * (uint64_t)per_sm;
	return above > UINT64_MAX / threads ? UINT64_MAX : above * threads;
}

/* Moves the charge of the current context's limit to bytes: under the session's lock, so
 * that two threads setting one limit leave one charge. */
static CUresult charge_limit(struct rm_channel *s, CUlimit limit, uint64_t bytes)
{
	pthread_mutex_lock(&s->sh->lock);
	CUresult r = rm_session_recharge(s, s->cur->limit_charge[limit], bytes);
	if (r == CUDA_SUCCESS)
		s->cur->limit_charge[limit] = bytes;
	pthread_mutex_unlock(&s->sh->lock);
	return r;
}

/* Limits are each context's, as the client set them; the shared context gets the highest
 * any client set, so that a client may raise one, never lower it under others. What the
 * client's value holds on the device is charged to its quota first (docs/sharing.md,
 * "Quotas"): past it, CUDA_ERROR_OUT_OF_MEMORY and nothing set. */
CUresult rm_body_cuCtxSetLimit(struct rm_channel *s, CUlimit limit, size_t value)
{
	size_t cur = 0;
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	int recorded = (unsigned)limit < RM_CTX_LIMITS; /* the others are the driver's to refuse */
	uint64_t had = recorded ? s->cur->limit_charge[limit] : 0;
	CUresult r = recorded ? charge_limit(s, limit, limit_bytes(s->cur->dev, limit, value)) : CUDA_SUCCESS;
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuCtxGetLimit(&cur, limit);
	if (r == CUDA_SUCCESS && (value > cur || limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED)) {
		if ((r = rm_drv_cuCtxSetLimit(limit, value)) == CUDA_SUCCESS)
			r = rm_drv_cuCtxGetLimit(&value, limit); /* as the driver rounded it */
		else if (limit == CU_LIMIT_MALLOC_HEAP_SIZE)
			rm_session_log(s, RM_LOG_WARN, "device malloc heap of %zu bytes refused: the GPU's shared context "
				       "has %zu, which cannot grow once a kernel of any client used it (gpu_malloc_heap in "
				       "remorad.conf sizes it)", value, cur);
	}
	if (r == CUDA_SUCCESS && recorded) {
		pthread_mutex_lock(&s->sh->lock);
		s->cur->limits[limit] = value;
		s->cur->limits_set |= 1u << limit;
		pthread_mutex_unlock(&s->sh->lock);
	} else if (recorded && charge_limit(s, limit, had) != CUDA_SUCCESS) { /* the earlier value's charge again */
		rm_session_log(s, RM_LOG_WARN, "limit %d's earlier charge of %llu bytes could not be taken again",
			       (int)limit, (unsigned long long)had);
	}
	return r;
}

/* The context's own value once the client set it, else a fresh context's (another client
 * may have raised the shared context's). */
CUresult rm_body_cuCtxGetLimit(struct rm_channel *s, size_t *pvalue, CUlimit limit)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUresult r = rm_drv_cuCtxGetLimit(pvalue, limit);
	if (r == CUDA_SUCCESS)
		rm_gpu_default_limit(s->cur->dev, limit, pvalue);
	pthread_mutex_lock(&s->sh->lock);
	if (r == CUDA_SUCCESS && (unsigned)limit < RM_CTX_LIMITS && (s->cur->limits_set & (1u << limit)))
		*pvalue = s->cur->limits[limit];
	pthread_mutex_unlock(&s->sh->lock);
	return r;
}

/* Capabilities a remote client has only in part, answered as absent so that programs take
 * their other path instead of getting wrong data (docs/managed-memory.md): the client's
 * managed memory is a copy kept coherent at synchronization, not memory the GPU and the
 * host reach at once; its pageable and registered memory never reaches the GPU by the host
 * pointer; host and device atomics never meet on the same bytes. A multi-device cooperative
 * launch, deprecated, is not forwarded, nor are memory pools located on the host. */
static int remote_lacks(CUdevice_attribute attrib)
{
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED: /* pools of host memory are not forwarded */
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED:
		return 1;
	default:
		return 0;
	}
}

CUresult rm_body_cuDeviceGetAttribute(struct rm_channel *s, int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	(void)s;
	CUresult r = rm_drv_cuDeviceGetAttribute(pi, attrib, dev);
	if (r == CUDA_SUCCESS && remote_lacks(attrib))
		*pi = 0;
	return r;
}

/* The client's context a stream belongs to: the context whose legacy or per-thread stream it
 * is, else the one current when the client made it. Green contexts are not forwarded. */
CUresult rm_body_cuStreamGetCtx_v2(struct rm_channel *s, CUstream hStream, CUcontext *pCtx, CUgreenCtx *pGreenCtx)
{
	struct rm_handle h;
	struct rm_session_ctx *c = NULL;
	if (rm_session_find(s, RM_H_STREAM, (uint64_t)(uintptr_t)hStream, &h))
		c = h.ctx ? rm_session_ctx_at(s, (int)h.ctx - 1) : NULL;
	for (int i = 0; !c && rm_session_ctx_at(s, i); i++) {
		struct rm_session_ctx *k = rm_session_ctx_at(s, i);
		int mine = k->default_stream == hStream;
		pthread_mutex_lock(&k->order_lock);
		for (int j = 0; j <= RM_MAX_CHANNELS && !mine; j++)
			mine = k->per_thread[j] == hStream;
		pthread_mutex_unlock(&k->order_lock);
		c = mine ? k : NULL;
	}
	if (!c)
		return CUDA_ERROR_INVALID_HANDLE;
	*pCtx = (CUcontext)(uintptr_t)c->handle;
	if (pGreenCtx)
		*pGreenCtx = NULL;
	return CUDA_SUCCESS;
}

/* The current context reaching peerContext's memory: s->named is the client's context it
 * names (a created context's driver value is its shared context's). */
CUresult rm_body_cuCtxEnablePeerAccess(struct rm_channel *s, CUcontext peerContext, unsigned int Flags)
{
	(void)peerContext;
	return rm_peer_enable(s, s->named, Flags);
}

CUresult rm_body_cuCtxDisablePeerAccess(struct rm_channel *s, CUcontext peerContext)
{
	(void)peerContext;
	return rm_peer_disable(s, s->named);
}
