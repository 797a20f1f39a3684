/* A graph's structure: root nodes, a node's dependencies and dependents, a graph's edges,
 * each one GraphNodes round trip (backend/calls/graph_edges.c). The _v2 forms' edge data
 * are all default edges: Remora makes no other (cuGraphAddDependencies_v2 and
 * cuStreamUpdateCaptureDependencies_v2 refuse edge data). */
#include "client.h"

#include <string.h>

#include "remora.pb-c.h"

/* Asks op about h; a and b (edges: from and to) get up to *n nodes, *n the count. */
static CUresult list(uint32_t op, const void *h, CUgraphNode *a, CUgraphNode *b, CUgraphEdgeData *edges, size_t *n)
{
	int want = a != NULL;
	if (!n || (want && *n > RM_MAX_GRAPH_DEPS) || (op == RM_OP_cuGraphGetEdges && want != (b != NULL)))
		return CUDA_ERROR_INVALID_VALUE;
	size_t per = op == RM_OP_cuGraphGetEdges ? 2 : 1;
	Remora__GraphNodes req = REMORA__GRAPH_NODES__INIT;
	req.graph = (uint64_t)(uintptr_t)h;
	req.room = want ? *n : 0;
	Remora__GraphNodesReply *rep = NULL;
	CUresult r = rm_rpc_simple(op, &req.base, &remora__graph_nodes_reply__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep &&
	    (rep->n_nodes % per || rep->n_nodes / per > req.room || rep->n_nodes / per > rep->count))
		r = rm_rpc_bad_reply("%s: %zu nodes for room of %llu", rm_op_names[op], rep->n_nodes,
				     (unsigned long long)req.room);
	if (r == CUDA_SUCCESS && rep) {
		size_t got = rep->n_nodes / per;
		for (size_t i = 0; want && i < req.room; i++) {
			a[i] = i < got ? (CUgraphNode)(uintptr_t)rep->nodes[i * per] : NULL;
			if (b)
				b[i] = i < got ? (CUgraphNode)(uintptr_t)rep->nodes[i * per + 1] : NULL;
		}
		if (edges && want)
			memset(edges, 0, req.room * sizeof(*edges));
		*n = rep->count;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphGetRootNodes(CUgraph hGraph, CUgraphNode *rootNodes, size_t *numRootNodes)
{
	return list(RM_OP_cuGraphGetRootNodes, hGraph, rootNodes, NULL, NULL, numRootNodes);
}

RM_EXPORT CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode hNode, CUgraphNode *dependencies,
						      size_t *numDependencies)
{
	return list(RM_OP_cuGraphNodeGetDependencies, hNode, dependencies, NULL, NULL, numDependencies);
}

RM_EXPORT CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode hNode, CUgraphNode *dependencies,
							 CUgraphEdgeData *edgeData, size_t *numDependencies)
{
	return list(RM_OP_cuGraphNodeGetDependencies, hNode, dependencies, NULL, edgeData, numDependencies);
}

RM_EXPORT CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode hNode, CUgraphNode *dependentNodes,
							size_t *numDependentNodes)
{
	return list(RM_OP_cuGraphNodeGetDependentNodes, hNode, dependentNodes, NULL, NULL, numDependentNodes);
}

RM_EXPORT CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode hNode, CUgraphNode *dependentNodes,
							   CUgraphEdgeData *edgeData, size_t *numDependentNodes)
{
	return list(RM_OP_cuGraphNodeGetDependentNodes, hNode, dependentNodes, NULL, edgeData, numDependentNodes);
}

RM_EXPORT CUresult CUDAAPI cuGraphGetEdges(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to, size_t *numEdges)
{
	return list(RM_OP_cuGraphGetEdges, hGraph, from, to, NULL, numEdges);
}

RM_EXPORT CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph hGraph, CUgraphNode *from, CUgraphNode *to,
					      CUgraphEdgeData *edgeData, size_t *numEdges)
{
	return list(RM_OP_cuGraphGetEdges, hGraph, from, to, edgeData, numEdges);
}

/* Only default (all-zero) edges exist here, as in cuGraphAddDependencies_v2. */
RM_EXPORT CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
							const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	static const CUgraphEdgeData plain;
	for (size_t i = 0; edgeData && i < numDependencies; i++)
		if (memcmp(&edgeData[i], &plain, sizeof(plain)))
			return rm_unsupported("cuGraphRemoveDependencies_v2 with edge data");
	return cuGraphRemoveDependencies(hGraph, from, to, numDependencies);
}
