/* CUDA IPC between clients of one tenant (typed bodies of generated handlers; the exports and
 * their holders: backend/worker/ipc.h). An exported allocation or event is the very one the
 * importer gets: same process, same context, so the same device address and CUevent. The
 * driver is asked first whether it would export the object (its answer is the client's, as
 * natively), and its own handle is not used. */
#include "deferred.h"
#include "dispatch.h"

#include "ipc.h"
#include "log.h"
#include "migrate.h"
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

/* An opened allocation's parent bit: imported from a pool (cuMemPoolImportPointer), freed by
 * cuMemFree or cuMemFreeAsync rather than closed. */
#define POOL_IMPORT (1ull << 62)

/* Undoes an open of memory that is refused after all: result r. */
static CUresult give_back(struct rm_channel *s, const struct rm_ipc_object *o, int again, CUresult r)
{
	if (again)
		rm_ipc_unref(s, RM_IPC_MEMORY, o->value);
	else if (rm_ipc_leave(s, RM_IPC_MEMORY, o->value) == RM_IPC_LAST) /* its exporter freed it meanwhile */
		rm_deferred_release(NULL, RM_DEFER_MEM_FREE, o->value, NULL, NULL);
	return r;
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
	/* The window's memory (migratable_memory) is mapped, not the driver's allocation: the
	 * driver would not export it, but the worker shares it as it is. */
	int window = rm_session_range_of(s, dptr, &h) && h.kind == RM_H_MOVED_MEMORY && rm_migrate_owns_run(s, &h);
	if (!window && (!rm_session_range_of(s, dptr, &h) || h.kind != RM_H_MEMORY)) {
		rm_session_log(s, RM_LOG_WARN, "refused to export 0x%llx (CUDA IPC): not in an allocation of its own",
			       (unsigned long long)dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUipcMemHandle native;
	CUresult r = window ? CUDA_SUCCESS : rm_drv_cuIpcGetMemHandle(&native, dptr);
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
	if (r == CUDA_SUCCESS && o.pool) /* a pool's allocation opens by cuMemPoolImportPointer only */
		return give_back(s, &o, again, CUDA_ERROR_INVALID_VALUE);
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
			rm_deferred_release(NULL, RM_DEFER_MEM_FREE, o.value, NULL, NULL);
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
	if (!rm_session_find(s, RM_H_IPC_MEMORY, dptr, &h) || (h.parent & POOL_IMPORT)) {
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
	/* The driver's event is an ordinary one (rm_body_cuEventCreate): the client's flags say
	 * whether it may be exported, as the driver would. */
	struct rm_handle h;
	if (!rm_session_find(s, RM_H_EVENT, (uint64_t)(uintptr_t)event, &h))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(h.size & CU_EVENT_INTERPROCESS) || !(h.size & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
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

/* A pool of the client's made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR (its handle
 * types are its record's size), not one it imported. */
CUresult rm_body_cuMemPoolExportToShareableHandle(struct rm_channel *s, void *handle_out, CUmemoryPool pool,
						  CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct rm_handle p;
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported_use("cuMemPoolExportToShareableHandle of a handle type but a POSIX file descriptor");
	uint64_t v = (uint64_t)(uintptr_t)pool;
	if (flags || !rm_session_find(s, RM_H_MEMPOOL, v, &p) || !(p.size & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ||
	    rm_ipc_imported(s, RM_IPC_POOL, v)) {
		rm_session_log(s, RM_LOG_WARN, "refused to export pool 0x%llx: not one it made with "
			       "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR", (unsigned long long)v);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct rm_ipc_object o = {.value = v, .device = -1};
	return rm_ipc_export(s, RM_IPC_POOL, &o, handle_out);
}

/* The exporter's pool, recorded as the importer's (one record however often imported; each
 * import is given back by a cuMemPoolDestroy). */
CUresult rm_body_cuMemPoolImportFromShareableHandle(struct rm_channel *s, CUmemoryPool *pool_out, void *handle,
						    CUmemAllocationHandleType handleType, unsigned long long flags)
{
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported_use("cuMemPoolImportFromShareableHandle of a handle type but a POSIX file descriptor");
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	struct rm_ipc_object o;
	int again = 0;
	CUresult r = rm_ipc_open(s, RM_IPC_POOL, handle, RM_IPC_TOKEN_SIZE, &o, &again);
	if (r != CUDA_SUCCESS)
		return r;
	if (!again)
		rm_session_own_memory(s, RM_H_MEMPOOL, o.value, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
	*pool_out = (CUmemoryPool)(uintptr_t)o.value;
	return CUDA_SUCCESS;
}

/* The whole allocation at ptr (its base), of an exportable pool of the client's. */
CUresult rm_body_cuMemPoolExportPointer(struct rm_channel *s, CUmemPoolPtrExportData *shareData_out, CUdeviceptr ptr)
{
	struct rm_handle h, p;
	CUmemoryPool pool = NULL;
	if (!rm_session_range_of(s, ptr, &h) || h.kind != RM_H_MEMORY || h.value != ptr ||
	    rm_drv_cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr) != CUDA_SUCCESS ||
	    !rm_session_find(s, RM_H_MEMPOOL, (uint64_t)(uintptr_t)pool, &p) ||
	    !(p.size & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) {
		rm_session_log(s, RM_LOG_WARN, "refused to export 0x%llx: not an allocation of an exportable pool of its own",
			       (unsigned long long)ptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct rm_ipc_object o = {.value = h.value, .size = h.size, .device = device_of(h.value),
				  .pool = (uint64_t)(uintptr_t)pool};
	return rm_ipc_export(s, RM_IPC_MEMORY, &o, shareData_out->reserved);
}

/* An allocation of a pool the client imported: the exporter's address, usable memory of the
 * importer's, charged to it, until it frees it (rm_ipc_free_imported) or goes. */
CUresult rm_body_cuMemPoolImportPointer(struct rm_channel *s, CUdeviceptr *ptr_out, CUmemoryPool pool,
					CUmemPoolPtrExportData *shareData)
{
	uint64_t v = (uint64_t)(uintptr_t)pool;
	if (!rm_ipc_imported(s, RM_IPC_POOL, v)) {
		rm_session_log(s, RM_LOG_WARN, "refused to import a pointer into pool 0x%llx: not a pool it imported",
			       (unsigned long long)v);
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct rm_ipc_object o;
	int again = 0;
	CUresult r = rm_ipc_open(s, RM_IPC_MEMORY, shareData->reserved, sizeof(shareData->reserved), &o, &again);
	if (r != CUDA_SUCCESS)
		return r;
	if (o.pool != v)
		return give_back(s, &o, again, CUDA_ERROR_INVALID_VALUE);
	if (!again && (r = rm_session_charge(s, o.size)) != CUDA_SUCCESS)
		return give_back(s, &o, again, r);
	if (!again)
		rm_session_own_memory(s, RM_H_IPC_MEMORY, o.value, o.size, POOL_IMPORT);
	*ptr_out = o.value;
	return CUDA_SUCCESS;
}

CUresult rm_ipc_free_imported(struct rm_channel *s, CUdeviceptr dptr, CUstream st)
{
	struct rm_handle h;
	if (!rm_session_find(s, RM_H_IPC_MEMORY, dptr, &h) || !(h.parent & POOL_IMPORT))
		return CUDA_ERROR_NOT_FOUND;
	if (rm_ipc_unref(s, RM_IPC_MEMORY, dptr) > 0)
		return CUDA_SUCCESS;
	if (!rm_session_take(s, RM_H_IPC_MEMORY, dptr, &h)) /* another thread freed it first */
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	if (rm_ipc_leave(s, RM_IPC_MEMORY, dptr) == RM_IPC_LAST) {
		if (st) {
			r = rm_drv_cuMemFreeAsync(dptr, st);
		} else {
			r = rm_session_synchronize_all(s);
			rm_deferred_release(NULL, RM_DEFER_MEM_FREE, dptr, NULL, NULL);
		}
	}
	rm_session_uncharge(s, h.size);
	rm_ipc_peer_unhold(h.parent);
	return r;
}
