// bench_cublas N ITERS: cuBLAS sgemm N x N x N in a loop, timed with events.
// Prints sgemm_ms (per call) and sgemm_tflops on stdout.
//
// Exit status: 0 measured; 1 a failure once cuBLAS ran; 3 cuBLAS cannot run on
// this driver at all (CUDA, cublasCreate or the first sgemm fails), with the
// reason on stdout as unsupported=..., so the driver reports the section as
// skipped rather than failed.
#include <cublas_v2.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

static bool measured_once; // set after the first sgemm completed

static void fail(const char *call, const char *what)
{
    if (!measured_once) {
        printf("unsupported=%s: %s\n", call, what);
        fflush(stdout);
        exit(3);
    }
    fprintf(stderr, "bench_cublas: %s: %s\n", call, what);
    exit(1);
}

#define CK(call)                                                        \
    do {                                                                \
        cudaError_t ck_err_ = (call);                                   \
        if (ck_err_ != cudaSuccess)                                     \
            fail(#call, cudaGetErrorName(ck_err_));                     \
    } while (0)

#define CKB(call)                                                       \
    do {                                                                \
        cublasStatus_t ckb_st_ = (call);                                \
        if (ckb_st_ != CUBLAS_STATUS_SUCCESS)                           \
            fail(#call, cublasGetStatusName(ckb_st_));                  \
    } while (0)

// A float in [-1, 1) from a splitmix64 stream.
static float next_value(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (float)((int32_t)(z >> 40) - (1 << 23)) / (float)(1 << 23);
}

int main(int argc, char **argv)
{
    if (argc != 3 || atoi(argv[1]) <= 0 || atoi(argv[2]) <= 0) {
        fprintf(stderr, "usage: bench_cublas N ITERS\n");
        return 2;
    }
    int n = atoi(argv[1]), iters = atoi(argv[2]);
    size_t elems = (size_t)n * n;
    float *A = (float *)malloc(elems * sizeof(float)), *B = (float *)malloc(elems * sizeof(float));
    float *C = (float *)malloc(elems * sizeof(float)), *dA, *dB, *dC;
    if (!A || !B || !C) {
        fprintf(stderr, "bench_cublas: out of host memory\n");
        return 1;
    }
    uint64_t seed = 4096;
    for (size_t i = 0; i < elems; i++) {
        A[i] = next_value(&seed);
        B[i] = next_value(&seed);
    }
    const float alpha = 1.0f, beta = 0.0f;
    cublasHandle_t h;
    cudaEvent_t start, stop;
    CK(cudaSetDevice(0));
    CK(cudaFree(0));
    CKB(cublasCreate(&h));
    CK(cudaMalloc(&dA, elems * sizeof(float)));
    CK(cudaMalloc(&dB, elems * sizeof(float)));
    CK(cudaMalloc(&dC, elems * sizeof(float)));
    CK(cudaMemcpy(dA, A, elems * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, elems * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&stop));
    for (int i = 0; i < 10; i++) // warm-up: cuBLAS loads its kernels and picks one; clocks rise
        CKB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, dA, n, dB, n, &beta, dC, n));
    CK(cudaDeviceSynchronize());
    measured_once = true;

    CK(cudaEventRecord(start, 0));
    for (int i = 0; i < iters; i++)
        CKB(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, dA, n, dB, n, &beta, dC, n));
    CK(cudaEventRecord(stop, 0));
    CK(cudaEventSynchronize(stop));
    float ms;
    CK(cudaEventElapsedTime(&ms, start, stop));
    CK(cudaMemcpy(C, dC, elems * sizeof(float), cudaMemcpyDeviceToHost));

    // Spot-check 16 entries of C = A B (column-major) against double sums.
    int bad = 0;
    for (int s = 0; s < 16; s++) {
        int i = (int)((s * 2654435761u) % (unsigned)n), j = (int)((s * 40503u + 7) % (unsigned)n);
        double ref = 0, mag = 0;
        for (int p = 0; p < n; p++) {
            double term = (double)A[i + (size_t)p * n] * B[p + (size_t)j * n];
            ref += term;
            mag += fabs(term);
        }
        if (fabs(C[i + (size_t)j * n] - ref) > 1e-4 * (mag + 1e-30) && bad++ < 3)
            fprintf(stderr, "bench_cublas: C(%d,%d) = %g, expected %g\n", i, j, C[i + (size_t)j * n], ref);
    }
    if (bad) {
        fprintf(stderr, "bench_cublas: %d of 16 checked entries wrong\n", bad);
        return 1;
    }
    double per_call_ms = ms / iters;
    printf("sgemm_ms=%.4f\n", per_call_ms);
    printf("sgemm_tflops=%.4f\n", 2.0 * n * (double)n * n / (per_call_ms * 1e-3) / 1e12);
    CK(cudaEventDestroy(stop));
    CK(cudaEventDestroy(start));
    CK(cudaFree(dC));
    CK(cudaFree(dB));
    CK(cudaFree(dA));
    CKB(cublasDestroy(h));
    free(C);
    free(B);
    free(A);
    return 0;
}
