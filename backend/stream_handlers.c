/* Streams, event creation and records, and the calls CUDA runs on the NULL stream. The driver's streams of a
 * client are all non-blocking, taken from the worker's pool (stream_pool.c), and the
 * context's real NULL stream is never used, so clients never wait on one another;
 * each client's legacy stream keeps CUDA's ordering against its own blocking
 * streams (stream_order.c). */
#include "dispatch.h"

#include "api.pb-c.h"
#include "log.h"
#include "stream_pool.h"

static CUresult create_stream(struct rm_session *s, unsigned flags, int priority, int with_priority, CUstream *out)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	if (with_priority) { /* clamped to the range, as CUDA does */
		int least = 0, greatest = 0;
		CUresult r = rm_drv.cuCtxGetStreamPriorityRange(&least, &greatest);
		if (r != CUDA_SUCCESS)
			return r;
		priority = priority > least ? least : priority < greatest ? greatest : priority;
	}
	CUresult r = rm_stream_pool_take(s->cur->ctx, priority, out);
	if (r != CUDA_SUCCESS)
		return r;
	if (!(flags & CU_STREAM_NON_BLOCKING) && (r = rm_stream_order_add(s->cur, *out)) != CUDA_SUCCESS) {
		rm_stream_pool_give(*out);
		return r;
	}
	rm_session_own(s, RM_H_STREAM, *out, 0);
	return CUDA_SUCCESS;
}

void rm_handle_cuStreamCreate(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuStreamCreateReq *req = (void *)rm_request_unpack(rq, &remora__cu_stream_create__req__descriptor);
	if (!req)
		return;
	Remora__CuStreamCreateRep rep = REMORA__CU_STREAM_CREATE__REP__INIT;
	CUstream st = NULL;
	CUresult r = create_stream(s, req->flags, 0, 0, &st);
	rep.phstream = (uint64_t)(uintptr_t)st;
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuStreamCreateWithPriority(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuStreamCreateWithPriorityReq *req =
		(void *)rm_request_unpack(rq, &remora__cu_stream_create_with_priority__req__descriptor);
	if (!req)
		return;
	Remora__CuStreamCreateWithPriorityRep rep = REMORA__CU_STREAM_CREATE_WITH_PRIORITY__REP__INIT;
	CUstream st = NULL;
	CUresult r = create_stream(s, req->flags, req->priority, 1, &st);
	rep.phstream = (uint64_t)(uintptr_t)st;
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* The stream goes back to the pool; its work still runs to the end, as CUDA's does. */
void rm_handle_cuStreamDestroy_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuStreamDestroyV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_stream_destroy_v2__req__descriptor);
	if (!req)
		return;
	CUstream st = NULL;
	CUresult r = rm_session_use(s, RM_H_STREAM, req->hstream, (void **)&st);
	if (r == CUDA_SUCCESS) {
		rm_session_disown(s, RM_H_STREAM, st);
		rm_stream_pool_give(st);
	}
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* When the stream shares its hardware queue, the wait is done here, so that it holds up
 * no other client's work queued behind it. */
void rm_handle_cuStreamWaitEvent(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuStreamWaitEventReq *req = (void *)rm_request_unpack(rq, &remora__cu_stream_wait_event__req__descriptor);
	if (!req)
		return;
	CUevent ev = NULL;
	CUstream st = NULL;
	CUresult r = rm_session_use(s, RM_H_EVENT, req->hevent, (void **)&ev);
	if (r == CUDA_SUCCESS)
		r = rm_session_stream_submit(s, req->hstream, rq->frame.flags, &st);
	if (r == CUDA_SUCCESS)
		r = rm_stream_pool_before_wait(st, ev);
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuStreamWaitEvent(st, ev, (unsigned)req->flags);
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* Events remember their flags: a record of a CU_EVENT_DISABLE_TIMING event does not hold
 * up a shared hardware queue (H200, bench/queue_probe), so it needs no wait for the
 * stream's running work; a timed one does. */
void rm_handle_cuEventCreate(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuEventCreateReq *req = (void *)rm_request_unpack(rq, &remora__cu_event_create__req__descriptor);
	if (!req)
		return;
	Remora__CuEventCreateRep rep = REMORA__CU_EVENT_CREATE__REP__INIT;
	CUevent ev = NULL;
	CUresult r = s->cur ? rm_drv.cuEventCreate(&ev, req->flags) : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_EVENT, (uint64_t)(uintptr_t)ev, req->flags, 0);
	rep.phevent = (uint64_t)(uintptr_t)ev;
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

static CUresult record(struct rm_session *s, struct rm_request *rq, uint64_t event, uint64_t stream, int with_flags,
		       unsigned flags)
{
	const struct rm_handle *h = rm_session_find(s, RM_H_EVENT, event);
	if (!h) {
		void *unused;
		return rm_session_use(s, RM_H_EVENT, event, &unused); /* refused, and logged */
	}
	CUstream st;
	CUresult r = h->size & CU_EVENT_DISABLE_TIMING ? rm_session_stream(s, stream, rq->frame.flags, &st)
						       : rm_session_stream_submit(s, stream, rq->frame.flags, &st);
	if (r != CUDA_SUCCESS)
		return r;
	CUevent ev = (CUevent)(uintptr_t)event;
	if (with_flags)
		return rm_drv.cuEventRecordWithFlags ? rm_drv.cuEventRecordWithFlags(ev, st, flags)
						     : rm_unsupported_by_driver("cuEventRecordWithFlags");
	return rm_drv.cuEventRecord(ev, st);
}

void rm_handle_cuEventRecord(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuEventRecordReq *req = (void *)rm_request_unpack(rq, &remora__cu_event_record__req__descriptor);
	if (!req)
		return;
	CUresult r = record(s, rq, req->hevent, req->hstream, 0, 0);
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuEventRecordWithFlags(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuEventRecordWithFlagsReq *req =
		(void *)rm_request_unpack(rq, &remora__cu_event_record_with_flags__req__descriptor);
	if (!req)
		return;
	CUresult r = record(s, rq, req->hevent, req->hstream, 1, req->flags);
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* The flags the client asked for, not the driver's. */
void rm_handle_cuStreamGetFlags(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuStreamGetFlagsReq *req = (void *)rm_request_unpack(rq, &remora__cu_stream_get_flags__req__descriptor);
	if (!req)
		return;
	Remora__CuStreamGetFlagsRep rep = REMORA__CU_STREAM_GET_FLAGS__REP__INIT;
	CUstream st;
	CUresult r = rm_session_stream(s, req->hstream, rq->frame.flags, &st);
	if (r == CUDA_SUCCESS)
		rep.flags = rm_stream_order_is_blocking(s->cur, st) || st == s->cur->per_thread ? 0 : CU_STREAM_NON_BLOCKING;
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* A NULL-stream call: issued to the client's legacy (or per-thread) stream, then waited for. */
static CUresult on_null_stream(struct rm_session *s, struct rm_request *rq, CUstream *st)
{
	return rm_session_stream_submit(s, 0, rq->frame.flags, st);
}

#define MEMSET_HANDLER(NAME, REQ, DESC, FIELD, ASYNC, UNIT)                                             \
	void rm_handle_##NAME(struct rm_session *s, struct rm_request *rq)                              \
	{                                                                                               \
		REQ *req = (void *)rm_request_unpack(rq, &DESC);                                        \
		if (!req)                                                                               \
			return;                                                                         \
		CUstream st;                                                                            \
		CUresult r = rm_session_check_span(s, req->dstdevice, req->n, UNIT);                     \
		if (r == CUDA_SUCCESS)                                                                  \
			r = on_null_stream(s, rq, &st);                                                 \
		if (r == CUDA_SUCCESS)                                                                  \
			r = rm_drv.ASYNC(req->dstdevice, req->FIELD, req->n, st);                       \
		if (r == CUDA_SUCCESS)                                                                  \
			r = rm_drv.cuStreamSynchronize(st);                                             \
		rm_request_finish(s, rq, r, NULL);                                                      \
		protobuf_c_message_free_unpacked(&req->base, NULL);                                     \
	}

MEMSET_HANDLER(cuMemsetD8_v2, Remora__CuMemsetD8V2Req, remora__cu_memset_d8_v2__req__descriptor, uc, cuMemsetD8Async, 1)
MEMSET_HANDLER(cuMemsetD16_v2, Remora__CuMemsetD16V2Req, remora__cu_memset_d16_v2__req__descriptor, us, cuMemsetD16Async, 2)
MEMSET_HANDLER(cuMemsetD32_v2, Remora__CuMemsetD32V2Req, remora__cu_memset_d32_v2__req__descriptor, ui, cuMemsetD32Async, 4)

void rm_handle_cuMemcpyDtoD_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuMemcpyDtoDV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_memcpy_dto_d_v2__req__descriptor);
	if (!req)
		return;
	CUstream st;
	CUresult r = rm_session_check_range(s, req->dstdevice, req->bytecount);
	if (r == CUDA_SUCCESS)
		r = rm_session_check_range(s, req->srcdevice, req->bytecount);
	if (r == CUDA_SUCCESS)
		r = on_null_stream(s, rq, &st);
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuMemcpyDtoDAsync_v2(req->dstdevice, req->srcdevice, req->bytecount, st);
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuStreamSynchronize(st);
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}
