// rt_spin ITERS [BLOCKS]: one spinFma launch timed with events; BLOCKS one-thread blocks
// (default 1) make it a throughput kernel for compute shares (scripts/bench-tenants.sh). The CPU reference
// stops early once x reaches a fixed point: fmaf rounding is monotone, so
// the sequence is monotone and, once it stops moving, stays put.
#include <math.h>
#define RT_WANT_spinFma
#include "catalogue.cuh"
#include "rtcommon.h"

static float cpu_spin(long long iters)
{
    float x = 1.0f;
    for (long long i = 0; i < iters; i++) {
        float prev = x;
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
        x = fmaf(x, 0.999999f, 1e-7f);
        if (x == prev)
            break;
    }
    return x;
}

int main(int argc, char **argv)
{
    long long iters = rt_arg_count(argc, argv, 1, 100000000);
    int blocks = (int)rt_arg_count(argc, argv, 2, 1);
    cudaEvent_t t0, t1;
    float *dout, x, ref = cpu_spin(iters), ms;
    uint32_t bits;
    CK(cudaMalloc(&dout, sizeof(float)));
    CK(cudaEventCreate(&t0));
    CK(cudaEventCreate(&t1));
    CK(cudaEventRecord(t0, 0));
    spinFma<<<blocks, 1>>>(dout, iters);
    CK_LAUNCH();
    CK(cudaEventRecord(t1, 0));
    CK(cudaEventSynchronize(t1));
    CK(cudaEventElapsedTime(&ms, t0, t1));
    CK(cudaMemcpy(&x, dout, sizeof x, cudaMemcpyDeviceToHost));
    memcpy(&bits, &x, sizeof bits);
    int ok = memcmp(&x, &ref, sizeof x) == 0;
    printf("spinFma iters=%lld x=%.9g bits=%08x %s\n", iters, x, bits, ok ? "ok" : "MISMATCH");
    if (!ok)
        fprintf(stderr, "cpu reference %a, gpu %a\n", ref, x);
    printf("time_ms=%.3f\n", ms);
    CK(cudaEventDestroy(t1));
    CK(cudaEventDestroy(t0));
    CK(cudaFree(dout));
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
