// rt_migrate: live migration's runtime-API program (docs/pool.md, "Live migration"): device
// state carried across iterations on a stream of its own, a checksum per iteration checked
// against the CPU. cudart loads its kernels as a library (cuLibraryLoadData) and launches
// them as CUkernels. Moved between remorads mid-run (tests/robustness/migrate.py), it must
// print what it prints unmoved, bit for bit.
// usage: rt_migrate [ITERATIONS [PAUSE_MS]]
#include <unistd.h>
#define RT_WANT_vecAdd
#define RT_WANT_scaleArray
#include "catalogue.cuh"
#include "rtcommon.h"

#define N (1 << 19)

static uint64_t fnv1a(const void *data, size_t bytes)
{
    const unsigned char *p = (const unsigned char *)data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < bytes; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

int main(int argc, char **argv)
{
    int iterations = argc > 1 ? atoi(argv[1]) : 10, pause_ms = argc > 2 ? atoi(argv[2]) : 0;
    size_t bytes = N * sizeof(float);
    float *ha = (float *)malloc(bytes), *hb = (float *)malloc(bytes), *got = (float *)malloc(bytes);
    float *a, *b, *c;
    int failed = 0;
    if (!ha || !hb || !got)
        return 1;
    for (int i = 0; i < N; i++) {
        ha[i] = (float)(i % 613) * 0.125f;
        hb[i] = (float)(i % 97) - 48.0f;
    }
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemcpy(a, ha, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(b, hb, bytes, cudaMemcpyHostToDevice));
    for (int it = 0; it < iterations; it++) {
        vecAdd<<<64, 256, 0, s>>>(a, b, c, N); // c = a + b
        scaleArray<<<64, 256, 0, s>>>(c, 0.5f, N); // c *= 0.5
        vecAdd<<<64, 256, 0, s>>>(c, b, a, N); // a = c + b
        CK_LAUNCH();
        CK(cudaStreamSynchronize(s)); // where a move happens
        for (int i = 0; i < N; i++) {
            volatile float sum = ha[i] + hb[i];
            float half = sum * 0.5f;
            ha[i] = half + hb[i];
        }
        CK(cudaMemcpy(got, a, bytes, cudaMemcpyDeviceToHost));
        if (memcmp(got, ha, bytes)) {
            fprintf(stderr, "iteration %d: a differs from the CPU's\n", it);
            failed = 1;
        }
        printf("iter %d checksum %016llx\n", it, (unsigned long long)fnv1a(got, bytes));
        fflush(stdout);
        if (pause_ms)
            usleep((useconds_t)pause_ms * 1000);
    }
    CK(cudaFree(a));
    CK(cudaFree(b));
    CK(cudaFree(c));
    CK(cudaStreamDestroy(s));
    printf("%s\n", failed ? "FAIL" : "PASS");
    return failed;
}
