/* The graph calls' names of CUDA 10 and 11 that the driver still exports, for programs
 * built against those headers: each is its successor's call, answered here. */
#include "client.h"

#include <string.h>

static CUDA_KERNEL_NODE_PARAMS kernel_of(const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	CUDA_KERNEL_NODE_PARAMS k;
	memset(&k, 0, sizeof(k));
	memcpy(&k, p, sizeof(*p)); /* v2 begins with v1's fields; kern and ctx stay NULL */
	return k;
}

_Static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, extra) == offsetof(CUDA_KERNEL_NODE_PARAMS_v1, extra),
	       "CUDA_KERNEL_NODE_PARAMS_v2 no longer begins with v1's fields");

/* No error node or log: an instantiation that fails says why through its result only. */
static CUresult instantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode, char *logBuffer,
			    size_t bufferSize)
{
	if (phErrorNode)
		*phErrorNode = NULL;
	if (logBuffer && bufferSize)
		logBuffer[0] = 0;
	return cuGraphInstantiateWithFlags(phGraphExec, hGraph, 0);
}

RM_EXPORT CUresult CUDAAPI cuGraphInstantiate(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
					      char *logBuffer, size_t bufferSize)
{
	return instantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

RM_EXPORT CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec *phGraphExec, CUgraph hGraph, CUgraphNode *phErrorNode,
						 char *logBuffer, size_t bufferSize)
{
	return instantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}

RM_EXPORT CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
						size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS k = kernel_of(nodeParams);
	return cuGraphAddKernelNode_v2(phGraphNode, hGraph, dependencies, numDependencies, &k);
}

RM_EXPORT CUresult CUDAAPI cuGraphKernelNodeSetParams(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS k = kernel_of(nodeParams);
	return cuGraphKernelNodeSetParams_v2(hNode, &k);
}

RM_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
							  const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS k = kernel_of(nodeParams);
	return cuGraphExecKernelNodeSetParams_v2(hGraphExec, hNode, &k);
}

RM_EXPORT CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode *hErrorNode_out,
					     CUgraphExecUpdateResult *updateResult_out)
{
	if (!hErrorNode_out || !updateResult_out)
		return CUDA_ERROR_INVALID_VALUE;
	CUgraphExecUpdateResultInfo info;
	memset(&info, 0, sizeof(info));
	CUresult r = cuGraphExecUpdate_v2(hGraphExec, hGraph, &info);
	*hErrorNode_out = info.errorNode;
	*updateResult_out = info.result;
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_KERNEL_NODE_PARAMS k;
	CUresult r = cuGraphKernelNodeGetParams_v2(hNode, &k);
	if (r == CUDA_SUCCESS)
		memcpy(nodeParams, &k, sizeof(*nodeParams));
	return r;
}
