/* A session's contexts, streams, device ordinals and synchronizes (contexts.h). */
#include "session.h"

#include <stdlib.h>

#include "api.pb-c.h"
#include "api_ops.h"
#include "call_profile.h"
#include "deferred.h"
#include "driver_table.h"
#include "gpus.h"
#include "kernel_timing.h"
#include "peer_access.h"
#include "stream_pool.h"
#include "stream_wait.h"

/* Context i of the session, or NULL (the list is only appended to). */
struct rm_session_ctx *rm_session_ctx_at(struct rm_channel *s, int i)
{
	return i < __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE) ? &s->sh->ctxs[i] : NULL;
}

/* The per-thread default stream of channel chan in c: one per client thread with a
 * channel of its own, one for the threads sharing the main connection; blocking like
 * CUDA's per-thread streams. Only the channel's own thread makes it. */
static CUresult per_thread_stream(struct rm_session_ctx *c, int chan, CUstream *out)
{
	pthread_mutex_lock(&c->order_lock);
	CUstream st = c->per_thread[chan];
	pthread_mutex_unlock(&c->order_lock);
	if (!st) {
		CUresult r = rm_stream_pool_take(c->ctx, 0, &st);
		if (r == CUDA_SUCCESS && ((r = rm_ctx_events_adopt(c, st)) != CUDA_SUCCESS ||
					  (r = rm_stream_order_add(c, st)) != CUDA_SUCCESS))
			rm_stream_pool_give(st);
		if (r != CUDA_SUCCESS)
			return r;
		pthread_mutex_lock(&c->order_lock);
		c->per_thread[chan] = st;
		c->nper_thread++;
		pthread_mutex_unlock(&c->order_lock);
	}
	*out = st;
	return CUDA_SUCCESS;
}

/* rm_session_stream without naming the stream to the pool. */
static CUresult resolve_stream(struct rm_channel *s, uint64_t v, uint32_t frame_flags, CUstream *out)
{
	CUresult r;
	int per_thread = v == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD || (v == 0 && (frame_flags & RM_F_PER_THREAD));
	if (per_thread || v == 0 || v == (uint64_t)(uintptr_t)CU_STREAM_LEGACY) {
		if (!s->cur)
			return CUDA_ERROR_INVALID_CONTEXT;
		if (per_thread)
			r = per_thread_stream(s->cur, s->chan, out);
		else
			*out = s->cur->default_stream, r = CUDA_SUCCESS;
	} else {
		r = rm_session_use(s, RM_H_STREAM, v, (void **)out);
	}
	if (r != CUDA_SUCCESS || !s->cur)
		return r;
	/* During a capture nothing of the daemon's own (ordering events, waits for a shared
	 * queue) may go onto a capturing stream: it would be captured, or be an illegal call
	 * that invalidates the capture. And the legacy stream may not be used while one of
	 * the client's blocking streams captures, as in CUDA. */
	if (s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0) {
		if (rm_capture_active(*out))
			return CUDA_SUCCESS;
		if (*out == s->cur->default_stream && (r = rm_capture_check_legacy(s->cur)) != CUDA_SUCCESS)
			return r;
	}
	return rm_stream_order_before(s->cur, *out);
}

CUresult rm_session_stream(struct rm_channel *s, uint64_t v, uint32_t frame_flags, CUstream *out)
{
	CUresult r = resolve_stream(s, v, frame_flags, out);
	if (r == CUDA_SUCCESS)
		rm_stream_pool_named(*out);
	return r;
}

/* The submission names the stream (rm_stream_pool_before_submit). */
CUresult rm_session_stream_submit(struct rm_channel *s, uint64_t v, uint32_t frame_flags, CUstream *out)
{
	CUresult r = resolve_stream(s, v, frame_flags, out);
	if (r == CUDA_SUCCESS && s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 && rm_capture_active(*out))
		return CUDA_SUCCESS;
	return r == CUDA_SUCCESS ? rm_stream_pool_before_submit(*out) : r;
}

int rm_session_sync_follows(struct rm_channel *s, const struct rm_frame *launch, uint64_t v)
{
	struct rm_frame f;
	const uint8_t *msg;
	if (!rm_link_buffered(&s->link) || rm_link_peek_frame(&s->link, &f, &msg) || f.ctx != launch->ctx ||
	    f.bulk_len || (f.flags & (RM_F_REPLY | RM_F_ASYNC)))
		return 0;
	if (f.op == RM_OP_cuCtxSynchronize || (f.op == RM_OP_cuCtxSynchronize_v2 && !f.msg_len))
		return 1; /* the current context's: the client's every stream there */
	if (f.op != RM_OP_cuStreamSynchronize || !msg)
		return 0;
	Remora__CuStreamSynchronizeReq *req = remora__cu_stream_synchronize__req__unpack(NULL, f.msg_len, msg);
	if (!req)
		return 0;
	int same = req->hstream == v && (f.flags & RM_F_PER_THREAD) == (launch->flags & RM_F_PER_THREAD);
	remora__cu_stream_synchronize__req__free_unpacked(req, NULL);
	return same;
}

CUresult rm_session_device(struct rm_channel *s, int ordinal, CUdevice *out)
{
	if (ordinal < 0 || ordinal >= s->sh->ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = s->sh->devices[ordinal];
	return CUDA_SUCCESS;
}

CUresult rm_session_device_out(struct rm_channel *s, CUdevice dev, CUdevice *out)
{
	for (int i = 0; i < s->sh->ndevices; i++)
		if (s->sh->devices[i] == dev) {
			*out = i;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_DEVICE; /* a GPU the client does not see */
}

/* Appends a context of dev to the session, its default stream made in it. Under sh->lock. */
static CUresult append_ctx_locked(struct rm_channel *s, CUdevice dev, struct rm_session_ctx **out)
{
	if (s->sh->nctx == RM_SESSION_MAX_CTX) {
		rm_session_log(s, RM_LOG_WARN, "no room for another context: %d made, destroyed ones included",
			       RM_SESSION_MAX_CTX);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CUcontext ctx;
	CUresult r = rm_gpu_acquire(dev, &ctx);
	if (r != CUDA_SUCCESS)
		return r;
	CUcontext prev = s->thread_ctx;
	r = rm_drv_cuCtxSetCurrent(ctx);
	CUstream stream = NULL;
	if (r == CUDA_SUCCESS)
		r = rm_stream_pool_take(ctx, 0, &stream);
	rm_drv_cuCtxSetCurrent(prev);
	if (r != CUDA_SUCCESS) {
		rm_gpu_release(dev);
		return r;
	}
	struct rm_session_ctx *c = &s->sh->ctxs[s->sh->nctx];
	*c = (struct rm_session_ctx){.ctx = ctx, .dev = dev, .handle = (uint64_t)(uintptr_t)ctx, .default_stream = stream};
	pthread_mutex_init(&c->order_lock, NULL);
	*out = c;
	return CUDA_SUCCESS;
}

static void publish_ctx_locked(struct rm_channel *s)
{
	__atomic_store_n(&s->sh->nctx, s->sh->nctx + 1, __ATOMIC_RELEASE);
}

static CUresult add_ctx_locked(struct rm_channel *s, CUdevice dev, CUcontext *out)
{
	for (int i = 0; i < s->sh->nctx; i++)
		if (s->sh->ctxs[i].dev == dev && !s->sh->ctxs[i].created) {
			*out = s->sh->ctxs[i].ctx;
			return CUDA_SUCCESS;
		}
	struct rm_session_ctx *c;
	CUresult r = append_ctx_locked(s, dev, &c);
	if (r == CUDA_SUCCESS) {
		publish_ctx_locked(s);
		*out = c->ctx;
	}
	return r;
}

/* A created context's handle: above every user-space address, so never a primary
 * context's (the driver's pointer); unique in the session as slots are never reused. */
#define RM_CREATED_CTX_BASE 0x00c7000000000000ull

CUresult rm_session_create_ctx(struct rm_channel *s, CUdevice dev, struct rm_session_ctx **out)
{
	static unsigned long long ids; /* the worker's created contexts' ids, above the driver's */
	pthread_mutex_lock(&s->sh->lock);
	struct rm_session_ctx *c = NULL;
	CUresult r = append_ctx_locked(s, dev, &c);
	if (r == CUDA_SUCCESS) {
		c->created = 1;
		c->handle = RM_CREATED_CTX_BASE | ((uint64_t)(c - s->sh->ctxs) << 8);
		c->id = (1ull << 32) + __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED);
		publish_ctx_locked(s);
		*out = c;
	}
	pthread_mutex_unlock(&s->sh->lock);
	return r;
}

struct rm_session_ctx *rm_session_ctx_of(struct rm_channel *s, uint64_t v, CUresult *why)
{
	struct rm_session_ctx *k;
	for (int i = 0; v && (k = rm_session_ctx_at(s, i)); i++)
		if (k->handle == v) {
			if (!__atomic_load_n(&k->destroyed, __ATOMIC_ACQUIRE))
				return k;
			*why = CUDA_ERROR_CONTEXT_IS_DESTROYED;
			return NULL;
		}
	*why = CUDA_ERROR_INVALID_CONTEXT;
	return NULL;
}

/* Held across the context's creation (rm_gpu_acquire), so that two threads' first calls
 * on a device make one. */
CUresult rm_session_add_ctx(struct rm_channel *s, CUdevice dev, CUcontext *out)
{
	pthread_mutex_lock(&s->sh->lock);
	CUresult r = add_ctx_locked(s, dev, out);
	pthread_mutex_unlock(&s->sh->lock);
	return r;
}

CUresult rm_session_enter(struct rm_channel *s, uint64_t ctx)
{
	CUresult why = CUDA_SUCCESS;
	struct rm_session_ctx *c = ctx ? rm_session_ctx_of(s, ctx, &why) : NULL;
	if (ctx && !c)
		return why;
	s->cur = c;
	CUcontext want = c ? c->ctx : NULL;
	if (want != s->thread_ctx) {
		CUresult r = rm_drv_cuCtxSetCurrent(want);
		if (r != CUDA_SUCCESS)
			return r;
		s->thread_ctx = want;
	}
	return CUDA_SUCCESS;
}

/* The session's streams in c (NULL: all contexts): its legacy and per-thread streams and
 * those it created, gathered under the locks into a new array (*n of them) so that they
 * are waited for without. A stream another thread destroys meanwhile went back to the
 * pool, not to the driver (stream_pool.h): waiting for it is harmless. NULL: no memory. */
static CUstream *gather_streams(struct rm_channel *s, struct rm_session_ctx *only, CUstream *small, size_t nsmall,
				size_t *n)
{
	pthread_mutex_lock(&s->sh->lock);
	size_t cap = s->sh->nstreams + (size_t)s->sh->nctx * (RM_MAX_CHANNELS + 2) + 1;
	CUstream *st = cap <= nsmall ? small : malloc(cap * sizeof(*st));
	*n = 0;
	for (int k = 0; st && k < s->sh->nctx; k++) {
		struct rm_session_ctx *c = &s->sh->ctxs[k];
		if ((only && c != only) || __atomic_load_n(&c->destroyed, __ATOMIC_ACQUIRE))
			continue;
		st[(*n)++] = c->default_stream;
		pthread_mutex_lock(&c->order_lock);
		for (int i = 0, found = 0; found < c->nper_thread && i <= RM_MAX_CHANNELS; i++)
			if (c->per_thread[i])
				st[(*n)++] = c->per_thread[i], found++;
		pthread_mutex_unlock(&c->order_lock);
	}
	for (size_t i = 0; st && i < s->sh->nstreams; i++)
		st[(*n)++] = s->sh->streams[i];
	pthread_mutex_unlock(&s->sh->lock);
	return st;
}

/* Waits for the streams gather_streams gives, holding no lock. Kernel timing learns of
 * the current context's (rm_kernel_timing_synced). */
static CUresult sync_streams(struct rm_channel *s, struct rm_session_ctx *only)
{
	size_t n;
	CUstream small[1024]; /* one context, its channels' streams and 765 more without malloc */
	CUstream *st = gather_streams(s, only, small, sizeof(small) / sizeof(small[0]), &n);
	if (!st)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult first = CUDA_SUCCESS;
	uint64_t part = rm_call_part_begin();
	for (size_t i = 0; i < n; i++) {
		/* In the current context a wait also ends its kernel-time spans (stream_wait.h). */
		CUresult r = only && only == s->cur ? rm_stream_wait(s, st[i]) : rm_drv_cuStreamSynchronize(st[i]);
		if (first == CUDA_SUCCESS)
			first = r;
	}
	rm_call_part_end(RM_PART_DRIVER_SYNC, part);
	if (st != small)
		free(st);
	return first;
}

/* The session's thread is left in the shared context, which outlives c (session.c
 * releases the worker's context at the session's end). */
CUresult rm_session_destroy_ctx(struct rm_channel *s, struct rm_session_ctx *c)
{
	if (!c->created)
		return CUDA_ERROR_INVALID_CONTEXT; /* a primary context is not the client's to destroy */
	if (s->thread_ctx != c->ctx && rm_drv_cuCtxSetCurrent(c->ctx) == CUDA_SUCCESS)
		s->thread_ctx = c->ctx;
	struct rm_session_ctx *cur = s->cur;
	s->cur = c;
	CUresult r = sync_streams(s, c); /* its work done before what it uses goes */
	size_t n = rm_session_release_ctx(s, c);
	rm_peer_release(s, c); /* its peer access goes with it, both ways */
	rm_kernel_timing_release(s, c);
	rm_ctx_events_release(c);
	pthread_mutex_lock(&c->order_lock);
	for (int i = 0; i <= RM_MAX_CHANNELS; i++)
		if (c->per_thread[i]) {
			rm_stream_pool_give(c->per_thread[i]);
			c->per_thread[i] = NULL;
		}
	c->nper_thread = 0;
	pthread_mutex_unlock(&c->order_lock);
	rm_stream_order_release(c);
	pthread_mutex_lock(&s->sh->lock);
	for (int i = 0; i < RM_CTX_LIMITS; i++) { /* the limits it set hold nothing now */
		rm_session_uncharge(s, c->limit_charge[i]);
		c->limit_charge[i] = 0;
	}
	CUstream st = c->default_stream;
	c->default_stream = NULL;
	__atomic_store_n(&c->destroyed, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&s->sh->lock);
	rm_stream_pool_give(st);
	s->cur = cur == c ? NULL : cur;
	rm_session_log(s, RM_LOG_DEBUG, "context %#llx destroyed with %zu handles made in it",
		       (unsigned long long)c->handle, n);
	return r;
}

CUresult rm_session_synchronize(struct rm_channel *s)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	return sync_streams(s, s->cur);
}

CUresult rm_session_synchronize_all(struct rm_channel *s)
{
	if (s->thread_ctx)
		return sync_streams(s, NULL);
	/* No context current (a library unloaded after the client popped its context): each
	 * context's streams are waited for with it current, as a driver may want. */
	CUresult first = CUDA_SUCCESS;
	struct rm_session_ctx *c;
	for (int i = 0; (c = rm_session_ctx_at(s, i)); i++) {
		CUcontext popped;
		if (__atomic_load_n(&c->destroyed, __ATOMIC_ACQUIRE) || rm_drv_cuCtxPushCurrent_v2(c->ctx) != CUDA_SUCCESS)
			continue;
		CUresult r = sync_streams(s, c);
		rm_drv_cuCtxPopCurrent_v2(&popped);
		if (first == CUDA_SUCCESS)
			first = r;
	}
	return first;
}

CUresult rm_session_free_memory(struct rm_channel *s, uint64_t ptr)
{
	CUcontext owner = NULL;
	struct rm_session_ctx *c = NULL;
	int managed = 0; /* managed memory: not cuMemFreeAsync's to free (cuMemFree waits) */
	if (rm_drv.cuPointerGetAttribute)
		rm_drv_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr);
	if (!managed && rm_drv.cuMemFreeAsync && rm_drv.cuPointerGetAttribute &&
	    rm_drv_cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, ptr) == CUDA_SUCCESS)
		for (int i = 0; !c && rm_session_ctx_at(s, i); i++)
			if (s->sh->ctxs[i].ctx == owner)
				c = s->cur && s->cur->ctx == owner ? s->cur : &s->sh->ctxs[i];
	if (c && c == s->cur) {
		CUresult r = rm_session_synchronize(s);
		if (r == CUDA_SUCCESS)
			r = rm_drv_cuMemFreeAsync(ptr, c->default_stream);
		return r;
	}
	/* Managed memory, or another context's: cuMemFree, which waits for every client's
	 * work, made off the client's thread once its own work is done (deferred.h). */
	CUresult r = rm_session_synchronize_all(s);
	if (r == CUDA_SUCCESS)
		rm_deferred_release(c ? c->ctx : NULL, RM_DEFER_MEM_FREE, ptr, NULL, NULL);
	return r;
}

/* Frees memory whose users are known to be done, without cuMemFree's wait for the
 * whole shared context. */
void rm_session_free_drained(struct rm_channel *s, uint64_t ptr)
{
	CUresult r = CUDA_ERROR_NOT_SUPPORTED;
	struct rm_session_ctx *c = NULL;
	for (int i = 0; !c && i < s->sh->nctx; i++)
		if (s->sh->ctxs[i].default_stream)
			c = &s->sh->ctxs[i]; /* a destroyed context's is given back */
	if (rm_drv.cuMemFreeAsync && c)
		r = rm_drv_cuMemFreeAsync(ptr, c->default_stream);
	if (r != CUDA_SUCCESS) /* managed memory: cuMemFree, off the thread (deferred.h) */
		rm_deferred_release(c ? c->ctx : NULL, RM_DEFER_MEM_FREE, ptr, NULL, NULL);
}
