/* Graphs (proto/api.spec, "Graphs"): graphs and executable graphs are the client's
 * handles, owned without a parent (an executable graph or a clone outlives the graph it
 * came from); nodes are children of their graph, and go with it. Every node handle,
 * function and device range a client names is checked against what it owns, and a
 * kernel node's packed parameters against the function's own layout. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "kernel_watch.h"
#include "remora.pb-c.h"
#include "variable_alias.h"

#define MAX_PARAM_BYTES 32764 /* CUDA's limit on the bytes of a kernel's parameters */

CUresult rm_graph_check_nodes(struct rm_channel *s, CUgraph g, const CUgraphNode *nodes, size_t n)
{
	if (n > RM_MAX_GRAPH_DEPS)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n; i++) {
		struct rm_handle h;
		if (!rm_session_find(s, RM_H_GRAPH_NODE, (uint64_t)(uintptr_t)nodes[i], &h) ||
		    h.parent != (uint64_t)(uintptr_t)g)
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult rm_graph_check_memset(struct rm_channel *s, const CUDA_MEMSET_NODE_PARAMS *p)
{
	uint64_t row, span;
	if ((p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->height)
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow((uint64_t)p->width, (uint64_t)p->elementSize, &row))
		return CUDA_ERROR_INVALID_VALUE;
	if (p->height > 1 && p->pitch < row)
		return CUDA_ERROR_INVALID_VALUE;
	if (__builtin_mul_overflow((uint64_t)(p->height - 1), (uint64_t)p->pitch, &span) ||
	    __builtin_add_overflow(span, row, &span))
		return CUDA_ERROR_INVALID_VALUE;
	return rm_session_check_range(s, p->dst, span);
}

/* An executable graph is the client's until it destroys it, whatever becomes of its graph. */
CUresult rm_body_cuGraphInstantiateWithFlags(struct rm_channel *s, CUgraphExec *phGraphExec, CUgraph hGraph,
					     unsigned long long flags)
{
	CUresult r = rm_drv_cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);
	if (r == CUDA_SUCCESS)
		rm_session_own(s, RM_H_GRAPH_EXEC, *phGraphExec, 0);
	return r;
}

/* Its kernels held to kernel_time_limit as launches are (kernel_watch.h). */
CUresult rm_body_cuGraphLaunch(struct rm_channel *s, CUgraphExec hGraph, CUstream hStream)
{
	CUresult r = rm_drv_cuGraphLaunch(hGraph, hStream);
	if (r == CUDA_SUCCESS)
		rm_kernel_watch_launched(s, hStream);
	return r;
}

CUresult rm_body_cuGraphClone(struct rm_channel *s, CUgraph *phGraphClone, CUgraph originalGraph)
{
	CUresult r = rm_drv_cuGraphClone(phGraphClone, originalGraph);
	if (r == CUDA_SUCCESS)
		rm_session_own(s, RM_H_GRAPH, *phGraphClone, 0);
	return r;
}

CUresult rm_body_cuGraphAddEmptyNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
				     const CUgraphNode *dependencies, size_t numDependencies)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphAddEmptyNode(phGraphNode, hGraph, dependencies, numDependencies) : r;
}

CUresult rm_body_cuGraphAddMemsetNode(struct rm_channel *s, CUgraphNode *phGraphNode, CUgraph hGraph,
				      const CUgraphNode *dependencies, size_t numDependencies,
				      const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	if (r == CUDA_SUCCESS)
		r = rm_graph_check_memset(s, memsetParams);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphAddMemsetNode(phGraphNode, hGraph, dependencies, numDependencies,
								memsetParams, ctx ? ctx : s->cur ? s->cur->ctx : NULL)
				 : r;
}

CUresult rm_body_cuGraphExecMemsetNodeSetParams(struct rm_channel *s, CUgraphExec hGraphExec, CUgraphNode hNode,
						const CUDA_MEMSET_NODE_PARAMS *memsetParams, CUcontext ctx)
{
	CUresult r = rm_graph_check_memset(s, memsetParams);
	return r == CUDA_SUCCESS ? rm_drv_cuGraphExecMemsetNodeSetParams(hGraphExec, hNode, memsetParams,
									  ctx ? ctx : s->cur ? s->cur->ctx : NULL)
				 : r;
}

/* The nodes the result names are of hGraph, which the client owns: they become its. */
CUresult rm_body_cuGraphExecUpdate_v2(struct rm_channel *s, CUgraphExec hGraphExec, CUgraph hGraph,
				      CUgraphExecUpdateResultInfo *resultInfo)
{
	CUresult r = rm_drv_cuGraphExecUpdate_v2(hGraphExec, hGraph, resultInfo);
	if (resultInfo->errorNode)
		rm_session_own(s, RM_H_GRAPH_NODE, resultInfo->errorNode, (uint64_t)(uintptr_t)hGraph);
	if (resultInfo->errorFromNode)
		rm_session_own(s, RM_H_GRAPH_NODE, resultInfo->errorFromNode, (uint64_t)(uintptr_t)hGraph);
	return r;
}

CUresult rm_body_cuGraphGetNodes(struct rm_channel *s, struct rm_request *rq, const Remora__GraphNodes *req,
				 Remora__GraphNodesReply *rep)
{
	void *g = NULL;
	size_t count = 0;
	CUgraphNode *nodes = NULL;
	uint64_t *values = NULL;
	CUresult r = req->room > RM_MAX_GRAPH_DEPS ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS)
		r = rm_session_use(s, RM_H_GRAPH, req->graph, &g);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphGetNodes(g, NULL, &count);
	size_t give = count < req->room ? count : req->room;
	if (r == CUDA_SUCCESS && give) {
		nodes = calloc(count, sizeof(*nodes));
		values = calloc(give, sizeof(*values));
		size_t got = count;
		r = !nodes || !values ? CUDA_ERROR_OUT_OF_MEMORY : rm_drv_cuGraphGetNodes(g, nodes, &got);
		if (r == CUDA_SUCCESS && got < give)
			give = got;
	}
	for (size_t i = 0; r == CUDA_SUCCESS && i < give; i++) {
		rm_session_own(s, RM_H_GRAPH_NODE, nodes[i], req->graph);
		values[i] = (uint64_t)(uintptr_t)nodes[i];
	}
	if (r == CUDA_SUCCESS) {
		rep->count = count;
		rep->nodes = values;
		rep->n_nodes = give;
	}
	rq->reply_mem = values;
	free(nodes);
	return r;
}

/* The bytes f's parameters span, from the driver's layout of it. */
static CUresult param_bytes(CUfunction f, size_t *out)
{
	size_t end = 0;
	for (size_t i = 0;; i++) {
		size_t off = 0, len = 0;
		CUresult r = rm_drv_cuFuncGetParamInfo(f, i, &off, &len);
		if (r == CUDA_ERROR_INVALID_VALUE)
			break;
		if (r != CUDA_SUCCESS)
			return r;
		if (off + len > end)
			end = off + len;
	}
	*out = end;
	return CUDA_SUCCESS;
}

/* A kernel node's parameters from the launch message: the function the client's, its
 * packed arguments exactly as long as the function's parameters. *size must outlive p. */
static CUresult kernel_params(struct rm_channel *s, const Remora__LaunchKernel *l, CUDA_KERNEL_NODE_PARAMS *p,
			      void **extra, size_t *size)
{
	void *f = NULL;
	size_t want = 0;
	CUresult r = l ? rm_session_use(s, RM_H_FUNCTION, l->func, &f) : CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		r = param_bytes(f, &want);
	if (r == CUDA_SUCCESS && (l->params.len != want || want > MAX_PARAM_BYTES))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r != CUDA_SUCCESS)
		return r;
	*size = l->params.len;
	rm_session_real_params(s, l->params.data, l->params.len); /* a moved-in client's variables */
	extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
	extra[1] = l->params.data;
	extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
	extra[3] = size;
	extra[4] = CU_LAUNCH_PARAM_END;
	*p = (CUDA_KERNEL_NODE_PARAMS){.func = f, .gridDimX = l->grid_x, .gridDimY = l->grid_y,
				       .gridDimZ = l->grid_z, .blockDimX = l->block_x, .blockDimY = l->block_y,
				       .blockDimZ = l->block_z, .sharedMemBytes = l->shared_mem,
				       .extra = *size ? extra : NULL};
	return CUDA_SUCCESS;
}

CUresult rm_body_cuGraphAddKernelNode_v2(struct rm_channel *s, struct rm_request *rq, const Remora__GraphKernelNode *req,
					 Remora__GraphNodeReply *rep)
{
	(void)rq;
	void *g = NULL, *extra[5];
	size_t size = 0;
	CUDA_KERNEL_NODE_PARAMS p;
	CUgraphNode node = NULL;
	CUresult r = rm_session_use(s, RM_H_GRAPH, req->graph, &g);
	if (r == CUDA_SUCCESS)
		r = rm_graph_check_nodes(s, g, (const CUgraphNode *)req->deps, req->n_deps);
	if (r == CUDA_SUCCESS)
		r = kernel_params(s, req->launch, &p, extra, &size);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphAddKernelNode_v2(&node, g, (const CUgraphNode *)req->deps, req->n_deps, &p);
	if (r == CUDA_SUCCESS) {
		rm_session_own(s, RM_H_GRAPH_NODE, node, req->graph);
		rep->node = (uint64_t)(uintptr_t)node;
	}
	return r;
}

CUresult rm_body_cuGraphExecKernelNodeSetParams_v2(struct rm_channel *s, struct rm_request *rq,
						   const Remora__GraphKernelNode *req)
{
	(void)rq;
	void *exec = NULL, *node = NULL, *extra[5];
	size_t size = 0;
	CUDA_KERNEL_NODE_PARAMS p;
	CUresult r = rm_session_use(s, RM_H_GRAPH_EXEC, req->exec, &exec);
	if (r == CUDA_SUCCESS)
		r = rm_session_use(s, RM_H_GRAPH_NODE, req->node, &node);
	if (r == CUDA_SUCCESS)
		r = kernel_params(s, req->launch, &p, extra, &size);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphExecKernelNodeSetParams_v2(exec, node, &p);
	return r;
}

CUresult rm_body_cuGraphKernelNodeSetParams_v2(struct rm_channel *s, struct rm_request *rq,
					       const Remora__GraphKernelNode *req)
{
	(void)rq;
	void *node = NULL, *extra[5];
	size_t size = 0;
	CUDA_KERNEL_NODE_PARAMS p;
	CUresult r = rm_session_use(s, RM_H_GRAPH_NODE, req->node, &node);
	if (r == CUDA_SUCCESS)
		r = kernel_params(s, req->launch, &p, extra, &size);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphKernelNodeSetParams_v2(node, &p);
	return r;
}

/* The node found is of the clone, which the client owns. */
CUresult rm_body_cuGraphNodeFindInClone(struct rm_channel *s, CUgraphNode *phNode, CUgraphNode hOriginalNode,
					CUgraph hClonedGraph)
{
	CUresult r = rm_drv_cuGraphNodeFindInClone(phNode, hOriginalNode, hClonedGraph);
	if (r == CUDA_SUCCESS)
		rm_session_own(s, RM_H_GRAPH_NODE, *phNode, (uint64_t)(uintptr_t)hClonedGraph);
	return r;
}

struct kernel_of {
	CUfunction f;
	uint64_t kern;
};

static int kernel_of_function(const struct rm_handle *h, void *arg)
{
	struct kernel_of *k = arg;
	CUfunction f = NULL;
	if (rm_drv_cuKernelGetFunction(&f, (CUkernel)(uintptr_t)h->value) == CUDA_SUCCESS && f == k->f)
		k->kern = h->value;
	return k->kern != 0;
}

/* A kernel node's launch as the client gave it: its arguments packed by the function's
 * layout, from the driver's array of them (or its buffer, for a node given one). The
 * kernel of the client's whose function it is (a CUkernel, cudart's, the daemon turned
 * into its function) is given as kern, and as func where the client does not own the
 * function itself. */
CUresult rm_body_cuGraphKernelNodeGetParams_v2(struct rm_channel *s, struct rm_request *rq,
					       const Remora__GraphKernelNode *req, Remora__GraphKernelNodeParams *rep)
{
	void *node = NULL;
	size_t want = 0;
	CUDA_KERNEL_NODE_PARAMS p;
	memset(&p, 0, sizeof(p));
	CUresult r = rm_session_use(s, RM_H_GRAPH_NODE, req->node, &node);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphKernelNodeGetParams_v2(node, &p);
	if (r == CUDA_SUCCESS && !p.func && p.kern)
		r = rm_drv_cuKernelGetFunction(&p.func, p.kern);
	if (r == CUDA_SUCCESS)
		r = param_bytes(p.func, &want);
	/* One allocation, the reply's: the launch message, then its argument bytes. */
	Remora__LaunchKernel *l = r == CUDA_SUCCESS ? calloc(1, sizeof(*l) + want + 1) : NULL;
	uint8_t *buf = l ? (uint8_t *)(l + 1) : NULL;
	if (r == CUDA_SUCCESS && !l)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; r == CUDA_SUCCESS && p.kernelParams && i < RM_MAX_KERNEL_PARAMS; i++) {
		size_t off = 0, len = 0;
		if (rm_drv_cuFuncGetParamInfo(p.func, i, &off, &len) != CUDA_SUCCESS)
			break;
		if (off + len <= want && p.kernelParams[i])
			memcpy(buf + off, p.kernelParams[i], len);
	}
	const void *from = NULL;
	size_t have = 0;
	for (size_t i = 0; r == CUDA_SUCCESS && !p.kernelParams && p.extra && p.extra[i] != CU_LAUNCH_PARAM_END &&
			   i < 8; i += 2) {
		if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			from = p.extra[i + 1];
		else if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && p.extra[i + 1])
			have = *(const size_t *)p.extra[i + 1];
	}
	if (from)
		memcpy(buf, from, have < want ? have : want);
	if (r == CUDA_SUCCESS) /* a moved variable's address as the client holds it */
		rm_session_client_params(s, buf, want);
	struct kernel_of k = {.f = p.func, .kern = (uint64_t)(uintptr_t)p.kern};
	int owned = r == CUDA_SUCCESS && rm_session_find(s, RM_H_FUNCTION, (uint64_t)(uintptr_t)p.func, NULL);
	if (r == CUDA_SUCCESS && !k.kern)
		rm_session_each(s, RM_H_KERNEL, kernel_of_function, &k);
	if (r == CUDA_SUCCESS) {
		remora__launch_kernel__init(l);
		l->func = owned || !k.kern ? (uint64_t)(uintptr_t)p.func : k.kern;
		l->grid_x = p.gridDimX, l->grid_y = p.gridDimY, l->grid_z = p.gridDimZ;
		l->block_x = p.blockDimX, l->block_y = p.blockDimY, l->block_z = p.blockDimZ;
		l->shared_mem = p.sharedMemBytes;
		l->params.data = buf;
		l->params.len = want;
		rep->launch = l;
		rep->kern = k.kern;
	}
	rq->reply_mem = l;
	return r;
}

/* An attribute naming an event would need the event checked and translated: refused, as
 * cuLaunchKernelEx's are. */
CUresult rm_body_cuGraphKernelNodeSetAttribute(struct rm_channel *s, CUgraphNode hNode, CUkernelNodeAttrID attr,
					       const CUkernelNodeAttrValue *value)
{
	(void)s;
	if (attr == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT || attr == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT)
		return rm_unsupported_use("cuGraphKernelNodeSetAttribute with an event attribute");
	return rm_drv_cuGraphKernelNodeSetAttribute(hNode, attr, value);
}
