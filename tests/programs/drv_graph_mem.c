/* drv_graph_mem [IMAGE] [LAUNCHES]: graph memory nodes. A graph allocates a buffer, sets it
 * (a memset node whose value changes between launches), copies it out and frees it; each
 * launch's copy is checked. The nodes' parameters read back as given; the device's graph
 * memory attributes are read, its high watermark reset, its memory trimmed. A second graph
 * allocates without freeing: its memory, set by the graph, is read and freed outside it. */
#include "drv_common.h"

#define N 4096

static CUDA_MEM_ALLOC_NODE_PARAMS alloc_params(void)
{
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	memset(&p, 0, sizeof p);
	p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	p.poolProps.location.id = 0;
	p.bytesize = N * sizeof(unsigned);
	return p;
}

static CUDA_MEMSET_NODE_PARAMS set_to(CUdeviceptr dst, unsigned value)
{
	CUDA_MEMSET_NODE_PARAMS m = { 0 };
	m.dst = dst;
	m.value = value;
	m.elementSize = 4;
	m.width = N;
	m.height = 1;
	return m;
}

static int all(const unsigned *x, unsigned want, const char *what, int round)
{
	for (int i = 0; i < N; i++)
		if (x[i] != want) {
			EXPECT(0, "%s, round %d: element %d is %u, expected %u", what, round, i, x[i], want);
			return 0;
		}
	return 1;
}

int main(int argc, char **argv)
{
	int launches = argc > 2 ? atoi(argv[2]) : 5;
	drv_open_device0();
	CUcontext ctx;
	CUstream st;
	CUdeviceptr out;
	static unsigned host[N];
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemAlloc(&out, sizeof host));

	/* alloc -> memset -> copy out -> free */
	CUgraph g;
	CUgraphNode a, set, cp, fr;
	CHECK(cuGraphCreate(&g, 0));
	CUDA_MEM_ALLOC_NODE_PARAMS p = alloc_params();
	CHECK(cuGraphAddMemAllocNode(&a, g, NULL, 0, &p));
	EXPECT(p.dptr != 0, "the allocation node gave no address");
	CUDA_MEMSET_NODE_PARAMS m = set_to(p.dptr, 1);
	CHECK(cuGraphAddMemsetNode(&set, g, &a, 1, &m, ctx));
	CUDA_MEMCPY3D c = { 0 };
	c.srcMemoryType = c.dstMemoryType = CU_MEMORYTYPE_DEVICE;
	c.srcDevice = p.dptr;
	c.dstDevice = out;
	c.WidthInBytes = sizeof host;
	c.Height = c.Depth = 1;
	CHECK(cuGraphAddMemcpyNode(&cp, g, &set, 1, &c, ctx));
	CHECK(cuGraphAddMemFreeNode(&fr, g, &cp, 1, p.dptr));

	CUDA_MEM_ALLOC_NODE_PARAMS back;
	CUdeviceptr freed = 0;
	CHECK(cuGraphMemAllocNodeGetParams(a, &back));
	EXPECT(back.bytesize == p.bytesize && back.dptr == p.dptr && back.poolProps.location.id == 0 &&
	       back.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE, "the allocation node's parameters");
	CHECK(cuGraphMemFreeNodeGetParams(fr, &freed));
	EXPECT(freed == p.dptr, "the free node frees another address");
	CUgraphNodeType t1, t2;
	CHECK(cuGraphNodeGetType(a, &t1));
	CHECK(cuGraphNodeGetType(fr, &t2));
	EXPECT(t1 == CU_GRAPH_NODE_TYPE_MEM_ALLOC && t2 == CU_GRAPH_NODE_TYPE_MEM_FREE, "node types %d, %d", t1, t2);

	CUgraphExec e;
	CHECK(cuGraphInstantiate(&e, g, 0));
	int good = 0;
	for (int round = 0; round < launches; round++) {
		m = set_to(p.dptr, 100u + (unsigned)round);
		CHECK(cuGraphExecMemsetNodeSetParams(e, set, &m, ctx));
		CHECK(cuGraphLaunch(e, st));
		CHECK(cuStreamSynchronize(st));
		CHECK(cuMemcpyDtoH(host, out, sizeof host));
		good += all(host, 100u + (unsigned)round, "alloc, set, copy, free", round);
	}
	printf("alloc/free graph: %d of %d launches right\n", good, launches);

	cuuint64_t used = 0, high = 0, zero = 0;
	CHECK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &used));
	CHECK(cuDeviceGetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &high));
	EXPECT(high >= used, "the reserved high watermark %llu is below the memory in use %llu",
	       (unsigned long long)high, (unsigned long long)used);
	CHECK(cuDeviceSetGraphMemAttribute(0, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero));
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));
	CHECK(cuDeviceGraphMemTrim(0));

	/* alloc -> memset, no free: the memory outlives the launch */
	CHECK(cuGraphCreate(&g, 0));
	p = alloc_params();
	CHECK(cuGraphAddMemAllocNode(&a, g, NULL, 0, &p));
	m = set_to(p.dptr, 77);
	CHECK(cuGraphAddMemsetNode(&set, g, &a, 1, &m, ctx));
	CHECK(cuGraphInstantiate(&e, g, 0));
	CHECK(cuGraphLaunch(e, st));
	CHECK(cuStreamSynchronize(st));
	memset(host, 0, sizeof host);
	CHECK(cuMemcpyDtoH(host, p.dptr, sizeof host));
	int kept = all(host, 77, "allocation kept after the launch", 0);
	CHECK(cuMemFree(p.dptr));
	printf("allocation kept after the launch: %s\n", kept ? "ok" : "wrong");
	/* Launched again, the graph allocates it again: freed outside the graph again
	 * (graphMemoryNodes does), by cuMemFreeAsync this time. */
	int again = 1;
	for (int round = 1; round <= 2; round++) {
		CHECK(cuGraphLaunch(e, st));
		CHECK(cuStreamSynchronize(st));
		memset(host, 0, sizeof host);
		CHECK(cuMemcpyDtoH(host, p.dptr, sizeof host));
		CHECK(cuMemFreeAsync(p.dptr, st));
		CHECK(cuStreamSynchronize(st));
		again &= all(host, 77, "allocation of a later launch", round);
	}
	printf("allocated again at each launch and freed outside the graph: %s\n", again ? "ok" : "wrong");
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(g));

	CHECK(cuMemFree(out));
	CHECK(cuStreamDestroy(st));
	drv_close_device0();
	return drv_exit_status();
}
