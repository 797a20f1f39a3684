// rt_memkinds: what PyTorch asks of the runtime about memory. cudaPointerGetAttributes
// on device, pinned, registered and unknown memory; cudaMallocAsync / cudaFreeAsync
// with a kernel between; a kernel writing mapped pinned memory (cudaHostAllocMapped,
// cudaHostGetDevicePointer) that the host reads after cudaDeviceSynchronize.
#define RT_WANT_fillU32
#define RT_WANT_scaleArray
#include "catalogue.cuh"
#include "rtcommon.h"

static int failures;

#define EXPECT(cond, ...)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond);   \
            fprintf(stderr, __VA_ARGS__);                                              \
            fputc('\n', stderr);                                                       \
            failures++;                                                                \
        }                                                                              \
    } while (0)

int main(void)
{
    const int n = 1 << 14;
    cudaPointerAttributes a;

    float *d;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaPointerGetAttributes(&a, d + 5));
    EXPECT(a.type == cudaMemoryTypeDevice && a.device == 0 && a.devicePointer == d + 5 && a.hostPointer == NULL,
           "device memory: type %d, device %d, device pointer %p, host pointer %p", (int)a.type, a.device,
           a.devicePointer, a.hostPointer);

    float *h;
    CK(cudaMallocHost(&h, n * sizeof(float)));
    CK(cudaPointerGetAttributes(&a, h));
    EXPECT(a.type == cudaMemoryTypeHost && a.hostPointer == h, "pinned memory: type %d, host pointer %p", (int)a.type,
           a.hostPointer);

    float *m = (float *)aligned_alloc(4096, n * sizeof(float));
    CK(cudaPointerGetAttributes(&a, m));
    EXPECT(a.type == cudaMemoryTypeUnregistered, "malloc'd memory: type %d", (int)a.type);
    CK(cudaHostRegister(m, n * sizeof(float), cudaHostRegisterDefault));
    CK(cudaPointerGetAttributes(&a, m + 1));
    EXPECT(a.type == cudaMemoryTypeHost && a.hostPointer == m + 1, "registered memory: type %d, host pointer %p",
           (int)a.type, a.hostPointer);
    CK(cudaHostUnregister(m));

    // Stream-ordered allocation, with a round trip through a kernel.
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    for (int i = 0; i < n; i++)
        h[i] = (float)(i % 100);
    float *x;
    CK(cudaMallocAsync(&x, n * sizeof(float), st));
    CK(cudaMemcpyAsync(x, h, n * sizeof(float), cudaMemcpyHostToDevice, st));
    scaleArray<<<16, 256, 0, st>>>(x, 2.0f, n);
    CK_LAUNCH();
    CK(cudaMemcpyAsync(h, x, n * sizeof(float), cudaMemcpyDeviceToHost, st));
    CK(cudaFreeAsync(x, st));
    CK(cudaStreamSynchronize(st));
    int bad = 0;
    for (int i = 0; i < n; i++)
        bad += h[i] != (float)(i % 100) * 2.0f;
    EXPECT(!bad, "cudaMallocAsync round trip: %d of %d wrong", bad, n);

    // Mapped pinned memory written by a kernel.
    unsigned *hm;
    CK(cudaHostAlloc(&hm, 256 * sizeof(unsigned), cudaHostAllocMapped));
    memset(hm, 0, 256 * sizeof(unsigned));
    unsigned *dm;
    CK(cudaHostGetDevicePointer(&dm, hm, 0));
    fillU32<<<1, 64>>>(dm + 128, 77u, 64);
    CK_KERNEL();
    EXPECT(hm[0] == 0 && hm[127] == 0 && hm[128] == 77u && hm[191] == 77u && hm[192] == 0,
           "mapped memory after a kernel: %u %u %u %u %u", hm[0], hm[127], hm[128], hm[191], hm[192]);

    CK(cudaFreeHost(hm));
    CK(cudaStreamDestroy(st));
    free(m);
    CK(cudaFreeHost(h));
    CK(cudaFree(d));
    printf("rt_memkinds %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
