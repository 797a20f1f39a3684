/* Contexts the program creates: each is the client's own context on the daemon, over the
 * GPU's shared context (backend/worker/contexts.h), made current on creation and, with
 * what the program made in it, gone with cuCtxDestroy. */
#include "client.h"

#include "export_tables.h"
#include "query_cache.h"
#include "remora.pb-c.h"

#define CREATE_FLAGS (CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX | CU_CTX_SYNC_MEMOPS)

/* Execution affinity (a share of the GPU's SMs) and CIG (a graphics queue) would need
 * a context of its own on the GPU host: refused rather than given a whole GPU. */
RM_EXPORT CUresult CUDAAPI cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
					  CUdevice dev)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (ctxCreateParams && (ctxCreateParams->execAffinityParams || ctxCreateParams->cigParams))
		return rm_unsupported("cuCtxCreate_v4 with execution affinity or CIG parameters");
	if (flags & (CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE))
		return rm_unsupported("cuCtxCreate_v4 with coredump flags");
	unsigned sched = flags & CU_CTX_SCHED_MASK;
	if (flags & ~(unsigned)CREATE_FLAGS || (sched & (sched - 1)))
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CtxCreate req = REMORA__CTX_CREATE__INIT;
	req.flags = flags;
	req.dev = dev;
	Remora__CtxCreateReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuCtxCreate_v4, &req.base, &remora__ctx_create_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && (!rep || !rep->ctx))
		r = rm_rpc_bad_reply("cuCtxCreate_v4: no context in the reply");
	if (r == CUDA_SUCCESS) {
		CUcontext ctx = (CUcontext)(uintptr_t)rep->ctx;
		rm_ctx_known_created(ctx, dev, rep->flags, rep->flags & ~flags, rep->id);
		if ((r = rm_ctx_push(ctx)) == CUDA_SUCCESS)
			*pctx = ctx;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* The entry points of programs built before CUDA 12.5. */
RM_EXPORT CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

RM_EXPORT CUresult CUDAAPI cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
					  unsigned int flags, CUdevice dev)
{
	if (numParams < 0 || (numParams && !paramsArray))
		return CUDA_ERROR_INVALID_VALUE;
	if (numParams)
		return rm_unsupported("cuCtxCreate_v3 with execution affinity parameters");
	return cuCtxCreate_v4(pctx, NULL, flags, dev);
}

/* What cuModuleUnload forgets (proto/api.spec, the group module_functions), and what the
 * context's own answers are (context_answers, and its priority range): its handle may come
 * again for another context. */
static void forget_context_answers(void)
{
	static const uint32_t ops[] = {
		RM_OP_cuFuncGetAttribute, RM_OP_cuKernelGetAttribute, RM_OP_cuOccupancyMaxActiveBlocksPerMultiprocessor,
		RM_OP_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, RM_OP_cuOccupancyAvailableDynamicSMemPerBlock,
		RM_OP_cuFuncSetAttribute, RM_OP_cuFuncSetCacheConfig, RM_OP_cuFuncGetParamInfo,
		RM_OP_cuCtxGetLimit, RM_OP_cuStreamGetPriority, RM_OP_cuCtxGetStreamPriorityRange,
	};
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		rm_query_cache_forget(ops[i]);
}

/* cudart's context-local storage and mapped host memory's device buffers go first, while
 * the context still works; answers kept
 * for the functions of modules it held are forgotten, as their handles may come again. */
RM_EXPORT CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx)
{
	if (!rm_ctx_created(ctx))
		return CUDA_ERROR_INVALID_CONTEXT; /* a primary context, or none of the program's */
	rm_ctx_local_storage_release(ctx);
	rm_host_memory_ctx_gone(ctx);
	Remora__CtxDestroy req = REMORA__CTX_DESTROY__INIT;
	req.ctx = (uint64_t)(uintptr_t)ctx;
	CUresult r = rm_rpc_simple(RM_OP_cuCtxDestroy_v2, &req.base, NULL, NULL);
	if (r == CUDA_SUCCESS) {
		rm_ctx_forget(ctx);
		forget_context_answers();
	}
	return r;
}

RM_EXPORT CUresult CUDAAPI cuCtxDestroy(CUcontext ctx)
{
	return cuCtxDestroy_v2(ctx);
}
