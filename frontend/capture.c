/* Stream capture and graph calls whose parameters the generator cannot carry: arrays of
 * node handles that come back (capture dependencies, a graph's nodes), kernel node
 * parameters (packed like a launch's), and calls answered here. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"
#include "graph_host.h"
#include "remora.pb-c.h"

/* What cuStreamGetCaptureInfo_v2/_v3 hand out: CUDA keeps the array valid until the next
 * call on the stream; here until the calling thread's next such call. */
static __thread CUgraphNode *capture_deps;
static __thread size_t capture_deps_cap;

/* The mode CUDA keeps per thread. The daemon's driver captures in relaxed mode (api.spec):
 * the mode is kept and exchanged, not enforced. */
static __thread CUstreamCaptureMode thread_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Captures this process began and has not ended (atomic). While there are none, every
 * stream's capture status is NONE and is answered here, with no round trip: PyTorch asks
 * before many allocations and launches. An uncertain end keeps the count up (asking the
 * daemon is never wrong). */
static int captures_open;

static int no_capture_open(void)
{
	return __atomic_load_n(&captures_open, __ATOMIC_ACQUIRE) <= 0;
}

int rm_capture_any_open(void)
{
	return !no_capture_open();
}

/* Written by hand to count the captures begun. */
RM_EXPORT CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	Remora__CuStreamBeginCaptureV2Req req = REMORA__CU_STREAM_BEGIN_CAPTURE_V2__REQ__INIT;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	req.mode = mode;
	__atomic_add_fetch(&captures_open, 1, __ATOMIC_ACQ_REL); /* before: a racing query asks */
	CUresult r = rm_rpc_simple(RM_OP_cuStreamBeginCapture_v2, &req.base, NULL, NULL);
	if (r != CUDA_SUCCESS)
		__atomic_sub_fetch(&captures_open, 1, __ATOMIC_ACQ_REL);
	return r;
}

/* As cuStreamBeginCapture_v2, into a graph of the client's (a conditional node's body);
 * only default edges travel. */
RM_EXPORT CUresult CUDAAPI cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph, const CUgraphNode *dependencies,
						       const CUgraphEdgeData *dependencyData, size_t numDependencies,
						       CUstreamCaptureMode mode)
{
	static const CUgraphEdgeData plain;
	for (size_t i = 0; dependencyData && i < numDependencies; i++)
		if (memcmp(&dependencyData[i], &plain, sizeof(plain)))
			return rm_unsupported("cuStreamBeginCaptureToGraph with edge data");
	if ((numDependencies && !dependencies) || numDependencies > RM_MAX_GRAPH_DEPS)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuStreamBeginCaptureToGraphReq req = REMORA__CU_STREAM_BEGIN_CAPTURE_TO_GRAPH__REQ__INIT;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	req.hgraph = (uint64_t)(uintptr_t)hGraph;
	req.dependencies.data = (uint8_t *)dependencies;
	req.dependencies.len = numDependencies * sizeof(*dependencies);
	req.numdependencies = numDependencies;
	req.mode = mode;
	__atomic_add_fetch(&captures_open, 1, __ATOMIC_ACQ_REL);
	CUresult r = rm_rpc_simple(RM_OP_cuStreamBeginCaptureToGraph, &req.base, NULL, NULL);
	if (r != CUDA_SUCCESS)
		__atomic_sub_fetch(&captures_open, 1, __ATOMIC_ACQ_REL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuStreamBeginCapture(CUstream hStream)
{
	return cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

RM_EXPORT CUresult CUDAAPI cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	if (!captureStatus)
		return CUDA_ERROR_INVALID_VALUE;
	if (no_capture_open()) {
		*captureStatus = CU_STREAM_CAPTURE_STATUS_NONE;
		return CUDA_SUCCESS;
	}
	Remora__CuStreamIsCapturingReq req = REMORA__CU_STREAM_IS_CAPTURING__REQ__INIT;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	Remora__CuStreamIsCapturingRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuStreamIsCapturing, &req.base, &remora__cu_stream_is_capturing__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep)
		*captureStatus = (CUstreamCaptureStatus)rep->capturestatus;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						  cuuint64_t *id_out)
{
	if (!captureStatus_out)
		return CUDA_ERROR_INVALID_VALUE;
	if (no_capture_open()) {
		*captureStatus_out = CU_STREAM_CAPTURE_STATUS_NONE;
		return CUDA_SUCCESS;
	}
	Remora__CuStreamGetCaptureInfoReq req = REMORA__CU_STREAM_GET_CAPTURE_INFO__REQ__INIT;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	Remora__CuStreamGetCaptureInfoRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuStreamGetCaptureInfo, &req.base,
				   &remora__cu_stream_get_capture_info__rep__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		*captureStatus_out = (CUstreamCaptureStatus)rep->capturestatus_out;
		if (id_out)
			*id_out = rep->id_out;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

static CUresult capture_info(uint32_t op, CUstream hStream, CUstreamCaptureStatus *status, cuuint64_t *id,
			     CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	if (no_capture_open()) {
		*status = CU_STREAM_CAPTURE_STATUS_NONE;
		if (graph)
			*graph = NULL;
		if (deps)
			*deps = NULL;
		if (ndeps)
			*ndeps = 0;
		return CUDA_SUCCESS;
	}
	Remora__CaptureInfo req = REMORA__CAPTURE_INFO__INIT;
	req.stream = (uint64_t)(uintptr_t)hStream;
	Remora__CaptureInfoReply *rep = NULL;
	CUresult r = rm_rpc_simple(op, &req.base, &remora__capture_info_reply__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && rep->n_deps > RM_MAX_GRAPH_DEPS)
		r = rm_rpc_bad_reply("%s: %zu capture dependencies, more than %d", rm_op_names[op], rep->n_deps,
				     RM_MAX_GRAPH_DEPS);
	if (r == CUDA_SUCCESS && rep && rep->n_deps > capture_deps_cap) {
		CUgraphNode *grown = realloc(capture_deps, rep->n_deps * sizeof(*grown));
		if (!grown)
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else
			capture_deps = grown, capture_deps_cap = rep->n_deps;
	}
	if (r == CUDA_SUCCESS && rep) {
		for (size_t i = 0; i < rep->n_deps; i++)
			capture_deps[i] = (CUgraphNode)(uintptr_t)rep->deps[i];
		*status = (CUstreamCaptureStatus)rep->status;
		if (id && rep->status != CU_STREAM_CAPTURE_STATUS_NONE)
			*id = rep->id;
		if (graph)
			*graph = (CUgraph)(uintptr_t)rep->graph;
		if (deps)
			*deps = rep->n_deps ? capture_deps : NULL;
		if (ndeps)
			*ndeps = rep->n_deps;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out, size_t *numDependencies_out)
{
	return capture_info(RM_OP_cuStreamGetCaptureInfo_v2, hStream, captureStatus_out, id_out, graph_out,
			    dependencies_out, numDependencies_out);
}

RM_EXPORT CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream hStream, CUstreamCaptureStatus *captureStatus_out,
						     cuuint64_t *id_out, CUgraph *graph_out,
						     const CUgraphNode **dependencies_out,
						     const CUgraphEdgeData **edgeData_out, size_t *numDependencies_out)
{
	if (edgeData_out)
		*edgeData_out = NULL; /* every edge is a default one */
	return capture_info(RM_OP_cuStreamGetCaptureInfo_v3, hStream, captureStatus_out, id_out, graph_out,
			    dependencies_out, numDependencies_out);
}

/* Only default edges travel: the daemon's part is generated (proto/api.spec). */
RM_EXPORT CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream hStream, CUgraphNode *dependencies,
								const CUgraphEdgeData *dependencyData,
								size_t numDependencies, unsigned int flags)
{
	static const CUgraphEdgeData plain;
	for (size_t i = 0; dependencyData && i < numDependencies; i++)
		if (memcmp(&dependencyData[i], &plain, sizeof(plain)))
			return rm_unsupported("cuStreamUpdateCaptureDependencies_v2 with edge data");
	if ((numDependencies && !dependencies) || numDependencies > RM_MAX_GRAPH_DEPS)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuStreamUpdateCaptureDependenciesV2Req req = REMORA__CU_STREAM_UPDATE_CAPTURE_DEPENDENCIES_V2__REQ__INIT;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	req.dependencies.data = (uint8_t *)dependencies;
	req.dependencies.len = numDependencies * sizeof(*dependencies);
	req.numdependencies = numDependencies;
	req.flags = flags;
	return rm_rpc_simple(RM_OP_cuStreamUpdateCaptureDependencies_v2, &req.base, NULL, NULL);
}

RM_EXPORT CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = thread_capture_mode;
	thread_capture_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec *phGraphExec, CUgraph hGraph,
							CUDA_GRAPH_INSTANTIATE_PARAMS *params)
{
	if (!params)
		return CUDA_ERROR_INVALID_VALUE;
	/* The driver refuses the upload flag in cuGraphInstantiateWithFlags: the upload is ours. */
	CUresult r = cuGraphInstantiateWithFlags(phGraphExec, hGraph, params->flags & ~CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD);
	if (r == CUDA_SUCCESS && (params->flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD))
		r = cuGraphUpload(*phGraphExec, params->hUploadStream);
	params->hErrNode_out = NULL;
	params->result_out = r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphGetNodes(CUgraph hGraph, CUgraphNode *nodes, size_t *numNodes)
{
	if (!numNodes || (nodes && *numNodes > RM_MAX_GRAPH_DEPS))
		return CUDA_ERROR_INVALID_VALUE;
	Remora__GraphNodes req = REMORA__GRAPH_NODES__INIT;
	req.graph = (uint64_t)(uintptr_t)hGraph;
	req.room = nodes ? *numNodes : 0;
	Remora__GraphNodesReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphGetNodes, &req.base, &remora__graph_nodes_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && (rep->n_nodes > req.room || rep->n_nodes > rep->count))
		r = rm_rpc_bad_reply("cuGraphGetNodes: %zu nodes for room of %llu", rep->n_nodes,
				     (unsigned long long)req.room);
	if (r == CUDA_SUCCESS && rep) {
		for (size_t i = 0; nodes && i < req.room; i++)
			nodes[i] = i < rep->n_nodes ? (CUgraphNode)(uintptr_t)rep->nodes[i] : NULL;
		*numNodes = rep->count;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* Kernel node parameters travel as a launch does: the function, its shape, and the
 * arguments packed at their offsets (launch.c). */
static CUresult kernel_node(uint32_t op, Remora__GraphKernelNode *req, const CUDA_KERNEL_NODE_PARAMS *p,
			    const ProtobufCMessageDescriptor *rep_desc, ProtobufCMessage **rep)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	if (!p->func)
		return rm_unsupported("a kernel node given as a CUkernel");
	Remora__LaunchKernel launch = REMORA__LAUNCH_KERNEL__INIT;
	launch.func = (uint64_t)(uintptr_t)p->func;
	launch.grid_x = p->gridDimX;
	launch.grid_y = p->gridDimY;
	launch.grid_z = p->gridDimZ;
	launch.block_x = p->blockDimX;
	launch.block_y = p->blockDimY;
	launch.block_z = p->blockDimZ;
	launch.shared_mem = p->sharedMemBytes;
	uint8_t packed[4096], *heap;
	CUresult r = rm_pack_kernel_params(p->func, p->kernelParams, p->extra, &launch, packed, sizeof(packed), &heap);
	req->launch = &launch;
	if (r == CUDA_SUCCESS)
		r = rm_rpc_simple(op, &req->base, rep_desc, rep);
	free(heap);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
						   const CUgraphNode *dependencies, size_t numDependencies,
						   const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	if (!phGraphNode || (numDependencies && !dependencies) || numDependencies > RM_MAX_GRAPH_DEPS)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__GraphKernelNode req = REMORA__GRAPH_KERNEL_NODE__INIT;
	req.graph = (uint64_t)(uintptr_t)hGraph;
	req.n_deps = numDependencies;
	req.deps = numDependencies ? calloc(numDependencies, sizeof(*req.deps)) : NULL;
	if (numDependencies && !req.deps)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < numDependencies; i++)
		req.deps[i] = (uint64_t)(uintptr_t)dependencies[i];
	Remora__GraphNodeReply *rep = NULL;
	CUresult r = kernel_node(RM_OP_cuGraphAddKernelNode_v2, &req, nodeParams, &remora__graph_node_reply__descriptor,
				 (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep)
		*phGraphNode = (CUgraphNode)(uintptr_t)rep->node;
	rm_rpc_free(rep ? &rep->base : NULL);
	free(req.deps);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec hGraphExec, CUgraphNode hNode,
							     const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	Remora__GraphKernelNode req = REMORA__GRAPH_KERNEL_NODE__INIT;
	req.exec = (uint64_t)(uintptr_t)hGraphExec;
	req.node = (uint64_t)(uintptr_t)hNode;
	return kernel_node(RM_OP_cuGraphExecKernelNodeSetParams_v2, &req, nodeParams, NULL, NULL);
}

RM_EXPORT CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	Remora__GraphKernelNode req = REMORA__GRAPH_KERNEL_NODE__INIT;
	req.node = (uint64_t)(uintptr_t)hNode;
	return kernel_node(RM_OP_cuGraphKernelNodeSetParams_v2, &req, nodeParams, NULL, NULL);
}

/* CUDA 12.3's form, with data for each edge: only default (all-zero) edges travel. */
RM_EXPORT CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph hGraph, const CUgraphNode *from, const CUgraphNode *to,
						     const CUgraphEdgeData *edgeData, size_t numDependencies)
{
	static const CUgraphEdgeData plain;
	for (size_t i = 0; edgeData && i < numDependencies; i++)
		if (memcmp(&edgeData[i], &plain, sizeof(plain)))
			return rm_unsupported("cuGraphAddDependencies_v2 with edge data");
	return cuGraphAddDependencies(hGraph, from, to, numDependencies);
}

/* Written by hand for CUDA's answer on failure: an invalidated or unjoined capture gives
 * a NULL graph. phGraph may be NULL (cudaStreamEndCapture of a capture into a graph). */
RM_EXPORT CUresult CUDAAPI cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	CUgraph unused;
	if (!phGraph)
		phGraph = &unused;
	Remora__CuStreamEndCaptureReq req = REMORA__CU_STREAM_END_CAPTURE__REQ__INIT;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	Remora__CuStreamEndCaptureRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuStreamEndCapture, &req.base, &remora__cu_stream_end_capture__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r != CUDA_ERROR_DEVICE_UNAVAILABLE)
		*phGraph = r == CUDA_SUCCESS && rep ? (CUgraph)(uintptr_t)rep->phgraph : NULL;
	if (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED)
		if (__atomic_sub_fetch(&captures_open, 1, __ATOMIC_ACQ_REL) < 0) /* ended one begun elsewhere */
			__atomic_store_n(&captures_open, 0, __ATOMIC_RELEASE);
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* Written by hand because the result says why an update failed (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE). */
RM_EXPORT CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec hGraphExec, CUgraph hGraph,
						CUgraphExecUpdateResultInfo *resultInfo)
{
	if (!resultInfo)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuGraphExecUpdateV2Req req = REMORA__CU_GRAPH_EXEC_UPDATE_V2__REQ__INIT;
	req.hgraphexec = (uint64_t)(uintptr_t)hGraphExec;
	req.hgraph = (uint64_t)(uintptr_t)hGraph;
	Remora__CuGraphExecUpdateV2Rep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphExecUpdate_v2, &req.base, &remora__cu_graph_exec_update_v2__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	int answered = r == CUDA_SUCCESS || r == CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
	if (answered && rep && rep->resultinfo.len != sizeof(*resultInfo))
		r = rm_rpc_bad_reply("cuGraphExecUpdate_v2: the reply's resultinfo is %zu bytes, not %zu",
				     rep->resultinfo.len, sizeof(*resultInfo));
	else if (answered && rep)
		memcpy(resultInfo, rep->resultinfo.data, sizeof(*resultInfo));
	if (r == CUDA_SUCCESS)
		r = rm_graph_host_inherit(req.hgraph, req.hgraphexec);
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* As a kernel launch: mapped and managed host memory the graph's kernels may read goes up
 * first, on the launch's stream; so do the host sources of its copies, and its host
 * destinations come down at a synchronization once it is done (graph_host.c). */
RM_EXPORT CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraph, CUstream hStream)
{
	Remora__CuGraphLaunchReq req = REMORA__CU_GRAPH_LAUNCH__REQ__INIT;
	req.hgraph = (uint64_t)(uintptr_t)hGraph;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	CUresult r = rm_mapped_before_launch(hStream);
	if (r == CUDA_SUCCESS)
		r = rm_graph_host_before_launch(hGraph, hStream);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_rpc_ordered(RM_OP_cuGraphLaunch, &req.base, req.hstream, 0);
	return rm_graph_host_after_launch(hGraph, hStream, r);
}

/* The arrays cuGraphKernelNodeGetParams_v2 gave, one a node (CUDA keeps its own for the
 * node's life): each replaced by the node's next answer, kept for the process's life. */
struct node_params {
	CUgraphNode node;
	void *block;
	struct node_params *next;
};
static pthread_mutex_t params_lock = PTHREAD_MUTEX_INITIALIZER;
static struct node_params *given;

static CUresult keep_params(CUgraphNode node, void *block)
{
	pthread_mutex_lock(&params_lock);
	struct node_params *g = given;
	while (g && g->node != node)
		g = g->next;
	if (!g && (g = calloc(1, sizeof(*g)))) {
		g->node = node;
		g->next = given;
		given = g;
	}
	if (g) {
		free(g->block);
		g->block = block;
	}
	pthread_mutex_unlock(&params_lock);
	return g ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

RM_EXPORT CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__GraphKernelNode req = REMORA__GRAPH_KERNEL_NODE__INIT;
	req.node = (uint64_t)(uintptr_t)hNode;
	Remora__GraphKernelNodeParams *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphKernelNodeGetParams_v2, &req.base,
				   &remora__graph_kernel_node_params__descriptor, (ProtobufCMessage **)&rep);
	void **params = NULL, *block = NULL;
	if (r == CUDA_SUCCESS && (!rep || !rep->launch))
		r = rm_rpc_bad_reply("cuGraphKernelNodeGetParams_v2: no reply");
	Remora__LaunchKernel *l = r == CUDA_SUCCESS ? rep->launch : NULL;
	if (r == CUDA_SUCCESS)
		r = rm_unpack_kernel_params((CUfunction)(uintptr_t)l->func, l->params.data, l->params.len, &params, &block);
	if (r == CUDA_SUCCESS)
		r = keep_params(hNode, block);
	if (r == CUDA_SUCCESS) {
		memset(nodeParams, 0, sizeof(*nodeParams));
		nodeParams->func = (CUfunction)(uintptr_t)l->func;
		nodeParams->kern = (CUkernel)(uintptr_t)rep->kern;
		nodeParams->gridDimX = l->grid_x;
		nodeParams->gridDimY = l->grid_y;
		nodeParams->gridDimZ = l->grid_z;
		nodeParams->blockDimX = l->block_x;
		nodeParams->blockDimY = l->block_y;
		nodeParams->blockDimZ = l->block_z;
		nodeParams->sharedMemBytes = l->shared_mem;
		nodeParams->kernelParams = params;
		nodeParams->ctx = rm_ctx_current();
	} else {
		free(block);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}
