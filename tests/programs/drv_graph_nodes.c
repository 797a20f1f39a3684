/* drv_graph_nodes IMAGE [LAUNCHES]: a graph built explicitly with every node kind Remora
 * forwards (memset, device-to-device memcpy, kernel, host, event record and wait, child
 * graph, empty; a dependency added afterwards), launched LAUNCHES times with every result
 * checked; its executable graph's nodes set one by one, then updated from the graph's
 * changed nodes; a second graph waiting on the first's event; a host function captured
 * on a stream, run at every replay. */
#include "drv_common.h"

#define N 4096

static CUfunction scale;
static int host_runs, other_runs, captured_runs;

static void CUDA_CB count_host(void *arg) { ++*(int *)arg; }

static uint32_t bits(float f)
{
	uint32_t b;
	memcpy(&b, &f, sizeof b);
	return b;
}

/* Every element of x is want; reports the first that is not. */
static int all_equal(CUdeviceptr x, float want, const char *what, int round)
{
	static float host[N];
	CHECK(cuMemcpyDtoH(host, x, sizeof host));
	for (int i = 0; i < N; i++)
		if (host[i] != want) {
			EXPECT(host[i] == want, "%s, round %d: element %d is %g, expected %g", what, round, i, host[i],
			       want);
			return 0;
		}
	return 1;
}

static CUDA_MEMSET_NODE_PARAMS fill(CUdeviceptr dst, float value)
{
	CUDA_MEMSET_NODE_PARAMS m = { 0 };
	m.dst = dst;
	m.value = bits(value);
	m.elementSize = 4;
	m.width = N;
	m.height = 1;
	return m;
}

static CUDA_MEMCPY3D copy(CUdeviceptr dst, CUdeviceptr src)
{
	CUDA_MEMCPY3D c = { 0 };
	c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = src;
	c.dstDevice = dst;
	c.WidthInBytes = N * sizeof(float);
	c.Height = c.Depth = 1;
	return c;
}

static CUDA_KERNEL_NODE_PARAMS scale_by(CUdeviceptr *x, float *s)
{
	static int n = N;
	static void *params[3];
	params[0] = x;
	params[1] = s;
	params[2] = &n;
	CUDA_KERNEL_NODE_PARAMS p = { 0 };
	p.func = scale;
	p.gridDimX = 16;
	p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = 256;
	p.blockDimY = p.blockDimZ = 1;
	p.kernelParams = params;
	return p;
}

static CUDA_HOST_NODE_PARAMS host(int *counter)
{
	CUDA_HOST_NODE_PARAMS h = { count_host, counter };
	return h;
}

/* A graph of one memset node writing value to z. */
static CUgraph child_graph(CUdeviceptr z, float value, CUcontext ctx)
{
	CUgraph g;
	CUgraphNode n;
	CUDA_MEMSET_NODE_PARAMS m = fill(z, value);
	CHECK(cuGraphCreate(&g, 0));
	CHECK(cuGraphAddMemsetNode(&n, g, NULL, 0, &m, ctx));
	return g;
}

static void explicit_nodes(CUstream a, CUstream b, int launches)
{
	CUcontext ctx;
	CUdeviceptr x, x2, y, z;
	CUevent done, other;
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuMemAlloc(&x, N * sizeof(float)));
	CHECK(cuMemAlloc(&x2, N * sizeof(float)));
	CHECK(cuMemAlloc(&y, N * sizeof(float)));
	CHECK(cuMemAlloc(&z, N * sizeof(float)));
	CHECK(cuMemsetD32(x2, bits(5.0f), N));
	CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
	CHECK(cuEventCreate(&other, CU_EVENT_DISABLE_TIMING));

	/* set(x=1) -> copy(y=x) -> host -> scale(y*=3) -> record(done); child(z=7) -> scale */
	CUgraph graph;
	CUgraphNode set, cp, hn, k, child, rec, empty;
	CHECK(cuGraphCreate(&graph, 0));
	CUDA_MEMSET_NODE_PARAMS m = fill(x, 1.0f);
	CHECK(cuGraphAddMemsetNode(&set, graph, NULL, 0, &m, ctx));
	CUDA_MEMCPY3D c = copy(y, x);
	CHECK(cuGraphAddMemcpyNode(&cp, graph, &set, 1, &c, ctx));
	CUDA_HOST_NODE_PARAMS h = host(&host_runs);
	CHECK(cuGraphAddHostNode(&hn, graph, &cp, 1, &h));
	float three = 3.0f;
	CUDA_KERNEL_NODE_PARAMS kp = scale_by(&y, &three);
	CHECK(cuGraphAddKernelNode(&k, graph, &hn, 1, &kp));
	CUgraph sub = child_graph(z, 7.0f, ctx);
	CHECK(cuGraphAddChildGraphNode(&child, graph, NULL, 0, sub));
	CHECK(cuGraphAddDependencies(graph, &child, &k, NULL, 1));
	CHECK(cuGraphAddEventRecordNode(&rec, graph, &k, 1, done));
	CHECK(cuGraphAddEmptyNode(&empty, graph, &rec, 1));
	CHECK(cuGraphDestroy(sub)); /* the node holds its own copy */

	size_t count = 0;
	CUgraphNode nodes[8];
	CHECK(cuGraphGetNodes(graph, NULL, &count));
	EXPECT(count == 7, "the graph has %zu nodes, expected 7", count);
	count = 8;
	CHECK(cuGraphGetNodes(graph, nodes, &count));
	int types[CU_GRAPH_NODE_TYPE_GRAPH + 16] = { 0 };
	for (size_t i = 0; i < count && i < 8; i++) {
		CUgraphNodeType t;
		CHECK(cuGraphNodeGetType(nodes[i], &t));
		if ((size_t)t < sizeof types / sizeof types[0])
			types[t]++;
	}
	printf("nodes=%zu kernel=%d memcpy=%d memset=%d host=%d graph=%d empty=%d record=%d\n", count,
	       types[CU_GRAPH_NODE_TYPE_KERNEL], types[CU_GRAPH_NODE_TYPE_MEMCPY], types[CU_GRAPH_NODE_TYPE_MEMSET],
	       types[CU_GRAPH_NODE_TYPE_HOST], types[CU_GRAPH_NODE_TYPE_GRAPH], types[CU_GRAPH_NODE_TYPE_EMPTY],
	       types[CU_GRAPH_NODE_TYPE_EVENT_RECORD]);

	/* A second graph: wait for done, then y *= 10. */
	CUgraph waiter;
	CUgraphNode wait, k10;
	float ten = 10.0f;
	CHECK(cuGraphCreate(&waiter, 0));
	CHECK(cuGraphAddEventWaitNode(&wait, waiter, NULL, 0, done));
	kp = scale_by(&y, &ten);
	CHECK(cuGraphAddKernelNode(&k10, waiter, &wait, 1, &kp));

	CUgraphExec exec, wexec;
	CHECK(cuGraphInstantiate(&exec, graph, 0));
	CHECK(cuGraphInstantiate(&wexec, waiter, 0));
	int good = 0;
	for (int r = 0; r < launches; r++) {
		CHECK(cuGraphLaunch(exec, a));
		CHECK(cuGraphLaunch(wexec, b));
		CHECK(cuStreamSynchronize(b));
		CHECK(cuStreamSynchronize(a));
		good += all_equal(y, 30.0f, "y after both graphs", r) & all_equal(z, 7.0f, "z of the child", r);
		EXPECT(host_runs == r + 1, "round %d: the host node ran %d times", r, host_runs);
	}
	printf("launches=%d correct=%d host_runs=%d\n", launches, good, host_runs);

	/* The executable graph's nodes, one by one: copy from x2 (5), another host function,
	 * another event, a child writing 9. */
	c = copy(y, x2);
	CHECK(cuGraphExecMemcpyNodeSetParams(exec, cp, &c, ctx));
	h = host(&other_runs);
	CHECK(cuGraphExecHostNodeSetParams(exec, hn, &h));
	CHECK(cuGraphExecEventRecordNodeSetEvent(exec, rec, other));
	CHECK(cuGraphExecEventWaitNodeSetEvent(wexec, wait, other));
	sub = child_graph(z, 9.0f, ctx);
	CHECK(cuGraphExecChildGraphNodeSetParams(exec, child, sub));
	CHECK(cuGraphDestroy(sub));
	CHECK(cuGraphLaunch(exec, a));
	CHECK(cuGraphLaunch(wexec, b));
	CHECK(cuStreamSynchronize(b));
	CHECK(cuStreamSynchronize(a));
	all_equal(y, 150.0f, "y after the exec setters", 0);
	all_equal(z, 9.0f, "z after the child's setter", 0);
	EXPECT(host_runs == launches && other_runs == 1, "host runs %d and %d after the setter", host_runs, other_runs);

	/* The graph's own nodes changed, then taken into the executable graph: memset 2,
	 * copy from x, scale by 4, the first host function and event back. */
	m = fill(x, 2.0f);
	CHECK(cuGraphMemsetNodeSetParams(set, &m));
	c = copy(y, x);
	CHECK(cuGraphMemcpyNodeSetParams(cp, &c));
	float four = 4.0f;
	kp = scale_by(&y, &four);
	CHECK(cuGraphKernelNodeSetParams(k, &kp));
	h = host(&host_runs);
	CHECK(cuGraphHostNodeSetParams(hn, &h));
	CHECK(cuGraphEventRecordNodeSetEvent(rec, done));
	CUgraphExecUpdateResultInfo info;
	CHECK(cuGraphExecUpdate(exec, graph, &info));
	EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "update result %d", (int)info.result);
	CHECK(cuGraphLaunch(exec, a));
	CHECK(cuStreamSynchronize(a));
	all_equal(y, 8.0f, "y after cuGraphExecUpdate", 0);
	all_equal(z, 7.0f, "z after cuGraphExecUpdate", 0);
	EXPECT(host_runs == launches + 1 && other_runs == 1, "host runs %d and %d after the update", host_runs,
	       other_runs);
	printf("setters: exec=150 child=9 update=8 host_runs=%d other_runs=%d\n", host_runs, other_runs);

	CHECK(cuGraphExecDestroy(wexec));
	CHECK(cuGraphExecDestroy(exec));
	CHECK(cuGraphDestroy(waiter));
	CHECK(cuGraphDestroy(graph));
	CHECK(cuEventDestroy(done));
	CHECK(cuEventDestroy(other));
	CHECK(cuMemFree(x));
	CHECK(cuMemFree(x2));
	CHECK(cuMemFree(y));
	CHECK(cuMemFree(z));
}

/* cuLaunchHostFunc on a capturing stream becomes a host node: it runs at each replay, in
 * order between the device work around it. */
static void captured_host_function(CUstream a, int replays)
{
	CUdeviceptr x;
	CUgraph graph;
	CUgraphExec exec;
	float two = 2.0f;
	int n = N;
	void *params[] = { &x, &two, &n };
	CHECK(cuMemAlloc(&x, N * sizeof(float)));
	CHECK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuMemsetD32Async(x, bits(1.5f), N, a));
	CHECK(cuLaunchHostFunc(a, count_host, &captured_runs));
	CHECK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, a, params, NULL));
	CHECK(cuStreamEndCapture(a, &graph));
	EXPECT(captured_runs == 0, "the captured host function ran during the capture");
	size_t count = 0;
	CHECK(cuGraphGetNodes(graph, NULL, &count));
	CHECK(cuGraphInstantiate(&exec, graph, 0));
	int good = 0;
	for (int r = 0; r < replays; r++) {
		CHECK(cuGraphLaunch(exec, a));
		CHECK(cuStreamSynchronize(a));
		good += all_equal(x, 3.0f, "captured graph", r);
	}
	EXPECT(captured_runs == replays, "the captured host function ran %d times in %d replays", captured_runs,
	       replays);
	printf("captured: nodes=%zu replays=%d correct=%d host_runs=%d\n", count, replays, good, captured_runs);
	CHECK(cuGraphExecDestroy(exec));
	CHECK(cuGraphDestroy(graph));
	CHECK(cuMemFree(x));
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s IMAGE [LAUNCHES]\n", argv[0]);
		return 2;
	}
	int launches = argc == 3 ? atoi(argv[2]) : 20;
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&scale, module, "scaleArray"));
	CUstream a, b;
	CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));

	explicit_nodes(a, b, launches);
	captured_host_function(a, launches);

	CHECK(cuStreamDestroy(a));
	CHECK(cuStreamDestroy(b));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
