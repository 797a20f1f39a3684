/* Staging buffers (staging.h). */
#include "staging.h"

#include <errno.h>

#include "deferred.h"
#include "driver_table.h"
#include "host_memory.h"
#include "log.h"
#include "transport.h"

void rm_staging_init(struct rm_staging *st, size_t size, struct rm_host_account *account)
{
	*st = (struct rm_staging){.size = size, .full = size, .account = account};
}

/* The size a copy of bytes wants: the next power of two, within RM_STAGING_MIN and full. */
static size_t wanted(const struct rm_staging *st, uint64_t bytes)
{
	size_t size = RM_STAGING_MIN;
	while (size < st->full && size < bytes)
		size *= 2;
	return size < st->full ? size : st->full;
}

/* Every buffer's last copy is done: it can be given back without a wait. */
static int all_idle(const struct rm_staging *st)
{
	for (int b = 0; b < RM_STAGING_BUFS; b++)
		if (!st->idle[b] && rm_drv_cuEventQuery(st->done[b]) != CUDA_SUCCESS)
			return 0;
	return 1;
}

CUresult rm_staging_open(struct rm_staging *st)
{
	return st->open ? CUDA_SUCCESS : rm_staging_open_for(st, st->full);
}

CUresult rm_staging_open_for(struct rm_staging *st, uint64_t bytes)
{
	size_t want = wanted(st, bytes);
	if (st->open && (st->size >= want || st->shrunk || !all_idle(st)))
		return CUDA_SUCCESS; /* large enough, or cut smaller rather than waited for or
				      * reallocated again and again at the worker's bound */
	if (st->open)
		rm_staging_close(st); /* to grow: nothing is waited for */
	st->size = want;
	uint64_t bytes_taken = (uint64_t)st->size * RM_STAGING_BUFS;
	int err = rm_host_account_take(st->account, bytes_taken);
	while (err && err != -EDQUOT && st->size / 2 >= RM_STAGING_MIN) { /* the worker's bound: smaller */
		st->size /= 2;
		bytes_taken = (uint64_t)st->size * RM_STAGING_BUFS;
		err = rm_host_account_take(st->account, bytes_taken);
	}
	int shrunk = st->size < want;
	if (err) {
		rm_log(RM_LOG_WARN, "session %llu: %llu bytes of staging refused: %s holds %llu bytes of host memory (%s)",
		       (unsigned long long)(st->account ? st->account->owner : 0), (unsigned long long)bytes_taken,
		       err == -EDQUOT ? "the client" : "the worker",
		       (unsigned long long)(err == -EDQUOT ? rm_host_account_held(st->account) : rm_host_memory_held()),
		       err == -EDQUOT ? "client_host_memory_limit" : "worker_host_memory_limit");
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CUresult r = CUDA_SUCCESS;
	int b = 0;
	for (; b < RM_STAGING_BUFS; b++) {
		/* Pinned for every GPU's contexts too: with unified addressing, pinned memory is portable. */
		r = rm_drv_cuMemAllocHost_v2(&st->buf[b], st->size);
		if (r != CUDA_SUCCESS)
			break;
		r = rm_drv_cuEventCreate(&st->done[b], CU_EVENT_DISABLE_TIMING);
		if (r == CUDA_SUCCESS)
			r = rm_drv_cuCtxGetCurrent(&st->done_ctx[b]);
		if (r != CUDA_SUCCESS) {
			if (st->done[b])
				rm_drv_cuEventDestroy_v2(st->done[b]);
			rm_drv_cuMemFreeHost(st->buf[b]);
			break;
		}
		rm_transport_pin(st->buf[b], st->size); /* rdma: registered once per connection */
	}
	if (r != CUDA_SUCCESS) {
		while (b-- > 0) {
			rm_drv_cuEventDestroy_v2(st->done[b]);
			rm_transport_unpin(st->buf[b]);
			rm_drv_cuMemFreeHost(st->buf[b]);
		}
		rm_host_account_give(st->account, bytes_taken);
		rm_staging_init(st, st->full, st->account);
		return r;
	}
	st->open = 1;
	st->shrunk = shrunk;
	return CUDA_SUCCESS;
}

CUresult rm_staging_wait(struct rm_staging *st, int b, void **buf)
{
	CUresult r = rm_staging_open(st);
	if (r != CUDA_SUCCESS)
		return r;
	*buf = st->buf[b];
	return st->idle[b] ? CUDA_SUCCESS : rm_drv_cuEventSynchronize(st->done[b]);
}

CUresult rm_staging_record(struct rm_staging *st, int b, CUstream stream)
{
	CUcontext ctx = NULL;
	CUresult r = rm_drv_cuStreamGetCtx(stream, &ctx);
	if (r != CUDA_SUCCESS || ctx == st->done_ctx[b])
		return r == CUDA_SUCCESS ? rm_drv_cuEventRecord(st->done[b], stream) : r;
	CUevent ev = NULL;
	r = rm_drv_cuCtxPushCurrent_v2(ctx);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
	CUcontext popped;
	rm_drv_cuCtxPopCurrent_v2(&popped);
	if (r != CUDA_SUCCESS)
		return r;
	rm_drv_cuEventSynchronize(st->done[b]); /* waited for already before b was used again */
	rm_drv_cuEventDestroy_v2(st->done[b]);
	st->done[b] = ev;
	st->done_ctx[b] = ctx;
	return rm_drv_cuEventRecord(ev, stream);
}

void rm_staging_close(struct rm_staging *st)
{
	if (!st->open)
		return;
	/* Each buffer's last copy done, its free is made off the thread: cuMemFreeHost waits
	 * for every client's work in the shared context (deferred.h). */
	for (int b = 0; b < RM_STAGING_BUFS; b++) {
		rm_drv_cuEventSynchronize(st->done[b]);
		rm_drv_cuEventDestroy_v2(st->done[b]);
		rm_transport_unpin(st->buf[b]);
		rm_deferred_release(NULL, RM_DEFER_FREE_HOST, (uint64_t)(uintptr_t)st->buf[b], NULL, NULL);
	}
	rm_host_account_give(st->account, (uint64_t)st->size * RM_STAGING_BUFS);
	rm_staging_init(st, st->full, st->account);
}

void rm_staging_release_idle(struct rm_staging *st)
{
	if (st->open && all_idle(st))
		rm_staging_close(st);
}
