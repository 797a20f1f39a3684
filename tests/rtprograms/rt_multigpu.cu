// rt_multigpu: what NVIDIA's simpleMultiGPU, MonteCarloMultiGPU and simpleP2P do with two
// devices of one host, checked exactly.
//
// Per device: a stream, events, pinned and device buffers, async copies both ways and
// kernels, with cudaSetDevice switching back and forth between the work of each. Across:
// cudaMemcpy between the devices by unified addressing, cudaMemcpyPeer(Async), an event
// recorded on device 0 waited on by device 1's stream, a host thread per device
// (MonteCarloMultiGPU's threaded method), peer access enabled (its errors
// as the runtime gives them), a kernel of device 1 reading device 0's memory, and device 0's
// memory pool made accessible to device 1 (streamOrderedAllocationP2P).
// Needs two devices: on one it says so and exits 77 (a skip for meson).
#define RT_WANT_scaleArray
#define RT_WANT_vecAdd
#define RT_WANT_fillU32
#define RT_WANT_sleepNs
#include "catalogue.cuh"
#include "rtcommon.h"

#include <pthread.h>

#define N (1 << 20)
#define NDEV 2
#define FLAG 0x5eed0001u

static int failures;

// MonteCarloMultiGPU's threaded method: one host thread per device, each doing its own
// device's copies and kernels on a stream of its own.
struct per_thread {
    int device;
    float *in, *out;
    int ok;
};

static void *device_thread(void *arg)
{
    struct per_thread *t = (struct per_thread *)arg;
    cudaStream_t st;
    cudaEvent_t done;
    float *d;
    CK(cudaSetDevice(t->device));
    CK(cudaStreamCreate(&st));
    CK(cudaEventCreate(&done));
    CK(cudaMalloc(&d, N * sizeof(float)));
    CK(cudaMemcpyAsync(d, t->in, N * sizeof(float), cudaMemcpyHostToDevice, st));
    scaleArray<<<256, 256, 0, st>>>(d, (float)(t->device + 5), N);
    CK_LAUNCH();
    CK(cudaMemcpyAsync(t->out, d, N * sizeof(float), cudaMemcpyDeviceToHost, st));
    CK(cudaEventRecord(done, st));
    CK(cudaEventSynchronize(done));
    t->ok = 1;
    for (int j = 0; j < N && t->ok; j++)
        t->ok = t->out[j] == t->in[j] * (float)(t->device + 5);
    CK(cudaFree(d));
    CK(cudaEventDestroy(done));
    CK(cudaStreamDestroy(st));
    return NULL;
}

static void expect(int ok, const char *what)
{
    printf("%s: %s\n", what, ok ? "ok" : "WRONG");
    failures += !ok;
}

static void expect_err(cudaError_t got, cudaError_t want, const char *what)
{
    (void)cudaGetLastError();
    printf("%s: %s\n", what, cudaGetErrorName(got));
    failures += got != want;
}

int main(void)
{
    int ndev = 0;
    CK(cudaGetDeviceCount(&ndev));
    if (ndev < NDEV) {
        printf("rt_multigpu: needs %d devices, this host has %d: skipped\n", NDEV, ndev);
        return 77;
    }
    cudaStream_t s[NDEV];
    cudaEvent_t done[NDEV];
    float *host_in[NDEV], *host_out[NDEV], *d[NDEV];
    uint64_t seed = 39;

    // simpleMultiGPU's shape: set up every device, then issue each one's work in turn.
    for (int i = 0; i < NDEV; i++) {
        CK(cudaSetDevice(i));
        CK(cudaStreamCreate(&s[i]));
        CK(cudaEventCreate(&done[i]));
        CK(cudaMalloc(&d[i], N * sizeof(float)));
        CK(cudaMallocHost((void **)&host_in[i], N * sizeof(float)));
        CK(cudaMallocHost((void **)&host_out[i], N * sizeof(float)));
        for (int j = 0; j < N; j++)
            host_in[i][j] = rt_randf(&seed);
    }
    for (int i = 0; i < NDEV; i++) {
        CK(cudaSetDevice(i));
        CK(cudaMemcpyAsync(d[i], host_in[i], N * sizeof(float), cudaMemcpyHostToDevice, s[i]));
        scaleArray<<<256, 256, 0, s[i]>>>(d[i], (float)(i + 2), N);
        CK_LAUNCH();
        CK(cudaMemcpyAsync(host_out[i], d[i], N * sizeof(float), cudaMemcpyDeviceToHost, s[i]));
        CK(cudaEventRecord(done[i], s[i]));
    }
    for (int i = NDEV - 1; i >= 0; i--) {
        CK(cudaSetDevice(i));
        CK(cudaStreamSynchronize(s[i]));
        CK(cudaEventSynchronize(done[i]));
        int ok = 1;
        for (int j = 0; j < N && ok; j++)
            ok = host_out[i][j] == host_in[i][j] * (float)(i + 2);
        printf("device %d scaled: %016llx\n", i, (unsigned long long)rt_fnv1a(host_out[i], N * sizeof(float)));
        expect(ok, i ? "device 1 stream work" : "device 0 stream work");
    }

    // A host thread for each device at once.
    {
        pthread_t th[NDEV];
        struct per_thread t[NDEV];
        for (int i = 0; i < NDEV; i++) {
            t[i] = (struct per_thread){i, host_in[i], NULL, 0};
            CK(cudaMallocHost((void **)&t[i].out, N * sizeof(float)));
            if (pthread_create(&th[i], NULL, device_thread, &t[i])) {
                fprintf(stderr, "pthread_create failed\n");
                return 1;
            }
        }
        for (int i = 0; i < NDEV; i++)
            pthread_join(th[i], NULL);
        expect(t[0].ok && t[1].ok, "a host thread for each device");
        for (int i = 0; i < NDEV; i++)
            CK(cudaFreeHost(t[i].out));
    }

    // Pinned memory allocated with device 0 current, written by a kernel of device 1 by its
    // host pointer (unified addressing), as p2pBandwidthLatencyTest's flag is polled.
    {
        unsigned *pinned;
        CK(cudaSetDevice(0));
        CK(cudaHostAlloc((void **)&pinned, 4096 * sizeof(unsigned), cudaHostAllocPortable));
        memset(pinned, 0, 4096 * sizeof(unsigned));
        CK(cudaSetDevice(1));
        fillU32<<<4, 256, 0, s[1]>>>(pinned, FLAG + 1, 4096);
        CK_LAUNCH();
        CK(cudaStreamSynchronize(s[1]));
        int ok = 1;
        for (int j = 0; j < 4096 && ok; j++)
            ok = pinned[j] == FLAG + 1;
        expect(ok, "device 1's kernel wrote pinned memory of device 0's time");
        CK(cudaFreeHost(pinned));
    }

    // Which device a pointer is on, whatever device is current.
    CK(cudaSetDevice(0));
    cudaPointerAttributes pa;
    CK(cudaPointerGetAttributes(&pa, d[1]));
    expect(pa.type == cudaMemoryTypeDevice && pa.device == 1, "device 1's memory is device 1's");

    // Copies between the devices: by unified addressing, then the peer calls.
    float *e[NDEV];
    for (int i = 0; i < NDEV; i++) {
        CK(cudaSetDevice(i));
        CK(cudaMalloc(&e[i], N * sizeof(float)));
        CK(cudaMemset(e[i], 0, N * sizeof(float)));
    }
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(e[1], d[0], N * sizeof(float), cudaMemcpyDeviceToDevice));
    CK(cudaMemcpy(host_out[1], e[1], N * sizeof(float), cudaMemcpyDefault));
    expect(!memcmp(host_out[1], host_out[0], N * sizeof(float)), "cudaMemcpy device 0 -> 1 (current 0)");
    CK(cudaSetDevice(1));
    CK(cudaMemcpyPeer(e[0], 0, d[1], 1, N * sizeof(float)));
    CK(cudaMemcpy(host_in[0], e[0], N * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(host_in[1], d[1], N * sizeof(float), cudaMemcpyDeviceToHost));
    expect(!memcmp(host_in[0], host_in[1], N * sizeof(float)), "cudaMemcpyPeer device 1 -> 0 (current 1)");
    CK(cudaMemsetAsync(e[1], 0, N * sizeof(float), s[1])); // device 1's stream, device 0 current
    CK(cudaMemcpyPeerAsync(e[1], 1, d[0], 0, N * sizeof(float), s[1]));
    CK(cudaMemcpyAsync(host_out[1], e[1], N * sizeof(float), cudaMemcpyDeviceToHost, s[1]));
    CK(cudaStreamSynchronize(s[1]));
    expect(!memcmp(host_out[1], host_out[0], N * sizeof(float)), "cudaMemcpyPeerAsync on device 1's stream");

    // An event recorded on device 0, waited for by device 1's stream.
    unsigned *flag0, *flag1, flag_host = 0;
    cudaEvent_t gate;
    CK(cudaSetDevice(0));
    CK(cudaMalloc(&flag0, sizeof(unsigned)));
    CK(cudaMemset(flag0, 0, sizeof(unsigned)));
    CK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
    CK(cudaSetDevice(1));
    CK(cudaMalloc(&flag1, sizeof(unsigned)));
    CK(cudaMemset(flag1, 0, sizeof(unsigned)));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(0));
    sleepNs<<<1, 1, 0, s[0]>>>(20 * 1000 * 1000);
    CK_LAUNCH();
    fillU32<<<1, 1, 0, s[0]>>>(flag0, FLAG, 1);
    CK_LAUNCH();
    CK(cudaEventRecord(gate, s[0]));
    CK(cudaSetDevice(1));
    CK(cudaStreamWaitEvent(s[1], gate, 0));
    CK(cudaMemcpyPeerAsync(flag1, 1, flag0, 0, sizeof(unsigned), s[1]));
    CK(cudaMemcpyAsync(&flag_host, flag1, sizeof(unsigned), cudaMemcpyDeviceToHost, s[1]));
    CK(cudaStreamSynchronize(s[1]));
    expect(flag_host == FLAG, "device 1's stream waited for device 0's event");

    // streamOrderedAllocationP2P's calls: device 0's pool made accessible to device 1, whose
    // kernel reads an allocation of it; both freed on device 1's stream.
    {
        float *src0, *dst1;
        cudaStream_t st0, st1;
        cudaMemPool_t pool0;
        cudaEvent_t filled;
        CK(cudaSetDevice(0));
        CK(cudaEventCreate(&filled));
        CK(cudaStreamCreateWithFlags(&st0, cudaStreamNonBlocking));
        CK(cudaDeviceGetDefaultMemPool(&pool0, 0));
        CK(cudaMallocAsync((void **)&src0, N * sizeof(float), st0));
        CK(cudaMemcpyAsync(src0, host_in[1], N * sizeof(float), cudaMemcpyHostToDevice, st0));
        CK(cudaEventRecord(filled, st0));
        CK(cudaSetDevice(1));
        CK(cudaStreamCreateWithFlags(&st1, cudaStreamNonBlocking));
        CK(cudaMallocAsync((void **)&dst1, N * sizeof(float), st1));
        cudaMemAccessDesc desc;
        memset(&desc, 0, sizeof(desc));
        desc.location.type = cudaMemLocationTypeDevice;
        desc.location.id = 1;
        desc.flags = cudaMemAccessFlagsProtReadWrite;
        CK(cudaMemPoolSetAccess(pool0, &desc, 1));
        cudaMemLocation loc = {cudaMemLocationTypeDevice, 1};
        cudaMemAccessFlags flags = cudaMemAccessFlagsProtNone;
        CK(cudaMemPoolGetAccess(&flags, pool0, &loc));
        expect(flags == cudaMemAccessFlagsProtReadWrite, "device 0's pool is device 1's to read and write");
        CK(cudaStreamWaitEvent(st1, filled, 0));
        vecAdd<<<256, 256, 0, st1>>>(src0, src0, dst1, N);
        CK_LAUNCH();
        CK(cudaMemcpyAsync(host_out[1], dst1, N * sizeof(float), cudaMemcpyDeviceToHost, st1));
        CK(cudaFreeAsync(src0, st1));
        CK(cudaFreeAsync(dst1, st1));
        CK(cudaStreamSynchronize(st1));
        int ok = 1;
        for (int j = 0; j < N && ok; j++)
            ok = host_out[1][j] == 2.0f * host_in[1][j];
        expect(ok, "device 1's kernel read device 0's pool allocation");
        CK(cudaStreamDestroy(st1));
        CK(cudaSetDevice(0));
        CK(cudaStreamDestroy(st0));
        CK(cudaEventDestroy(filled));
    }

    // Peer access: as natively, per direction, each error once.
    int can01 = 0, can10 = 0;
    CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    printf("can access peer: 0->1 %d, 1->0 %d\n", can01, can10);
    if (can01 && can10) {
        CK(cudaSetDevice(1));
        expect_err(cudaDeviceDisablePeerAccess(0), cudaErrorPeerAccessNotEnabled, "disable before enable");
        CK(cudaDeviceEnablePeerAccess(0, 0));
        expect_err(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled, "enable twice");
        CK(cudaSetDevice(0));
        CK(cudaDeviceEnablePeerAccess(1, 0));
        // A kernel of device 1 adds device 0's memory to its own.
        CK(cudaSetDevice(1));
        CK(cudaMemcpy(e[1], d[1], N * sizeof(float), cudaMemcpyDeviceToDevice));
        vecAdd<<<256, 256, 0, s[1]>>>(d[0], e[1], e[1], N);
        CK_LAUNCH();
        CK(cudaMemcpyAsync(host_out[1], e[1], N * sizeof(float), cudaMemcpyDeviceToHost, s[1]));
        CK(cudaStreamSynchronize(s[1]));
        CK(cudaSetDevice(0));
        CK(cudaMemcpy(host_out[0], d[0], N * sizeof(float), cudaMemcpyDeviceToHost));
        int ok = 1;
        for (int j = 0; j < N && ok; j++)
            ok = host_out[1][j] == host_out[0][j] + host_in[1][j];
        printf("peer sum: %016llx\n", (unsigned long long)rt_fnv1a(host_out[1], N * sizeof(float)));
        expect(ok, "device 1's kernel read device 0's memory");
        CK(cudaDeviceDisablePeerAccess(1));
        expect_err(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled, "disable twice");
        CK(cudaSetDevice(1));
        CK(cudaDeviceDisablePeerAccess(0));
    }

    for (int i = 0; i < NDEV; i++) {
        CK(cudaSetDevice(i));
        CK(cudaStreamDestroy(s[i]));
        CK(cudaEventDestroy(done[i]));
        CK(cudaFree(d[i]));
        CK(cudaFree(e[i]));
        CK(cudaFreeHost(host_in[i]));
        CK(cudaFreeHost(host_out[i]));
    }
    CK(cudaFree(flag1));
    CK(cudaSetDevice(0));
    CK(cudaFree(flag0));
    CK(cudaEventDestroy(gate));
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
