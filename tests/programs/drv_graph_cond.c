/* drv_graph_cond IMAGE: conditional graph nodes, as NVIDIA's graphConditionalNodes sample
 * builds them (cond_kernels.cu): a kernel sets the handle (passed to it as a plain 64-bit
 * argument), an IF, IF/ELSE, SWITCH or WHILE node after it runs the bodies the value
 * picks, each body adding its own amount to one word. A do-while loop whose handle takes
 * its default at each launch; a loop built in a stream capture (the capture's graph given
 * a handle and a node, the capture's dependencies moved past it) whose body is captured
 * into the body graph (cuStreamBeginCaptureToGraph). Each launch's word checked. */
#include "drv_common.h"

static CUfunction f_set, f_count, f_add;
static CUdeviceptr d_value, d_count, d_out;
static CUcontext ctx;

static CUgraphNode kernel(CUgraph g, const CUgraphNode *deps, size_t n, CUfunction f, void **args)
{
	CUgraphNodeParams p;
	memset(&p, 0, sizeof p);
	p.type = CU_GRAPH_NODE_TYPE_KERNEL;
	p.kernel.func = f;
	p.kernel.gridDimX = p.kernel.gridDimY = p.kernel.gridDimZ = 1;
	p.kernel.blockDimX = p.kernel.blockDimY = p.kernel.blockDimZ = 1;
	p.kernel.kernelParams = args;
	CUgraphNode node;
	CHECK(cuGraphAddNode_v2(&node, g, deps, NULL, n, &p));
	return node;
}

static CUgraphNode add_kernel(CUgraph g, const CUgraphNode *deps, size_t n, unsigned amount)
{
	void *args[] = {&d_out, &amount};
	return kernel(g, deps, n, f_add, args);
}

static CUgraphNode conditional(CUgraph g, const CUgraphNode *deps, size_t n, CUgraphConditionalHandle h,
			       CUgraphConditionalNodeType type, unsigned size, CUgraph *bodies)
{
	CUgraphNodeParams p;
	memset(&p, 0, sizeof p);
	p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
	p.conditional.handle = h;
	p.conditional.type = type;
	p.conditional.size = size;
	p.conditional.ctx = ctx;
	CUgraphNode node;
	CHECK(cuGraphAddNode_v2(&node, g, deps, NULL, n, &p));
	for (unsigned i = 0; i < size; i++)
		bodies[i] = p.conditional.phGraph_out[i];
	CUgraphNodeType t;
	CHECK(cuGraphGetNodes(bodies[0], NULL, &(size_t){0}));
	CHECK(cuGraphNodeGetType(node, &t));
	EXPECT(t == CU_GRAPH_NODE_TYPE_CONDITIONAL, "node type %d", (int)t);
	return node;
}

/* One launch with the handle's kernel reading value (and a loop counter): the word. */
static unsigned launch(CUgraphExec e, unsigned value, unsigned count)
{
	unsigned out = 0;
	CHECK(cuMemcpyHtoD(d_value, &value, 4));
	CHECK(cuMemcpyHtoD(d_count, &count, 4));
	CHECK(cuMemsetD32(d_out, 0, 1));
	CHECK(cuGraphLaunch(e, NULL));
	CHECK(cuStreamSynchronize(NULL));
	CHECK(cuMemcpyDtoH(&out, d_out, 4));
	return out;
}

static void expect_word(const char *what, CUgraphExec e, unsigned value, unsigned count, unsigned want)
{
	unsigned got = launch(e, value, count);
	printf("%s value=%u count=%u: %u\n", what, value, count, got);
	EXPECT(got == want, "%s with %u: %u, expected %u", what, value, got, want);
}

/* condSet -> a node of type with size bodies, body i adding amounts[i]. */
static CUgraphExec branch_graph(CUgraph *g, CUgraphConditionalNodeType type, unsigned size, const unsigned *amounts)
{
	CUgraphConditionalHandle h;
	CUgraph bodies[4];
	CUgraphExec e;
	CHECK(cuGraphCreate(g, 0));
	CHECK(cuGraphConditionalHandleCreate(&h, *g, ctx, 0, 0));
	void *args[] = {&d_value, &h};
	CUgraphNode set = kernel(*g, NULL, 0, f_set, args);
	conditional(*g, &set, 1, h, type, size, bodies);
	for (unsigned i = 0; i < size; i++)
		add_kernel(bodies[i], NULL, 0, amounts[i]);
	CHECK(cuGraphInstantiateWithFlags(&e, *g, 0));
	return e;
}

static void branches(void)
{
	CUgraph g;
	const unsigned amounts[] = {1, 2, 4, 8};
	CUgraphExec e = branch_graph(&g, CU_GRAPH_COND_TYPE_IF, 1, (const unsigned[]){1});
	expect_word("if", e, 0, 0, 0);
	expect_word("if", e, 1, 0, 1);
	expect_word("if", e, 7, 0, 1);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));

	e = branch_graph(&g, CU_GRAPH_COND_TYPE_IF, 2, (const unsigned[]){10, 100});
	expect_word("if/else", e, 0, 0, 100);
	expect_word("if/else", e, 3, 0, 10);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));

	e = branch_graph(&g, CU_GRAPH_COND_TYPE_SWITCH, 4, amounts);
	for (unsigned v = 0; v <= 4; v++)
		expect_word("switch", e, v, 0, v < 4 ? amounts[v] : 0);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
}

/* A do-while loop: the handle's default, 1, assigned at each launch; the body counts down. */
static void do_while(void)
{
	CUgraph g, body;
	CUgraphConditionalHandle h;
	CUgraphExec e;
	CHECK(cuGraphCreate(&g, 0));
	CHECK(cuGraphConditionalHandleCreate(&h, g, ctx, 1, CU_GRAPH_COND_ASSIGN_DEFAULT));
	conditional(g, NULL, 0, h, CU_GRAPH_COND_TYPE_WHILE, 1, &body);
	void *args[] = {&d_count, &h};
	CUgraphNode step = kernel(body, NULL, 0, f_count, args);
	add_kernel(body, &step, 1, 1);
	size_t n = 0;
	CHECK(cuGraphGetNodes(body, NULL, &n));
	EXPECT(n == 2, "the body has %zu nodes", n);
	CHECK(cuGraphInstantiateWithFlags(&e, g, 0));
	expect_word("do-while", e, 0, 5, 5);
	expect_word("do-while", e, 0, 1, 1);
	expect_word("do-while", e, 0, 3, 3);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
}

/* The sample's capturedWhileGraph: the loop node added to a capture under way, its body
 * captured into the body graph. */
static void captured_while(void)
{
	CUstream s;
	CUgraph graph, ended, body, body_ended = NULL;
	CUgraphConditionalHandle h;
	CUstreamCaptureStatus status;
	const CUgraphNode *deps;
	size_t ndeps;
	CUgraphExec e;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	CHECK(cuStreamGetCaptureInfo_v3(s, &status, NULL, &graph, &deps, NULL, &ndeps));
	CHECK(cuGraphConditionalHandleCreate(&h, graph, ctx, 0, 0));
	void *set_args[] = {&d_value, &h};
	CHECK(cuLaunchKernel(f_set, 1, 1, 1, 1, 1, 1, 0, s, set_args, NULL));
	CHECK(cuStreamGetCaptureInfo_v3(s, &status, NULL, &graph, &deps, NULL, &ndeps));
	EXPECT(ndeps == 1, "%zu capture dependencies", ndeps);
	CUgraphNode loop = conditional(graph, deps, ndeps, h, CU_GRAPH_COND_TYPE_WHILE, 1, &body);
	CUgraphEdgeData plain;
	memset(&plain, 0, sizeof plain); /* a default edge, given */
	CHECK(cuStreamUpdateCaptureDependencies_v2(s, &loop, &plain, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES));
	unsigned thousand = 1000;
	void *add_args[] = {&d_out, &thousand};
	CHECK(cuLaunchKernel(f_add, 1, 1, 1, 1, 1, 1, 0, s, add_args, NULL));
	CHECK(cuStreamEndCapture(s, &ended));
	EXPECT(ended == graph, "the capture ended with another graph than its own");

	CHECK(cuStreamBeginCaptureToGraph(s, body, NULL, NULL, 0, CU_STREAM_CAPTURE_MODE_GLOBAL));
	void *count_args[] = {&d_count, &h};
	unsigned one = 1;
	void *one_args[] = {&d_out, &one};
	CHECK(cuLaunchKernel(f_count, 1, 1, 1, 1, 1, 1, 0, s, count_args, NULL));
	CHECK(cuLaunchKernel(f_add, 1, 1, 1, 1, 1, 1, 0, s, one_args, NULL));
	CHECK(cuStreamEndCapture(s, &body_ended));
	EXPECT(body_ended == body, "the capture into the body ended with another graph");
	CHECK(cuStreamDestroy(s));
	size_t n = 0;
	CHECK(cuGraphGetNodes(body, NULL, &n));
	EXPECT(n == 2, "the captured body has %zu nodes", n);

	CHECK(cuGraphInstantiateWithFlags(&e, ended, 0));
	expect_word("captured while", e, 0, 4, 1000);
	expect_word("captured while", e, 1, 4, 1004);
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(ended));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	ctx = drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&f_set, module, "condSet"));
	CHECK(cuModuleGetFunction(&f_count, module, "condCountDown"));
	CHECK(cuModuleGetFunction(&f_add, module, "condAddU32"));
	CHECK(cuMemAlloc(&d_value, 4));
	CHECK(cuMemAlloc(&d_count, 4));
	CHECK(cuMemAlloc(&d_out, 4));

	branches();
	do_while();
	captured_while();

	CHECK(cuMemFree(d_out));
	CHECK(cuMemFree(d_count));
	CHECK(cuMemFree(d_value));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
