/* CUDA's legacy default stream semantics for one client, without the context's
 * real NULL stream (which would make clients wait on each other): work issued to
 * the client's legacy stream waits for what its blocking streams were given
 * before, and work issued to a blocking stream waits for what the legacy stream
 * was given before. Counters skip the events when nothing new was issued, so a
 * program using only the default stream, or only non-blocking streams, pays nothing. */
#include "session.h"

#include <stdlib.h>

#include "driver_table.h"
#include "stream_pool.h"

/* Each function takes c->order_lock for what it does (session.h). */

/* An event of c's context, whichever is current: it is recorded on c's streams only. */
static CUresult event_in(struct rm_session_ctx *c, CUevent *ev)
{
	CUresult r = rm_drv_cuCtxPushCurrent_v2(c->ctx);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuEventCreate(ev, CU_EVENT_DISABLE_TIMING);
	CUcontext popped;
	rm_drv_cuCtxPopCurrent_v2(&popped);
	return r;
}

static CUresult add_locked(struct rm_session_ctx *c, CUstream st)
{
	if (c->nblocking == c->blocking_cap) {
		int cap = c->blocking_cap ? c->blocking_cap * 2 : 8;
		struct rm_blocking_stream *b = realloc(c->blocking, cap * sizeof(*b));
		if (!b)
			return CUDA_ERROR_OUT_OF_MEMORY;
		c->blocking = b;
		c->blocking_cap = cap;
	}
	CUevent ev;
	CUresult r = event_in(c, &ev);
	if (r != CUDA_SUCCESS)
		return r;
	/* A new blocking stream starts after what the legacy stream holds so far. */
	c->blocking[c->nblocking++] = (struct rm_blocking_stream){.stream = st, .done = ev};
	return CUDA_SUCCESS;
}

CUresult rm_stream_order_add(struct rm_session_ctx *c, CUstream st)
{
	pthread_mutex_lock(&c->order_lock);
	CUresult r = add_locked(c, st);
	pthread_mutex_unlock(&c->order_lock);
	return r;
}

void rm_stream_order_remove(struct rm_channel *s, CUstream st)
{
	for (int k = 0; k < __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE); k++) {
		struct rm_session_ctx *c = &s->sh->ctxs[k];
		int found = 0;
		pthread_mutex_lock(&c->order_lock);
		for (int i = 0; i < c->nblocking && !found; i++)
			if (c->blocking[i].stream == st) {
				rm_drv_cuEventDestroy_v2(c->blocking[i].done);
				c->blocking[i] = c->blocking[--c->nblocking];
				found = 1;
			}
		pthread_mutex_unlock(&c->order_lock);
		if (found)
			return;
	}
}

int rm_stream_order_is_blocking(struct rm_session_ctx *c, CUstream st)
{
	if (st == c->default_stream)
		return 1;
	int found = 0;
	pthread_mutex_lock(&c->order_lock);
	for (int i = 0; i < c->nblocking && !found; i++)
		found = c->blocking[i].stream == st;
	pthread_mutex_unlock(&c->order_lock);
	return found;
}

static CUresult before_locked(struct rm_session_ctx *c, CUstream st);

CUresult rm_stream_order_before(struct rm_session_ctx *c, CUstream st)
{
	pthread_mutex_lock(&c->order_lock);
	CUresult r = before_locked(c, st);
	pthread_mutex_unlock(&c->order_lock);
	return r;
}

static CUresult before_locked(struct rm_session_ctx *c, CUstream st)
{
	CUresult r = CUDA_SUCCESS;
	if (st == c->default_stream) {
		for (int i = 0; i < c->nblocking && r == CUDA_SUCCESS; i++) {
			struct rm_blocking_stream *b = &c->blocking[i];
			if (b->work == b->legacy_waited)
				continue;
			r = rm_drv_cuEventRecord(b->done, b->stream);
			if (r == CUDA_SUCCESS)
				r = rm_stream_pool_before_wait(c->default_stream, b->done);
			if (r == CUDA_SUCCESS)
				r = rm_drv_cuStreamWaitEvent(c->default_stream, b->done, 0);
			b->legacy_waited = b->work;
		}
		c->legacy_work++;
		return r;
	}
	for (int i = 0; i < c->nblocking; i++) {
		struct rm_blocking_stream *b = &c->blocking[i];
		if (b->stream != st)
			continue;
		if (b->waited_legacy != c->legacy_work) {
			if (!c->legacy_done)
				r = event_in(c, &c->legacy_done);
			if (r == CUDA_SUCCESS)
				r = rm_drv_cuEventRecord(c->legacy_done, c->default_stream);
			if (r == CUDA_SUCCESS)
				r = rm_stream_pool_before_wait(st, c->legacy_done);
			if (r == CUDA_SUCCESS)
				r = rm_drv_cuStreamWaitEvent(st, c->legacy_done, 0);
			b->waited_legacy = c->legacy_work;
		}
		b->work++;
		break;
	}
	return r;
}

void rm_stream_order_release(struct rm_session_ctx *c)
{
	for (int i = 0; i < c->nblocking; i++)
		rm_drv_cuEventDestroy_v2(c->blocking[i].done);
	free(c->blocking);
	c->blocking = NULL;
	c->nblocking = c->blocking_cap = 0;
	if (c->legacy_done)
		rm_drv_cuEventDestroy_v2(c->legacy_done);
	c->legacy_done = NULL;
}
