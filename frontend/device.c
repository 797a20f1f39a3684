/* Primary contexts: the daemon hands out its shared context of the GPU; the
 * client remembers which device each context belongs to. */
#include "client.h"

#include "api.pb-c.h"
#include "query_cache.h"

RM_EXPORT CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuDevicePrimaryCtxRetainReq req = REMORA__CU_DEVICE_PRIMARY_CTX_RETAIN__REQ__INIT;
	req.dev = dev;
	Remora__CuDevicePrimaryCtxRetainRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuDevicePrimaryCtxRetain, &req.base,
				   &remora__cu_device_primary_ctx_retain__rep__descriptor, (ProtobufCMessage **)&rep);
	rm_query_cache_forget(RM_OP_cuDevicePrimaryCtxGetState); /* it is active now */
	if (r == CUDA_SUCCESS && rep) {
		*pctx = (CUcontext)(uintptr_t)rep->pctx;
		rm_ctx_known(*pctx, dev);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuStreamDestroy(CUstream hStream)
{
	return cuStreamDestroy_v2(hStream);
}

RM_EXPORT CUresult CUDAAPI cuEventDestroy(CUevent hEvent)
{
	return cuEventDestroy_v2(hEvent);
}
