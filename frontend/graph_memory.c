/* cuGraphAddMemAllocNode: its parameters travel as bytes, its access descriptors beside
 * them (backend/calls/graph_memory.c); the address the node allocates comes back into
 * the parameters, as CUDA gives it. */
#include "client.h"

#include <stdlib.h>

#include "remora.pb-c.h"

RM_EXPORT CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						  const CUgraphNode *dependencies, size_t numDependencies,
						  CUDA_MEM_ALLOC_NODE_PARAMS *nodeParams)
{
	if (!phGraphNode || !nodeParams || (numDependencies && !dependencies) || numDependencies > RM_MAX_GRAPH_DEPS ||
	    nodeParams->accessDescCount > RM_MAX_GRAPH_DEPS || (nodeParams->accessDescCount && !nodeParams->accessDescs))
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t *heap = NULL;
	Remora__GraphMemAllocNode req = REMORA__GRAPH_MEM_ALLOC_NODE__INIT;
	req.graph = (uint64_t)(uintptr_t)hGraph;
	req.n_deps = numDependencies;
	req.deps = numDependencies ? heap = calloc(numDependencies, sizeof(*heap)) : NULL;
	if (numDependencies && !heap)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < numDependencies; i++)
		heap[i] = (uint64_t)(uintptr_t)dependencies[i];
	req.params.data = (uint8_t *)nodeParams;
	req.params.len = sizeof(*nodeParams);
	req.access.data = (uint8_t *)nodeParams->accessDescs;
	req.access.len = nodeParams->accessDescCount * sizeof(*nodeParams->accessDescs);
	Remora__GraphMemAllocNodeReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphAddMemAllocNode, &req.base, &remora__graph_mem_alloc_node_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		*phGraphNode = (CUgraphNode)(uintptr_t)rep->node;
		nodeParams->dptr = rep->dptr;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	free(heap);
	return r;
}
