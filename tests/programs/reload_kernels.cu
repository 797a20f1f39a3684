// The kernels of drv_reload, one to an image: fillU32 when built with -DRELOAD_FILL,
// vecAdd without, the same as kernels.cu's (the test driver runs them by name), so that
// two modules hold functions of different parameter layouts.
//
// Each image holds kernelsMagic, device state a client could write: remorad loads it for
// its client alone and unloads it at cuModuleUnload (backend/gpu/image_cache.h), so that the
// handles of an unloaded module may come again for the next module's functions.

extern "C" {

__device__ unsigned int kernelsMagic = 0x52454d4fu;

#ifdef RELOAD_FILL
__global__ void fillU32(unsigned *x, unsigned v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = v;
}
#else
__global__ void vecAdd(const float *a, const float *b, float *c, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}
#endif

}
