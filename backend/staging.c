/* Staging buffers (staging.h). */
#include "staging.h"

#include "driver_table.h"
#include "host_memory.h"
#include "transport.h"

void rm_staging_init(struct rm_staging *st, size_t size)
{
	*st = (struct rm_staging){.size = size};
}

CUresult rm_staging_open(struct rm_staging *st)
{
	if (st->open)
		return CUDA_SUCCESS;
	if (rm_host_memory_take((uint64_t)st->size * RM_STAGING_BUFS))
		return CUDA_ERROR_OUT_OF_MEMORY;
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
		rm_host_memory_give((uint64_t)st->size * RM_STAGING_BUFS);
		rm_staging_init(st, st->size);
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
	rm_host_memory_give((uint64_t)st->size * RM_STAGING_BUFS);
	rm_staging_init(st, st->size);
}
