/* CUDA 12's generic node calls, answered here by the typed call of each node kind Remora
 * forwards (kernel, memcpy, memset, host, child graph, event record and wait, empty,
 * memory allocation and free), a conditional node by its own message (graph_cond.c):
 * cuGraphAddNode(_v2), cuGraphNodeSetParams, cuGraphExecNodeSetParams. Other kinds
 * (external semaphores, batch memory operations), edge data and a moved child graph are
 * refused (CUDA_ERROR_NOT_SUPPORTED, logged once). */
#include "client.h"
#include "graph_cond.h"

#include <string.h>

static CUDA_KERNEL_NODE_PARAMS kernel_of(const CUDA_KERNEL_NODE_PARAMS_v3 *k)
{
	CUDA_KERNEL_NODE_PARAMS p;
	memset(&p, 0, sizeof(p));
	p.func = k->func;
	p.gridDimX = k->gridDimX;
	p.gridDimY = k->gridDimY;
	p.gridDimZ = k->gridDimZ;
	p.blockDimX = k->blockDimX;
	p.blockDimY = k->blockDimY;
	p.blockDimZ = k->blockDimZ;
	p.sharedMemBytes = k->sharedMemBytes;
	p.kernelParams = k->kernelParams;
	p.extra = k->extra;
	p.kern = k->kern;
	p.ctx = k->ctx;
	return p;
}

static CUDA_MEMSET_NODE_PARAMS memset_of(const CUDA_MEMSET_NODE_PARAMS_v2 *m)
{
	CUDA_MEMSET_NODE_PARAMS p = {.dst = m->dst, .pitch = m->pitch, .value = m->value,
				     .elementSize = m->elementSize, .width = m->width, .height = m->height};
	return p;
}

static CUresult add(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n, CUgraphNodeParams *p)
{
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		CUDA_KERNEL_NODE_PARAMS k = kernel_of(&p->kernel);
		return cuGraphAddKernelNode_v2(ph, g, deps, n, &k);
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		return p->memcpy.flags ? CUDA_ERROR_INVALID_VALUE
				       : cuGraphAddMemcpyNode(ph, g, deps, n, &p->memcpy.copyParams, p->memcpy.copyCtx);
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS m = memset_of(&p->memset);
		return cuGraphAddMemsetNode(ph, g, deps, n, &m, p->memset.ctx);
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS h = {.fn = p->host.fn, .userData = p->host.userData};
		return cuGraphAddHostNode(ph, g, deps, n, &h);
	}
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (p->graph.ownership != CU_GRAPH_CHILD_GRAPH_OWNERSHIP_CLONE)
			return rm_unsupported("cuGraphAddNode of a child graph moved into its parent");
		return cuGraphAddChildGraphNode(ph, g, deps, n, p->graph.graph);
	case CU_GRAPH_NODE_TYPE_EMPTY:
		return cuGraphAddEmptyNode(ph, g, deps, n);
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return cuGraphAddEventWaitNode(ph, g, deps, n, p->eventWait.event);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return cuGraphAddEventRecordNode(ph, g, deps, n, p->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_MEM_ALLOC: {
		CUDA_MEM_ALLOC_NODE_PARAMS a;
		memcpy(&a, &p->alloc, sizeof(a)); /* the same fields */
		CUresult r = cuGraphAddMemAllocNode(ph, g, deps, n, &a);
		if (r == CUDA_SUCCESS)
			p->alloc.dptr = a.dptr;
		return r;
	}
	case CU_GRAPH_NODE_TYPE_MEM_FREE:
		return cuGraphAddMemFreeNode(ph, g, deps, n, p->free.dptr);
	case CU_GRAPH_NODE_TYPE_CONDITIONAL:
		return rm_graph_add_conditional(ph, g, deps, n, &p->conditional);
	default:
		return rm_unsupported("cuGraphAddNode of an external semaphore or batch memory node");
	}
}

_Static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2),
	       "the two allocation node parameter structures differ");

RM_EXPORT CUresult CUDAAPI cuGraphAddNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					     const CUgraphEdgeData *dependencyData, size_t numDependencies,
					     CUgraphNodeParams *nodeParams)
{
	static const CUgraphEdgeData plain;
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; dependencyData && i < numDependencies; i++)
		if (memcmp(&dependencyData[i], &plain, sizeof(plain)))
			return rm_unsupported("cuGraphAddNode with edge data");
	return add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

RM_EXPORT CUresult CUDAAPI cuGraphAddNode(CUgraphNode *phGraphNode, CUgraph hGraph, const CUgraphNode *dependencies,
					  size_t numDependencies, CUgraphNodeParams *nodeParams)
{
	return nodeParams ? add(phGraphNode, hGraph, dependencies, numDependencies, nodeParams)
			  : CUDA_ERROR_INVALID_VALUE;
}

/* The node's own setter (exec NULL), or its executable graph's. */
static CUresult set(CUgraphExec exec, CUgraphNode node, CUgraphNodeParams *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	switch (p->type) {
	case CU_GRAPH_NODE_TYPE_KERNEL: {
		CUDA_KERNEL_NODE_PARAMS k = kernel_of(&p->kernel);
		return exec ? cuGraphExecKernelNodeSetParams_v2(exec, node, &k) : cuGraphKernelNodeSetParams_v2(node, &k);
	}
	case CU_GRAPH_NODE_TYPE_MEMCPY:
		if (p->memcpy.flags)
			return CUDA_ERROR_INVALID_VALUE;
		return exec ? cuGraphExecMemcpyNodeSetParams(exec, node, &p->memcpy.copyParams, p->memcpy.copyCtx)
			    : cuGraphMemcpyNodeSetParams(node, &p->memcpy.copyParams);
	case CU_GRAPH_NODE_TYPE_MEMSET: {
		CUDA_MEMSET_NODE_PARAMS m = memset_of(&p->memset);
		return exec ? cuGraphExecMemsetNodeSetParams(exec, node, &m, p->memset.ctx)
			    : cuGraphMemsetNodeSetParams(node, &m);
	}
	case CU_GRAPH_NODE_TYPE_HOST: {
		CUDA_HOST_NODE_PARAMS h = {.fn = p->host.fn, .userData = p->host.userData};
		return exec ? cuGraphExecHostNodeSetParams(exec, node, &h) : cuGraphHostNodeSetParams(node, &h);
	}
	case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
		return exec ? cuGraphExecEventWaitNodeSetEvent(exec, node, p->eventWait.event)
			    : cuGraphEventWaitNodeSetEvent(node, p->eventWait.event);
	case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
		return exec ? cuGraphExecEventRecordNodeSetEvent(exec, node, p->eventRecord.event)
			    : cuGraphEventRecordNodeSetEvent(node, p->eventRecord.event);
	case CU_GRAPH_NODE_TYPE_GRAPH:
		if (exec)
			return cuGraphExecChildGraphNodeSetParams(exec, node, p->graph.graph);
		break;
	default:
		break;
	}
	return rm_unsupported("cuGraphNodeSetParams or cuGraphExecNodeSetParams of this node type");
}

RM_EXPORT CUresult CUDAAPI cuGraphNodeSetParams(CUgraphNode hNode, CUgraphNodeParams *nodeParams)
{
	return set(NULL, hNode, nodeParams);
}

RM_EXPORT CUresult CUDAAPI cuGraphExecNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
						    CUgraphNodeParams *nodeParams)
{
	return set(hGraphExec, hNode, nodeParams);
}
