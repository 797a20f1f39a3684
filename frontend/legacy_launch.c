/* The launch calls before CUDA 4 (cuFuncSetBlockShape, cuFuncSetSharedSize, cuParamSet*,
 * cuLaunch, cuLaunchGrid, cuLaunchGridAsync), done here: a function's block shape, dynamic
 * shared memory and parameter buffer are kept per function, as the driver keeps them, and a
 * launch is cuLaunchKernel with the buffer as its `extra` (CU_LAUNCH_PARAM_BUFFER_POINTER),
 * on the legacy NULL stream for cuLaunch and cuLaunchGrid. What a function was given is kept
 * with its module's handle: a function whose module is another's by then (unloaded, its
 * handle come again) starts afresh. cuParamSetTexRef is the driver's (proto/api.spec). */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define PARAM_BYTES 4096 /* the legacy parameter buffer's size */

struct legacy_fn {
	CUfunction f;
	CUmodule module;
	unsigned block[3], shared;
	size_t size;
	unsigned char params[PARAM_BYTES];
	struct legacy_fn *next;
};

static struct legacy_fn *functions;
static pthread_mutex_t functions_lock = PTHREAD_MUTEX_INITIALIZER;

/* f's state, made fresh where it had none or its module changed; NULL with *r set on failure.
 * Called and left with functions_lock held. */
static struct legacy_fn *state_of(CUfunction f, CUresult *r)
{
	CUmodule module = NULL;
	if (!f || (*r = cuFuncGetModule(&module, f)) != CUDA_SUCCESS) {
		*r = f ? *r : CUDA_ERROR_INVALID_HANDLE;
		return NULL;
	}
	struct legacy_fn *fn = functions;
	while (fn && fn->f != f)
		fn = fn->next;
	if (!fn) {
		if (!(fn = calloc(1, sizeof(*fn)))) {
			*r = CUDA_ERROR_OUT_OF_MEMORY;
			return NULL;
		}
		fn->f = f;
		fn->next = functions;
		functions = fn;
	}
	if (fn->module != module) {
		struct legacy_fn *next = fn->next;
		memset(fn, 0, sizeof(*fn));
		fn->f = f, fn->module = module, fn->next = next;
	}
	*r = CUDA_SUCCESS;
	return fn;
}

RM_EXPORT CUresult CUDAAPI cuFuncSetBlockShape(CUfunction hfunc, int x, int y, int z)
{
	if (x <= 0 || y <= 0 || z <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r;
	pthread_mutex_lock(&functions_lock);
	struct legacy_fn *fn = state_of(hfunc, &r);
	if (fn)
		fn->block[0] = (unsigned)x, fn->block[1] = (unsigned)y, fn->block[2] = (unsigned)z;
	pthread_mutex_unlock(&functions_lock);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuFuncSetSharedSize(CUfunction hfunc, unsigned int bytes)
{
	CUresult r;
	pthread_mutex_lock(&functions_lock);
	struct legacy_fn *fn = state_of(hfunc, &r);
	if (fn)
		fn->shared = bytes;
	pthread_mutex_unlock(&functions_lock);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuParamSetSize(CUfunction hfunc, unsigned int numbytes)
{
	if (numbytes > PARAM_BYTES)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r;
	pthread_mutex_lock(&functions_lock);
	struct legacy_fn *fn = state_of(hfunc, &r);
	if (fn)
		fn->size = numbytes;
	pthread_mutex_unlock(&functions_lock);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuParamSetv(CUfunction hfunc, int offset, void *ptr, unsigned int numbytes)
{
	if (offset < 0 || numbytes > PARAM_BYTES || (size_t)offset > PARAM_BYTES - numbytes || (numbytes && !ptr))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r;
	pthread_mutex_lock(&functions_lock);
	struct legacy_fn *fn = state_of(hfunc, &r);
	if (fn && numbytes)
		memcpy(fn->params + offset, ptr, numbytes);
	pthread_mutex_unlock(&functions_lock);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuParamSeti(CUfunction hfunc, int offset, unsigned int value)
{
	return cuParamSetv(hfunc, offset, &value, sizeof(value));
}

RM_EXPORT CUresult CUDAAPI cuParamSetf(CUfunction hfunc, int offset, float value)
{
	return cuParamSetv(hfunc, offset, &value, sizeof(value));
}

RM_EXPORT CUresult CUDAAPI cuLaunchGridAsync(CUfunction f, int grid_width, int grid_height, CUstream hStream)
{
	if (grid_width <= 0 || grid_height <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r;
	pthread_mutex_lock(&functions_lock);
	struct legacy_fn *fn = state_of(f, &r);
	struct legacy_fn copy;
	if (fn)
		memcpy(&copy, fn, sizeof(copy)); /* the launch packs it; a setter may run meanwhile */
	pthread_mutex_unlock(&functions_lock);
	if (!fn)
		return r;
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, copy.params, CU_LAUNCH_PARAM_BUFFER_SIZE, &copy.size,
			 CU_LAUNCH_PARAM_END};
	return cuLaunchKernel(f, (unsigned)grid_width, (unsigned)grid_height, 1, copy.block[0], copy.block[1],
			      copy.block[2], copy.shared, hStream, NULL, copy.size ? extra : NULL);
}

RM_EXPORT CUresult CUDAAPI cuLaunchGrid(CUfunction f, int grid_width, int grid_height)
{
	return cuLaunchGridAsync(f, grid_width, grid_height, CU_STREAM_LEGACY);
}

RM_EXPORT CUresult CUDAAPI cuLaunch(CUfunction f)
{
	return cuLaunchGridAsync(f, 1, 1, CU_STREAM_LEGACY);
}
