// Kernel catalogue shared by the driver-API test programs.
//
// Every kernel is extern "C" so the driver finds it by its plain name, and the
// test driver (tests/testdriver/kernels.c) carries a CPU version under the same
// name.  Element-wise kernels are grid-stride loops: any launch shape covers
// all n elements, which is what the CPU versions compute.

#include <assert.h>

extern "C" {

// Read back with cuModuleGetGlobal by drv_vecadd: "REMO".
__device__ unsigned int kernelsMagic = 0x52454d4fu;

__global__ void vecAdd(const float *a, const float *b, float *c, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        c[i] = a[i] + b[i];
}

__global__ void scaleArray(float *x, float s, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] *= s;
}

__global__ void fillU32(unsigned *x, unsigned v, int n)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        x[i] = v;
}

// Block reduction in shared memory; works for any blockDim.x <= 1024.
__global__ void reduceSum(const int *in, unsigned long long *out, int n)
{
    __shared__ unsigned long long partial[1024];
    unsigned tid = threadIdx.x;
    unsigned long long sum = 0;
    for (int i = blockIdx.x * blockDim.x + tid; i < n; i += gridDim.x * blockDim.x)
        sum += (unsigned long long)(long long)in[i];
    partial[tid] = sum;
    __syncthreads();
    unsigned span = 1;
    while (span < blockDim.x)
        span <<= 1;
    for (unsigned s = span / 2; s > 0; s >>= 1) {
        if (tid < s && tid + s < blockDim.x)
            partial[tid] += partial[tid + s];
        __syncthreads();
    }
    if (tid == 0)
        atomicAdd(out, partial[0]);
}

// C = A * B, n x n row-major, 16x16 tiles (launch with 16x16 blocks covering
// n x n).  Each element is one fmaf chain in ascending k, starting from 0.
#define TILE 16
__global__ void matmulTiled(const float *A, const float *B, float *C, int n)
{
    __shared__ float tileA[TILE][TILE];
    __shared__ float tileB[TILE][TILE];
    int row = blockIdx.y * TILE + threadIdx.y;
    int col = blockIdx.x * TILE + threadIdx.x;
    float acc = 0.0f;
    for (int t = 0; t < n; t += TILE) {
        int ka = t + threadIdx.x, kb = t + threadIdx.y;
        tileA[threadIdx.y][threadIdx.x] = (row < n && ka < n) ? A[row * n + ka] : 0.0f;
        tileB[threadIdx.y][threadIdx.x] = (kb < n && col < n) ? B[kb * n + col] : 0.0f;
        __syncthreads();
        int kmax = n - t < TILE ? n - t : TILE;
        for (int k = 0; k < kmax; k++)
            acc = fmaf(tileA[threadIdx.y][k], tileB[k][threadIdx.x], acc);
        __syncthreads();
    }
    if (row < n && col < n)
        C[row * n + col] = acc;
}

// Spins until the host sets *flag (cuda-samples' latches), then copies it to *out; launch 1x1.
__global__ void waitFlag(const volatile unsigned *flag, unsigned *out)
{
    while (*flag == 0)
        ;
    *out = *flag;
}

// One dependent chain of 4 FMAs per iteration from x = 1; launch 1x1.
__global__ void spinFma(float *out, long long iters)
{
    float x = 1.0f;
    for (long long i = 0; i < iters; i++) {
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0)
        out[0] = x;
}

// Busy for at least ns nanoseconds of the GPU's global timer.
__global__ void sleepNs(unsigned long long ns)
{
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}

__global__ void emptyKernel(void)
{
}

// Launched with a bad pointer to raise an illegal-address error.
__global__ void faultKernel(int *p)
{
    *p = 1;
}

// Launched with v = 0 to fail a device-side assert (CUDA_ERROR_ASSERT).
__global__ void assertKernel(int v)
{
    assert(v != 0);
}

// Reads a 2-D texture of float: out[y * w + x] = the texel at (x + dx, y + dy), sampled at
// its centre (point filtering, unnormalized coordinates; the address mode decides outside).
__global__ void texFetch2D(float *out, unsigned long long tex, int w, int h, float dx, float dy)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < w * h; i += gridDim.x * blockDim.x)
        out[i] = tex2D<float>(tex, (float)(i % w) + dx + 0.5f, (float)(i / w) + dy + 0.5f);
}

// Writes v + 1000 * x + y to each element (x, y) of a w x h surface of 32-bit elements.
__global__ void surfWrite2D(unsigned long long surf, int w, int h, unsigned v)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < w * h; i += gridDim.x * blockDim.x)
        surf2Dwrite<unsigned>(v + 1000u * (unsigned)(i % w) + (unsigned)(i / w), surf, (i % w) * 4, i / w);
}

// Adds 1 to kernelsMagic and writes what it became to out[0] (drv_migrate: a module's
// variable that a move must carry).
__global__ void bumpMagic(unsigned *out)
{
    if (blockIdx.x == 0 && threadIdx.x == 0)
        out[0] = ++kernelsMagic;
}

}
