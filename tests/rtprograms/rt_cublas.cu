// rt_cublas: cuBLAS sgemm and dgemm against a CPU reference in double, with a
// tolerance scaled by sum |a||b|. GPU-only: the CPU test driver cannot serve
// cuBLAS's own kernels.
#include <cublas_v2.h>
#include <math.h>
#include "rtcommon.h"

#define CKB(call)                                                              \
    do {                                                                       \
        cublasStatus_t ckb_st_ = (call);                                       \
        if (ckb_st_ != CUBLAS_STATUS_SUCCESS) {                                \
            fprintf(stderr, "%s:%d: %s: cuBLAS status %d\n", __FILE__, __LINE__, \
                    #call, (int)ckb_st_);                                      \
            exit(1);                                                           \
        }                                                                      \
    } while (0)

static cublasStatus_t gemm(cublasHandle_t h, int m, int n, int k, const float *al,
                           const float *A, const float *B, const float *be, float *C)
{
    return cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, al, A, m, B, k, be, C, m);
}

static cublasStatus_t gemm(cublasHandle_t h, int m, int n, int k, const double *al,
                           const double *A, const double *B, const double *be, double *C)
{
    return cublasDgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, al, A, m, B, k, be, C, m);
}

// C = alpha A B + beta C, column-major, A m x k, B k x n. Returns 1 if it matched.
template <typename T>
static int check_gemm(cublasHandle_t h, const char *name, int m, int n, int k, double tol)
{
    size_t na = (size_t)m * k, nb = (size_t)k * n, nc = (size_t)m * n;
    T *A = (T *)malloc(na * sizeof(T)), *B = (T *)malloc(nb * sizeof(T));
    T *C = (T *)malloc(nc * sizeof(T)), *dA, *dB, *dC;
    const T alpha = (T)1.5, beta = (T)-0.5;
    uint64_t seed = (uint64_t)m * 1000003 + n * 1009 + k;
    int bad = 0;
    if (!A || !B || !C) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (size_t i = 0; i < na; i++)
        A[i] = (T)rt_randf(&seed);
    for (size_t i = 0; i < nb; i++)
        B[i] = (T)rt_randf(&seed);
    for (size_t i = 0; i < nc; i++)
        C[i] = (T)rt_randf(&seed);
    CK(cudaMalloc(&dA, na * sizeof(T)));
    CK(cudaMalloc(&dB, nb * sizeof(T)));
    CK(cudaMalloc(&dC, nc * sizeof(T)));
    CK(cudaMemcpy(dA, A, na * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dB, B, nb * sizeof(T), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dC, C, nc * sizeof(T), cudaMemcpyHostToDevice));
    CKB(gemm(h, m, n, k, &alpha, dA, dB, &beta, dC));
    T *out = (T *)malloc(nc * sizeof(T));
    if (!out) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    CK(cudaMemcpy(out, dC, nc * sizeof(T), cudaMemcpyDeviceToHost));
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            double ref = 0, mag = 0;
            for (int p = 0; p < k; p++) {
                ref += (double)A[i + (size_t)p * m] * B[p + (size_t)j * k];
                mag += fabs((double)A[i + (size_t)p * m] * B[p + (size_t)j * k]);
            }
            ref = alpha * ref + beta * (double)C[i + (size_t)j * m];
            mag = fabs(alpha) * mag + fabs(beta * (double)C[i + (size_t)j * m]);
            double err = fabs((double)out[i + (size_t)j * m] - ref);
            if (!(err <= tol * (mag + 1e-30)) && bad++ < 5)
                fprintf(stderr, "%s C(%d,%d): got %g want %g\n", name, i, j,
                        (double)out[i + (size_t)j * m], ref);
        }
    printf("%s m=%d n=%d k=%d %s\n", name, m, n, k, bad ? "FAIL" : "pass");
    CK(cudaFree(dC));
    CK(cudaFree(dB));
    CK(cudaFree(dA));
    free(out);
    free(C);
    free(B);
    free(A);
    return !bad;
}

int main(void)
{
    static const int dims[][3] = {{256, 256, 256}, {300, 200, 150}, {1, 513, 64}};
    cublasHandle_t h;
    int ok = 1;
    CKB(cublasCreate(&h));
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++) {
        ok &= check_gemm<float>(h, "sgemm", dims[i][0], dims[i][1], dims[i][2], 1e-4);
        ok &= check_gemm<double>(h, "dgemm", dims[i][0], dims[i][1], dims[i][2], 1e-12);
    }
    CKB(cublasDestroy(h));
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
