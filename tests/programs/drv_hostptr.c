/* drv_hostptr IMAGE: kernels handed pinned host pointers themselves, as programs on a GPU
 * with unified addressing do (cuda-samples' latches, zero-copy buffers):
 *   - scaleArray over cuMemAllocHost memory by its host pointer, then the host reads the
 *     kernel's results after a synchronize, and a second launch sees the host's writes;
 *   - fillU32 into cuMemHostAlloc memory at an offset inside it;
 *   - cuMemHostGetDevicePointer of such memory is the host pointer itself;
 *   - a kernel spinning on a latch in pinned memory ends once the host sets it and
 *     synchronizes (cuda-samples' UnifiedMemoryPerf).
 * Prints each check's values. */
#include "drv_common.h"

#define N 4096

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction scale, fill;
	CUstream stream;
	CHECK(cuModuleGetFunction(&scale, module, "scaleArray"));
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

	float *x;
	CHECK(cuMemAllocHost((void **)&x, N * sizeof(float)));
	for (int i = 0; i < N; i++)
		x[i] = (float)i;
	CUdeviceptr xp = (CUdeviceptr)(uintptr_t)x;
	float s = 2.0f;
	int n = N;
	void *scale_params[] = {&xp, &s, &n};
	CHECK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, stream, scale_params, NULL));
	CHECK(cuStreamSynchronize(stream));
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += x[i] != 2.0f * (float)i;
	printf("scale by host pointer: %d wrong, x[4095] = %.1f\n", bad, x[N - 1]);
	x[7] = 100.0f; /* seen by the next launch */
	CHECK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, stream, scale_params, NULL));
	CHECK(cuStreamSynchronize(stream));
	printf("host write seen by the next launch: x[7] = %.1f, x[8] = %.1f\n", x[7], x[8]);

	unsigned *u;
	CHECK(cuMemHostAlloc((void **)&u, N * sizeof(unsigned), CU_MEMHOSTALLOC_PORTABLE));
	memset(u, 0, N * sizeof(unsigned));
	CUdeviceptr up = (CUdeviceptr)(uintptr_t)(u + 1024);
	unsigned v = 0xabcd;
	int m = 1024;
	void *fill_params[] = {&up, &v, &m};
	CHECK(cuLaunchKernel(fill, 4, 1, 1, 128, 1, 1, 0, stream, fill_params, NULL));
	CHECK(cuStreamSynchronize(stream));
	unsigned sum = 0;
	for (int i = 0; i < N; i++)
		sum += u[i] == 0xabcd;
	printf("fill at an offset: %u of %d set, u[1023] = %u, u[1024] = %#x\n", sum, N, u[1023], u[1024]);

	CUdeviceptr d;
	CHECK(cuMemHostGetDevicePointer(&d, u, 0));
	printf("device pointer of pinned memory is its host pointer: %d\n", d == (CUdeviceptr)(uintptr_t)u);

	CUfunction wait_flag;
	CHECK(cuModuleGetFunction(&wait_flag, module, "waitFlag"));
	unsigned *latch;
	CUdeviceptr seen;
	CHECK(cuMemAllocHost((void **)&latch, sizeof(unsigned)));
	CHECK(cuMemAlloc(&seen, sizeof(unsigned)));
	*latch = 0;
	CUdeviceptr lp = (CUdeviceptr)(uintptr_t)latch;
	void *wait_params[] = {&lp, &seen};
	CHECK(cuLaunchKernel(wait_flag, 1, 1, 1, 1, 1, 1, 0, stream, wait_params, NULL));
	*latch = 7;
	CHECK(cuStreamSynchronize(stream));
	unsigned got = 0;
	CHECK(cuMemcpyDtoH(&got, seen, sizeof(got)));
	printf("latch set by the host after the launch, seen by the spinning kernel: %u\n", got);
	bad += got != 7;
	CHECK(cuMemFree(seen));
	CHECK(cuMemFreeHost(latch));
	CHECK(cuMemFreeHost(u));
	CHECK(cuMemFreeHost(x));
	CHECK(cuStreamDestroy(stream));
	return bad ? 1 : 0;
}
