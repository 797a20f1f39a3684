/* Contexts: one primary context per device, created contexts, and a
 * per-thread stack of current contexts. */
#include "testdriver.h"

#include <stdlib.h>
#include <string.h>

#define CONTEXT_STACK_DEPTH 64

void td_unload_context_modules(struct td_context *ctx);

static struct td_context primary_contexts[TD_MAX_DEVICES];
static struct td_context *created_contexts;   /* guarded by td_lock */

static __thread struct td_context *context_stack[CONTEXT_STACK_DEPTH];
static __thread int context_depth;

static const size_t default_limits[CU_LIMIT_MAX] = {
	[CU_LIMIT_STACK_SIZE] = 1024,
	[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20,
	[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20,
	[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2,
	[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048,
	[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64,
	[CU_LIMIT_PERSISTING_L2_CACHE_SIZE] = 0,
};

static CUresult process_fault = CUDA_SUCCESS;

CUresult td_sticky_error(void)
{
	return __atomic_load_n(&process_fault, __ATOMIC_ACQUIRE);
}

void td_fault(CUresult rc)
{
	CUresult none = CUDA_SUCCESS;
	__atomic_compare_exchange_n(&process_fault, &none, rc, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
}

static bool recoverable(void)
{
	const char *v = getenv("REMORA_TESTDRIVER_RECOVERABLE");
	return v && !strcmp(v, "1");
}

static void context_activate(struct td_context *ctx, int device, unsigned flags)
{
	ctx->magic = TD_MAGIC_CONTEXT;
	ctx->device = device;
	ctx->flags = flags;
	ctx->active = true;
	static unsigned long long ids;
	ctx->id = __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED);
	memcpy(ctx->limits, default_limits, sizeof default_limits);
	ctx->cache_config = CU_FUNC_CACHE_PREFER_NONE;
	ctx->shmem_config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
}

/* Releases everything the context owns; the struct itself stays. */
static void context_teardown(struct td_context *ctx)
{
	td_context_synchronize(ctx);
	td_destroy_context_streams(ctx);
	td_unload_context_modules(ctx);
	td_free_context_allocs(ctx);
	ctx->active = false;
}

bool td_context_valid(const struct td_context *ctx)
{
	if (!ctx)
		return false;
	if (ctx >= primary_contexts && ctx < primary_contexts + TD_MAX_DEVICES)
		return ctx->magic == TD_MAGIC_CONTEXT;
	bool found = false;
	pthread_mutex_lock(&td_lock);
	for (struct td_context *c = created_contexts; c && !found; c = c->next)
		found = c == ctx;
	pthread_mutex_unlock(&td_lock);
	return found;
}

struct td_context *td_current_context(void)
{
	return context_depth ? context_stack[context_depth - 1] : NULL;
}

CUresult td_require_context(struct td_context **out)
{
	struct td_context *ctx = td_current_context();
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!ctx->active)
		return CUDA_ERROR_CONTEXT_IS_DESTROYED;
	*out = ctx;
	return td_sticky_error();
}

static CUresult check_device(CUdevice dev)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return dev >= 0 && dev < td_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* ---- primary contexts ---- */

TD_EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_context *ctx = &primary_contexts[dev];
	if (!__atomic_load_n(&ctx->active, __ATOMIC_RELAXED))
		td_context_delay();
	pthread_mutex_lock(&td_lock);
	if (!ctx->active && !td_channels_fit()) {
		pthread_mutex_unlock(&td_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!ctx->active)
		context_activate(ctx, dev, ctx->magic ? ctx->flags : 0);
	ctx->primary = true;
	ctx->primary_refs++;
	pthread_mutex_unlock(&td_lock);
	*pctx = (CUcontext)ctx;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_context *ctx = &primary_contexts[dev];
	pthread_mutex_lock(&td_lock);
	bool last = false;
	if (ctx->primary_refs > 0)
		last = --ctx->primary_refs == 0;
	else
		rc = CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_unlock(&td_lock);
	if (last)
		context_teardown(ctx);
	return rc;
}

TD_EXPORT CUresult cuDevicePrimaryCtxRelease(CUdevice dev)
{
	return cuDevicePrimaryCtxRelease_v2(dev);
}

TD_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_context *ctx = &primary_contexts[dev];
	if (ctx->active)
		context_teardown(ctx);
	pthread_mutex_lock(&td_lock);
	ctx->primary_refs = 0;
	pthread_mutex_unlock(&td_lock);
	if (recoverable())
		__atomic_store_n(&process_fault, CUDA_SUCCESS, __ATOMIC_RELEASE);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
	return cuDevicePrimaryCtxReset_v2(dev);
}

TD_EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int *flags, int *active)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags || !active)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_context *ctx = &primary_contexts[dev];
	pthread_mutex_lock(&td_lock);
	*flags = ctx->flags;
	*active = ctx->active;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	primary_contexts[dev].flags = flags;
	if (!primary_contexts[dev].magic)
		primary_contexts[dev].magic = TD_MAGIC_CONTEXT;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags)
{
	return cuDevicePrimaryCtxSetFlags_v2(dev, flags);
}

/* ---- created contexts ---- */

static CUresult context_create(CUcontext *pctx, unsigned flags, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	unsigned sched = flags & CU_CTX_SCHED_MASK;
	if (!pctx || (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
					  CU_CTX_SYNC_MEMOPS)) || (sched & (sched - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	if (context_depth == CONTEXT_STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct td_context *ctx = calloc(1, sizeof *ctx);
	if (!ctx)
		return CUDA_ERROR_OUT_OF_MEMORY;
	context_activate(ctx, dev, flags);
	pthread_mutex_lock(&td_lock);
	ctx->next = created_contexts;
	created_contexts = ctx;
	pthread_mutex_unlock(&td_lock);
	context_stack[context_depth++] = ctx;
	*pctx = (CUcontext)ctx;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxCreate(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return context_create(pctx, flags, dev);
}

TD_EXPORT CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return context_create(pctx, flags, dev);
}

TD_EXPORT CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int count,
				   unsigned int flags, CUdevice dev)
{
	(void)params, (void)count;
	return context_create(pctx, flags, dev);
}

TD_EXPORT CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned int flags,
				   CUdevice dev)
{
	(void)params;
	return context_create(pctx, flags, dev);
}

TD_EXPORT CUresult cuCtxDestroy_v2(CUcontext handle)
{
	struct td_context *ctx = (struct td_context *)handle;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!td_context_valid(ctx) || ctx->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&td_lock);
	for (struct td_context **link = &created_contexts; *link; link = &(*link)->next) {
		if (*link == ctx) {
			*link = ctx->next;
			break;
		}
	}
	pthread_mutex_unlock(&td_lock);
	/* Popped when current, as CUDA does; deeper places of this thread's stack, and other
	 * threads' stacks, may still name it (CUDA then answers it as destroyed): its memory
	 * stays, marked invalid, so that such a place never names another context. */
	if (context_depth && context_stack[context_depth - 1] == ctx)
		context_depth--;
	context_teardown(ctx);
	ctx->magic = 0;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxDestroy(CUcontext ctx)
{
	return cuCtxDestroy_v2(ctx);
}

/* ---- the current-context stack ---- */

TD_EXPORT CUresult cuCtxSetCurrent(CUcontext handle)
{
	struct td_context *ctx = (struct td_context *)handle;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ctx) {
		if (context_depth)
			context_depth--;
		return CUDA_SUCCESS;
	}
	if (!td_context_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (context_depth)
		context_stack[context_depth - 1] = ctx;
	else
		context_stack[context_depth++] = ctx;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)td_current_context();
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxPushCurrent_v2(CUcontext handle)
{
	struct td_context *ctx = (struct td_context *)handle;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!td_context_valid(ctx))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (context_depth == CONTEXT_STACK_DEPTH)
		return CUDA_ERROR_OUT_OF_MEMORY;
	context_stack[context_depth++] = ctx;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxPushCurrent(CUcontext ctx)
{
	return cuCtxPushCurrent_v2(ctx);
}

TD_EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *pctx)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!context_depth)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct td_context *ctx = context_stack[--context_depth];
	if (pctx)
		*pctx = (CUcontext)ctx;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxPopCurrent(CUcontext *pctx)
{
	return cuCtxPopCurrent_v2(pctx);
}

/* ---- queries on a context ---- */

/* ctx_handle NULL means the current context. */
static CUresult context_or_current(CUcontext handle, struct td_context **out)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle) {
		*out = td_current_context();
		return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	}
	if (!td_context_valid((struct td_context *)handle))
		return CUDA_ERROR_INVALID_CONTEXT;
	*out = (struct td_context *)handle;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetDevice_v2(CUdevice *device, CUcontext handle)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(handle, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = ctx->device;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
	return cuCtxGetDevice_v2(device, NULL);
}

TD_EXPORT CUresult cuCtxSynchronize_v2(CUcontext handle)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(handle, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((rc = td_capture_forbid_context(ctx)) != CUDA_SUCCESS)
		return rc;
	return td_context_synchronize(ctx);
}

TD_EXPORT CUresult cuCtxSynchronize(void)
{
	return cuCtxSynchronize_v2(NULL);
}

TD_EXPORT CUresult cuCtxGetLimit(size_t *value, CUlimit limit)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value || (unsigned)limit >= CU_LIMIT_MAX)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	*value = ctx->limits[limit];
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxSetLimit(CUlimit limit, size_t value)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((unsigned)limit >= CU_LIMIT_MAX || limit == CU_LIMIT_SHMEM_SIZE || limit == CU_LIMIT_CIG_ENABLED)
		return CUDA_ERROR_UNSUPPORTED_LIMIT;
	if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128)
		return CUDA_ERROR_INVALID_VALUE;
	ctx->limits[limit] = value;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetApiVersion(CUcontext handle, unsigned int *version)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(handle, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = 3020;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetId(CUcontext handle, unsigned long long *id)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(handle, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	*id = ctx->id;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetFlags(unsigned int *flags)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!flags)
		return CUDA_ERROR_INVALID_VALUE;
	*flags = ctx->flags;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxSetFlags(unsigned int flags)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	unsigned sched = flags & CU_CTX_SCHED_MASK;
	if (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS) ||
	    (sched & (sched - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	ctx->flags = flags;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxSetCacheConfig(CUfunc_cache config)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	ctx->cache_config = config;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetCacheConfig(CUfunc_cache *config)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	*config = ctx->cache_config;
	return CUDA_SUCCESS;
}

/* The bank size is fixed on every GPU CUDA 13 supports: setting it changes nothing. */
TD_EXPORT CUresult cuCtxSetSharedMemConfig(CUsharedconfig config)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	return (unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxGetSharedMemConfig(CUsharedconfig *config)
{
	struct td_context *ctx;
	CUresult rc = context_or_current(NULL, &ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	*config = ctx->shmem_config;
	return CUDA_SUCCESS;
}
