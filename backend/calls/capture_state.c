/* The daemon's side of stream capture that session.c needs: whether a driver stream
 * captures, the legacy stream's rule, and ending a departed client's captures
 * (capture_handlers.c has the calls; it says what is whose). */
#include "session.h"

#include "driver_table.h"
#include "stream_pool.h"

int rm_capture_active(CUstream st)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	return rm_drv.cuStreamIsCapturing && rm_drv_cuStreamIsCapturing(st, &status) == CUDA_SUCCESS &&
	       status != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* A capturing stream's capture is invalidated by an illegal call on it, as the driver
 * defines: a query (the driver refuses it and invalidates the capture). */
static void invalidate(CUstream st)
{
	rm_drv_cuStreamQuery(st);
}

int rm_capture_retire(struct rm_session_ctx *c, CUstream st)
{
	pthread_mutex_lock(&c->order_lock);
	int kept = c->nretired < RM_MAX_RETIRED_STREAMS;
	if (kept)
		c->retired[c->nretired++] = st;
	pthread_mutex_unlock(&c->order_lock);
	return kept;
}

/* Takes c's retired streams out (all, or those no capture holds) into out. */
static int take_retired(struct rm_session_ctx *c, int all, CUstream *out)
{
	int n = 0;
	pthread_mutex_lock(&c->order_lock);
	for (int i = 0; i < c->nretired;)
		if (all || !rm_capture_active(c->retired[i])) {
			out[n++] = c->retired[i];
			c->retired[i] = c->retired[--c->nretired];
		} else {
			i++;
		}
	pthread_mutex_unlock(&c->order_lock);
	return n;
}

void rm_capture_settle_retired(struct rm_session_ctx *c)
{
	CUstream free[RM_MAX_RETIRED_STREAMS];
	int n = take_retired(c, 0, free);
	for (int i = 0; i < n; i++)
		rm_stream_pool_give(free[i]);
}

CUresult rm_capture_check_legacy(struct rm_session_ctx *c)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&c->order_lock);
	for (int i = 0; i < c->nblocking; i++)
		if (rm_capture_active(c->blocking[i].stream)) {
			invalidate(c->blocking[i].stream);
			r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		}
	for (int i = 0; i <= RM_MAX_CHANNELS; i++)
		if (c->per_thread[i] && rm_capture_active(c->per_thread[i])) {
			invalidate(c->per_thread[i]);
			r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
		}
	pthread_mutex_unlock(&c->order_lock);
	return r;
}

void rm_capture_drop_graph(struct rm_channel *s, CUgraph g, int locked)
{
	struct rm_handle h;
	uint64_t v = (uint64_t)(uintptr_t)g;
	int owned = locked ? rm_session_find_locked(s, RM_H_GRAPH, v, &h) : rm_session_find(s, RM_H_GRAPH, v, &h);
	if (!g || (owned && h.parent != RM_GRAPH_OF_CAPTURE))
		return;
	rm_drv_cuGraphDestroy(g);
	if (owned && !locked)
		rm_session_disown_value(s, RM_H_GRAPH, v);
}

/* Ends what the client's streams capture, origins first (ending a stream that only joined
 * a capture fails until its origin has ended). */
void rm_capture_end_all(struct rm_channel *s)
{
	if (!rm_drv.cuStreamEndCapture || !rm_drv.cuGraphDestroy)
		return; /* a driver without graphs made no capture */
	for (int k = 0; k < s->sh->nctx; k++) {
		struct rm_session_ctx *c = &s->sh->ctxs[k];
		CUstream retired[RM_MAX_RETIRED_STREAMS];
		int nretired = take_retired(c, 1, retired);
		if (nretired)
			rm_drv_cuCtxSetCurrent(c->ctx);
		for (int i = 0; i < nretired; i++) { /* an origin the client destroyed too */
			CUgraph g = NULL;
			if (rm_capture_active(retired[i]) && rm_drv_cuStreamEndCapture(retired[i], &g) == CUDA_SUCCESS)
				rm_capture_drop_graph(s, g, 0);
		}
		if (__atomic_load_n(&c->captures, __ATOMIC_ACQUIRE) == 0) {
			for (int i = 0; i < nretired; i++)
				rm_stream_pool_give(retired[i]);
			continue;
		}
		rm_drv_cuCtxSetCurrent(c->ctx);
		pthread_mutex_lock(&s->sh->lock);
		for (size_t i = 0; i < s->sh->handles_cap; i++) {
			if (s->sh->handles[i].kind != RM_H_STREAM)
				continue;
			CUstream st = (CUstream)(uintptr_t)s->sh->handles[i].value;
			CUgraph g = NULL;
			if (rm_capture_active(st) && rm_drv_cuStreamEndCapture(st, &g) == CUDA_SUCCESS)
				rm_capture_drop_graph(s, g, 1);
		}
		for (int i = 0; i <= RM_MAX_CHANNELS; i++) {
			CUgraph g = NULL;
			if (c->per_thread[i] && rm_capture_active(c->per_thread[i]) &&
			    rm_drv_cuStreamEndCapture(c->per_thread[i], &g) == CUDA_SUCCESS)
				rm_capture_drop_graph(s, g, 1);
		}
		pthread_mutex_unlock(&s->sh->lock);
		__atomic_store_n(&c->captures, 0, __ATOMIC_RELEASE);
		for (int i = 0; i < nretired; i++)
			rm_stream_pool_give(retired[i]);
	}
}
