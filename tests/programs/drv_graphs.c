/* drv_graphs IMAGE [REPLAYS]: stream capture across two streams joined by events
 * (memset, device copy, kernels) replayed REPLAYS times with every result checked;
 * the errors of illegal calls during a capture; an explicit graph (memset, kernel and
 * empty nodes) launched, its kernel node's parameters set in the executable graph,
 * and the executable graph updated from a changed clone. */
#include "drv_common.h"

#define N 4096

static CUfunction scale, vec_add;

static uint32_t bits(float f)
{
	uint32_t b;
	memcpy(&b, &f, sizeof b);
	return b;
}

static void launch_scale(CUdeviceptr x, float s, CUstream stream)
{
	int n = N;
	void *params[] = { &x, &s, &n };
	CHECK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, stream, params, NULL));
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

static void capture_and_replay(CUstream a, CUstream b, int replays)
{
	CUdeviceptr x, y, z;
	CUevent fork, join;
	CHECK(cuMemAlloc(&x, N * sizeof(float)));
	CHECK(cuMemAlloc(&y, N * sizeof(float)));
	CHECK(cuMemAlloc(&z, N * sizeof(float)));
	CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
	CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));

	CUstreamCaptureStatus status;
	CHECK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuStreamIsCapturing(a, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE, "capturing stream a says %d", (int)status);
	CHECK(cuStreamIsCapturing(b, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "stream b captures before it joined: %d", (int)status);
	CHECK(cuMemsetD32Async(x, bits(2.0f), N, a));
	CHECK(cuEventRecord(fork, a));
	CHECK(cuStreamWaitEvent(b, fork, 0));
	CHECK(cuStreamIsCapturing(b, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE, "stream b did not join the capture: %d", (int)status);
	CHECK(cuMemcpyDtoDAsync(y, x, N * sizeof(float), b));
	launch_scale(y, 3.0f, b);
	launch_scale(x, 5.0f, a);
	CHECK(cuEventRecord(join, b));
	CHECK(cuStreamWaitEvent(a, join, 0));
	int n = N;
	void *params[] = { &x, &y, &z, &n };
	CHECK(cuLaunchKernel(vec_add, 16, 1, 1, 256, 1, 1, 0, a, params, NULL));

	cuuint64_t id = 0;
	CUgraph captured = NULL;
	const CUgraphNode *deps = NULL;
	size_t ndeps = 0;
	CHECK(cuStreamGetCaptureInfo(a, &status, &id, &captured, &deps, NULL, &ndeps));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_ACTIVE && id != 0 && captured && ndeps == 1 && deps && deps[0],
	       "capture info: status %d id %llu graph %p %zu dependencies", (int)status, (unsigned long long)id,
	       (void *)captured, ndeps);
	CUgraphNodeType type;
	if (ndeps == 1 && deps)
		CHECK(cuGraphNodeGetType(deps[0], &type));
	EXPECT(ndeps == 1 && type == CU_GRAPH_NODE_TYPE_KERNEL, "the capture's last node is not the kernel");

	CUgraph graph;
	CHECK(cuStreamEndCapture(a, &graph));
	CHECK(cuStreamIsCapturing(a, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "a still captures after its end: %d", (int)status);
	CHECK(cuStreamIsCapturing(b, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "b still captures after the end: %d", (int)status);
	size_t nodes = 0;
	CHECK(cuGraphGetNodes(graph, NULL, &nodes));
	printf("captured nodes=%zu\n", nodes);
	EXPECT(nodes == 5, "the capture made %zu nodes, expected 5", nodes);

	/* Nothing ran during the capture. */
	CHECK(cuMemsetD32(z, bits(-1.0f), N));
	all_equal(z, -1.0f, "z before any replay", 0);

	CUgraphExec exec;
	CHECK(cuGraphInstantiate(&exec, graph, 0));
	CHECK(cuGraphUpload(exec, b));
	int good = 0;
	for (int r = 0; r < replays; r++) {
		CHECK(cuMemsetD32(z, 0, N));
		CHECK(cuGraphLaunch(exec, r % 2 ? a : b));
		CHECK(cuStreamSynchronize(r % 2 ? a : b));
		good += all_equal(z, 2.0f * 5.0f + 2.0f * 3.0f, "replay", r);
	}
	printf("replays=%d correct=%d z=%g\n", replays, good, 16.0);
	CHECK(cuGraphExecDestroy(exec));
	CHECK(cuGraphDestroy(graph));
	CHECK(cuEventDestroy(fork));
	CHECK(cuEventDestroy(join));
	CHECK(cuMemFree(x));
	CHECK(cuMemFree(y));
	CHECK(cuMemFree(z));
}

/* A synchronizing call on a capturing stream fails and invalidates the capture. */
static void illegal_during_capture(CUstream a)
{
	CUdeviceptr x;
	CUgraph graph = (CUgraph)1;
	CUstreamCaptureStatus status;
	CHECK(cuMemAlloc(&x, N * sizeof(float)));
	EXPECT_RESULT(cuStreamBeginCapture(NULL, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);

	CHECK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED));
	EXPECT_RESULT(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_ERROR_ILLEGAL_STATE);
	launch_scale(x, 2.0f, a);
	EXPECT_RESULT(cuStreamQuery(a), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	CHECK(cuStreamIsCapturing(a, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_INVALIDATED, "after a query the capture is %d", (int)status);
	EXPECT_RESULT(cuStreamEndCapture(a, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	EXPECT(graph == NULL, "an invalidated capture gave a graph");

	CHECK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
	EXPECT_RESULT(cuStreamSynchronize(a), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
	EXPECT_RESULT(cuStreamEndCapture(a, &graph), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
	CHECK(cuStreamIsCapturing(a, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "the stream captures after its end: %d", (int)status);
	printf("illegal: query=CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED synchronize=CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED "
	       "end=CUDA_ERROR_STREAM_CAPTURE_INVALIDATED\n");

	/* The stream works as before. */
	CHECK(cuMemsetD32Async(x, bits(1.5f), N, a));
	launch_scale(x, 2.0f, a);
	CHECK(cuStreamSynchronize(a));
	all_equal(x, 3.0f, "after invalidated captures", 0);
	CHECK(cuMemFree(x));
}

static CUDA_KERNEL_NODE_PARAMS scale_node(CUdeviceptr *x, float *s, int *n)
{
	static void *params[3];
	params[0] = x;
	params[1] = s;
	params[2] = n;
	CUDA_KERNEL_NODE_PARAMS p = { 0 };
	p.func = scale;
	p.gridDimX = 16;
	p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = 256;
	p.blockDimY = p.blockDimZ = 1;
	p.kernelParams = params;
	return p;
}

static void explicit_graph(CUstream a)
{
	CUdeviceptr x;
	CUgraph graph;
	CUgraphNode set, first, empty, second;
	CHECK(cuMemAlloc(&x, N * sizeof(float)));
	CHECK(cuGraphCreate(&graph, 0));
	CUDA_MEMSET_NODE_PARAMS m = { 0 };
	m.dst = x;
	m.value = bits(1.0f);
	m.elementSize = 4;
	m.width = N;
	m.height = 1;
	CUcontext ctx;
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuGraphAddMemsetNode(&set, graph, NULL, 0, &m, ctx));
	float s1 = 4.0f, s2 = 0.5f;
	int n = N;
	CUDA_KERNEL_NODE_PARAMS p = scale_node(&x, &s1, &n);
	CHECK(cuGraphAddKernelNode(&first, graph, &set, 1, &p));
	CHECK(cuGraphAddEmptyNode(&empty, graph, &first, 1));
	p = scale_node(&x, &s2, &n);
	CHECK(cuGraphAddKernelNode(&second, graph, &empty, 1, &p));
	size_t count = 0;
	CHECK(cuGraphGetNodes(graph, NULL, &count));
	EXPECT(count == 4, "explicit graph has %zu nodes", count);

	CUgraphExec exec;
	CUDA_GRAPH_INSTANTIATE_PARAMS ip = { 0 };
	ip.flags = CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD;
	ip.hUploadStream = a;
	CHECK(cuGraphInstantiateWithParams(&exec, graph, &ip));
	EXPECT(ip.result_out == CUDA_GRAPH_INSTANTIATE_SUCCESS, "instantiate result %d", (int)ip.result_out);
	CHECK(cuGraphLaunch(exec, a));
	CHECK(cuStreamSynchronize(a));
	all_equal(x, 2.0f, "explicit graph", 0);

	/* The executable graph's first kernel now scales by 10: 1 * 10 * 0.5. */
	float s10 = 10.0f;
	p = scale_node(&x, &s10, &n);
	CHECK(cuGraphExecKernelNodeSetParams(exec, first, &p));
	CHECK(cuGraphLaunch(exec, a));
	CHECK(cuStreamSynchronize(a));
	all_equal(x, 5.0f, "after cuGraphExecKernelNodeSetParams", 0);

	/* Updated from a clone whose memset writes 3: 3 * 4 * 0.5. */
	CUgraph clone;
	CHECK(cuGraphClone(&clone, graph));
	CUgraphExecUpdateResultInfo info;
	CHECK(cuGraphExecUpdate(exec, clone, &info));
	EXPECT(info.result == CU_GRAPH_EXEC_UPDATE_SUCCESS, "update result %d", (int)info.result);
	CUgraphNode clone_nodes[4];
	count = 4;
	CHECK(cuGraphGetNodes(clone, clone_nodes, &count));
	m.value = bits(3.0f);
	CHECK(cuGraphExecMemsetNodeSetParams(exec, set, &m, ctx));
	CHECK(cuGraphLaunch(exec, a));
	CHECK(cuStreamSynchronize(a));
	all_equal(x, 6.0f, "after cuGraphExecUpdate and a memset node's new value", 0);

	/* A graph of another shape does not update it. */
	CUgraph other;
	CUgraphNode lone;
	CHECK(cuGraphCreate(&other, 0));
	CHECK(cuGraphAddEmptyNode(&lone, other, NULL, 0));
	EXPECT_RESULT(cuGraphExecUpdate(exec, other, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
	EXPECT(info.result != CU_GRAPH_EXEC_UPDATE_SUCCESS, "a changed topology updated");
	printf("explicit: launch=2 set_params=5 update=6 other_topology=CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE\n");

	CHECK(cuGraphDestroy(other));
	CHECK(cuGraphDestroy(clone));
	CHECK(cuGraphExecDestroy(exec));
	CHECK(cuGraphDestroy(graph));
	CHECK(cuMemFree(x));
}

/* A stream forked into a capture and joined back may be destroyed before the capture
 * ends (graphMemoryNodes does): the capture goes on, and a stream made meanwhile does not
 * capture. */
static void forked_stream_destroyed(CUstream a)
{
	CUdeviceptr x, y;
	CUstream c, d;
	CUevent fork, join;
	CUstreamCaptureStatus status;
	CHECK(cuMemAlloc(&x, N * sizeof(float)));
	CHECK(cuMemAlloc(&y, N * sizeof(float)));
	CHECK(cuEventCreate(&fork, CU_EVENT_DISABLE_TIMING));
	CHECK(cuEventCreate(&join, CU_EVENT_DISABLE_TIMING));
	CHECK(cuStreamCreate(&c, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamBeginCapture(a, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuEventRecord(fork, a));
	CHECK(cuStreamWaitEvent(c, fork, 0));
	CHECK(cuMemsetD32Async(y, bits(4.0f), N, c));
	CHECK(cuMemsetD32Async(x, bits(1.0f), N, a));
	CHECK(cuEventRecord(join, c));
	CHECK(cuStreamWaitEvent(a, join, 0));
	CHECK(cuStreamDestroy(c));
	CHECK(cuStreamCreate(&d, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamIsCapturing(d, &status));
	EXPECT(status == CU_STREAM_CAPTURE_STATUS_NONE, "a stream made during the capture captures: %d", (int)status);
	int n = N;
	void *params[] = { &x, &y, &x, &n };
	CHECK(cuLaunchKernel(vec_add, 16, 1, 1, 256, 1, 1, 0, a, params, NULL));
	CUgraph graph = NULL;
	CUresult r = cuStreamEndCapture(a, &graph);
	EXPECT(r == CUDA_SUCCESS && graph, "the capture ended in %d after its forked stream was destroyed", (int)r);
	if (graph) {
		CUgraphExec exec;
		CHECK(cuGraphInstantiate(&exec, graph, 0));
		CHECK(cuGraphLaunch(exec, d));
		CHECK(cuStreamSynchronize(d));
		printf("forked stream destroyed mid-capture: %s\n", all_equal(x, 5.0f, "x", 0) ? "ok" : "wrong");
		CHECK(cuGraphExecDestroy(exec));
		CHECK(cuGraphDestroy(graph));
	}
	CHECK(cuStreamDestroy(d));
	CHECK(cuEventDestroy(fork));
	CHECK(cuEventDestroy(join));
	CHECK(cuMemFree(x));
	CHECK(cuMemFree(y));
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s IMAGE [REPLAYS]\n", argv[0]);
		return 2;
	}
	int replays = argc == 3 ? atoi(argv[2]) : 100;
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&scale, module, "scaleArray"));
	CHECK(cuModuleGetFunction(&vec_add, module, "vecAdd"));
	CUstream a, b;
	CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamCreate(&b, CU_STREAM_DEFAULT));

	capture_and_replay(a, b, replays);
	illegal_during_capture(a);
	forked_stream_destroyed(a);
	explicit_graph(a);

	CHECK(cuStreamDestroy(a));
	CHECK(cuStreamDestroy(b));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
