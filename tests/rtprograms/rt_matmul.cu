// rt_matmul: matmulTiled on 512x512 floats, compared bit for bit with a CPU
// fmaf chain over ascending k.
#include <math.h>
#define RT_WANT_matmulTiled
#include "catalogue.cuh"
#include "rtcommon.h"

#define N 512

static void cpu_matmul(const float *A, const float *B, float *C, int n)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            float acc = 0.0f;
            for (int k = 0; k < n; k++)
                acc = fmaf(A[i * n + k], B[k * n + j], acc);
            C[i * n + j] = acc;
        }
}

int main(void)
{
    size_t bytes = (size_t)N * N * sizeof(float);
    float *A = (float *)malloc(bytes), *B = (float *)malloc(bytes);
    float *C = (float *)malloc(bytes), *ref = (float *)malloc(bytes);
    float *dA, *dB, *dC;
    uint64_t seed = 512;
    size_t bad = 0;
    if (!A || !B || !C || !ref) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    for (size_t i = 0; i < (size_t)N * N; i++) {
        A[i] = rt_randf(&seed);
        B[i] = rt_randf(&seed);
    }
    CK(cudaMalloc(&dA, bytes));
    CK(cudaMalloc(&dB, bytes));
    CK(cudaMalloc(&dC, bytes));
    CK(cudaMemcpy(dA, A, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(dC, 0xff, bytes));
    dim3 block(RT_TILE, RT_TILE), grid((N + RT_TILE - 1) / RT_TILE, (N + RT_TILE - 1) / RT_TILE);
    matmulTiled<<<grid, block>>>(dA, dB, dC, N);
    CK_KERNEL();
    CK(cudaMemcpy(C, dC, bytes, cudaMemcpyDeviceToHost));
    cpu_matmul(A, B, ref, N);
    for (size_t i = 0; i < (size_t)N * N; i++)
        if (memcmp(&C[i], &ref[i], sizeof(float)) != 0 && bad++ < 5)
            fprintf(stderr, "C[%zu]: gpu %a cpu %a\n", i, C[i], ref[i]);
    printf("matmulTiled n=%d gpu_bits=%016llx cpu_bits=%016llx mismatches=%zu\n", N,
           (unsigned long long)rt_fnv1a(C, bytes), (unsigned long long)rt_fnv1a(ref, bytes), bad);
    CK(cudaFree(dC));
    CK(cudaFree(dB));
    CK(cudaFree(dA));
    free(ref);
    free(C);
    free(B);
    free(A);
    printf("%s\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}
