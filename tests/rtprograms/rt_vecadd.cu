// rt_vecadd: memory round trips, vecAdd, device properties, error strings and
// a few calls that must fail with a given error.
#define RT_WANT_vecAdd
#include "catalogue.cuh"
#include "rtcommon.h"

static int failures;

// Check that a call failed with the expected error, then clear it.
static void expect_error(const char *what, cudaError_t got, cudaError_t want)
{
    int ok = got == want;
    printf("expect %s: %s %s\n", what, cudaGetErrorName(got), ok ? "ok" : "WRONG");
    if (!ok) {
        fprintf(stderr, "%s: got %d, want %s (%d)\n", what, (int)got, cudaGetErrorName(want),
                (int)want);
        failures++;
    }
    (void)cudaGetLastError();
}

static void print_devices(void)
{
    int count;
    CK(cudaGetDeviceCount(&count));
    printf("devices=%d\n", count);
    for (int d = 0; d < count; d++) {
        cudaDeviceProp p;
        CK(cudaGetDeviceProperties(&p, d));
        printf("device %d: %s sm_%d%d mem=%zu MiB sms=%d\n", d, p.name, p.major, p.minor,
               p.totalGlobalMem >> 20, p.multiProcessorCount);
    }
}

static void print_error_strings(void)
{
    static const cudaError_t errs[] = {
        cudaSuccess, cudaErrorInvalidValue, cudaErrorMemoryAllocation, cudaErrorInvalidDevice,
        cudaErrorInvalidMemcpyDirection, cudaErrorNotReady, cudaErrorLaunchFailure,
    };
    for (size_t i = 0; i < sizeof errs / sizeof errs[0]; i++)
        printf("error %d %s: %s\n", (int)errs[i], cudaGetErrorName(errs[i]),
               cudaGetErrorString(errs[i]));
}

// H2D, vecAdd, D2H, memset, D2D for n floats; compares everything exactly.
static void round_trip(int n, uint64_t seed)
{
    size_t bytes = (size_t)n * sizeof(float);
    float *a = (float *)malloc(bytes), *b = (float *)malloc(bytes), *c = (float *)malloc(bytes);
    float *da, *db, *dc;
    int bad = 0;
    if (!a || !b || !c) {
        fprintf(stderr, "out of host memory\n");
        exit(1);
    }
    for (int i = 0; i < n; i++) {
        a[i] = rt_randf(&seed);
        b[i] = rt_randf(&seed);
    }
    CK(cudaMalloc(&da, bytes));
    CK(cudaMalloc(&db, bytes));
    CK(cudaMalloc(&dc, bytes));
    CK(cudaMemcpy(da, a, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(db, b, bytes, cudaMemcpyHostToDevice));
    vecAdd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
    CK_KERNEL();
    CK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        bad += c[i] != a[i] + b[i];
    printf("vecAdd n=%d checksum=%016llx %s\n", n, (unsigned long long)rt_fnv1a(c, bytes),
           bad ? "MISMATCH" : "ok");
    failures += bad != 0;

    CK(cudaMemset(dc, 0x5a, bytes));
    CK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    bad = 0;
    for (size_t i = 0; i < bytes; i++)
        bad += ((unsigned char *)c)[i] != 0x5a;
    CK(cudaMemcpy(dc, da, bytes, cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(c, dc, bytes, cudaMemcpyDeviceToHost));
    bad += memcmp(c, a, bytes) != 0;
    printf("memset+d2d n=%d %s\n", n, bad ? "MISMATCH" : "ok");
    failures += bad != 0;

    CK(cudaFree(dc));
    CK(cudaFree(db));
    CK(cudaFree(da));
    free(c);
    free(b);
    free(a);
}

static void bad_calls(void)
{
    float host[4] = {0}, *dev;
    void *huge = NULL;
    CK(cudaMalloc(&dev, sizeof host));
    expect_error("cudaSetDevice(999)", cudaSetDevice(999), cudaErrorInvalidDevice);
    expect_error("cudaMemcpy(kind=42)",
                 cudaMemcpy(dev, host, sizeof host, (cudaMemcpyKind)42),
                 cudaErrorInvalidMemcpyDirection);
    expect_error("cudaMalloc(1 PiB)", cudaMalloc(&huge, (size_t)1 << 50),
                 cudaErrorMemoryAllocation);
    CK(cudaFree(dev));
}

int main(void)
{
    print_devices();
    print_error_strings();
    CK(cudaSetDevice(0));
    round_trip(1, 1);
    round_trip(1000, 2);
    round_trip((1 << 20) + 3, 3);
    bad_calls();
    round_trip(4096, 4); // the context still works after the failed calls
    CK(cudaDeviceSynchronize());
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
