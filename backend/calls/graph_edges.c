/* A graph's structure (proto/api.spec, "Graphs"): its root nodes, a node's dependencies
 * and dependents, a graph's edges. Each travels as GraphNodes (the graph, or the node, in
 * graph; the room the caller has) and comes back as GraphNodesReply (the count the driver
 * gives, and as many nodes as there is room for; an edge is two of them, from and to).
 * The nodes named become the client's, as children of their graph. */
#include "dispatch.h"

#include <stdlib.h>

#include "remora.pb-c.h"

enum which { ROOTS, DEPENDENCIES, DEPENDENTS, EDGES };

static CUresult ask(enum which w, void *h, CUgraphNode *a, CUgraphNode *b, size_t *n)
{
	switch (w) {
	case ROOTS:
		return rm_drv_cuGraphGetRootNodes(h, a, n);
	case DEPENDENCIES:
		return rm_drv_cuGraphNodeGetDependencies(h, a, n);
	case DEPENDENTS:
		return rm_drv_cuGraphNodeGetDependentNodes(h, a, n);
	default:
		return rm_drv_cuGraphGetEdges(h, a, b, n);
	}
}

static CUresult list(enum which w, struct rm_channel *s, struct rm_request *rq, const Remora__GraphNodes *req,
		     Remora__GraphNodesReply *rep)
{
	struct rm_handle found;
	void *h = NULL;
	uint64_t graph = req->graph;
	size_t count = 0, per = w == EDGES ? 2 : 1;
	CUgraphNode *a = NULL, *b = NULL;
	uint64_t *values = NULL;
	CUresult r = req->room > RM_MAX_GRAPH_DEPS ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS && (w == DEPENDENCIES || w == DEPENDENTS)) {
		r = rm_session_use(s, RM_H_GRAPH_NODE, req->graph, &h);
		if (r == CUDA_SUCCESS && rm_session_find(s, RM_H_GRAPH_NODE, req->graph, &found))
			graph = found.parent;
	} else if (r == CUDA_SUCCESS) {
		r = rm_session_use(s, RM_H_GRAPH, req->graph, &h);
	}
	if (r == CUDA_SUCCESS)
		r = ask(w, h, NULL, NULL, &count);
	size_t give = count < req->room ? count : req->room;
	if (r == CUDA_SUCCESS && give) {
		size_t got = count;
		a = calloc(count, sizeof(*a));
		b = calloc(count, sizeof(*b));
		values = calloc(give * per, sizeof(*values));
		r = !a || !b || !values ? CUDA_ERROR_OUT_OF_MEMORY : ask(w, h, a, w == EDGES ? b : NULL, &got);
		if (r == CUDA_SUCCESS && got < give)
			give = got;
	}
	for (size_t i = 0; r == CUDA_SUCCESS && i < give; i++) {
		rm_session_own(s, RM_H_GRAPH_NODE, a[i], graph);
		values[i * per] = (uint64_t)(uintptr_t)a[i];
		if (w == EDGES) {
			rm_session_own(s, RM_H_GRAPH_NODE, b[i], graph);
			values[i * per + 1] = (uint64_t)(uintptr_t)b[i];
		}
	}
	if (r == CUDA_SUCCESS) {
		rep->count = count;
		rep->nodes = values;
		rep->n_nodes = give * per;
	}
	rq->reply_mem = values;
	free(a);
	free(b);
	return r;
}

CUresult rm_body_cuGraphGetRootNodes(struct rm_channel *s, struct rm_request *rq, const Remora__GraphNodes *req,
				     Remora__GraphNodesReply *rep)
{
	return list(ROOTS, s, rq, req, rep);
}

CUresult rm_body_cuGraphNodeGetDependencies(struct rm_channel *s, struct rm_request *rq, const Remora__GraphNodes *req,
					    Remora__GraphNodesReply *rep)
{
	return list(DEPENDENCIES, s, rq, req, rep);
}

CUresult rm_body_cuGraphNodeGetDependentNodes(struct rm_channel *s, struct rm_request *rq,
					      const Remora__GraphNodes *req, Remora__GraphNodesReply *rep)
{
	return list(DEPENDENTS, s, rq, req, rep);
}

CUresult rm_body_cuGraphGetEdges(struct rm_channel *s, struct rm_request *rq, const Remora__GraphNodes *req,
				 Remora__GraphNodesReply *rep)
{
	return list(EDGES, s, rq, req, rep);
}

CUresult rm_body_cuGraphRemoveDependencies(struct rm_channel *s, CUgraph hGraph, const CUgraphNode *from,
					   const CUgraphNode *to, size_t numDependencies)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, from, numDependencies);
	if (r == CUDA_SUCCESS)
		r = rm_graph_check_nodes(s, hGraph, to, numDependencies);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphRemoveDependencies(hGraph, from, to, numDependencies) : r;
}
