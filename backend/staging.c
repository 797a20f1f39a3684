/* Staging buffers (staging.h). */
#include "staging.h"

#include <errno.h>

#include "driver_table.h"
#include "host_memory.h"
#include "log.h"
#include "transport.h"

void rm_staging_init(struct rm_staging *st, size_t size, struct rm_host_account *account)
{
	*st = (struct rm_staging){.size = size, .full = size, .account = account};
}

CUresult rm_staging_open(struct rm_staging *st)
{
	if (st->open)
		return CUDA_SUCCESS;
	st->size = st->full;
	uint64_t bytes = (uint64_t)st->size * RM_STAGING_BUFS;
	int err = rm_host_account_take(st->account, bytes);
	while (err && err != -EDQUOT && st->size / 2 >= RM_STAGING_MIN) { /* the worker's bound: smaller */
		st->size /= 2;
		bytes = (uint64_t)st->size * RM_STAGING_BUFS;
		err = rm_host_account_take(st->account, bytes);
	}
	if (err) {
		rm_log(RM_LOG_WARN, "session %llu: %llu bytes of staging refused: %s holds %llu bytes of host memory (%s)",
		       (unsigned long long)(st->account ? st->account->owner : 0), (unsigned long long)bytes,
		       err == -EDQUOT ? "the client" : "the worker",
		       (unsigned long long)(err == -EDQUOT ? rm_host_account_held(st->account) : rm_host_memory_held()),
		       err == -EDQUOT ? "client_host_memory_limit" : "worker_host_memory_limit");
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	CUresult r = CUDA_SUCCESS;
	int b = 0;
	for (; b < RM_STAGING_BUFS; b++) {
		r = rm_drv.cuMemAllocHost_v2(&st->buf[b], st->size);
		if (r != CUDA_SUCCESS)
			break;
		r = rm_drv.cuEventCreate(&st->done[b], CU_EVENT_DISABLE_TIMING);
		if (r != CUDA_SUCCESS) {
			rm_drv.cuMemFreeHost(st->buf[b]);
			break;
		}
		rm_transport_pin(st->buf[b], st->size); /* rdma: registered once per connection */
	}
	if (r != CUDA_SUCCESS) {
		while (b-- > 0) {
			rm_drv.cuEventDestroy_v2(st->done[b]);
			rm_transport_unpin(st->buf[b]);
			rm_drv.cuMemFreeHost(st->buf[b]);
		}
		rm_host_account_give(st->account, bytes);
		rm_staging_init(st, st->full, st->account);
		return r;
	}
	st->open = 1;
	return CUDA_SUCCESS;
}

CUresult rm_staging_wait(struct rm_staging *st, int b, void **buf)
{
	CUresult r = rm_staging_open(st);
	if (r != CUDA_SUCCESS)
		return r;
	*buf = st->buf[b];
	return st->idle[b] ? CUDA_SUCCESS : rm_drv.cuEventSynchronize(st->done[b]);
}

void rm_staging_close(struct rm_staging *st)
{
	if (!st->open)
		return;
	for (int b = 0; b < RM_STAGING_BUFS; b++) {
		rm_drv.cuEventSynchronize(st->done[b]);
		rm_drv.cuEventDestroy_v2(st->done[b]);
		rm_transport_unpin(st->buf[b]);
		rm_drv.cuMemFreeHost(st->buf[b]);
	}
	rm_host_account_give(st->account, (uint64_t)st->size * RM_STAGING_BUFS);
	rm_staging_init(st, st->full, st->account);
}

void rm_staging_release_idle(struct rm_staging *st)
{
	for (int b = 0; st->open && b < RM_STAGING_BUFS; b++)
		if (!st->idle[b] && rm_drv.cuEventQuery(st->done[b]) != CUDA_SUCCESS)
			return;
	rm_staging_close(st);
}
