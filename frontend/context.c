/* Contexts as the program sees them: the current-context stack is per thread and
 * kept here; the daemon learns the current context from every request's header. */
#include "client.h"

#include <pthread.h>

#define MAX_KNOWN_CTX 64
#define CTX_STACK_DEPTH 32

static pthread_mutex_t known_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
	CUcontext ctx;
	CUdevice dev;
} known[MAX_KNOWN_CTX];
static int nknown;

static __thread CUcontext stack[CTX_STACK_DEPTH];
static __thread int depth; /* stack[depth - 1] is current */

void rm_ctx_known(CUcontext ctx, CUdevice dev)
{
	pthread_mutex_lock(&known_lock);
	int i = 0;
	while (i < nknown && known[i].ctx != ctx)
		i++;
	if (i == nknown && nknown < MAX_KNOWN_CTX) {
		known[i].ctx = ctx;
		known[i].dev = dev;
		nknown++;
	}
	pthread_mutex_unlock(&known_lock);
}

static int ctx_device(CUcontext ctx, CUdevice *dev)
{
	int found = 0;
	pthread_mutex_lock(&known_lock);
	for (int i = 0; i < nknown && !found; i++)
		if (known[i].ctx == ctx) {
			*dev = known[i].dev;
			found = 1;
		}
	pthread_mutex_unlock(&known_lock);
	return found;
}

CUcontext rm_ctx_current(void)
{
	return depth ? stack[depth - 1] : NULL;
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
	if (depth == CTX_STACK_DEPTH)
		return CUDA_ERROR_INVALID_VALUE;
	stack[depth++] = ctx;
	return CUDA_SUCCESS;
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
	*version = 3020; /* the API version of every context created through cuDevicePrimaryCtxRetain */
	return CUDA_SUCCESS;
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
