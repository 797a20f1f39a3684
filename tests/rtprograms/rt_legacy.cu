// rt_legacy: CUDA's legacy default stream semantics within one program. Work on the
// NULL stream waits for earlier work on blocking streams, and work on a blocking
// stream waits for earlier NULL-stream work; a slow kernel first in each pair makes
// a missing wait show as a wrong result. Also: a non-blocking stream's flags.
#define RT_WANT_vecAdd
#define RT_WANT_scaleArray
#define RT_WANT_sleepNs
#include "catalogue.cuh"
#include "rtcommon.h"

static int check(const char *what, const float *got, float want, int n)
{
    for (int i = 0; i < n; i++)
        if (got[i] != want) {
            fprintf(stderr, "%s: element %d is %g, want %g\n", what, i, got[i], want);
            printf("%s MISMATCH\n", what);
            return 0;
        }
    printf("%s ok\n", what);
    return 1;
}

int main(void)
{
    const int n = 4096;
    const size_t bytes = n * sizeof(float);
    const unsigned long long slow_ns = 50ull * 1000 * 1000;
    float *ones = (float *)malloc(bytes), *host = (float *)malloc(bytes);
    float *a, *b, *c;
    cudaStream_t blocking, nonblocking;
    unsigned flags_b, flags_nb;
    int ok = 1;
    for (int i = 0; i < n; i++)
        ones[i] = 1.0f;
    CK(cudaMalloc(&a, bytes));
    CK(cudaMalloc(&b, bytes));
    CK(cudaMalloc(&c, bytes));
    CK(cudaMemcpy(a, ones, bytes, cudaMemcpyHostToDevice));
    CK(cudaStreamCreate(&blocking));
    CK(cudaStreamCreateWithFlags(&nonblocking, cudaStreamNonBlocking));
    CK(cudaStreamGetFlags(blocking, &flags_b));
    CK(cudaStreamGetFlags(nonblocking, &flags_nb));
    printf("flags blocking=%u nonblocking=%u\n", flags_b, flags_nb);
    ok &= flags_b == cudaStreamDefault && flags_nb == cudaStreamNonBlocking;

    // Blocking stream first, then the NULL stream reads what it wrote: a = 1 * 3, c = a + a.
    sleepNs<<<1, 1, 0, blocking>>>(slow_ns);
    scaleArray<<<16, 256, 0, blocking>>>(a, 3.0f, n);
    vecAdd<<<16, 256>>>(a, a, c, n);
    CK_LAUNCH();
    CK(cudaMemcpy(host, c, bytes, cudaMemcpyDeviceToHost));
    ok &= check("null-after-blocking", host, 6.0f, n);

    // The NULL stream first, then the blocking stream reads what it wrote: b = 3 * 2, c = b + b.
    CK(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
    sleepNs<<<1, 1>>>(slow_ns);
    scaleArray<<<16, 256>>>(b, 2.0f, n);
    vecAdd<<<16, 256, 0, blocking>>>(b, b, c, n);
    CK_LAUNCH();
    CK(cudaMemcpyAsync(host, c, bytes, cudaMemcpyDeviceToHost, blocking));
    CK(cudaStreamSynchronize(blocking));
    ok &= check("blocking-after-null", host, 12.0f, n);

    // cudaMemset on the NULL stream waits for the blocking stream's earlier kernel too.
    sleepNs<<<1, 1, 0, blocking>>>(slow_ns);
    scaleArray<<<16, 256, 0, blocking>>>(c, 0.5f, n);
    CK(cudaMemset(c, 0x40, bytes)); // each float 0x40404040; halved if the kernel ran after
    CK(cudaMemcpy(host, c, bytes, cudaMemcpyDeviceToHost));
    uint32_t pattern = 0x40404040u;
    float want;
    memcpy(&want, &pattern, sizeof want);
    ok &= check("memset-after-blocking", host, want, n);

    CK(cudaStreamDestroy(nonblocking));
    CK(cudaStreamDestroy(blocking));
    CK(cudaFree(c));
    CK(cudaFree(b));
    CK(cudaFree(a));
    free(host);
    free(ones);
    printf("%s\n", ok ? "PASS" : "FAIL");
    return ok ? 0 : 1;
}
