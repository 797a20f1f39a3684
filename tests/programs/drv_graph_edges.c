/* drv_graph_edges [IMAGE]: a graph's structure read back. A diamond a -> (b, c) -> d of empty and
 * memset nodes: its roots, edges, each node's dependencies and dependents (as sets: the
 * driver's order is its own), through the v1 and v2 calls; an edge removed, a node
 * destroyed, each change read back; the graph launched after them (its memsets checked);
 * a node found in a clone, of the same type. A graph built with the generic calls
 * (cuGraphAddNode, cuGraphNodeSetParams, cuGraphExecNodeSetParams), launched and checked. */
#include "drv_common.h"

#define N 256

static CUgraph graph;
static CUgraphNode nodes[4]; /* a, b, c, d */

/* The letters of a set of nodes, sorted ("bc"); a node not of the four is '?'. */
static void name(const CUgraphNode *set, size_t n, char *out)
{
	size_t k = 0;
	for (char l = 'a'; l <= 'd'; l++)
		for (size_t i = 0; i < n; i++)
			if (set[i] == nodes[l - 'a'])
				out[k++] = l;
	while (k < n)
		out[k++] = '?';
	out[k] = 0;
}

static void expect_set(const char *what, const CUgraphNode *set, size_t n, const char *want)
{
	char got[16];
	name(set, n, got);
	printf("%s: {%s}\n", what, got);
	EXPECT(!strcmp(got, want), "%s is {%s}, expected {%s}", what, got, want);
}

static void roots(const char *want)
{
	CUgraphNode set[8];
	size_t n = 0;
	CHECK(cuGraphGetRootNodes(graph, NULL, &n));
	EXPECT(n == strlen(want), "%zu roots, expected %zu", n, strlen(want));
	n = 8;
	CHECK(cuGraphGetRootNodes(graph, set, &n));
	expect_set("roots", set, n, want);
}

/* Of node l: its dependencies (dependents 0) or dependents, through v1 and v2. */
static void related(char l, int dependents, const char *want)
{
	CUgraphNode set[8], set2[8];
	CUgraphEdgeData edges[8];
	size_t n = 8, n2 = 8, count = 0;
	CUgraphNode node = nodes[l - 'a'];
	char what[32];
	snprintf(what, sizeof what, "%s of %c", dependents ? "dependents" : "dependencies", l);
	if (dependents) {
		CHECK(cuGraphNodeGetDependentNodes_v2(node, NULL, NULL, &count));
		CHECK(cuGraphNodeGetDependentNodes_v2(node, set, edges, &n));
		CHECK(cuGraphNodeGetDependentNodes_v2(node, set2, NULL, &n2));
	} else {
		CHECK(cuGraphNodeGetDependencies_v2(node, NULL, NULL, &count));
		CHECK(cuGraphNodeGetDependencies_v2(node, set, edges, &n));
		CHECK(cuGraphNodeGetDependencies_v2(node, set2, NULL, &n2));
	}
	EXPECT(count == n && n == n2, "%s: counts %zu, %zu, %zu differ", what, count, n, n2);
	for (size_t i = 0; i < n; i++)
		EXPECT(!edges[i].type && !edges[i].from_port && !edges[i].to_port, "%s: edge %zu not default", what, i);
	expect_set(what, set, n, want);
}

/* The edges as "xy" pairs, sorted. */
static void edges(const char *want)
{
	CUgraphNode from[8], to[8];
	size_t n = 0;
	CHECK(cuGraphGetEdges_v2(graph, NULL, NULL, NULL, &n));
	size_t count = n;
	n = 8;
	CHECK(cuGraphGetEdges_v2(graph, from, to, NULL, &n));
	EXPECT(n == count, "edges: %zu, then %zu", count, n);
	char pairs[8][3], got[32] = "";
	for (size_t i = 0; i < n && i < 8; i++) {
		name(&from[i], 1, pairs[i]);
		name(&to[i], 1, pairs[i] + 1);
	}
	for (size_t i = 0; i < n && i < 8; i++) /* insertion sort, a handful */
		for (size_t j = i; j > 0 && strcmp(pairs[j - 1], pairs[j]) > 0; j--) {
			char t[3];
			memcpy(t, pairs[j], 3);
			memcpy(pairs[j], pairs[j - 1], 3);
			memcpy(pairs[j - 1], t, 3);
		}
	for (size_t i = 0; i < n && i < 8; i++) {
		strcat(got, i ? " " : "");
		strcat(got, pairs[i]);
	}
	printf("edges: %s\n", got);
	EXPECT(!strcmp(got, want), "edges are %s, expected %s", got, want);
}

int main(int argc, char **argv)
{
	(void)argv; /* IMAGE, as every program of the table is given: no kernel is needed */
	if (argc > 2) {
		fprintf(stderr, "usage: drv_graph_edges [IMAGE]\n");
		return 2;
	}
	drv_open_device0();
	CUcontext ctx;
	CUdeviceptr x;
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuMemAlloc(&x, 2 * N * sizeof(unsigned)));
	CHECK(cuMemsetD32(x, 0, 2 * N));
	CUDA_MEMSET_NODE_PARAMS m = { 0 };
	m.elementSize = 4;
	m.width = N;
	m.height = 1;

	CHECK(cuGraphCreate(&graph, 0));
	CHECK(cuGraphAddEmptyNode(&nodes[0], graph, NULL, 0));
	m.dst = x;
	m.value = 7;
	CHECK(cuGraphAddMemsetNode(&nodes[1], graph, &nodes[0], 1, &m, ctx));
	m.dst = x + N * sizeof(unsigned);
	m.value = 9;
	CHECK(cuGraphAddMemsetNode(&nodes[2], graph, &nodes[0], 1, &m, ctx));
	CHECK(cuGraphAddEmptyNode(&nodes[3], graph, &nodes[1], 2));

	roots("a");
	edges("ab ac bd cd");
	related('d', 0, "bc");
	related('a', 1, "bc");
	related('b', 1, "d");
	related('a', 0, "");

	CHECK(cuGraphRemoveDependencies(graph, &nodes[0], &nodes[2], NULL, 1));
	EXPECT_RESULT(cuGraphRemoveDependencies(graph, &nodes[0], &nodes[2], NULL, 1), CUDA_ERROR_INVALID_VALUE);
	roots("ac");
	edges("ab bd cd");

	CHECK(cuGraphDestroyNode(nodes[1]));
	nodes[1] = NULL;
	roots("ac");
	edges("cd");
	related('d', 0, "c");
	size_t count = 0;
	CHECK(cuGraphGetNodes(graph, NULL, &count));
	EXPECT(count == 3, "%zu nodes after one was destroyed, expected 3", count);

	CUgraph clone;
	CUgraphNode found;
	CUgraphNodeType t;
	CHECK(cuGraphClone(&clone, graph));
	CHECK(cuGraphNodeFindInClone(&found, nodes[2], clone));
	CHECK(cuGraphNodeGetType(found, &t));
	EXPECT(t == CU_GRAPH_NODE_TYPE_MEMSET && found != nodes[2], "the clone's c is of type %d", (int)t);
	printf("found in clone: type %d\n", (int)t);

	CUgraphExec e;
	CHECK(cuGraphInstantiate(&e, clone, 0));
	CHECK(cuGraphLaunch(e, NULL));
	CHECK(cuCtxSynchronize());
	unsigned host[2 * N];
	CHECK(cuMemcpyDtoH(host, x, sizeof host));
	int good = 1;
	for (int i = 0; i < 2 * N; i++)
		good &= host[i] == (i < N ? 0u : 9u);
	EXPECT(good, "the launch after the changes wrote the wrong values");
	printf("launch after the changes: %s\n", good ? "ok" : "wrong");

	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(clone));
	CHECK(cuGraphDestroy(graph));

	/* The generic calls: an empty root, then a memset, changed in the graph, then in its
	 * executable graph before the launch. */
	CUgraph gen;
	CUgraphNode root, set;
	CUgraphNodeParams np;
	CHECK(cuGraphCreate(&gen, 0));
	memset(&np, 0, sizeof np);
	np.type = CU_GRAPH_NODE_TYPE_EMPTY;
	CHECK(cuGraphAddNode(&root, gen, NULL, NULL, 0, &np));
	memset(&np, 0, sizeof np);
	np.type = CU_GRAPH_NODE_TYPE_MEMSET;
	np.memset.dst = x;
	np.memset.value = 11;
	np.memset.elementSize = 4;
	np.memset.width = 2 * N;
	np.memset.height = 1;
	np.memset.ctx = ctx;
	CHECK(cuGraphAddNode(&set, gen, &root, NULL, 1, &np));
	np.memset.value = 12;
	CHECK(cuGraphNodeSetParams(set, &np));
	CUDA_MEMSET_NODE_PARAMS mback;
	CHECK(cuGraphMemsetNodeGetParams(set, &mback));
	EXPECT(mback.dst == x && mback.value == 12 && mback.elementSize == 4 && mback.width == 2 * N && mback.height == 1,
	       "the memset node's parameters read back");
	CHECK(cuGraphInstantiate(&e, gen, 0));
	np.memset.value = 13;
	CHECK(cuGraphExecNodeSetParams(e, set, &np));
	CHECK(cuGraphLaunch(e, NULL));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(host, x, sizeof host));
	good = 1;
	for (int i = 0; i < 2 * N; i++)
		good &= host[i] == 13u;
	EXPECT(good, "the generic calls' memset wrote the wrong values");
	printf("generic node calls: %s\n", good ? "ok" : "wrong");
	CHECK(cuGraphExecDestroy(e));
	CHECK(cuGraphDestroy(gen));
	CHECK(cuMemFree(x));
	drv_close_device0();
	return drv_exit_status();
}
