// What launch replay rests on (docs/hotpath.md, backend/worker/launch_replay.h): the host
// cost of N kernel launches against one launch of a graph of N kernel nodes, and of giving
// a graph's kernels new parameters before its launch. Native, on a GPU host:
//   nvcc -O2 -arch=sm_90 -o graph_cost bench/graph_cost.cu -lcuda && ./graph_cost
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <time.h>

__global__ void axpy(float *a, float *b, int n, float s)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		a[i] = a[i] * s + b[i];
}

static double now_us(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define CHECK(x) do { CUresult r_ = (x); if (r_) { printf("%s: %d\n", #x, (int)r_); return 1; } } while (0)

int main(void)
{
	cudaFree(0);
	CUfunction f;
	if (cudaGetFuncBySymbol(&f, (const void *)axpy) != cudaSuccess)
		return 1;
	float *a, *b;
	cudaMalloc(&a, 4096 * sizeof(float));
	cudaMalloc(&b, 4096 * sizeof(float));
	CUstream st;
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	struct { float *a, *b; int n; float s; } args = {a, b, 4096, 1.0f};
	size_t size = sizeof(args);
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END};
	CUDA_KERNEL_NODE_PARAMS kp = {};
	kp.func = f;
	kp.gridDimX = 16, kp.gridDimY = 1, kp.gridDimZ = 1;
	kp.blockDimX = 256, kp.blockDimY = 1, kp.blockDimZ = 1;
	kp.extra = extra;
	const int total = 8192, rounds = 256;
	for (int rep = 0; rep < 2; rep++) { /* the first pass warms up */
		double t = 0;
		for (int i = 0; i < total; i += 64) { /* the time to queue, a synchronize apart */
			double t0 = now_us();
			for (int j = 0; j < 64; j++)
				CHECK(cuLaunchKernel(f, 16, 1, 1, 256, 1, 1, 0, st, NULL, extra));
			t += now_us() - t0;
			CHECK(cuStreamSynchronize(st));
		}
		printf("cuLaunchKernel: %.2f us a launch\n", t / total);
		static const int lengths[] = {1, 4, 8, 16, 32, 64};
		for (int li = 0; li < 6; li++) {
			int n = lengths[li];
			CUgraph g;
			CUgraphNode nodes[64];
			CHECK(cuGraphCreate(&g, 0));
			double t0 = now_us();
			for (int j = 0; j < n; j++)
				CHECK(cuGraphAddKernelNode(&nodes[j], g, j ? &nodes[j - 1] : NULL, j ? 1 : 0, &kp));
			CUgraphExec e;
			CHECK(cuGraphInstantiate(&e, g, 0));
			double made = now_us() - t0;
			t = 0;
			int launches = 0;
			for (int i = 0; i < total; i += 64) {
				t0 = now_us();
				for (int j = 0; j < 64; j += n, launches++)
					CHECK(cuGraphLaunch(e, st));
				t += now_us() - t0;
				CHECK(cuStreamSynchronize(st));
			}
			printf("graph of %2d kernels: %.2f us a launch (made in %.0f us)\n", n, t / launches, made);
			if (n == 32)
				for (int set = 0; set <= n; set += 8) {
					t = 0;
					for (int i = 0; i < rounds; i++) {
						t0 = now_us();
						for (int j = 0; j < set; j++) {
							args.s = 1.0f + (i & 1);
							CHECK(cuGraphExecKernelNodeSetParams(e, nodes[j], &kp));
						}
						CHECK(cuGraphLaunch(e, st));
						t += now_us() - t0;
						CHECK(cuStreamSynchronize(st));
					}
					printf("  with %2d kernels' parameters set first: %.2f us\n", set, t / rounds);
				}
			CHECK(cuGraphExecDestroy(e));
			CHECK(cuGraphDestroy(g));
		}
	}
	return 0;
}
