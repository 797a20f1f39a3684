// rt_empty N: launch overhead. N async launches of emptyKernel then one
// sync, and N times launch + cudaDeviceSynchronize; per-launch microseconds.
#define RT_WANT_emptyKernel
#include "catalogue.cuh"
#include "rtcommon.h"

int main(int argc, char **argv)
{
    long long n = rt_arg_count(argc, argv, 1, 10000);
    emptyKernel<<<1, 1>>>(); // load the module outside the timed loops
    CK_KERNEL();

    double t = rt_now_us();
    for (long long i = 0; i < n; i++) {
        emptyKernel<<<1, 1>>>();
        CK_LAUNCH();
    }
    CK(cudaDeviceSynchronize());
    double async_us = (rt_now_us() - t) / n;

    t = rt_now_us();
    for (long long i = 0; i < n; i++) {
        emptyKernel<<<1, 1>>>();
        CK_KERNEL();
    }
    double sync_us = (rt_now_us() - t) / n;

    printf("emptyKernel launches=%lld async+sync ok\n", n);
    printf("time_async_us=%.3f\n", async_us);
    printf("time_sync_us=%.3f\n", sync_us);
    printf("PASS\n");
    return 0;
}
