/* Streams, event creation and records. The driver's streams of a
 * client are all non-blocking, taken from the worker's pool (stream_pool.c), and the
 * context's real NULL stream is never used, so clients never wait on one another;
 * each client's legacy stream keeps CUDA's ordering against its own blocking
 * streams (stream_order.c). */
#include "dispatch.h"

#include "ipc.h"
#include "kernel_timing.h"
#include "stream_pool.h"
#include "stream_wait.h"

/* Typed bodies of generated handlers (proto/api.spec, daemon_handlers.h); the handler
 * records a new stream as the client's (phStream=new) and forgets a destroyed one. */

static CUresult create_stream(struct rm_channel *s, unsigned flags, int priority, int with_priority, CUstream *out)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (flags & ~(unsigned)CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	if (with_priority) { /* clamped to the range, as CUDA does */
		int least = 0, greatest = 0;
		CUresult r = rm_drv_cuCtxGetStreamPriorityRange(&least, &greatest);
		if (r != CUDA_SUCCESS)
			return r;
		priority = priority > least ? least : priority < greatest ? greatest : priority;
	}
	CUresult r = rm_stream_pool_take(s->cur->ctx, priority, out);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = rm_ctx_events_adopt(s->cur, *out)) != CUDA_SUCCESS ||
	    (!(flags & CU_STREAM_NON_BLOCKING) && (r = rm_stream_order_add(s->cur, *out)) != CUDA_SUCCESS)) {
		rm_stream_pool_give(*out);
		*out = NULL;
	}
	return r;
}

CUresult rm_body_cuStreamCreate(struct rm_channel *s, CUstream *phStream, unsigned int Flags)
{
	return create_stream(s, Flags, 0, 0, phStream);
}

CUresult rm_body_cuStreamCreateWithPriority(struct rm_channel *s, CUstream *phStream, unsigned int flags, int priority)
{
	return create_stream(s, flags, priority, 1, phStream);
}

/* The stream goes back to the pool; its work still runs to the end, as CUDA's does. */
CUresult rm_body_cuStreamDestroy_v2(struct rm_channel *s, CUstream hStream)
{
	/* A stream a capture holds stays out of the pool until the capture ends, as the
	 * capture goes on natively; where too many wait so, a capture it began ends here. */
	int capturing = s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 && rm_capture_active(hStream);
	if (capturing && rm_capture_retire(s->cur, hStream))
		return CUDA_SUCCESS;
	CUgraph g = NULL;
	if (capturing && rm_drv_cuStreamEndCapture(hStream, &g) == CUDA_SUCCESS) {
		__atomic_sub_fetch(&s->cur->captures, 1, __ATOMIC_ACQ_REL);
		rm_capture_drop_graph(s, g, 0);
	}
	rm_stream_pool_give(hStream);
	return CUDA_SUCCESS;
}

/* Its return tells kernel timing that the stream's spans have ended (rm_stream_wait). */
CUresult rm_body_cuStreamSynchronize(struct rm_channel *s, CUstream hStream)
{
	return rm_stream_wait(s, hStream);
}

/* When the stream shares its hardware queue, the wait is done here, so that it holds up
 * no other client's work queued behind it. */
CUresult rm_body_cuStreamWaitEvent(struct rm_channel *s, CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	/* During a capture the event may be a captured one, which may not be queried. */
	CUresult r = s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 ? CUDA_SUCCESS
									      : rm_stream_pool_before_wait(hStream, hEvent);
	return r == CUDA_SUCCESS ? rm_drv_cuStreamWaitEvent(hStream, hEvent, Flags) : r;
}

/* The flags the client asked for, not the driver's. */
CUresult rm_body_cuStreamGetFlags(struct rm_channel *s, CUstream hStream, unsigned int *flags)
{
	*flags = rm_stream_order_is_blocking(s->cur, hStream) ? 0 : CU_STREAM_NON_BLOCKING; /* per-thread streams are blocking */
	return CUDA_SUCCESS;
}

/* Events remember their flags (phEvent=new:body): a record of a CU_EVENT_DISABLE_TIMING
 * event does not hold up a shared hardware queue (H200, bench/queue_probe), so it needs
 * no wait for the stream's running work; a timed one does. */
/* CUDA IPC between clients is the worker's own (ipc.h): the driver's event is an ordinary
 * one, the client's flags kept in its handle. On 2 H200s a stream of one device waiting on
 * an interprocess event of the other's context crashed the driver (SIGSEGV in
 * cuStreamWaitEvent), where ordinary events are waited on across devices. */
CUresult rm_body_cuEventCreate(struct rm_channel *s, CUevent *phEvent, unsigned int Flags)
{
	CUresult r = s->cur ? rm_drv_cuEventCreate(phEvent, Flags & ~(unsigned)CU_EVENT_INTERPROCESS)
			    : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_EVENT, (uint64_t)(uintptr_t)*phEvent, Flags, 0);
	return r;
}

/* The stream arrives selected without the wait for submission (hStream=nosubmit):
 * only a timed record waits. *ipc: an interprocess event (CUDA IPC: ipc.h records it). */
static CUresult before_record(struct rm_channel *s, CUevent ev, CUstream st, int *ipc)
{
	struct rm_handle h;
	*ipc = 0;
	if (s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 && rm_capture_active(st))
		return CUDA_SUCCESS; /* captured: nothing runs now */
	rm_kernel_timing_close_stream(s, st);
	int found = rm_session_find(s, RM_H_EVENT, (uint64_t)(uintptr_t)ev, &h);
	*ipc = found && (h.size & CU_EVENT_INTERPROCESS);
	return found && (h.size & CU_EVENT_DISABLE_TIMING) ? CUDA_SUCCESS : rm_stream_pool_before_submit(st);
}

CUresult rm_body_cuEventRecord(struct rm_channel *s, CUevent hEvent, CUstream hStream)
{
	int ipc;
	CUresult r = before_record(s, hEvent, hStream, &ipc);
	if (r != CUDA_SUCCESS)
		return r;
	return ipc ? rm_ipc_event_record(s, hEvent, hStream, 0) : rm_drv_cuEventRecord(hEvent, hStream);
}

CUresult rm_body_cuEventRecordWithFlags(struct rm_channel *s, CUevent hEvent, CUstream hStream, unsigned int flags)
{
	int ipc;
	CUresult r = before_record(s, hEvent, hStream, &ipc);
	if (r != CUDA_SUCCESS)
		return r;
	return ipc && !flags ? rm_ipc_event_record(s, hEvent, hStream, 0)
			     : rm_drv_cuEventRecordWithFlags(hEvent, hStream, flags);
}

/* A batch's writes must address the client's memory; a wait by a word would hold up the
 * hardware queue other clients' streams share until the client writes it: refused. */
static CUresult check_mem_ops(struct rm_channel *s, unsigned count, const CUstreamBatchMemOpParams *ops)
{
	for (unsigned i = 0; i < count; i++) {
		CUresult r;
		switch (ops[i].operation) {
		case CU_STREAM_MEM_OP_WRITE_VALUE_32:
			r = rm_session_check_range(s, ops[i].writeValue.address, 4);
			break;
		case CU_STREAM_MEM_OP_WRITE_VALUE_64:
			r = rm_session_check_range(s, ops[i].writeValue.address, 8);
			break;
		case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
		case CU_STREAM_MEM_OP_BARRIER:
			r = CUDA_SUCCESS;
			break;
		case CU_STREAM_MEM_OP_WAIT_VALUE_32:
		case CU_STREAM_MEM_OP_WAIT_VALUE_64:
			return rm_unsupported_use("cuStreamBatchMemOp with a wait by a word");
		default:
			return rm_unsupported_use("cuStreamBatchMemOp with an operation Remora does not know");
		}
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}

CUresult rm_body_cuStreamBatchMemOp(struct rm_channel *s, CUstream stream, unsigned int count,
				    CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	CUresult r = check_mem_ops(s, count, paramArray);
	return r == CUDA_SUCCESS ? rm_drv_cuStreamBatchMemOp(stream, count, paramArray, flags) : r;
}

CUresult rm_body_cuStreamBatchMemOp_v2(struct rm_channel *s, CUstream stream, unsigned int count,
				       CUstreamBatchMemOpParams *paramArray, unsigned int flags)
{
	CUresult r = check_mem_ops(s, count, paramArray);
	return r == CUDA_SUCCESS ? rm_drv_cuStreamBatchMemOp_v2(stream, count, paramArray, flags) : r;
}
