/* Conditional nodes (proto/api.spec, "Conditional nodes"). A conditional handle is a plain
 * 64-bit value the driver gives; kernels set it on the device (cudaGraphSetConditional),
 * so the client gets the driver's value, passed to kernels unchanged. The session records
 * each handle under its graph, and refuses a node naming one it did not create. A
 * conditional node's body graphs, made by the driver, become the client's graphs owned by
 * the node: usable by every graph call (each node added to them checked as any other),
 * never destroyed by the client, forgotten with the node or its graph. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "remora.pb-c.h"

CUresult rm_body_cuGraphConditionalHandleCreate(struct rm_channel *s, CUgraphConditionalHandle *pHandle_out,
						CUgraph hGraph, CUcontext ctx, unsigned int defaultLaunchValue,
						unsigned int flags)
{
	CUresult r = rm_drv_cuGraphConditionalHandleCreate(pHandle_out, hGraph, ctx ? ctx : s->cur ? s->cur->ctx : NULL,
							   defaultLaunchValue, flags);
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_GRAPH_COND, *pHandle_out, 0, (uint64_t)(uintptr_t)hGraph);
	return r;
}

/* cuGraphAddNode_v2 of a conditional node (the client sends every other kind by its typed
 * call, frontend/graph_add_node.c). */
CUresult rm_body_cuGraphAddNode_v2(struct rm_channel *s, struct rm_request *rq, const Remora__GraphConditionalNode *req,
				   Remora__GraphConditionalNodeReply *rep)
{
	void *g = NULL, *ctx = NULL;
	CUgraphNode node = NULL;
	const CUgraphNode *deps = (const CUgraphNode *)req->deps;
	CUresult r = rm_session_use(s, RM_H_GRAPH, req->graph, &g);
	if (r == CUDA_SUCCESS)
		r = rm_graph_check_nodes(s, g, deps, req->n_deps);
	if (r == CUDA_SUCCESS && req->ctx)
		r = rm_session_use(s, RM_H_CONTEXT, req->ctx, &ctx);
	if (r == CUDA_SUCCESS && (!req->size || req->size > RM_MAX_COND_BODIES))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS && !rm_session_find(s, RM_H_GRAPH_COND, req->handle, NULL)) {
		rm_session_log(s, RM_LOG_WARN, "refused conditional handle 0x%llx it did not create",
			       (unsigned long long)req->handle);
		r = CUDA_ERROR_INVALID_VALUE;
	}
	CUgraphNodeParams p;
	memset(&p, 0, sizeof(p));
	p.type = CU_GRAPH_NODE_TYPE_CONDITIONAL;
	p.conditional.handle = req->handle;
	p.conditional.type = (CUgraphConditionalNodeType)req->type;
	p.conditional.size = req->size;
	p.conditional.ctx = ctx ? ctx : s->cur ? s->cur->ctx : NULL;
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphAddNode_v2(&node, g, deps, NULL, req->n_deps, &p);
	uint64_t *bodies = NULL;
	if (r == CUDA_SUCCESS && (!p.conditional.phGraph_out || !(bodies = calloc(req->size, sizeof(*bodies))))) {
		rm_drv_cuGraphDestroyNode(node);
		r = p.conditional.phGraph_out ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_UNKNOWN;
	}
	if (r == CUDA_SUCCESS) {
		rm_session_own_memory(s, RM_H_GRAPH_NODE, (uint64_t)(uintptr_t)node, RM_NODE_OWNS_GRAPHS, req->graph);
		for (uint32_t i = 0; i < req->size; i++) {
			bodies[i] = (uint64_t)(uintptr_t)p.conditional.phGraph_out[i];
			rm_session_own(s, RM_H_GRAPH, p.conditional.phGraph_out[i], (uint64_t)(uintptr_t)node);
		}
		rep->node = (uint64_t)(uintptr_t)node;
		rep->bodies = bodies;
		rep->n_bodies = req->size;
	}
	rq->reply_mem = bodies;
	return r;
}

/* The graph a child graph node holds: the client's to use, owned by the node. */
CUresult rm_body_cuGraphChildGraphNodeGetGraph(struct rm_channel *s, CUgraphNode hNode, CUgraph *phGraph)
{
	CUresult r = rm_drv_cuGraphChildGraphNodeGetGraph(hNode, phGraph);
	if (r == CUDA_SUCCESS && *phGraph) {
		rm_session_set_size(s, RM_H_GRAPH_NODE, (uint64_t)(uintptr_t)hNode, RM_NODE_OWNS_GRAPHS);
		rm_session_own(s, RM_H_GRAPH, *phGraph, (uint64_t)(uintptr_t)hNode);
	}
	return r;
}

/* Only the client's own graphs: one a node owns goes with it, a capture's with the capture. */
CUresult rm_body_cuGraphDestroy(struct rm_channel *s, CUgraph hGraph)
{
	struct rm_handle h;
	if (!rm_session_find(s, RM_H_GRAPH, (uint64_t)(uintptr_t)hGraph, &h) || h.parent)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_drv_cuGraphDestroy(hGraph);
	if (r == CUDA_SUCCESS)
		rm_session_disown(s, RM_H_GRAPH, hGraph);
	return r;
}
