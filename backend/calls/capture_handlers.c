/* Stream capture on the daemon's real streams (proto/api.spec, "Stream capture").
 *
 * The driver captures: what the client issues to a capturing stream reaches the driver
 * as it would natively and becomes the capture's graph. Four things are the daemon's:
 *  - the mode: the driver is always asked for CU_STREAM_CAPTURE_MODE_RELAXED, since a
 *    GLOBAL capture would forbid "unsafe" calls of every thread of the worker, that is
 *    of other clients; the mode the client asked for is not enforced (docs/status.md);
 *  - its own work: while the client has a capture under way in a context (captures > 0),
 *    rm_session_stream asks the driver whether a stream captures before putting ordering
 *    events or waits for a shared queue on it (session.c, stream_handlers.c);
 *  - the legacy stream: the client's NULL stream is a non-blocking stream of its own, so
 *    the driver cannot see CUDA's implicit synchronization between it and a capturing
 *    blocking stream; rm_capture_check_legacy refuses it as CUDA does
 *    (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) and invalidates the capture;
 *  - a stream the client destroys while a capture holds it (one forked into another
 *    stream's capture) stays out of the stream pool until the capture ends, and the
 *    capture goes on, as natively (capture_state.c).
 * A synchronize or query of a capturing stream reaches the driver, which refuses it and
 * invalidates the capture itself. */
#include "dispatch.h"

#include <stdlib.h>

#include "log.h"
#include "remora.pb-c.h"

CUresult rm_body_cuStreamBeginCapture_v2(struct rm_channel *s, CUstream hStream, CUstreamCaptureMode mode)
{
	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (hStream == s->cur->default_stream)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* the legacy NULL stream cannot capture */
	CUresult r = rm_drv_cuStreamBeginCapture_v2(hStream, CU_STREAM_CAPTURE_MODE_RELAXED);
	if (r == CUDA_SUCCESS)
		__atomic_add_fetch(&s->cur->captures, 1, __ATOMIC_ACQ_REL);
	return r;
}

/* Ends the capture st began: the graph becomes the client's. A capture that ends in an
 * error (invalidated, unjoined) is over too. */
CUresult rm_body_cuStreamEndCapture(struct rm_channel *s, CUstream hStream, CUgraph *phGraph)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	CUgraph capturing = NULL;
	if (rm_drv.cuStreamGetCaptureInfo_v2)
		rm_drv_cuStreamGetCaptureInfo_v2(hStream, &status, NULL, &capturing, NULL, NULL);
	CUresult r = rm_drv_cuStreamEndCapture(hStream, phGraph);
	if (s->cur)
		rm_capture_settle_retired(s->cur);
	if (status != CU_STREAM_CAPTURE_STATUS_NONE && !rm_capture_active(hStream) &&
	    r != CUDA_ERROR_STREAM_CAPTURE_UNMATCHED && s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0)
		__atomic_sub_fetch(&s->cur->captures, 1, __ATOMIC_ACQ_REL);
	struct rm_handle h;
	int owned = capturing && rm_session_find(s, RM_H_GRAPH, (uint64_t)(uintptr_t)capturing, &h);
	if (r == CUDA_SUCCESS && *phGraph) {
		/* Now the client's: a capture's graph it was shown during the capture, or a new one
		 * (a graph it captured into, cuStreamBeginCaptureToGraph, is its already). */
		if (!rm_session_set_parent_if(s, RM_H_GRAPH, (uint64_t)(uintptr_t)*phGraph, RM_GRAPH_OF_CAPTURE, 0))
			rm_session_own(s, RM_H_GRAPH, *phGraph, 0);
	} else if (capturing && !rm_capture_active(hStream) && (!owned || h.parent == RM_GRAPH_OF_CAPTURE)) {
		/* The driver destroyed the graph: node handles the client was given go with it. */
		rm_session_own(s, RM_H_GRAPH, capturing, RM_GRAPH_OF_CAPTURE);
		rm_session_disown(s, RM_H_GRAPH, capturing);
	}
	return r;
}

/* A capture into a graph of the client's: as cuStreamBeginCapture_v2, the dependencies its
 * nodes. Edge data is refused by the client (only default edges travel). */
CUresult rm_body_cuStreamBeginCaptureToGraph(struct rm_channel *s, CUstream hStream, CUgraph hGraph,
					     const CUgraphNode *dependencies, const CUgraphEdgeData *dependencyData,
					     size_t numDependencies, CUstreamCaptureMode mode)
{
	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (hStream == s->cur->default_stream)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	CUresult r = rm_graph_check_nodes(s, hGraph, dependencies, numDependencies);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuStreamBeginCaptureToGraph(hStream, hGraph, dependencies, dependencyData, numDependencies,
						       CU_STREAM_CAPTURE_MODE_RELAXED);
	if (r == CUDA_SUCCESS)
		__atomic_add_fetch(&s->cur->captures, 1, __ATOMIC_ACQ_REL);
	return r;
}

CUresult rm_body_cuStreamIsCapturing(struct rm_channel *s, CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	if (s->cur && hStream == s->cur->default_stream && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0) {
		CUresult r = rm_capture_check_legacy(s->cur);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return rm_drv_cuStreamIsCapturing(hStream, captureStatus);
}

CUresult rm_body_cuStreamGetCaptureInfo(struct rm_channel *s, CUstream hStream,
					CUstreamCaptureStatus *captureStatus_out, cuuint64_t *id_out)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	CUresult r = rm_body_cuStreamIsCapturing(s, hStream, &status);
	if (r == CUDA_SUCCESS && rm_drv.cuStreamGetCaptureInfo_v2)
		r = rm_drv_cuStreamGetCaptureInfo_v2(hStream, captureStatus_out, id_out, NULL, NULL, NULL);
	else if (r == CUDA_SUCCESS)
		*captureStatus_out = status;
	return r;
}

/* Handles of the stream's capture: its graph and the nodes it depends on, now the client's. */
static CUresult capture_info(struct rm_channel *s, struct rm_request *rq, const Remora__CaptureInfo *req,
			     Remora__CaptureInfoReply *rep)
{
	CUstream st = NULL;
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	cuuint64_t id = 0;
	CUgraph graph = NULL;
	const CUgraphNode *deps = NULL;
	size_t ndeps = 0;
	CUresult r = rm_session_stream(s, req->stream, rq->frame.flags, &st);
	if (r == CUDA_SUCCESS)
		r = rm_body_cuStreamIsCapturing(s, st, &status);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuStreamGetCaptureInfo_v2(st, &status, &id, &graph, &deps, &ndeps);
	if (r == CUDA_SUCCESS && ndeps > RM_MAX_GRAPH_DEPS)
		r = CUDA_ERROR_NOT_SUPPORTED;
	uint64_t *values = r == CUDA_SUCCESS ? calloc(ndeps + 1, sizeof(*values)) : NULL;
	if (r == CUDA_SUCCESS && !values)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS) {
		/* The capture's graph is the driver's until the capture ends (EndCapture gives it,
		 * or destroys it): recorded as the capture's, its nodes as children of it, so that
		 * they go with it. */
		if (graph) /* usable by the client (cuGraphAddNode, conditional handles), not its to destroy */
			rm_session_own(s, RM_H_GRAPH, graph, RM_GRAPH_OF_CAPTURE);
		for (size_t i = 0; i < ndeps; i++) {
			values[i] = (uint64_t)(uintptr_t)deps[i];
			rm_session_own(s, RM_H_GRAPH_NODE, deps[i], (uint64_t)(uintptr_t)graph);
		}
		rep->status = status;
		rep->id = id;
		rep->graph = (uint64_t)(uintptr_t)graph;
		rep->deps = values;
		rep->n_deps = ndeps;
	}
	rq->reply_mem = values;
	return r;
}

CUresult rm_body_cuStreamGetCaptureInfo_v2(struct rm_channel *s, struct rm_request *rq, const Remora__CaptureInfo *req,
					   Remora__CaptureInfoReply *rep)
{
	return capture_info(s, rq, req, rep);
}

CUresult rm_body_cuStreamGetCaptureInfo_v3(struct rm_channel *s, struct rm_request *rq, const Remora__CaptureInfo *req,
					   Remora__CaptureInfoReply *rep)
{
	return capture_info(s, rq, req, rep);
}
