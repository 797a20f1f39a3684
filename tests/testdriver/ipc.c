/* CUDA IPC, modelled within one process: a handle names the exporting process and what it
 * exported; opened in that process it is refused as the driver refuses it
 * (CUDA_ERROR_INVALID_CONTEXT), and another process's cannot be opened here (its memory is
 * not shared: CUDA_ERROR_NOT_SUPPORTED). Exporting checks what the driver checks. The VMM
 * path, whose memory is a memfd, works between processes (vmm.c). */
#include "testdriver.h"

#include <string.h>
#include <unistd.h>

#define IPC_MAGIC_MEM 0x50494454u   /* "TDIP" */
#define IPC_MAGIC_EVENT 0x45494454u /* "TDIE" */

struct td_ipc_handle {
	uint32_t magic;
	uint32_t pid;
	uint64_t what; /* the base address or the event */
	uint64_t id;   /* the allocation's buffer id */
};

_Static_assert(sizeof(struct td_ipc_handle) <= CU_IPC_HANDLE_SIZE, "a handle fits CUipcMemHandle");

static void put(char *reserved, uint32_t magic, uint64_t what, uint64_t id)
{
	struct td_ipc_handle h = {magic, (uint32_t)getpid(), what, id};
	memset(reserved, 0, CU_IPC_HANDLE_SIZE);
	memcpy(reserved, &h, sizeof(h));
}

/* Opening handle: refused, as it is this process's own or another's. */
static CUresult open_handle(const char *reserved, uint32_t magic)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_ipc_handle h;
	memcpy(&h, reserved, sizeof(h));
	if (h.magic != magic)
		return CUDA_ERROR_INVALID_VALUE;
	return h.pid == (uint32_t)getpid() ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_NOT_SUPPORTED;
}

TD_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_alloc a;
	if (!pHandle || !td_find_alloc(dptr, 1, &a) || a.kind != TD_ALLOC_DEVICE || a.pool)
		return CUDA_ERROR_INVALID_VALUE; /* cuMemAlloc's memory only: not a pool's, managed or host */
	put(pHandle->reserved, IPC_MAGIC_MEM, a.base, a.buffer_id);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	return open_handle(handle.reserved, IPC_MAGIC_MEM);
}

TD_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

TD_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	(void)dptr;
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE; /* nothing is ever opened here */
}

TD_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	struct td_event *e = (struct td_event *)event;
	if (!pHandle || !e || e->magic != TD_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(e->flags & CU_EVENT_INTERPROCESS) || !(e->flags & CU_EVENT_DISABLE_TIMING))
		return CUDA_ERROR_INVALID_VALUE;
	put(pHandle->reserved, IPC_MAGIC_EVENT, (uint64_t)(uintptr_t)e, 0);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	return open_handle(handle.reserved, IPC_MAGIC_EVENT);
}
