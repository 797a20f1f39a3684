// rt_twofiles: kernels from two .cu files in one binary, so the binary
// registers two fatbins. This file holds vecAdd and main; scaleArray and its
// launcher live in rt_twofiles_scale.cu.
#define RT_WANT_vecAdd
#include "catalogue.cuh"
#include "rtcommon.h"

void launch_scale(float *x, float s, int n); // rt_twofiles_scale.cu

#define N 100003

int main(void)
{
    size_t bytes = N * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    float *da, *db, *dc;
    uint64_t seed = 2;
    int bad = 0;
    if (!a || !b || !c) {
        fprintf(stderr, "out of host memory\n");
        return 1;
    }
    for (int i = 0; i < N; i++) {
        a[i] = rt_randf(&seed);
        b[i] = rt_randf(&seed);
    }
    CK(cudaMalloc(&da, bytes));
    CK(cudaMalloc(&db, bytes));
    CK(cudaMalloc(&dc, bytes));
    CK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    vecAdd<<<(N + 255) / 256, 256>>>(da, db, dc, N);
    CK_LAUNCH();
    launch_scale(dc, 0.5f, N);
    CK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < N; i++) {
        float sum = a[i] + b[i];
        bad += c[i] != sum * 0.5f;
    }
    printf("vecAdd+scaleArray n=%d checksum=%016llx %s\n", N,
           (unsigned long long)rt_fnv1a(c, bytes), bad ? "MISMATCH" : "ok");
    CK(cudaFree(dc));
    CK(cudaFree(db));
    CK(cudaFree(da));
    free(c);
    free(b);
    free(a);
    printf("%s\n", bad ? "FAIL" : "PASS");
    return bad ? 1 : 0;
}
