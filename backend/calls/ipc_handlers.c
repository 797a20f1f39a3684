/* CUDA IPC between clients of one tenant (typed bodies of generated handlers; the exports and
 * their holders: backend/worker/ipc.h). An exported allocation or event is the very one the
 * importer gets: same process, same context, so the same device address and CUevent. The
 * driver is asked first whether it would export the object (its answer is the client's, as
 * natively), and its own handle is not used. */
#include "deferred.h"
#include "dispatch.h"

#include "ipc.h"
#include "log.h"
#include "peer_access.h"

/* An opened allocation's parent (RM_H_IPC_MEMORY): the peer access its open holds, or 0. */
static uint64_t peer_hold(CUdevice from, CUdevice to)
{
	return 1ull << 63 | (uint64_t)(uint32_t)from << 16 | (uint64_t)(uint16_t)to;
}

void rm_ipc_peer_unhold(uint64_t hold)
{
	if (hold >> 63)
		rm_peer_hold_gpus((CUdevice)(hold >> 16 & 0xffff), (CUdevice)(hold & 0xffff), 0);
}

/* The driver's ordinal of the GPU ptr is on; -1 if it does not say. */
static int device_of(uint64_t ptr)
{
	int dev = -1;
	if (rm_drv_cuPointerGetAttribute(&dev, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr) != CUDA_SUCCESS)
		dev = -1;
	return dev;
}

/* A cuMemAlloc allocation of the client's (dptr=unchecked): the whole allocation that holds dptr. */
CUresult rm_body_cuIpcGetMemHandle(struct rm_channel *s, CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	struct rm_handle h;
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!rm_session_range_of(s, dptr, &h) || h.kind != RM_H_MEMORY) {
		rm_session_log(s, RM_LOG_WARN, "refused to export 0x%llx (CUDA IPC): not in an allocation of its own",
			       (unsigned long long)dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUipcMemHandle native;
	CUresult r = rm_drv_cuIpcGetMemHandle(&native, dptr);
	if (r != CUDA_SUCCESS)
		return r;
	struct rm_ipc_object o = {.value = h.value, .size = h.size, .device = device_of(h.value)};
	return rm_ipc_export(s, RM_IPC_MEMORY, &o, (uint8_t *)pHandle->reserved);
}

/* The exporter's allocation, recorded as usable memory of the importer's and charged to it
 * (once: opened again, it is counted, as natively). On another GPU than the importer's, with
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, the importer's GPU's access to it is held while open. */
CUresult rm_body_cuIpcOpenMemHandle_v2(struct rm_channel *s, CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
		return CUDA_ERROR_INVALID_VALUE;
	struct rm_ipc_object o;
	int again = 0;
	CUresult r = rm_ipc_open(s, RM_IPC_MEMORY, handle.reserved, sizeof(handle.reserved), &o, &again);
	if (r == CUDA_SUCCESS && !again) {
		uint64_t hold = 0;
		r = rm_session_charge(s, o.size);
		if (r == CUDA_SUCCESS && (Flags & CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) && o.device >= 0 &&
		    o.device != s->cur->dev) {
			if ((r = rm_peer_hold_gpus(s->cur->dev, o.device, 1)) == CUDA_SUCCESS)
				hold = peer_hold(s->cur->dev, o.device);
			else
				rm_session_uncharge(s, o.size);
		}
		if (r == CUDA_SUCCESS)
			rm_session_own_memory(s, RM_H_IPC_MEMORY, o.value, o.size, hold);
		else if (rm_ipc_leave(s, RM_IPC_MEMORY, o.value) == RM_IPC_LAST) /* its exporter freed it meanwhile */
			rm_drv_cuMemFree_v2(o.value);
	}
	if (r == CUDA_SUCCESS)
		*pdptr = o.value;
	return r;
}

/* Once closed as often as opened: no longer the client's, and freed if the exporter freed it
 * meanwhile: its own work done, with cuMemFree on the release thread (deferred.h), which
 * waits there for every client's work, the exporter's included, that may still use it. */
CUresult rm_body_cuIpcCloseMemHandle(struct rm_channel *s, CUdeviceptr dptr)
{
	struct rm_handle h;
	if (!rm_session_find(s, RM_H_IPC_MEMORY, dptr, NULL)) {
		rm_session_log(s, RM_LOG_WARN, "refused to close 0x%llx: not memory it opened (CUDA IPC)",
			       (unsigned long long)dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (rm_ipc_unref(s, RM_IPC_MEMORY, dptr) > 0)
		return CUDA_SUCCESS;
	if (!rm_session_take(s, RM_H_IPC_MEMORY, dptr, &h)) /* another thread closed it first */
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	if (rm_ipc_leave(s, RM_IPC_MEMORY, dptr) == RM_IPC_LAST) {
		r = rm_session_synchronize_all(s);
		rm_deferred_release(NULL, RM_DEFER_MEM_FREE, dptr, NULL, NULL);
	}
	rm_session_uncharge(s, h.size);
	rm_ipc_peer_unhold(h.parent);
	return r;
}

/* An event of the client's that the driver would export (CU_EVENT_INTERPROCESS), taken to
 * be of the context current at the export, as where a program makes one to export it: an
 * importer's record from another context goes through it (rm_ipc_event_record). */
CUresult rm_body_cuIpcGetEventHandle(struct rm_channel *s, CUipcEventHandle *pHandle, CUevent event)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUipcEventHandle native;
	CUresult r = rm_drv_cuIpcGetEventHandle(&native, event);
	if (r != CUDA_SUCCESS)
		return r;
	struct rm_ipc_object o = {.value = (uint64_t)(uintptr_t)event, .device = -1, .ctx = s->cur->ctx};
	return rm_ipc_export(s, RM_IPC_EVENT, &o, (uint8_t *)pHandle->reserved);
}

/* The exporter's event, the importer's to record, wait for and destroy: as natively, it
 * behaves as one made with CU_EVENT_DISABLE_TIMING. Waited for or queried from any context, it
 * is the export's latest record; recorded on a stream of another context than its own, it is
 * recorded through a proxy of that context (rm_ipc_event_record). */
CUresult rm_body_cuIpcOpenEventHandle(struct rm_channel *s, CUevent *phEvent, CUipcEventHandle handle)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	struct rm_ipc_object o;
	int again = 0;
	CUresult r = rm_ipc_open(s, RM_IPC_EVENT, handle.reserved, sizeof(handle.reserved), &o, &again);
	if (r != CUDA_SUCCESS)
		return r;
	if (!again)
		rm_session_own_memory(s, RM_H_EVENT, o.value, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS, 0);
	*phEvent = (CUevent)(uintptr_t)o.value;
	return CUDA_SUCCESS;
}

/* An event another client opened stays for it (hEvent=del:body): the driver's destroy is the
 * last holder's. Opened more than once, one destroy each. */
CUresult rm_body_cuEventDestroy_v2(struct rm_channel *s, CUevent hEvent)
{
	uint64_t v = (uint64_t)(uintptr_t)hEvent;
	struct rm_handle h;
	int refs = rm_ipc_unref(s, RM_IPC_EVENT, v);
	if (refs > 0)
		return CUDA_SUCCESS;
	if (!rm_session_take(s, RM_H_EVENT, v, &h))
		return CUDA_ERROR_INVALID_HANDLE;
	if (refs == 0 && rm_ipc_leave(s, RM_IPC_EVENT, v) == RM_IPC_OTHERS_HOLD)
		return CUDA_SUCCESS;
	CUresult r = rm_drv_cuEventDestroy_v2(hEvent);
	if (r != CUDA_SUCCESS && refs < 0)
		rm_session_own_memory(s, RM_H_EVENT, v, h.size, h.parent); /* still the client's */
	return r;
}
