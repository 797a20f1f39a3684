#include "gpus.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "driver_table.h"
#include "image_cache.h"
#include "log.h"
#include "stream_pool.h"
#include "stream_wait.h"

#define MAX_GPUS 64

static struct gpu {
	CUcontext ctx;
	int users;
	int broken;
} gpus[MAX_GPUS];
static pthread_mutex_t gpus_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int sync_flags = CU_CTX_SCHED_AUTO;

void rm_gpu_set_sync(const char *mode)
{
	sync_flags = !strcmp(mode, "spin")    ? CU_CTX_SCHED_SPIN
		     : !strcmp(mode, "yield") ? CU_CTX_SCHED_YIELD
		     : !strcmp(mode, "block") ? CU_CTX_SCHED_BLOCKING_SYNC
					      : CU_CTX_SCHED_AUTO;
}

/* Errors after which CUDA leaves a context unusable. */
static int is_sticky(CUresult r)
{
	switch (r) {
	case CUDA_ERROR_ILLEGAL_ADDRESS:
	case CUDA_ERROR_HARDWARE_STACK_ERROR:
	case CUDA_ERROR_ILLEGAL_INSTRUCTION:
	case CUDA_ERROR_MISALIGNED_ADDRESS:
	case CUDA_ERROR_INVALID_ADDRESS_SPACE:
	case CUDA_ERROR_INVALID_PC:
	case CUDA_ERROR_LAUNCH_FAILED:
		return 1;
	default:
		return 0;
	}
}

CUresult rm_gpu_acquire(CUdevice dev, CUcontext *out)
{
	if (dev < 0 || dev >= MAX_GPUS)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult r = CUDA_SUCCESS;
	struct gpu *g = &gpus[dev];
	pthread_mutex_lock(&gpus_lock);
	if (g->ctx && g->broken) {
		if (g->users) {
			rm_log(RM_LOG_WARN, "GPU %d: its shared context faulted; new clients are refused until its %d client(s) leave",
			       dev, g->users);
			r = CUDA_ERROR_DEVICE_UNAVAILABLE;
		} else {
			rm_log(RM_LOG_WARN, "GPU %d: resetting the shared context a fault broke", dev);
			rm_image_forget_context(g->ctx);
			rm_stream_pool_forget_context(g->ctx);
			rm_stream_wait_forget_gpu(dev, g->ctx);
			rm_drv.cuDevicePrimaryCtxRelease_v2(dev);
			rm_drv.cuDevicePrimaryCtxReset_v2(dev);
			g->ctx = NULL;
			g->broken = 0;
		}
	}
	if (r == CUDA_SUCCESS && !g->ctx) {
		/* Before the context exists; refused (another process made it) it keeps its own. */
		if (sync_flags != CU_CTX_SCHED_AUTO && rm_drv.cuDevicePrimaryCtxSetFlags_v2 &&
		    rm_drv.cuDevicePrimaryCtxSetFlags_v2(dev, sync_flags) != CUDA_SUCCESS)
			rm_log(RM_LOG_WARN, "GPU %d: the shared context keeps its scheduling flags (gpu_sync not applied)",
			       dev);
		r = rm_drv.cuDevicePrimaryCtxRetain(&g->ctx, dev);
		if (is_sticky(r)) {
			/* NVIDIA's driver keeps such errors for the life of the process: only a new
			 * process gets a working GPU, so leave that to the supervisor. */
			rm_log(RM_LOG_ERROR, "GPU %d: the driver cannot recover from the fault in this process "
			       "(error %d); exiting so that remorad is restarted", dev, r);
			exit(75);
		}
	}
	if (r == CUDA_SUCCESS) {
		g->users++;
		*out = g->ctx;
	}
	pthread_mutex_unlock(&gpus_lock);
	return r;
}

void rm_gpu_release(CUdevice dev)
{
	if (dev < 0 || dev >= MAX_GPUS)
		return;
	pthread_mutex_lock(&gpus_lock);
	if (gpus[dev].users > 0)
		gpus[dev].users--;
	pthread_mutex_unlock(&gpus_lock);
}

void rm_gpu_note_result(CUdevice dev, CUresult r)
{
	if (!is_sticky(r) || dev < 0 || dev >= MAX_GPUS)
		return;
	pthread_mutex_lock(&gpus_lock);
	if (!gpus[dev].broken)
		rm_log(RM_LOG_WARN, "GPU %d: a client's fault (error %d) broke the shared context", dev, r);
	gpus[dev].broken = 1;
	pthread_mutex_unlock(&gpus_lock);
}

CUresult rm_gpu_memory(CUdevice dev, size_t *free_b, size_t *total_b)
{
	if (dev < 0 || dev >= MAX_GPUS)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&gpus_lock);
	CUcontext ctx = gpus[dev].broken ? NULL : gpus[dev].ctx;
	pthread_mutex_unlock(&gpus_lock);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUresult r = rm_drv.cuCtxPushCurrent_v2(ctx);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv.cuMemGetInfo_v2(free_b, total_b);
	CUcontext popped;
	rm_drv.cuCtxPopCurrent_v2(&popped);
	return r;
}
