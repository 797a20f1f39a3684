/* The GPUs of this host: one shared primary context each, counted users, and
 * recovery once a fault has broken a context. */
#ifndef REMORA_GPUS_H
#define REMORA_GPUS_H

#include <cuda.h>

/* How the daemon's threads wait for the GPU in the driver, for contexts made from now
 * on: the gpu_sync setting's value (auto, spin, yield, block). */
void rm_gpu_set_sync(const char *mode);

/* The shared context of dev for a new user. A context broken by a fault is
 * reset first once no session uses it; while sessions still do, new ones get
 * CUDA_ERROR_DEVICE_UNAVAILABLE. */
CUresult rm_gpu_acquire(CUdevice dev, CUcontext *out);
/* A session stops using dev's context. */
void rm_gpu_release(CUdevice dev);
/* Notes result r of a call in dev's context: a sticky error marks the context broken. */
void rm_gpu_note_result(CUdevice dev, CUresult r);

/* dev's free and total memory as its context sees it; CUDA_ERROR_INVALID_CONTEXT
 * while this process has no working context on it. */
CUresult rm_gpu_memory(CUdevice dev, size_t *free_b, size_t *total_b);

#endif
