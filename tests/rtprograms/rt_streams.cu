// rt_streams: four streams with pinned buffers doing async H2D -> scaleArray
// -> async D2H, gated by an event that streams 1..3 wait on.
//
// Stream 0 sleeps, then fills a flag buffer and records the gate event.
// Every stream waits on the gate before its own work and copies the flag
// back, so a cudaStreamWaitEvent that is not honoured shows as a stale flag.
#define RT_WANT_scaleArray
#define RT_WANT_fillU32
#define RT_WANT_sleepNs
#include "catalogue.cuh"
#include "rtcommon.h"

#define NSTREAMS 4
#define CHUNK (1 << 20)
#define FLAG 0xc0ffee42u

// While work may still be pending, a query may say either of these.
static int pending_ok(const char *what, cudaError_t e)
{
    if (e == cudaErrorNotReady)
        (void)cudaGetLastError(); // keep it out of the next launch check
    if (e == cudaSuccess || e == cudaErrorNotReady)
        return 1;
    fprintf(stderr, "%s: %s (%d)\n", what, cudaGetErrorName(e), (int)e);
    return 0;
}

int main(void)
{
    cudaStream_t s[NSTREAMS];
    cudaEvent_t start, gate, done[NSTREAMS];
    float *in[NSTREAMS], *out[NSTREAMS], *dbuf[NSTREAMS];
    unsigned *flag_host, *dflag;
    uint64_t seed = 4;
    int failures = 0;

    for (int i = 0; i < NSTREAMS; i++) {
        CK(cudaStreamCreateWithFlags(&s[i], cudaStreamNonBlocking));
        CK(cudaEventCreate(&done[i]));
        // Half the pinned buffers through each allocator.
        if (i % 2)
            CK(cudaHostAlloc((void **)&in[i], CHUNK * sizeof(float), cudaHostAllocDefault));
        else
            CK(cudaMallocHost((void **)&in[i], CHUNK * sizeof(float)));
        CK(cudaHostAlloc((void **)&out[i], CHUNK * sizeof(float), cudaHostAllocDefault));
        CK(cudaMalloc(&dbuf[i], CHUNK * sizeof(float)));
        for (int j = 0; j < CHUNK; j++)
            in[i][j] = rt_randf(&seed);
    }
    CK(cudaEventCreate(&start));
    CK(cudaEventCreate(&gate));
    CK(cudaMallocHost((void **)&flag_host, NSTREAMS * sizeof(unsigned)));
    CK(cudaMalloc(&dflag, sizeof(unsigned)));
    CK(cudaMemset(dflag, 0, sizeof(unsigned)));
    CK(cudaDeviceSynchronize());

    CK(cudaEventRecord(start, s[0]));
    sleepNs<<<1, 1, 0, s[0]>>>(20 * 1000 * 1000);
    CK_LAUNCH();
    fillU32<<<1, 1, 0, s[0]>>>(dflag, FLAG, 1);
    CK_LAUNCH();
    CK(cudaEventRecord(gate, s[0]));
    failures += !pending_ok("cudaEventQuery(gate)", cudaEventQuery(gate));
    failures += !pending_ok("cudaStreamQuery(s[0])", cudaStreamQuery(s[0]));

    for (int i = 0; i < NSTREAMS; i++) {
        float scale = (float)(i + 2);
        CK(cudaStreamWaitEvent(s[i], gate, 0));
        CK(cudaMemcpyAsync(&flag_host[i], dflag, sizeof(unsigned), cudaMemcpyDeviceToHost, s[i]));
        CK(cudaMemcpyAsync(dbuf[i], in[i], CHUNK * sizeof(float), cudaMemcpyHostToDevice, s[i]));
        scaleArray<<<CHUNK / 256, 256, 0, s[i]>>>(dbuf[i], scale, CHUNK);
        CK_LAUNCH();
        CK(cudaMemcpyAsync(out[i], dbuf[i], CHUNK * sizeof(float), cudaMemcpyDeviceToHost, s[i]));
        CK(cudaEventRecord(done[i], s[i]));
        failures += !pending_ok("cudaStreamQuery(s[i])", cudaStreamQuery(s[i]));
    }
    CK(cudaDeviceSynchronize());

    for (int i = 0; i < NSTREAMS; i++) {
        float scale = (float)(i + 2), ms;
        int bad = 0;
        CK(cudaStreamQuery(s[i]));
        CK(cudaEventQuery(done[i]));
        for (int j = 0; j < CHUNK; j++)
            bad += out[i][j] != in[i][j] * scale;
        bad += flag_host[i] != FLAG;
        printf("stream %d: n=%d scale=%g flag=%08x checksum=%016llx %s\n", i, CHUNK, scale,
               flag_host[i], (unsigned long long)rt_fnv1a(out[i], CHUNK * sizeof(float)),
               bad ? "MISMATCH" : "ok");
        failures += bad != 0;
        CK(cudaEventElapsedTime(&ms, start, done[i]));
        printf("time_stream%d_ms=%.3f\n", i, ms);
        if (ms < 15.0f) // every stream waited behind the 20 ms sleep
            fprintf(stderr, "stream %d finished %.3f ms after start: gate ignored?\n", i, ms);
    }
    CK(cudaEventQuery(gate));

    CK(cudaFree(dflag));
    CK(cudaFreeHost(flag_host));
    CK(cudaEventDestroy(gate));
    CK(cudaEventDestroy(start));
    for (int i = NSTREAMS - 1; i >= 0; i--) {
        CK(cudaFree(dbuf[i]));
        CK(cudaFreeHost(out[i]));
        CK(cudaFreeHost(in[i]));
        CK(cudaEventDestroy(done[i]));
        CK(cudaStreamDestroy(s[i]));
    }
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
