// rt_reduce: reduceSum over 16M ints, compared exactly with a CPU sum.
#define RT_WANT_reduceSum
#include "catalogue.cuh"
#include "rtcommon.h"

#define N (16 << 20)

int main(void)
{
    int *in = (int *)malloc((size_t)N * sizeof(int)), *din;
    unsigned long long *dsum, sum = 0, ref = 0;
    uint64_t seed = 16;
    if (!in) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    for (int i = 0; i < N; i++) {
        in[i] = (int)(rt_rand(&seed) >> 44); // [0, 2^20)
        ref += (unsigned long long)in[i];
    }
    CK(cudaMalloc(&din, (size_t)N * sizeof(int)));
    CK(cudaMalloc(&dsum, sizeof *dsum));
    CK(cudaMemcpy(din, in, (size_t)N * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMemset(dsum, 0, sizeof *dsum));
    reduceSum<<<1024, RT_REDUCE_BLOCK>>>(din, dsum, N);
    CK_KERNEL();
    CK(cudaMemcpy(&sum, dsum, sizeof sum, cudaMemcpyDeviceToHost));
    printf("reduceSum n=%d gpu=%llu cpu=%llu %s\n", N, sum, ref, sum == ref ? "ok" : "MISMATCH");
    CK(cudaFree(dsum));
    CK(cudaFree(din));
    free(in);
    printf("%s\n", sum == ref ? "PASS" : "FAIL");
    return sum == ref ? 0 : 1;
}
