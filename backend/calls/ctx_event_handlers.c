/* cuCtxRecordEvent and cuCtxWaitEvent over the shared context (typed bodies, proto/api.spec):
 * the driver's would take in every client's work, so the client's context's work is named
 * stream by stream. Each context of the client's gets a stream of its own for this, its
 * record stream: a record makes it wait for every stream of the client's in the context and
 * records the event there; a wait makes it wait for the event, records the context's wait
 * event after, and makes every stream of the context wait for that, as each stream the
 * context gets later does (rm_ctx_events_adopt). */
#include "dispatch.h"

#include <stdlib.h>

#include "capture_state.h"
#include "kernel_timing.h"
#include "stream_pool.h"

#define MAX_CTX_STREAMS 4096

struct gather {
	uint32_t slot; /* 1 + the context's slot */
	CUstream *st;
	size_t n;
};

static int visit_stream(const struct rm_handle *h, void *arg)
{
	struct gather *g = arg;
	if (h->ctx == g->slot && g->n < MAX_CTX_STREAMS)
		g->st[g->n++] = (CUstream)(uintptr_t)h->value;
	return 0;
}

/* The client's streams in c: its legacy and per-thread streams and those it made there. */
static size_t context_streams(struct rm_channel *s, struct rm_session_ctx *c, CUstream *st)
{
	struct gather g = {(uint32_t)(c - s->sh->ctxs) + 1, st, 0};
	st[g.n++] = c->default_stream;
	pthread_mutex_lock(&c->order_lock);
	for (int i = 0; i <= RM_MAX_CHANNELS; i++)
		if (c->per_thread[i])
			st[g.n++] = c->per_thread[i];
	pthread_mutex_unlock(&c->order_lock);
	rm_session_each(s, RM_H_STREAM, visit_stream, &g);
	return g.n;
}

static pthread_mutex_t record_lock = PTHREAD_MUTEX_INITIALIZER; /* the contexts' record streams and wait events */

/* c's record stream, made once (c's shared context current), ready for work. */
static CUresult record_stream(struct rm_session_ctx *c, CUstream *out)
{
	pthread_mutex_lock(&record_lock);
	CUresult r = c->record_stream ? CUDA_SUCCESS : rm_stream_pool_take(c->ctx, 0, &c->record_stream);
	*out = c->record_stream;
	pthread_mutex_unlock(&record_lock);
	return r == CUDA_SUCCESS ? rm_stream_pool_before_submit(*out) : r;
}

/* The context the request named (its CUcontext parameter), checked, and its streams. */
static CUresult prepare(struct rm_channel *s, struct rm_session_ctx **c, CUstream **st, size_t *n)
{
	*c = s->named;
	if (!*c || __atomic_load_n(&(*c)->destroyed, __ATOMIC_ACQUIRE))
		return CUDA_ERROR_INVALID_CONTEXT;
	if (__atomic_load_n(&(*c)->captures, __ATOMIC_ACQUIRE) > 0)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED; /* a stream of the context captures */
	/* Its GPU's shared context current (another GPU's may be): the next request's entry
	 * makes its own current again (rm_session_enter). */
	if (s->thread_ctx != (*c)->ctx && rm_drv_cuCtxSetCurrent((*c)->ctx) == CUDA_SUCCESS)
		s->thread_ctx = (*c)->ctx;
	if (!(*st = malloc((MAX_CTX_STREAMS + RM_MAX_CHANNELS + 2) * sizeof(**st))))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*n = context_streams(s, *c, *st);
	return CUDA_SUCCESS;
}

CUresult rm_body_cuCtxRecordEvent(struct rm_channel *s, CUcontext hCtx, CUevent hEvent)
{
	(void)hCtx; /* the shared context: the client's record is s->named */
	struct rm_session_ctx *c;
	CUstream *st = NULL, rs = NULL;
	size_t n = 0;
	CUresult r = prepare(s, &c, &st, &n);
	if (r == CUDA_SUCCESS)
		r = record_stream(c, &rs);
	if (r == CUDA_SUCCESS)
		rm_kernel_timing_close_context(s, c); /* remorad's span ends before the marks */
	for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++) {
		CUevent mark;
		if ((r = rm_drv_cuEventCreate(&mark, CU_EVENT_DISABLE_TIMING)) != CUDA_SUCCESS)
			break;
		if ((r = rm_drv_cuEventRecord(mark, st[i])) == CUDA_SUCCESS)
			r = rm_drv_cuStreamWaitEvent(rs, mark, 0);
		rm_drv_cuEventDestroy_v2(mark); /* released once its record is done */
	}
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuEventRecord(hEvent, rs);
	free(st);
	return r;
}

CUresult rm_body_cuCtxWaitEvent(struct rm_channel *s, CUcontext hCtx, CUevent hEvent)
{
	(void)hCtx;
	struct rm_session_ctx *c;
	CUstream *st = NULL, rs = NULL;
	size_t n = 0;
	CUresult r = prepare(s, &c, &st, &n);
	if (r == CUDA_SUCCESS)
		r = record_stream(c, &rs);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuStreamWaitEvent(rs, hEvent, 0);
	pthread_mutex_lock(&record_lock);
	if (r == CUDA_SUCCESS && !c->wait_event)
		r = rm_drv_cuEventCreate(&c->wait_event, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuEventRecord(c->wait_event, rs);
	for (size_t i = 0; r == CUDA_SUCCESS && i < n; i++)
		r = rm_drv_cuStreamWaitEvent(st[i], c->wait_event, 0);
	pthread_mutex_unlock(&record_lock);
	free(st);
	return r;
}

CUresult rm_ctx_events_adopt(struct rm_session_ctx *c, CUstream st)
{
	pthread_mutex_lock(&record_lock);
	CUresult r = c->wait_event ? rm_drv_cuStreamWaitEvent(st, c->wait_event, 0) : CUDA_SUCCESS;
	pthread_mutex_unlock(&record_lock);
	return r;
}

void rm_ctx_events_release(struct rm_session_ctx *c)
{
	pthread_mutex_lock(&record_lock);
	if (c->record_stream)
		rm_stream_pool_give(c->record_stream);
	if (c->wait_event)
		rm_drv_cuEventDestroy_v2(c->wait_event);
	c->record_stream = NULL;
	c->wait_event = NULL;
	pthread_mutex_unlock(&record_lock);
}
