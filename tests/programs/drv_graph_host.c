/* drv_graph_host IMAGE [LAUNCHES]: graph copies with host memory. An explicit graph copies
 * a pinned source up, scales it and copies it down into pageable memory; a captured graph
 * does the same from pageable memory into a pageable destination on the stack. Before
 * each launch the host changes the source: each launch must read it anew, and each
 * synchronize must find the destination written. A node's parameters read back name the
 * host memory given; a clone and an executable graph's changed node copy to another host
 * range; a host destination the program wrote after the last synchronize stays as written
 * while no launch writes it again. Launches back to back, each with a source larger than the
 * daemon's staging and a host node reading a destination, all run (simpleCudaGraphs). */
#include "drv_common.h"

#define N 1024

static CUfunction scale;

static CUDA_KERNEL_NODE_PARAMS scale_by(CUdeviceptr *x, float *s)
{
	static int n = N;
	static void *params[3];
	params[0] = x;
	params[1] = s;
	params[2] = &n;
	CUDA_KERNEL_NODE_PARAMS p = { 0 };
	p.func = scale;
	p.gridDimX = N / 256;
	p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = 256;
	p.blockDimY = p.blockDimZ = 1;
	p.kernelParams = params;
	return p;
}

static CUDA_MEMCPY3D host_to_device(CUdeviceptr dst, const void *src)
{
	CUDA_MEMCPY3D c = { 0 };
	c.srcMemoryType = CU_MEMORYTYPE_HOST;
	c.srcHost = src;
	c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.dstDevice = dst;
	c.WidthInBytes = N * sizeof(float);
	c.Height = c.Depth = 1;
	return c;
}

static CUDA_MEMCPY3D device_to_host(void *dst, CUdeviceptr src)
{
	CUDA_MEMCPY3D c = { 0 };
	c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = src;
	c.dstMemoryType = CU_MEMORYTYPE_HOST;
	c.dstHost = dst;
	c.WidthInBytes = N * sizeof(float);
	c.Height = c.Depth = 1;
	return c;
}

static float seen;

/* A host node after the copy down: reads the destination, then writes it (simpleCudaGraphs'
 * callback resets its result so). */
static void CUDA_CB after_down(void *arg)
{
	float *out = arg;
	seen = out[N - 1];
	out[0] = -2.0f;
}

static void fill(float *x, int round)
{
	for (int i = 0; i < N; i++)
		x[i] = (float)(i % 97) + (float)round * 0.5f;
}

/* out[i] == in[i] * s for every element, bit for bit (one multiply, as the kernel does). */
static int check(const float *out, const float *in, float s, const char *what, int round)
{
	for (int i = 0; i < N; i++) {
		float want = in[i] * s;
		if (memcmp(&out[i], &want, sizeof want)) {
			EXPECT(0, "%s, round %d: element %d is %g, expected %g", what, round, i, out[i], want);
			return 0;
		}
	}
	return 1;
}

static void explicit_graph(CUstream st, int launches)
{
	CUcontext ctx;
	CUdeviceptr d;
	float *in, *out = malloc(N * sizeof(float)), *other = malloc(N * sizeof(float)), two = 2.0f;
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuMemAlloc(&d, N * sizeof(float)));
	CHECK(cuMemAllocHost((void **)&in, N * sizeof(float)));
	if (!out || !other)
		exit(1);

	CUgraph g;
	CUgraphNode up, k, down;
	CHECK(cuGraphCreate(&g, 0));
	CUDA_MEMCPY3D c = host_to_device(d, in);
	CHECK(cuGraphAddMemcpyNode(&up, g, NULL, 0, &c, ctx));
	CUDA_KERNEL_NODE_PARAMS kp = scale_by(&d, &two);
	CHECK(cuGraphAddKernelNode(&k, g, &up, 1, &kp));
	c = device_to_host(out, d);
	CHECK(cuGraphAddMemcpyNode(&down, g, &k, 1, &c, ctx));
	CUgraphNode hn;
	CUDA_HOST_NODE_PARAMS h = { after_down, out };
	CHECK(cuGraphAddHostNode(&hn, g, &down, 1, &h));

	CUDA_MEMCPY3D back;
	CHECK(cuGraphMemcpyNodeGetParams(up, &back));
	EXPECT(back.srcMemoryType == CU_MEMORYTYPE_HOST && back.srcHost == in, "the up node's source reads back");
	CHECK(cuGraphMemcpyNodeGetParams(down, &back));
	EXPECT(back.dstMemoryType == CU_MEMORYTYPE_HOST && back.dstHost == out && back.WidthInBytes == N * sizeof(float),
	       "the down node's destination reads back");

	CUgraphExec e;
	CHECK(cuGraphInstantiate(&e, g, 0));
	int good = 0;
	for (int round = 0; round < launches; round++) {
		fill(in, round);
		memset(out, 0, N * sizeof(float));
		CHECK(cuGraphLaunch(e, st));
		CHECK(cuStreamSynchronize(st));
		/* The host node saw the copy's result, and its own write stays. */
		EXPECT(out[0] == -2.0f, "round %d: the host node's write to the destination was lost", round);
		out[0] = in[0] * 2.0f;
		int ok = check(out, in, 2.0f, "explicit graph", round) && seen == in[N - 1] * 2.0f;
		EXPECT(seen == in[N - 1] * 2.0f, "round %d: the host node saw %g, expected %g", round, seen, in[N - 1] * 2.0f);
		good += ok;
	}
	printf("explicit graph: %d of %d launches read their source anew\n", good, launches);

	/* Written after the last synchronize, with no launch since: stays. */
	out[0] = -1.0f;
	CHECK(cuCtxSynchronize());
	EXPECT(out[0] == -1.0f, "a destination the program wrote after the graph's synchronize changed");

	/* A clone copies into the same host range; its executable graph's node, into another. */
	CUgraph cl;
	CUgraphExec ce;
	CHECK(cuGraphClone(&cl, g));
	CHECK(cuGraphInstantiate(&ce, cl, 0));
	fill(in, 1000);
	CHECK(cuGraphLaunch(ce, st));
	CHECK(cuStreamSynchronize(st));
	int clone_ok = out[0] == -2.0f;
	out[0] = in[0] * 2.0f;
	clone_ok &= check(out, in, 2.0f, "clone", 0);
	CUgraphNode down_clone;
	CHECK(cuGraphNodeFindInClone(&down_clone, down, cl));
	c = device_to_host(other, d);
	CHECK(cuGraphExecMemcpyNodeSetParams(ce, down_clone, &c, ctx));
	fill(in, 2000);
	memset(other, 0, N * sizeof(float));
	CHECK(cuGraphLaunch(ce, st));
	CHECK(cuCtxSynchronize());
	clone_ok &= check(other, in, 2.0f, "clone's executable graph, changed node", 0);
	printf("clone: %s\n", clone_ok ? "ok" : "wrong");

	CHECK(cuGraphExecDestroy(ce));
	CHECK(cuGraphDestroy(cl));
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
	CHECK(cuMemFreeHost(in));
	CHECK(cuMemFree(d));
	free(out);
	free(other);
}

static void captured_graph(CUstream st, int launches)
{
	CUdeviceptr d;
	float in[N], out[N], three = 3.0f; /* pageable, on the stack */
	int n = N;
	void *args[] = { &d, &three, &n };
	CHECK(cuMemAlloc(&d, N * sizeof(float)));
	CHECK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuMemcpyHtoDAsync(d, in, sizeof in, st));
	CHECK(cuLaunchKernel(scale, N / 256, 1, 1, 256, 1, 1, 0, st, args, NULL));
	CHECK(cuMemcpyDtoHAsync(out, d, sizeof out, st));
	CUgraph g;
	CHECK(cuStreamEndCapture(st, &g));
	size_t count = 0;
	CHECK(cuGraphGetNodes(g, NULL, &count));
	EXPECT(count == 3, "the captured graph has %zu nodes, expected 3", count);
	CUgraphExec e;
	CHECK(cuGraphInstantiate(&e, g, 0));
	int good = 0;
	for (int round = 0; round < launches; round++) {
		fill(in, round);
		memset(out, 0, sizeof out);
		CHECK(cuGraphLaunch(e, st));
		CHECK(cuStreamSynchronize(st));
		good += check(out, in, 3.0f, "captured graph", round);
	}
	printf("captured graph: %d of %d launches read their source anew\n", good, launches);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
	CHECK(cuMemFree(d));
}

#define BIG (24u << 20) /* bytes: more than the daemon stages at once */

static int host_node_runs;

static void CUDA_CB count_run(void *arg)
{
	float *out = arg;
	if (out[N - 1] == 2.0f * (float)((N - 1) % 97))
		host_node_runs++;
}

/* Each launch's big source goes up while the launch before waits at its host node, which
 * brings the destination down first: neither may wait for the other. */
static void back_to_back(CUstream st, int launches)
{
	CUcontext ctx;
	CUdeviceptr d;
	float *in, *out = malloc(N * sizeof(float)), two = 2.0f;
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuMemAlloc(&d, BIG));
	CHECK(cuMemAllocHost((void **)&in, BIG));
	if (!out)
		exit(1);
	memset(in, 0, BIG);
	fill(in, 0);
	CUgraph g;
	CUgraphNode up, k, down, hn;
	CHECK(cuGraphCreate(&g, 0));
	CUDA_MEMCPY3D c = host_to_device(d, in);
	c.WidthInBytes = BIG;
	CHECK(cuGraphAddMemcpyNode(&up, g, NULL, 0, &c, ctx));
	CUDA_KERNEL_NODE_PARAMS kp = scale_by(&d, &two);
	CHECK(cuGraphAddKernelNode(&k, g, &up, 1, &kp));
	c = device_to_host(out, d);
	CHECK(cuGraphAddMemcpyNode(&down, g, &k, 1, &c, ctx));
	CUDA_HOST_NODE_PARAMS h = { count_run, out };
	CHECK(cuGraphAddHostNode(&hn, g, &down, 1, &h));
	CUgraphExec e;
	CHECK(cuGraphInstantiate(&e, g, 0));
	host_node_runs = 0;
	for (int i = 0; i < launches; i++)
		CHECK(cuGraphLaunch(e, st));
	CHECK(cuStreamSynchronize(st));
	EXPECT(host_node_runs == launches, "back to back: the host node saw the result in %d of %d launches",
	       host_node_runs, launches);
	printf("back to back: %d of %d host nodes saw their launch's result\n", host_node_runs, launches);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
	CHECK(cuMemFreeHost(in));
	CHECK(cuMemFree(d));
	free(out);
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s IMAGE [LAUNCHES]\n", argv[0]);
		return 2;
	}
	int launches = argc == 3 ? atoi(argv[2]) : 10;
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&scale, module, "scaleArray"));
	CUstream st;
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	explicit_graph(st, launches);
	captured_graph(st, launches);
	back_to_back(st, launches < 3 ? launches : 3);
	CHECK(cuStreamDestroy(st));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
