// The kernel catalogue shared by the runtime test programs.
//
// The CPU test driver implements exactly these extern "C" names in C, so a
// program that must run in CI may only use kernels from this file, and their
// arithmetic must stay as written here (matmulTiled and spinFma results are
// compared bit for bit).
//
// Element-wise kernels are grid-stride loops, so any launch shape covers all
// n elements, as the CPU versions do. The same names and arithmetic are in
// tests/programs/kernels.cu (driver-API programs) and the test driver.
//
// A translation unit defines RT_WANT_<name> for each kernel it needs before
// including this header, so two .cu files of one binary never both define
// the same kernel.
#pragma once

#include <cuda_runtime.h>

#ifdef RT_WANT_vecAdd
extern "C" __global__ void vecAdd(const float *a, const float *b, float *c, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}
#endif

#ifdef RT_WANT_scaleArray
extern "C" __global__ void scaleArray(float *x, float s, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = x[i] * s;
}
#endif

#ifdef RT_WANT_fillU32
extern "C" __global__ void fillU32(unsigned *x, unsigned v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = v;
}
#endif

#ifdef RT_WANT_reduceSum
#define RT_REDUCE_BLOCK 256
// Launch with blockDim.x == RT_REDUCE_BLOCK and *out zeroed; any grid size.
extern "C" __global__ void reduceSum(const int *in, unsigned long long *out, int n)
{
    __shared__ unsigned long long part[RT_REDUCE_BLOCK];
    unsigned long long acc = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        acc += (unsigned long long)in[i];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (unsigned s = blockDim.x / 2; s > 0; s /= 2) {
        if (threadIdx.x < s)
            part[threadIdx.x] += part[threadIdx.x + s];
        __syncthreads();
    }
    if (threadIdx.x == 0)
        atomicAdd(out, part[0]);
}
#endif

#ifdef RT_WANT_matmulTiled
#define RT_TILE 16
// C = A * B, n x n row-major; launch with 16x16 blocks, ceil(n/16)^2 grid.
// Each C element is one fmaf chain over ascending k, starting from 0.0f.
extern "C" __global__ void matmulTiled(const float *A, const float *B, float *C, int n)
{
    __shared__ float As[RT_TILE][RT_TILE];
    __shared__ float Bs[RT_TILE][RT_TILE];
    int row = blockIdx.y * RT_TILE + threadIdx.y;
    int col = blockIdx.x * RT_TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n; t += RT_TILE) {
        int ak = t + threadIdx.x, bk = t + threadIdx.y;
        As[threadIdx.y][threadIdx.x] = (row < n && ak < n) ? A[row * n + ak] : 0.0f;
        Bs[threadIdx.y][threadIdx.x] = (col < n && bk < n) ? B[bk * n + col] : 0.0f;
        __syncthreads();
        for (int k = 0; k < RT_TILE && t + k < n; k++)
            acc = fmaf(As[threadIdx.y][k], Bs[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < n && col < n)
        C[row * n + col] = acc;
}
#endif

#ifdef RT_WANT_spinFma
// One thread: a dependent chain of 4 FMAs per iteration.
extern "C" __global__ void spinFma(float *out, long long iters)
{
    float x = 1.0f;
    for (long long i = 0; i < iters; i++) {
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
    }
    out[0] = x;
}
#endif

#ifdef RT_WANT_sleepNs
extern "C" __global__ void sleepNs(unsigned long long ns)
{
    // %globaltimer counts nanoseconds; __nanosleep naps at most ~1 ms a call.
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(100000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
#endif

#ifdef RT_WANT_emptyKernel
extern "C" __global__ void emptyKernel(void)
{
}
#endif

#ifdef RT_WANT_texFetch2D
// out[y * w + x] = the texel at (x + dx, y + dy), sampled at its centre.
extern "C" __global__ void texFetch2D(float *out, cudaTextureObject_t tex, int w, int h, float dx, float dy)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < w * h; i += gridDim.x * blockDim.x)
        out[i] = tex2D<float>(tex, (float)(i % w) + dx + 0.5f, (float)(i / w) + dy + 0.5f);
}
#endif

#ifdef RT_WANT_surfWrite2D
// Writes v + 1000 * x + y to each 32-bit element (x, y) of a w x h surface.
extern "C" __global__ void surfWrite2D(cudaSurfaceObject_t surf, int w, int h, unsigned v)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < w * h; i += gridDim.x * blockDim.x)
        surf2Dwrite<unsigned>(v + 1000u * (unsigned)(i % w) + (unsigned)(i / w), surf, (i % w) * 4, i / w);
}
#endif
