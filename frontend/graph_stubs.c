/* Graph calls whose client side keeps the staging buffers of copies with host memory
 * (graph_host.c) current: memcpy nodes' parameters are staged before they travel, and
 * what makes a graph's staging buffers another's (instantiating, cloning, nesting) is
 * recorded once the daemon agrees. The daemon's side of each is generated. */
#include "client.h"

#include <string.h>

#include "api.pb-c.h"
#include "graph_cond.h"
#include "graph_host.h"

static uint64_t handle(const void *h)
{
	return (uint64_t)(uintptr_t)h;
}

RM_EXPORT CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
						       unsigned long long flags)
{
	if (!phGraphExec)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuGraphInstantiateWithFlagsReq req = REMORA__CU_GRAPH_INSTANTIATE_WITH_FLAGS__REQ__INIT;
	req.hgraph = handle(hGraph);
	req.flags = flags;
	Remora__CuGraphInstantiateWithFlagsRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphInstantiateWithFlags, &req.base,
				   &remora__cu_graph_instantiate_with_flags__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		*phGraphExec = (CUgraphExec)(uintptr_t)rep->phgraphexec;
		r = rm_graph_host_inherit(req.hgraph, rep->phgraphexec);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph)
{
	Remora__CuGraphDestroyReq req = REMORA__CU_GRAPH_DESTROY__REQ__INIT;
	req.hgraph = handle(hGraph);
	CUresult r = rm_rpc_simple(RM_OP_cuGraphDestroy, &req.base, NULL, NULL);
	if (r == CUDA_SUCCESS) {
		rm_graph_host_forget(req.hgraph);
		rm_graph_cond_forget(req.hgraph);
	}
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	Remora__CuGraphExecDestroyReq req = REMORA__CU_GRAPH_EXEC_DESTROY__REQ__INIT;
	req.hgraphexec = handle(hGraphExec);
	CUresult r = rm_rpc_simple(RM_OP_cuGraphExecDestroy, &req.base, NULL, NULL);
	if (r == CUDA_SUCCESS)
		rm_graph_host_forget(req.hgraphexec);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphClone(CUgraph *phGraphClone, CUgraph originalGraph)
{
	if (!phGraphClone)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuGraphCloneReq req = REMORA__CU_GRAPH_CLONE__REQ__INIT;
	req.originalgraph = handle(originalGraph);
	Remora__CuGraphCloneRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphClone, &req.base, &remora__cu_graph_clone__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		*phGraphClone = (CUgraph)(uintptr_t)rep->phgraphclone;
		r = rm_graph_host_inherit(req.originalgraph, rep->phgraphclone);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphAddChildGraphNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						    const CUgraphNode *dependencies, size_t numDependencies,
						    CUgraph childGraph)
{
	if (!phGraphNode || (!dependencies && numDependencies) || numDependencies > RM_MAX_GRAPH_DEPS)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuGraphAddChildGraphNodeReq req = REMORA__CU_GRAPH_ADD_CHILD_GRAPH_NODE__REQ__INIT;
	req.hgraph = handle(hGraph);
	req.dependencies.data = (uint8_t *)dependencies;
	req.dependencies.len = numDependencies * sizeof(*dependencies);
	req.numdependencies = numDependencies;
	req.childgraph = handle(childGraph);
	Remora__CuGraphAddChildGraphNodeRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphAddChildGraphNode, &req.base,
				   &remora__cu_graph_add_child_graph_node__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		*phGraphNode = (CUgraphNode)(uintptr_t)rep->phgraphnode;
		r = rm_graph_host_inherit(req.childgraph, req.hgraph);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphExecChildGraphNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
							      CUgraph childGraph)
{
	Remora__CuGraphExecChildGraphNodeSetParamsReq req = REMORA__CU_GRAPH_EXEC_CHILD_GRAPH_NODE_SET_PARAMS__REQ__INIT;
	req.hgraphexec = handle(hGraphExec);
	req.hnode = handle(hNode);
	req.childgraph = handle(childGraph);
	CUresult r = rm_rpc_simple(RM_OP_cuGraphExecChildGraphNodeSetParams, &req.base, NULL, NULL);
	return r == CUDA_SUCCESS ? rm_graph_host_inherit(req.childgraph, req.hgraphexec) : r;
}

RM_EXPORT CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode *phGraphNode, CUgraph hGraph,
						const CUgraphNode *dependencies, size_t numDependencies,
						const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	if (!phGraphNode || (!dependencies && numDependencies) || numDependencies > RM_MAX_GRAPH_DEPS || !copyParams)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_MEMCPY3D staged;
	int host = rm_graph_host_names_host(copyParams);
	CUresult r = rm_graph_host_params(copyParams, &staged, handle(hGraph));
	if (r != CUDA_SUCCESS)
		return r;
	Remora__CuGraphAddMemcpyNodeReq req = REMORA__CU_GRAPH_ADD_MEMCPY_NODE__REQ__INIT;
	req.hgraph = handle(hGraph);
	req.dependencies.data = (uint8_t *)dependencies;
	req.dependencies.len = numDependencies * sizeof(*dependencies);
	req.numdependencies = numDependencies;
	req.copyparams.data = (uint8_t *)&staged;
	req.copyparams.len = sizeof(staged);
	req.ctx = handle(ctx);
	Remora__CuGraphAddMemcpyNodeRep *rep = NULL;
	r = rm_rpc_simple(RM_OP_cuGraphAddMemcpyNode, &req.base, &remora__cu_graph_add_memcpy_node__rep__descriptor,
			  (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		*phGraphNode = (CUgraphNode)(uintptr_t)rep->phgraphnode;
		if (host)
			r = rm_graph_host_node(*phGraphNode, hGraph);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* A node's graph is known for nodes added here: one whose graph is not (captured, or of a
 * clone) cannot be given host memory. */
RM_EXPORT CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode hNode, const CUDA_MEMCPY3D *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_MEMCPY3D staged = *nodeParams;
	uint64_t graph = rm_graph_host_names_host(nodeParams) ? rm_graph_host_graph_of(hNode) : 0;
	CUresult r = CUDA_SUCCESS;
	if (rm_graph_host_names_host(nodeParams))
		r = graph ? rm_graph_host_params(nodeParams, &staged, graph)
			  : rm_unsupported("cuGraphMemcpyNodeSetParams with host memory on a node not added by cuGraphAddMemcpyNode");
	if (r != CUDA_SUCCESS)
		return r;
	Remora__CuGraphMemcpyNodeSetParamsReq req = REMORA__CU_GRAPH_MEMCPY_NODE_SET_PARAMS__REQ__INIT;
	req.hnode = handle(hNode);
	req.nodeparams.data = (uint8_t *)&staged;
	req.nodeparams.len = sizeof(staged);
	return rm_rpc_simple(RM_OP_cuGraphMemcpyNodeSetParams, &req.base, NULL, NULL);
}

RM_EXPORT CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
							  const CUDA_MEMCPY3D *copyParams, CUcontext ctx)
{
	if (!copyParams)
		return CUDA_ERROR_INVALID_VALUE;
	CUDA_MEMCPY3D staged;
	CUresult r = rm_graph_host_params(copyParams, &staged, handle(hGraphExec));
	if (r != CUDA_SUCCESS)
		return r;
	Remora__CuGraphExecMemcpyNodeSetParamsReq req = REMORA__CU_GRAPH_EXEC_MEMCPY_NODE_SET_PARAMS__REQ__INIT;
	req.hgraphexec = handle(hGraphExec);
	req.hnode = handle(hNode);
	req.copyparams.data = (uint8_t *)&staged;
	req.copyparams.len = sizeof(staged);
	req.ctx = handle(ctx);
	return rm_rpc_simple(RM_OP_cuGraphExecMemcpyNodeSetParams, &req.base, NULL, NULL);
}

/* The node's parameters as the program gave them: a staging buffer names its host range. */
RM_EXPORT CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode hNode, CUDA_MEMCPY3D *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuGraphMemcpyNodeGetParamsReq req = REMORA__CU_GRAPH_MEMCPY_NODE_GET_PARAMS__REQ__INIT;
	req.hnode = handle(hNode);
	Remora__CuGraphMemcpyNodeGetParamsRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphMemcpyNodeGetParams, &req.base,
				   &remora__cu_graph_memcpy_node_get_params__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && rep->nodeparams.len != sizeof(*nodeParams))
		r = rm_rpc_bad_reply("cuGraphMemcpyNodeGetParams: %zu bytes of parameters", rep->nodeparams.len);
	if (r == CUDA_SUCCESS && rep) {
		memcpy(nodeParams, rep->nodeparams.data, sizeof(*nodeParams));
		rm_graph_host_unstage(nodeParams);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}
