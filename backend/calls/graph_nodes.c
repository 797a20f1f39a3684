/* The explicit graph construction API beyond kernels and memsets (proto/api.spec, "Graphs"):
 * memcpy, host, event and child-graph nodes, dependencies, and the setters of nodes and of
 * executable graphs' nodes. Every node, graph, event and device range a client names is
 * checked against what it owns; a host node runs the client's function through the
 * callback channel (host_functions.h). */
#include "dispatch.h"
#include "host_functions.h"

#include <stdlib.h>

#include "remora.pb-c.h"

/* The bytes one side of a copy spans from its origin: depth planes of height rows,
 * plus the last row's width, without overflow. 0 with *span set, or -1. */
static int copy_span(uint64_t x, uint64_t y, uint64_t z, uint64_t pitch, uint64_t height, const CUDA_MEMCPY3D *p,
		     uint64_t *first, uint64_t *span)
{
	uint64_t plane, start, rows, last;
	if (p->Height > 1 || p->Depth > 1 || y || z) {
		if (pitch < x + p->WidthInBytes || (p->Depth > 1 && height < y + p->Height))
			return -1;
	}
	if (__builtin_mul_overflow(pitch, height, &plane) || __builtin_mul_overflow(z, plane, &start) ||
	    __builtin_mul_overflow(y, pitch, &rows) || __builtin_add_overflow(start, rows, &start) ||
	    __builtin_add_overflow(start, x, &start))
		return -1;
	if (__builtin_mul_overflow((uint64_t)(p->Depth - 1), plane, &last) ||
	    __builtin_mul_overflow((uint64_t)(p->Height - 1), pitch, &rows) ||
	    __builtin_add_overflow(last, rows, &last) || __builtin_add_overflow(last, (uint64_t)p->WidthInBytes, &last))
		return -1;
	*first = start;
	*span = last;
	return 0;
}

/* One side of a copy: device memory (or unified memory at a device address) the client
 * owns, over every byte the copy touches. Host memory is the client's, out of reach of a
 * graph the daemon launches: refused, and logged once. */
static CUresult check_side(struct rm_channel *s, CUmemorytype type, CUdeviceptr dev, size_t x, size_t y, size_t z,
			   size_t pitch, size_t height, const CUDA_MEMCPY3D *p)
{
	uint64_t first, span;
	if (type == CU_MEMORYTYPE_HOST)
		return rm_unsupported_use("a graph memcpy node with host memory (cuGraphAddMemcpyNode)");
	if (type == CU_MEMORYTYPE_ARRAY)
		return rm_unsupported_use("a graph memcpy node with a CUDA array (cuGraphAddMemcpyNode)");
	if (type != CU_MEMORYTYPE_DEVICE && type != CU_MEMORYTYPE_UNIFIED)
		return CUDA_ERROR_INVALID_VALUE;
	if (copy_span(x, y, z, pitch, height, p, &first, &span) || __builtin_add_overflow((uint64_t)dev, first, &first))
		return CUDA_ERROR_INVALID_VALUE;
	return rm_session_check_range(s, first, span);
}

/* A memcpy node's parameters: both sides device memory the client owns, no LOD planes. */
static CUresult check_copy(struct rm_channel *s, const CUDA_MEMCPY3D *p)
{
	if (!p->WidthInBytes || !p->Height || !p->Depth || p->srcLOD || p->dstLOD)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = check_side(s, p->srcMemoryType, p->srcDevice, p->srcXInBytes, p->srcY, p->srcZ, p->srcPitch,
				p->srcHeight, p);
	if (r == CUDA_SUCCESS)
		r = check_side(s, p->dstMemoryType, p->dstDevice, p->dstXInBytes, p->dstY, p->dstZ, p->dstPitch,
			       p->dstHeight, p);
	return r;
}

/* The context a node's call names, or the client's current one. */
static CUcontext context_or_current(struct rm_channel *s, CUcontext ctx)
{
	return ctx ? ctx : s->cur ? s->cur->ctx : NULL;
}

CUresult rm_body_cuGraphAddMemcpyNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
				      const CUgraphNode *dependencies, size_t numDependencies,
				      const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	if (r == CUDA_SUCCESS)
		r = check_copy(s, copyParams);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphAddMemcpyNode(phGraphNode, hGraph, dependencies, numDependencies, copyParams,
						context_or_current(s, ctx));
	return r;
}

CUresult rm_body_cuGraphMemcpyNodeSetParams(struct rm_channel *s, CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
	CUresult r = check_copy(s, nodeParams);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphMemcpyNodeSetParams(hNode, nodeParams) : r;
}

CUresult rm_body_cuGraphExecMemcpyNodeSetParams(struct rm_channel *s, CUgraphExec hGraphExec, CUgraphNode hNode,
						const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	CUresult r = check_copy(s, copyParams);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphExecMemcpyNodeSetParams(hGraphExec, hNode, copyParams,
									  context_or_current(s, ctx))
				 : r;
}

CUresult rm_body_cuGraphMemsetNodeSetParams(struct rm_channel *s, CUgraphNode hNode,
					    const CUDA_MEMSET_NODE_PARAMS *nodeParams)
{
	CUresult r = rm_graph_check_memset(s, nodeParams);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphMemsetNodeSetParams(hNode, nodeParams) : r;
}

/* Host nodes: the parameters carry the client's id of its function in userData (the
 * client keeps the function); the driver gets the hub's call for that id. */
CUresult rm_body_cuGraphAddHostNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
				    const CUgraphNode *dependencies, size_t numDependencies,
				    const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CUDA_HOST_NODE_PARAMS node;
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	if (r == CUDA_SUCCESS)
		r = rm_hostfn_node(s->sh->hostfn, (uint64_t)(uintptr_t)nodeParams->userData, &node);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphAddHostNode(phGraphNode, hGraph, dependencies, numDependencies, &node)
				 : r;
}

/* What the node runs, as the client named it: the id of its function and data. */
CUresult rm_body_cuGraphHostNodeGetParams(struct rm_channel *s, CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CUDA_HOST_NODE_PARAMS p;
	CUresult r = rm_drv_cuGraphHostNodeGetParams(hNode, &p);
	uint64_t id = r == CUDA_SUCCESS ? rm_hostfn_node_id(s->sh->hostfn, &p) : 0;
	if (r == CUDA_SUCCESS && !id)
		r = rm_unsupported_use("cuGraphHostNodeGetParams of a node not the client's host node");
	if (r == CUDA_SUCCESS)
		*nodeParams = (CUDA_HOST_NODE_PARAMS){.fn = NULL, .userData = (void *)(uintptr_t)id};
	return r;
}

CUresult rm_body_cuGraphHostNodeSetParams(struct rm_channel *s, CUgraphNode hNode,
					  const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CUDA_HOST_NODE_PARAMS node;
	CUresult r = rm_hostfn_node(s->sh->hostfn, (uint64_t)(uintptr_t)nodeParams->userData, &node);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphHostNodeSetParams(hNode, &node) : r;
}

CUresult rm_body_cuGraphExecHostNodeSetParams(struct rm_channel *s, CUgraphExec hGraphExec, CUgraphNode hNode,
					      const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CUDA_HOST_NODE_PARAMS node;
	CUresult r = rm_hostfn_node(s->sh->hostfn, (uint64_t)(uintptr_t)nodeParams->userData, &node);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphExecHostNodeSetParams(hGraphExec, hNode, &node) : r;
}

CUresult rm_body_cuGraphAddEventRecordNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
					   const CUgraphNode *dependencies, size_t numDependencies, CUevent event)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphAddEventRecordNode(phGraphNode, hGraph, dependencies,
								     numDependencies, event)
				 : r;
}

CUresult rm_body_cuGraphAddEventWaitNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
					 const CUgraphNode *dependencies, size_t numDependencies, CUevent event)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphAddEventWaitNode(phGraphNode, hGraph, dependencies, numDependencies,
								   event)
				 : r;
}

/* The driver copies the child graph into the node: the child stays the client's to
 * change or destroy. */
CUresult rm_body_cuGraphAddChildGraphNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
					  const CUgraphNode *dependencies, size_t numDependencies, CUgraph childGraph)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphAddChildGraphNode(phGraphNode, hGraph, dependencies, numDependencies,
								    childGraph)
				 : r;
}

CUresult rm_body_cuGraphAddDependencies(struct rm_channel *s, CUgraph hGraph, const CUgraphNode *from,
					const CUgraphNode *to, size_t numDependencies)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, from, numDependencies);
	if (r == CUDA_SUCCESS)
		r = rm_graph_check_nodes(s, hGraph, to, numDependencies);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphAddDependencies(hGraph, from, to, numDependencies) : r;
}
