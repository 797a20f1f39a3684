/* CUDA IPC's events on the client (proto/api.spec, "CUDA IPC"). Natively a record of an
 * interprocess event is in the event when cuEventRecord returns, so another process told of
 * it (by shared memory, a pipe: simpleIPC's barrier) waits for it. Here a record is an async
 * call, which could still sit in this client's batch, or in the daemon's socket, when the
 * other client's wait arrives. So a record of an event this process exported or opened is
 * followed by a query on the same channel, whose reply comes once the record is done and
 * carries its error. The events are kept in a small list, rare as they are. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t *events;
static size_t nevents, cap;

static int known(uint64_t ev)
{
	int found = 0;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nevents && !found; i++)
		found = events[i] == ev;
	pthread_mutex_unlock(&lock);
	return found;
}

/* CUDA_ERROR_OUT_OF_MEMORY where the list cannot grow: the record's order is not promised. */
static CUresult remember(uint64_t ev)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	size_t i = 0;
	while (i < nevents && events[i] != ev)
		i++;
	if (i == nevents && nevents == cap) {
		size_t grown = cap ? 2 * cap : 16;
		uint64_t *p = realloc(events, grown * sizeof(*p));
		if (p)
			events = p, cap = grown;
	}
	if (i == nevents && nevents < cap) {
		events[nevents] = ev;
		__atomic_store_n(&nevents, nevents + 1, __ATOMIC_RELEASE); /* read without the lock: a hint */
	} else if (i == nevents) {
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

static void forget(uint64_t ev)
{
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nevents; i++)
		if (events[i] == ev) {
			events[i] = events[nevents - 1];
			__atomic_store_n(&nevents, nevents - 1, __ATOMIC_RELEASE);
			break;
		}
	pthread_mutex_unlock(&lock);
}

/* After an interprocess event's record: the record done, its error (NOT_READY is none). */
static CUresult settle(uint64_t ev)
{
	Remora__CuEventQueryReq req = REMORA__CU_EVENT_QUERY__REQ__INIT;
	req.hevent = ev;
	CUresult r = rm_rpc_simple(RM_OP_cuEventQuery, &req.base, NULL, NULL);
	return r == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : r;
}

RM_EXPORT CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream)
{
	Remora__CuEventRecordReq req = REMORA__CU_EVENT_RECORD__REQ__INIT;
	uint64_t ev = (uint64_t)(uintptr_t)hEvent;
	req.hevent = ev;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	CUresult r = rm_rpc_ordered(RM_OP_cuEventRecord, &req.base, (uint64_t)(uintptr_t)hStream, ev);
	return r == CUDA_SUCCESS && __atomic_load_n(&nevents, __ATOMIC_RELAXED) && known(ev) ? settle(ev) : r;
}

RM_EXPORT CUresult CUDAAPI cuEventRecordWithFlags(CUevent hEvent, CUstream hStream, unsigned int flags)
{
	Remora__CuEventRecordWithFlagsReq req = REMORA__CU_EVENT_RECORD_WITH_FLAGS__REQ__INIT;
	uint64_t ev = (uint64_t)(uintptr_t)hEvent;
	req.hevent = ev;
	req.hstream = (uint64_t)(uintptr_t)hStream;
	req.flags = flags;
	CUresult r = rm_rpc_ordered(RM_OP_cuEventRecordWithFlags, &req.base, (uint64_t)(uintptr_t)hStream, ev);
	return r == CUDA_SUCCESS && __atomic_load_n(&nevents, __ATOMIC_RELAXED) && known(ev) ? settle(ev) : r;
}

RM_EXPORT CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent)
{
	Remora__CuEventDestroyV2Req req = REMORA__CU_EVENT_DESTROY_V2__REQ__INIT;
	req.hevent = (uint64_t)(uintptr_t)hEvent;
	CUresult r = rm_rpc_simple(RM_OP_cuEventDestroy_v2, &req.base, NULL, NULL);
	if (r == CUDA_SUCCESS)
		forget(req.hevent);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	Remora__CuIpcGetEventHandleReq req = REMORA__CU_IPC_GET_EVENT_HANDLE__REQ__INIT;
	req.event = (uint64_t)(uintptr_t)event;
	if (!pHandle)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuIpcGetEventHandleRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuIpcGetEventHandle, &req.base, &remora__cu_ipc_get_event_handle__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && rep->phandle.len != sizeof(*pHandle))
		r = rm_rpc_bad_reply("cuIpcGetEventHandle: the reply's handle is %zu bytes, not %zu", rep->phandle.len,
				     sizeof(*pHandle));
	if (r == CUDA_SUCCESS && rep)
		memcpy(pHandle, rep->phandle.data, sizeof(*pHandle));
	rm_rpc_free(rep ? &rep->base : NULL);
	return r == CUDA_SUCCESS ? remember(req.event) : r;
}

RM_EXPORT CUresult CUDAAPI cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	Remora__CuIpcOpenEventHandleReq req = REMORA__CU_IPC_OPEN_EVENT_HANDLE__REQ__INIT;
	req.handle.data = (uint8_t *)&handle;
	req.handle.len = sizeof(handle);
	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuIpcOpenEventHandleRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuIpcOpenEventHandle, &req.base, &remora__cu_ipc_open_event_handle__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep)
		*phEvent = (CUevent)(uintptr_t)rep->phevent;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r == CUDA_SUCCESS ? remember((uint64_t)(uintptr_t)*phEvent) : r;
}
