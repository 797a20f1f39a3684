/* The GPUs of this host: one shared primary context each, with counted users. */
#ifndef REMORA_GPUS_H
#define REMORA_GPUS_H

#include <cuda.h>

/* How the daemon's threads wait for the GPU in the driver, for contexts made from now
 * on: the gpu_sync setting's value (auto, spin, yield, block). */
void rm_gpu_set_sync(const char *mode);
/* The device malloc heap a shared context is made with (0: the driver's): a context's heap
 * cannot grow once a kernel of any client used it, so the operator sizes it for all. */
void rm_gpu_set_malloc_heap(uint64_t bytes);

/* The shared context of dev for a new user; a faulted worker's sticky error once it has
 * faulted (fault.h). */
CUresult rm_gpu_acquire(CUdevice dev, CUcontext *out);
/* The value of limit in a fresh context of dev, as its shared context had it when made:
 * 1, or 0 when unknown. */
int rm_gpu_default_limit(CUdevice dev, CUlimit limit, size_t *out);
/* A session stops using dev's context. */
void rm_gpu_release(CUdevice dev);

/* Releases and resets dev's shared context, and forgets what was made in it, if no
 * session uses it; the next user makes it anew. For the request fuzzer (tests/fuzz), whose
 * test driver can recover a faulted process: NVIDIA's cannot, and remorad retires a faulted
 * worker instead (fault.h). */
void rm_gpu_reset(CUdevice dev);

/* dev's free and total memory as its context sees it; CUDA_ERROR_INVALID_CONTEXT
 * while this process has no context on it. A sticky error it returns faults the worker
 * (the worker's periodic check for faults no call has reported). */
CUresult rm_gpu_memory(CUdevice dev, size_t *free_b, size_t *total_b);

#endif
