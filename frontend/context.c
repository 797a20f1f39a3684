/* Contexts as the program sees them: the current-context stack is per thread and
 * kept here, with what the client knows of each context (its device; a created one's
 * flags, id and cache preference); the daemon learns the current context from every
 * request's header. Creating and destroying contexts: context_create.c. */
#include "client.h"

#include <pthread.h>

#include "api.pb-c.h"
#include "query_cache.h"

#define MAX_KNOWN_CTX 64
#define CTX_STACK_DEPTH 32

/* Flags a context has whether asked for or not, as the shared context reports them. */
#define IMPLICIT_FLAGS (CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX)

static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;
static struct known_ctx {
	CUcontext ctx; /* NULL: a free place */
	CUdevice dev;
	int created;
	int flags_known;  /* flags below are the context's (created, or set by cuCtxSetFlags) */
	unsigned flags;
	unsigned implicit; /* of flags, those the shared context has regardless */
	unsigned long long id;
	int id_known;
	CUfunc_cache cache;
} known[MAX_KNOWN_CTX];

static __thread CUcontext stack[CTX_STACK_DEPTH];
static __thread int depth; /* stack[depth - 1] is current */

/* The record of ctx, or a free place for it (ctx NULL); under known_lock. */
static struct known_ctx *find_locked(CUcontext ctx)
{
	for (int i = 0; i < MAX_KNOWN_CTX; i++)
		if (known[i].ctx == ctx)
			return &known[i];
	return NULL;
}

static void remember(CUcontext ctx, CUdevice dev, int created, unsigned flags, unsigned implicit, unsigned long long id)
{
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = find_locked(ctx);
	if (!k && (k = find_locked(NULL)))
		*k = (struct known_ctx){.ctx = ctx, .dev = dev, .cache = CU_FUNC_CACHE_PREFER_NONE};
	if (k && created) {
		k->created = k->flags_known = k->id_known = 1;
		k->flags = flags;
		k->implicit = implicit;
		k->id = id;
	}
	pthread_mutex_unlock(&known_lock);
	if (!k)
		rm_log(RM_LOG_ERROR, "more than %d contexts at once: context %p is not known to this client", MAX_KNOWN_CTX,
		       (void *)ctx);
}

void rm_ctx_known(CUcontext ctx, CUdevice dev)
{
	remember(ctx, dev, 0, 0, 0, 0);
}

void rm_ctx_known_created(CUcontext ctx, CUdevice dev, unsigned flags, unsigned implicit, unsigned long long id)
{
	remember(ctx, dev, 1, flags, implicit, id);
}

void rm_ctx_forget(CUcontext ctx)
{
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = find_locked(ctx);
	if (k)
		k->ctx = NULL;
	pthread_mutex_unlock(&known_lock);
	/* Current: popped, as cuCtxDestroy does. Deeper in this thread's stack it stays, as
	 * natively: a context set current over its own place (cuCtxCreate pushes) is current
	 * again, destroyed, once popped (measured on an H100). */
	if (depth && stack[depth - 1] == ctx)
		depth--;
}

int rm_ctx_created(CUcontext ctx)
{
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = ctx ? find_locked(ctx) : NULL;
	int created = k && k->created;
	pthread_mutex_unlock(&known_lock);
	return created;
}

static int ctx_device(CUcontext ctx, CUdevice *dev)
{
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = ctx ? find_locked(ctx) : NULL;
	if (k)
		*dev = k->dev;
	pthread_mutex_unlock(&known_lock);
	return k != NULL;
}

CUcontext rm_ctx_current(void)
{
	return depth ? stack[depth - 1] : NULL;
}

CUresult rm_ctx_push(CUcontext ctx)
{
	if (depth == CTX_STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	stack[depth++] = ctx;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuCtxGetCurrent(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = rm_ctx_current();
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx)
{
	CUdevice dev;
	if (ctx && !ctx_device(ctx, &dev))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx) {
		if (depth)
			depth--;
		return CUDA_SUCCESS;
	}
	if (!depth)
		depth = 1;
	stack[depth - 1] = ctx;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx)
{
	CUdevice dev;
	if (!ctx || !ctx_device(ctx, &dev))
		return CUDA_ERROR_INVALID_CONTEXT;
	return rm_ctx_push(ctx);
}

RM_EXPORT CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx)
{
	return cuCtxPushCurrent_v2(ctx);
}

RM_EXPORT CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext *pctx)
{
	if (!depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUcontext ctx = stack[--depth];
	if (pctx)
		*pctx = ctx;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuCtxPopCurrent(CUcontext *pctx)
{
	return cuCtxPopCurrent_v2(pctx);
}

RM_EXPORT CUresult CUDAAPI cuCtxGetDevice(CUdevice *device)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext ctx = rm_ctx_current();
	if (!ctx || !ctx_device(ctx, device))
		return CUDA_ERROR_INVALID_CONTEXT;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice *device, CUcontext ctx)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		return cuCtxGetDevice(device);
	return ctx_device(ctx, device) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

RM_EXPORT CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int *version)
{
	CUdevice dev;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	if (!ctx)
		ctx = rm_ctx_current();
	if (!ctx || !ctx_device(ctx, &dev))
		return CUDA_ERROR_INVALID_CONTEXT;
	*version = 3020; /* every context made through the _v2 and later entry points */
	return CUDA_SUCCESS;
}

/* The flags of the current context: a created one's, or those cuCtxSetFlags set, are
 * known here; a primary context's are the shared context's. */
static CUresult remote_flags(unsigned *flags)
{
	Remora__CuCtxGetFlagsReq req = REMORA__CU_CTX_GET_FLAGS__REQ__INIT;
	Remora__CuCtxGetFlagsRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuCtxGetFlags, &req.base, &remora__cu_ctx_get_flags__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS)
		*flags = rep ? rep->flags : 0;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuCtxGetFlags(unsigned int *flags)
{
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext ctx = rm_ctx_current();
	int answered = 0;
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = ctx ? find_locked(ctx) : NULL;
	if (k && k->flags_known)
		*flags = k->flags, answered = 1;
	pthread_mutex_unlock(&known_lock);
	return answered ? CUDA_SUCCESS : remote_flags(flags);
}

/* Recorded for the context, not applied: how the daemon's threads wait is the daemon's
 * (docs/status.md). */
RM_EXPORT CUresult CUDAAPI cuCtxSetFlags(unsigned int flags)
{
	unsigned sched = flags & CU_CTX_SCHED_MASK, old = 0;
	if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | IMPLICIT_FLAGS | CU_CTX_SYNC_MEMOPS) || (sched & (sched - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext ctx = rm_ctx_current();
	CUdevice dev;
	if (!ctx || !ctx_device(ctx, &dev))
		return CUDA_ERROR_INVALID_CONTEXT;
	CUresult r = cuCtxGetFlags(&old);
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = find_locked(ctx);
	if (r == CUDA_SUCCESS && k) {
		if (!k->flags_known)
			k->implicit = old & IMPLICIT_FLAGS;
		k->flags = flags | k->implicit;
		k->flags_known = 1;
	}
	pthread_mutex_unlock(&known_lock);
	return r == CUDA_SUCCESS && !k ? CUDA_ERROR_INVALID_CONTEXT : r;
}

/* A created context's id is known here; a primary context's is the shared context's. */
RM_EXPORT CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long *ctxId)
{
	if (!ctxId)
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext which = ctx ? ctx : rm_ctx_current();
	if (!which)
		return CUDA_ERROR_INVALID_CONTEXT;
	int answered = 0;
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = find_locked(which);
	if (k && k->id_known)
		*ctxId = k->id, answered = 1;
	pthread_mutex_unlock(&known_lock);
	if (answered)
		return CUDA_SUCCESS;
	Remora__CuCtxGetIdReq req = REMORA__CU_CTX_GET_ID__REQ__INIT;
	req.ctx = (uint64_t)(uintptr_t)ctx;
	Remora__CuCtxGetIdRep *rep = NULL;
	CUresult r = rm_rpc_cached(RM_OP_cuCtxGetId, &req.base, &remora__cu_ctx_get_id__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS)
		*ctxId = rep ? rep->ctxid : 0;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* The cache preference is each context's, recorded and not applied to the shared context,
 * where it would be every client's: a hint, noticed only in timing (docs/status.md). */
RM_EXPORT CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config)
{
	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext ctx = rm_ctx_current();
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = ctx ? find_locked(ctx) : NULL;
	if (k)
		k->cache = config;
	pthread_mutex_unlock(&known_lock);
	return k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

RM_EXPORT CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache *pconfig)
{
	if (!pconfig)
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext ctx = rm_ctx_current();
	pthread_mutex_lock(&known_lock);
	struct known_ctx *k = ctx ? find_locked(ctx) : NULL;
	if (k)
		*pconfig = k->cache;
	pthread_mutex_unlock(&known_lock);
	return k ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

RM_EXPORT CUresult CUDAAPI cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	/* Before cuInit this is the version the library was built for; afterwards the GPU host's, capped
	 * at ours since we implement no newer interface. */
	int remote = rm_remote_driver_version();
	*version = remote > 0 && remote < CUDA_VERSION ? remote : CUDA_VERSION;
	return CUDA_SUCCESS;
}
