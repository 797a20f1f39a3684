// rt_coop: cudaLaunchCooperativeKernel of a kernel summing over grid.sync(), at the largest
// co-resident grid and one block past it, and cudaLaunchKernelEx with a cluster dimension,
// each result checked. The kernels are drv_coop's (the test driver has them by name).
#include "../programs/coop_kernels.cu"
#include "rtcommon.h"

#define N (1 << 20)
#define BLOCK 256
#define CLUSTER_GRID 16

static int failures;

static void sum_coop(const int *din, unsigned grid, unsigned long long expected, cudaError_t want, const char *what)
{
    unsigned long long *partial, *out;
    int n = N;
    CK(cudaMalloc(&partial, (grid + 1) * sizeof *partial));
    CK(cudaMalloc(&out, (grid + 1) * sizeof *out));
    CK(cudaMemset(out, 0xee, (grid + 1) * sizeof *out));
    void *args[] = {(void *)&din, (void *)&partial, (void *)&out, (void *)&n};
    cudaError_t err = cudaLaunchCooperativeKernel((const void *)gridSumCoop, dim3(grid), dim3(BLOCK), args, 0, 0);
    (void)cudaGetLastError();
    if (err != want) {
        fprintf(stderr, "%s: %s, expected %s\n", what, cudaGetErrorName(err), cudaGetErrorName(want));
        failures++;
    }
    unsigned bad = 0;
    if (err == cudaSuccess) {
        unsigned long long *got = (unsigned long long *)malloc(grid * sizeof *got);
        CK(cudaMemcpy(got, out, grid * sizeof *got, cudaMemcpyDeviceToHost));
        for (unsigned b = 0; b < grid; b++)
            bad += got[b] != expected;
        free(got);
        failures += bad != 0;
    }
    printf("%s grid=%u result=%s blocks_wrong=%u\n", what, grid, cudaGetErrorName(err), bad);
    CK(cudaFree(out));
    CK(cudaFree(partial));
}

static void cluster_launch(unsigned *dout, unsigned size)
{
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = size;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CLUSTER_GRID);
    cfg.blockDim = dim3(32);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, clusterRanks, dout));
    CK(cudaDeviceSynchronize());
    unsigned got[CLUSTER_GRID], bad = 0;
    CK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
    for (unsigned b = 0; b < CLUSTER_GRID; b++) {
        unsigned rank = b % size, neighbour = b - rank + (rank + 1) % size;
        bad += got[b] != (rank | size << 8 | (neighbour * 3 + 1) << 16);
    }
    failures += bad != 0;
    printf("cluster size=%u hash=%016llx blocks_wrong=%u\n", size, (unsigned long long)rt_fnv1a(got, sizeof got), bad);
}

int main(void)
{
    static int in[N];
    unsigned long long expected = 0;
    for (int i = 0; i < N; i++) {
        in[i] = (int)((unsigned)i * 2654435761u % 2001u) - 1000;
        expected += (unsigned long long)(long long)in[i];
    }
    int coop = 0, sms = 0, per_sm = 0;
    CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, 0));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, gridSumCoop, BLOCK, 0));
    failures += coop != 1 || per_sm <= 0;
    printf("cooperative=%d blocks_per_sm=%d\n", coop, per_sm);
    int *din;
    CK(cudaMalloc(&din, sizeof in));
    CK(cudaMemcpy(din, in, sizeof in, cudaMemcpyHostToDevice));
    sum_coop(din, (unsigned)(per_sm * sms), expected, cudaSuccess, "coop_full");
    sum_coop(din, 7, expected, cudaSuccess, "coop_seven");
    sum_coop(din, (unsigned)(per_sm * sms) + 1, expected, cudaErrorCooperativeLaunchTooLarge, "coop_too_large");

    unsigned *dout;
    CK(cudaMalloc(&dout, CLUSTER_GRID * sizeof *dout));
    cluster_launch(dout, 2);
    cluster_launch(dout, 4);
    CK(cudaFree(dout));
    CK(cudaFree(din));
    printf("%s\n", failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
