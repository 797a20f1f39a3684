/* Peer access (peer_access.h). A session records which of its ordered context pairs it
 * enabled (sh->peer_enabled, atomic; changed under refs_lock); the worker counts, for each ordered pair of
 * host GPUs, the enables its sessions hold, and asks the driver for the shared contexts'
 * access at the first and gives it up at the last. */
#include "peer_access.h"

#include <pthread.h>

#include "driver_table.h"
#include "gpus.h"
#include "log.h"
#include "session.h"

#define MAX_GPUS 64

static pthread_mutex_t refs_lock = PTHREAD_MUTEX_INITIALIZER;
static int refs[MAX_GPUS][MAX_GPUS]; /* [from][to] host GPUs: enables held by sessions */

static int index_of(struct rm_channel *s, struct rm_session_ctx *c)
{
	return (int)(c - s->sh->ctxs);
}

/* With from's shared context current and refs_lock held: take (enable) or drop one
 * reference of the pair. */
static CUresult gpu_pair(struct rm_session_ctx *from, struct rm_session_ctx *to, int take)
{
	if (from->dev < 0 || from->dev >= MAX_GPUS || to->dev < 0 || to->dev >= MAX_GPUS)
		return CUDA_ERROR_INVALID_DEVICE;
	CUresult r = CUDA_SUCCESS;
	int *n = &refs[from->dev][to->dev];
	if (take) {
		if (*n == 0) {
			r = rm_drv_cuCtxEnablePeerAccess(to->ctx, 0);
			if (r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) /* the worker's own earlier enable */
				r = CUDA_SUCCESS;
			if (r == CUDA_SUCCESS)
				rm_log(RM_LOG_INFO, "peer access of GPU %d to GPU %d enabled", (int)from->dev, (int)to->dev);
		}
		if (r == CUDA_SUCCESS)
			(*n)++;
	} else if (*n > 0 && --*n == 0) {
		r = rm_drv_cuCtxDisablePeerAccess(to->ctx);
		if (r == CUDA_ERROR_PEER_ACCESS_NOT_ENABLED)
			r = CUDA_SUCCESS;
		rm_log(RM_LOG_INFO, "peer access of GPU %d to GPU %d given up: no client holds it", (int)from->dev,
		       (int)to->dev);
	}
	return r;
}

static CUresult pair_check(struct rm_channel *s, struct rm_session_ctx *peer)
{
	if (!s->cur || !peer)
		return CUDA_ERROR_INVALID_CONTEXT;
	return s->cur->dev == peer->dev ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult rm_peer_enable(struct rm_channel *s, struct rm_session_ctx *peer, unsigned int flags)
{
	CUresult r = pair_check(s, peer);
	if (r != CUDA_SUCCESS)
		return r;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	struct rm_session_ctx *from = s->cur;
	uint64_t bit = 1ull << index_of(s, peer);
	uint64_t *row = &s->sh->peer_enabled[index_of(s, from)];
	pthread_mutex_lock(&refs_lock); /* the session's channels and the worker's sessions in turn */
	if (__atomic_load_n(row, __ATOMIC_ACQUIRE) & bit)
		r = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
	else if ((r = gpu_pair(from, peer, 1)) == CUDA_SUCCESS)
		__atomic_or_fetch(row, bit, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&refs_lock);
	return r;
}

CUresult rm_peer_disable(struct rm_channel *s, struct rm_session_ctx *peer)
{
	CUresult r = pair_check(s, peer);
	if (r != CUDA_SUCCESS)
		return r;
	struct rm_session_ctx *from = s->cur;
	uint64_t bit = 1ull << index_of(s, peer);
	uint64_t *row = &s->sh->peer_enabled[index_of(s, from)];
	pthread_mutex_lock(&refs_lock);
	if (__atomic_fetch_and(row, ~bit, __ATOMIC_ACQ_REL) & bit)
		r = gpu_pair(from, peer, 0);
	else
		r = CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
	pthread_mutex_unlock(&refs_lock);
	return r;
}

void rm_peer_release(struct rm_channel *s, struct rm_session_ctx *c)
{
	int n = __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE);
	int only = c ? index_of(s, c) : -1;
	CUcontext cur = NULL;
	pthread_mutex_lock(&refs_lock);
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			if (only >= 0 && i != only && j != only)
				continue;
			if (!(__atomic_fetch_and(&s->sh->peer_enabled[i], ~(1ull << j), __ATOMIC_ACQ_REL) & (1ull << j)))
				continue;
			if (cur != s->sh->ctxs[i].ctx && rm_drv_cuCtxSetCurrent(s->sh->ctxs[i].ctx) == CUDA_SUCCESS)
				cur = s->sh->ctxs[i].ctx;
			gpu_pair(&s->sh->ctxs[i], &s->sh->ctxs[j], 0);
		}
	pthread_mutex_unlock(&refs_lock);
	if (cur && cur != s->thread_ctx)
		rm_drv_cuCtxSetCurrent(s->thread_ctx);
}

CUresult rm_peer_hold_gpus(CUdevice from, CUdevice to, int take)
{
	struct rm_session_ctx a = {.dev = from}, b = {.dev = to};
	CUcontext popped;
	CUresult r = rm_gpu_acquire(from, &a.ctx);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = rm_gpu_acquire(to, &b.ctx)) != CUDA_SUCCESS) {
		rm_gpu_release(from);
		return r;
	}
	if ((r = rm_drv_cuCtxPushCurrent_v2(a.ctx)) == CUDA_SUCCESS) {
		pthread_mutex_lock(&refs_lock);
		r = gpu_pair(&a, &b, take);
		pthread_mutex_unlock(&refs_lock);
		rm_drv_cuCtxPopCurrent_v2(&popped);
	}
	/* A hold keeps one use of each GPU's context, given back with it. */
	int uses = take && r == CUDA_SUCCESS ? 0 : take ? 1 : 2;
	for (int i = 0; i < uses; i++) {
		rm_gpu_release(from);
		rm_gpu_release(to);
	}
	return r;
}
