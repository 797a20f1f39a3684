/* Graph memory nodes (proto/api.spec, "Memory nodes"). An allocation node reserves its
 * address when it is added, or when a capture records cuMemAllocAsync: that range becomes
 * graph memory the client owns (RM_H_GRAPH_MEMORY), charged to its quota like cuMemAlloc's
 * until the client first frees it outside the graph, or a free node of it is added; it
 * stays usable and freeable after each launch (the driver refuses a free of an address not
 * allocated now) for the session's life. The pool properties name the
 * client's devices, mapped to the host's; nothing shareable (no handle types). */
#include "dispatch.h"

#include <string.h>

#include "remora.pb-c.h"

#define MAX_ACCESS 64 /* access descriptors: one a GPU, and no host has more GPUs */

/* A location of the client's, mapped to the host's device. */
static CUresult device_location(struct rm_channel *s, CUmemLocation *loc)
{
	CUdevice dev;
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return rm_unsupported_use("a graph memory node outside device memory");
	CUresult r = rm_session_device(s, loc->id, &dev);
	if (r == CUDA_SUCCESS)
		loc->id = dev;
	return r;
}

void rm_graph_memory_own(struct rm_channel *s, CUdeviceptr dptr, size_t bytesize)
{
	struct rm_handle h;
	if (rm_session_take(s, RM_H_GRAPH_MEMORY, dptr, &h) && h.parent) /* a capture reused the address */
		rm_session_uncharge(s, h.size);
	rm_session_own_memory(s, RM_H_GRAPH_MEMORY, dptr, bytesize, 1);
}

CUresult rm_graph_memory_free(struct rm_channel *s, CUdeviceptr dptr, CUstream st)
{
	struct rm_handle h;
	if (!rm_session_find(s, RM_H_GRAPH_MEMORY, dptr, &h) || h.value != dptr)
		return CUDA_ERROR_NOT_FOUND;
	CUresult r = st ? rm_drv_cuMemFreeAsync(dptr, st) : rm_session_free_memory(s, dptr);
	if (r == CUDA_SUCCESS && h.parent && rm_session_take(s, RM_H_GRAPH_MEMORY, dptr, &h)) {
		rm_session_uncharge(s, h.size);
		rm_session_own_memory(s, RM_H_GRAPH_MEMORY, dptr, h.size, 0);
	}
	return r;
}

CUresult rm_body_cuGraphAddMemAllocNode(struct rm_channel *s, struct rm_request *rq, const Remora__GraphMemAllocNode *req,
					Remora__GraphMemAllocNodeReply *rep)
{
	(void)rq;
	void *g = NULL;
	CUDA_MEM_ALLOC_NODE_PARAMS p;
	CUmemAccessDesc access[MAX_ACCESS];
	size_t naccess = req->access.len / sizeof(CUmemAccessDesc);
	CUresult r = req->params.len != sizeof(p) || req->access.len % sizeof(CUmemAccessDesc) ||
			     naccess > MAX_ACCESS
		     ? CUDA_ERROR_INVALID_VALUE
		     : rm_session_use(s, RM_H_GRAPH, req->graph, &g);
	if (r == CUDA_SUCCESS)
		r = rm_graph_check_nodes(s, g, (const CUgraphNode *)req->deps, req->n_deps);
	if (r == CUDA_SUCCESS) {
		memcpy(&p, req->params.data, sizeof(p));
		if (naccess)
			memcpy(access, req->access.data, req->access.len);
		p.accessDescs = naccess ? access : NULL;
		p.accessDescCount = naccess;
		p.poolProps.win32SecurityAttributes = NULL;
		p.dptr = 0;
		if (p.poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE)
			r = rm_unsupported_use("a graph memory node with shareable handles");
	}
	if (r == CUDA_SUCCESS)
		r = device_location(s, &p.poolProps.location);
	for (size_t i = 0; r == CUDA_SUCCESS && i < naccess; i++)
		r = device_location(s, &access[i].location);
	if (r == CUDA_SUCCESS)
		r = rm_session_charge(s, p.bytesize);
	if (r != CUDA_SUCCESS)
		return r;
	CUgraphNode node = NULL;
	r = rm_drv_cuGraphAddMemAllocNode(&node, g, (const CUgraphNode *)req->deps, req->n_deps, &p);
	if (r != CUDA_SUCCESS) {
		rm_session_uncharge(s, p.bytesize);
		return r;
	}
	rm_session_own(s, RM_H_GRAPH_NODE, node, req->graph);
	rm_graph_memory_own(s, p.dptr, p.bytesize);
	rep->node = (uint64_t)(uintptr_t)node;
	rep->dptr = p.dptr;
	return CUDA_SUCCESS;
}

/* Only a graph allocation of the client's, from its base. Once a graph frees it at each
 * launch, it is not charged: the range stays usable for the graph's other nodes. */
CUresult rm_body_cuGraphAddMemFreeNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
				       const CUgraphNode *dependencies, size_t numDependencies, CUdeviceptr dptr)
{
	struct rm_handle h;
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	if (r == CUDA_SUCCESS && !rm_session_find(s, RM_H_GRAPH_MEMORY, dptr, &h))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphAddMemFreeNode(phGraphNode, hGraph, dependencies, numDependencies, dptr);
	if (r == CUDA_SUCCESS && rm_session_take(s, RM_H_GRAPH_MEMORY, dptr, &h)) {
		if (h.parent)
			rm_session_uncharge(s, h.size);
		rm_session_own_memory(s, RM_H_GRAPH_MEMORY, h.value, h.size, 0);
	}
	return r;
}

/* The pool's location is the client's device; the access descriptors are the driver's
 * memory, which the client cannot read: a node with some is not answered. */
CUresult rm_body_cuGraphMemAllocNodeGetParams(struct rm_channel *s, CUgraphNode hNode,
					      CUDA_MEM_ALLOC_NODE_PARAMS *params_out)
{
	CUresult r = rm_drv_cuGraphMemAllocNodeGetParams(hNode, params_out);
	if (r == CUDA_SUCCESS && params_out->accessDescCount)
		r = rm_unsupported_use("cuGraphMemAllocNodeGetParams of a node with access descriptors");
	if (r == CUDA_SUCCESS)
		r = rm_session_device_out(s, params_out->poolProps.location.id, &params_out->poolProps.location.id);
	if (r == CUDA_SUCCESS)
		params_out->accessDescs = NULL;
	return r;
}
