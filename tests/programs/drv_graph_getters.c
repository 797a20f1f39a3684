/* drv_graph_getters IMAGE: what graph nodes say back, and the settings of executable
 * graphs' nodes. A kernel node added by the CUDA 10 name (cuGraphAddKernelNode), its
 * parameters read back (function, shape, arguments), its attribute set, read and copied
 * to another; a host node's function and data; event
 * record and wait nodes' events; a child graph node's graph and its nodes. The graph
 * instantiated by the CUDA 11 name and by flags (read back), a kernel node disabled (its
 * launch leaves memory alone) and enabled again, each launch's memory checked. */
#include "drv_common.h"

#undef cuGraphAddKernelNode
CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
				      size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
				       char *logBuffer, size_t bufferSize);

#define N 64

static int host_runs;

static void CUDA_CB host_fn(void *data)
{
	(*(int *)data)++;
}

static CUgraphNode fill_node(CUgraph g, CUfunction fill, CUdeviceptr *out, unsigned *value, int *n)
{
	void *args[] = {out, value, n};
	CUDA_KERNEL_NODE_PARAMS_v1 p;
	memset(&p, 0, sizeof p);
	p.func = fill;
	p.gridDimX = 1, p.gridDimY = 1, p.gridDimZ = 1;
	p.blockDimX = 64, p.blockDimY = 1, p.blockDimZ = 1;
	p.kernelParams = args;
	CUgraphNode node;
	CHECK(cuGraphAddKernelNode(&node, g, NULL, 0, &p));
	return node;
}

static void expect_fill(const char *what, CUdeviceptr out, unsigned want)
{
	unsigned host[N];
	CHECK(cuMemcpyDtoH(host, out, sizeof host));
	int bad = 0;
	for (int i = 0; i < N; i++)
		bad += host[i] != want;
	printf("%s: %u (%d wrong)\n", what, host[0], bad);
	EXPECT(!bad, "%s: %d words not %u", what, bad, want);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction fill;
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CUdeviceptr out, other;
	CHECK(cuMemAlloc(&out, N * 4));
	CHECK(cuMemAlloc(&other, N * 4));
	CUevent ev;
	CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));

	CUgraph g, child, inner;
	CHECK(cuGraphCreate(&g, 0));
	unsigned five = 5, seven = 7;
	int n = N;
	CUgraphNode k1 = fill_node(g, fill, &out, &five, &n);
	CUgraphNode k2 = fill_node(g, fill, &other, &seven, &n);

	/* k1's parameters: its function, shape and arguments, as given. */
	CUDA_KERNEL_NODE_PARAMS kp;
	memset(&kp, 0, sizeof kp);
	CHECK(cuGraphKernelNodeGetParams(k1, &kp));
	int same = kp.func == fill && kp.gridDimX == 1 && kp.blockDimX == 64 && kp.sharedMemBytes == 0 &&
		   kp.kernelParams && *(CUdeviceptr *)kp.kernelParams[0] == out &&
		   *(unsigned *)kp.kernelParams[1] == 5 && *(int *)kp.kernelParams[2] == N;
	EXPECT(same, "k1's parameters read back otherwise");
	printf("kernel node params: %s\n", same ? "same" : "differ");

	/* Attributes: the greatest priority set on k1, read back, copied to k2. */
	int least = 0, greatest = 0;
	CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
	CUkernelNodeAttrValue v, got;
	memset(&v, 0, sizeof v);
	v.priority = greatest;
	CHECK(cuGraphKernelNodeSetAttribute(k1, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &v));
	memset(&got, 0xff, sizeof got);
	CHECK(cuGraphKernelNodeGetAttribute(k1, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &got));
	EXPECT(got.priority == greatest, "priority %d read back as %d", greatest, got.priority);
	CHECK(cuGraphKernelNodeCopyAttributes(k2, k1));
	memset(&got, 0xff, sizeof got);
	CHECK(cuGraphKernelNodeGetAttribute(k2, CU_KERNEL_NODE_ATTRIBUTE_PRIORITY, &got));
	EXPECT(got.priority == greatest, "priority copied as %d", got.priority);
	printf("priority set, read and copied: %s\n", got.priority == greatest ? "same" : "differs");

	/* A host node's function and data, as given. */
	CUDA_HOST_NODE_PARAMS hp = {.fn = host_fn, .userData = &host_runs}, hgot;
	CUgraphNode host, rec, wait, sub;
	CHECK(cuGraphAddHostNode(&host, g, &k1, 1, &hp));
	memset(&hgot, 0, sizeof hgot);
	CHECK(cuGraphHostNodeGetParams(host, &hgot));
	EXPECT(hgot.fn == host_fn && hgot.userData == &host_runs, "host node params %p %p", (void *)hgot.fn,
	       hgot.userData);
	printf("host node params: %s\n", hgot.fn == host_fn && hgot.userData == &host_runs ? "same" : "differ");

	/* Event nodes' events. */
	CUevent egot = NULL;
	CHECK(cuGraphAddEventRecordNode(&rec, g, &host, 1, ev));
	CHECK(cuGraphAddEventWaitNode(&wait, g, &rec, 1, ev));
	CHECK(cuGraphEventRecordNodeGetEvent(rec, &egot));
	EXPECT(egot == ev, "record node's event %p, expected %p", (void *)egot, (void *)ev);
	egot = NULL;
	CHECK(cuGraphEventWaitNodeGetEvent(wait, &egot));
	EXPECT(egot == ev, "wait node's event %p, expected %p", (void *)egot, (void *)ev);
	printf("event nodes' events: %s\n", egot == ev ? "same" : "differ");

	/* A child graph node's graph: the node's copy, with the child's one node. */
	CUgraphNode m;
	CUDA_MEMSET_NODE_PARAMS ms = {.dst = other, .pitch = 0, .value = 9, .elementSize = 4, .width = 1, .height = 1};
	CHECK(cuGraphCreate(&child, 0));
	CHECK(cuGraphAddMemsetNode(&m, child, NULL, 0, &ms, NULL));
	CHECK(cuGraphAddChildGraphNode(&sub, g, &k2, 1, child));
	CHECK(cuGraphChildGraphNodeGetGraph(sub, &inner));
	size_t count = 0;
	CHECK(cuGraphGetNodes(inner, NULL, &count));
	CUgraphNode inner_node;
	size_t one = 1;
	CUgraphNodeType type;
	CHECK(cuGraphGetNodes(inner, &inner_node, &one));
	CHECK(cuGraphNodeGetType(inner_node, &type));
	EXPECT(count == 1 && type == CU_GRAPH_NODE_TYPE_MEMSET, "the child node's graph: %zu nodes, type %d", count,
	       (int)type);
	printf("child graph node's graph: %zu node(s), a memset: %s\n", count, type == CU_GRAPH_NODE_TYPE_MEMSET ? "yes" : "no");

	/* Executable graphs: the CUDA 11 name, then flags read back; k1 turned off and on. */
	CUgraphExec e1, e2;
	CUgraphNode err = (CUgraphNode)1;
	char log[16] = "x";
	CHECK(cuGraphInstantiate_v2(&e1, g, &err, log, sizeof log));
	EXPECT(err == NULL, "an error node from a good instantiation");
	CHECK(cuGraphInstantiateWithFlags(&e2, g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH));
	cuuint64_t flags = 0;
	CHECK(cuGraphExecGetFlags(e2, &flags));
	EXPECT(flags == CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, "flags %llu", (unsigned long long)flags);
	CHECK(cuGraphExecGetFlags(e1, &flags));
	EXPECT(flags == 0, "flags %llu", (unsigned long long)flags);
	printf("exec flags read back\n");

	unsigned enabled = 7;
	CHECK(cuGraphNodeGetEnabled(e1, k1, &enabled));
	EXPECT(enabled == 1, "k1 enabled reads %u", enabled);
	CHECK(cuMemsetD32(out, 0, N));
	CHECK(cuGraphLaunch(e1, NULL));
	CHECK(cuStreamSynchronize(NULL));
	expect_fill("enabled", out, 5);
	CHECK(cuGraphNodeSetEnabled(e1, k1, 0));
	CHECK(cuGraphNodeGetEnabled(e1, k1, &enabled));
	EXPECT(enabled == 0, "k1 disabled reads %u", enabled);
	CHECK(cuMemsetD32(out, 0, N));
	CHECK(cuGraphLaunch(e1, NULL));
	CHECK(cuStreamSynchronize(NULL));
	expect_fill("disabled", out, 0);
	CHECK(cuGraphNodeSetEnabled(e1, k1, 1));
	CHECK(cuGraphLaunch(e1, NULL));
	CHECK(cuStreamSynchronize(NULL));
	expect_fill("enabled again", out, 5);
	printf("host node ran %d times\n", host_runs);
	EXPECT(host_runs == 3, "host node ran %d times", host_runs);

	CHECK(cuGraphExecDestroy(e2));
	CHECK(cuGraphExecDestroy(e1));
	CHECK(cuGraphDestroy(child));
	CHECK(cuGraphDestroy(g));
	CHECK(cuEventDestroy(ev));
	CHECK(cuMemFree(other));
	CHECK(cuMemFree(out));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
