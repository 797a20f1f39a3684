#include "gpus.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deferred.h"
#include "driver_table.h"
#include "fault.h"
#include "image_cache.h"
#include "log.h"
#include "stream_pool.h"
#include "stream_wait.h"

#define MAX_GPUS 64

#define GPU_LIMITS 16

static struct gpu {
	CUcontext ctx;
	int users;
	size_t limits[GPU_LIMITS]; /* a fresh context's limits, read when the context was made */
	unsigned limits_read;      /* which of them the driver answered */
} gpus[MAX_GPUS];
static pthread_mutex_t gpus_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int sync_flags = CU_CTX_SCHED_AUTO;
static uint64_t malloc_heap; /* 0: the driver's */

void rm_gpu_set_malloc_heap(uint64_t bytes)
{
	malloc_heap = bytes;
}

void rm_gpu_set_sync(const char *mode)
{
	sync_flags = !strcmp(mode, "spin")    ? CU_CTX_SCHED_SPIN
		     : !strcmp(mode, "yield") ? CU_CTX_SCHED_YIELD
		     : !strcmp(mode, "block") ? CU_CTX_SCHED_BLOCKING_SYNC
					      : CU_CTX_SCHED_AUTO;
}

/* Whether a context that could not be made may be made on a later try: MPS's server
 * connection errors, seen when many MPS clients (workers) start at once. */
static int transient(CUresult r)
{
	return r == CUDA_ERROR_MPS_CONNECTION_FAILED || r == CUDA_ERROR_MPS_RPC_FAILURE ||
	       r == CUDA_ERROR_MPS_SERVER_NOT_READY || r == CUDA_ERROR_NOT_INITIALIZED || r == CUDA_ERROR_UNKNOWN;
}

/* The hardware queues the worker asks for (hardware_queues, passed in the environment). */
static int queues_asked(void)
{
	const char *v = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	int n = v ? atoi(v) : 8; /* the driver's default */
	return n > 0 && n <= 32 ? n : 8;
}

/* The GPU's shared context, tried again for a few seconds after a transient error; a
 * failure is logged with its error. */
static CUresult retain_primary(CUdevice dev, CUcontext *ctx)
{
	CUresult r = rm_drv_cuDevicePrimaryCtxRetain(ctx, dev);
	for (int delay_ms = 50; transient(r) && delay_ms <= 1600; delay_ms *= 2) {
		rm_log(RM_LOG_INFO, "GPU %d: the shared context could not be made (error %d); again in %d ms", dev,
		       (int)r, delay_ms);
		usleep((useconds_t)delay_ms * 1000);
		r = rm_drv_cuDevicePrimaryCtxRetain(ctx, dev);
	}
	/* Every context's hardware queues take channels of the GPU (or of MPS's server): with many
	 * workers on a GPU the last ones run out. Fewer queues beat no context. The driver reads
	 * CUDA_DEVICE_MAX_CONNECTIONS when it makes a context, under gpus_lock here. */
	for (int queues = queues_asked(); r == CUDA_ERROR_OUT_OF_MEMORY && queues > 1;) {
		queues /= 2;
		char v[12];
		snprintf(v, sizeof v, "%d", queues);
		setenv("CUDA_DEVICE_MAX_CONNECTIONS", v, 1);
		rm_log(RM_LOG_WARN, "GPU %d: out of memory making the shared context; trying again with %d hardware "
		       "queues (every context's queues share the GPU's channels: lower hardware_queues)", dev, queues);
		r = rm_drv_cuDevicePrimaryCtxRetain(ctx, dev);
		if (r == CUDA_SUCCESS)
			rm_stream_pool_set_queues(queues);
	}
	if (r == CUDA_ERROR_OUT_OF_MEMORY && getenv("CUDA_MPS_PIPE_DIRECTORY"))
		rm_log(RM_LOG_ERROR, "GPU %d: the shared context cannot be made: out of memory; under MPS that may be "
		       "the server's hardware queues, shared by every worker: lower hardware_queues", dev);
	else if (r != CUDA_SUCCESS)
		rm_log(RM_LOG_ERROR, "GPU %d: the shared context cannot be made: error %d", dev, (int)r);
	return r;
}

CUresult rm_gpu_acquire(CUdevice dev, CUcontext *out)
{
	if (dev < 0 || dev >= MAX_GPUS)
		return CUDA_ERROR_INVALID_DEVICE;
	/* A faulted worker's contexts never work again (fault.h): it takes no new user. */
	CUresult r = rm_fault_error();
	struct gpu *g = &gpus[dev];
	pthread_mutex_lock(&gpus_lock);
	if (r == CUDA_SUCCESS && !g->ctx) {
		/* Before the context exists; refused (another process made it) it keeps its own. */
		if (sync_flags != CU_CTX_SCHED_AUTO && rm_drv.cuDevicePrimaryCtxSetFlags_v2 &&
		    rm_drv_cuDevicePrimaryCtxSetFlags_v2(dev, sync_flags) != CUDA_SUCCESS)
			rm_log(RM_LOG_WARN, "GPU %d: the shared context keeps its scheduling flags (gpu_sync not applied)",
			       dev);
		r = retain_primary(dev, &g->ctx);
		rm_fault_note(NULL, r);
		CUcontext prev = NULL;
		g->limits_read = 0;
		if (r == CUDA_SUCCESS && rm_drv_cuCtxGetCurrent(&prev) == CUDA_SUCCESS &&
		    rm_drv_cuCtxSetCurrent(g->ctx) == CUDA_SUCCESS) {
			CUresult heap = malloc_heap ? rm_drv_cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, (size_t)malloc_heap)
						    : CUDA_SUCCESS;
			if (heap != CUDA_SUCCESS)
				rm_log(RM_LOG_WARN, "GPU %d: the shared context keeps the driver's malloc heap (gpu_malloc_heap "
				       "not applied: error %d)", dev, (int)heap);
			for (int l = 0; l < GPU_LIMITS; l++)
				if (rm_drv_cuCtxGetLimit(&g->limits[l], (CUlimit)l) == CUDA_SUCCESS)
					g->limits_read |= 1u << l;
			rm_drv_cuCtxSetCurrent(prev);
		}
	}
	if (r == CUDA_SUCCESS) {
		g->users++;
		*out = g->ctx;
	}
	pthread_mutex_unlock(&gpus_lock);
	return r;
}

int rm_gpu_default_limit(CUdevice dev, CUlimit limit, size_t *out)
{
	int known = 0;
	if (dev < 0 || dev >= MAX_GPUS || (unsigned)limit >= GPU_LIMITS)
		return 0;
	pthread_mutex_lock(&gpus_lock);
	if (gpus[dev].ctx && (gpus[dev].limits_read & (1u << limit))) {
		*out = gpus[dev].limits[limit];
		known = 1;
	}
	pthread_mutex_unlock(&gpus_lock);
	return known;
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

void rm_gpu_reset(CUdevice dev)
{
	if (dev < 0 || dev >= MAX_GPUS)
		return;
	struct gpu *g = &gpus[dev];
	pthread_mutex_lock(&gpus_lock);
	if (g->ctx && !g->users) {
		rm_deferred_drain(); /* no release is left for the context reset below */
		rm_image_forget_context(g->ctx);
		rm_stream_pool_forget_context(g->ctx);
		rm_stream_wait_forget_gpu(dev, g->ctx);
		rm_drv_cuDevicePrimaryCtxRelease_v2(dev);
		rm_drv_cuDevicePrimaryCtxReset_v2(dev);
		g->ctx = NULL;
	}
	pthread_mutex_unlock(&gpus_lock);
}

CUresult rm_gpu_memory(CUdevice dev, size_t *free_b, size_t *total_b)
{
	if (dev < 0 || dev >= MAX_GPUS)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&gpus_lock);
	CUcontext ctx = gpus[dev].ctx;
	pthread_mutex_unlock(&gpus_lock);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUresult r = rm_drv_cuCtxPushCurrent_v2(ctx);
	if (r == CUDA_SUCCESS) {
		r = rm_drv_cuMemGetInfo_v2(free_b, total_b);
		CUcontext popped;
		rm_drv_cuCtxPopCurrent_v2(&popped);
	}
	rm_fault_note(NULL, r); /* also the worker's check for a fault no call has reported */
	return r;
}
