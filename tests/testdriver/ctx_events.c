/* cuCtxRecordEvent and cuCtxWaitEvent: a context's record stream waits for every other
 * stream of the context (a record) or for the event, then each stream of the context, and
 * each one made later, for it (a wait). */
#include "testdriver.h"

static struct td_context *context_of(CUcontext h)
{
	struct td_context *ctx = (struct td_context *)h;
	return td_initialized() && h && td_context_valid(ctx) ? ctx : NULL;
}

/* ctx's record stream (td_lock held); CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED while a stream captures. */
static CUresult record_stream_locked(struct td_context *ctx, struct td_stream **out)
{
	for (struct td_stream *s = ctx->streams; s; s = s->next_in_context)
		if (__atomic_load_n(&s->capture, __ATOMIC_ACQUIRE))
			return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	if (!ctx->record_stream && !(ctx->record_stream = td_stream_new_locked(ctx)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = ctx->record_stream;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuCtxRecordEvent(CUcontext hCtx, CUevent hEvent)
{
	struct td_context *ctx = context_of(hCtx);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!hEvent)
		return CUDA_ERROR_INVALID_HANDLE;
	struct td_stream *rs;
	pthread_mutex_lock(&td_lock);
	CUresult rc = record_stream_locked(ctx, &rs);
	for (struct td_stream *s = ctx->streams; rc == CUDA_SUCCESS && s; s = s->next_in_context)
		if (s != rs)
			td_stream_wait_for(rs, s);
	pthread_mutex_unlock(&td_lock);
	return rc == CUDA_SUCCESS ? cuEventRecord(hEvent, (CUstream)rs) : rc;
}

TD_EXPORT CUresult cuCtxWaitEvent(CUcontext hCtx, CUevent hEvent)
{
	struct td_context *ctx = context_of(hCtx);
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct td_stream *rs;
	pthread_mutex_lock(&td_lock);
	CUresult rc = record_stream_locked(ctx, &rs);
	pthread_mutex_unlock(&td_lock);
	if (rc == CUDA_SUCCESS)
		rc = cuStreamWaitEvent((CUstream)rs, hEvent, 0);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&td_lock);
	pthread_mutex_lock(&rs->lock);
	ctx->wait_ticket = rs->enqueued;
	pthread_mutex_unlock(&rs->lock);
	for (struct td_stream *s = ctx->streams; s; s = s->next_in_context)
		if (s != rs)
			td_stream_wait_for(s, rs);
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}
