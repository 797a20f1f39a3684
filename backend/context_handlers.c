/* Contexts: every client of a GPU shares the daemon's primary context of it.
 * Retain and release only track the client's use; synchronize waits for the
 * client's own streams, never for other clients' work. */
#include "dispatch.h"

#include <stdlib.h>

#include "api.pb-c.h"
#include "gpus.h"
#include "log.h"

/* The GPUs the client sees (REMORA_VISIBLE_DEVICES narrows them at connect). */
void rm_handle_cuDeviceGetCount(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDeviceGetCountRep rep = REMORA__CU_DEVICE_GET_COUNT__REP__INIT;
	rep.count = s->ndevices;
	rm_request_finish(s, rq, CUDA_SUCCESS, &rep.base);
}

/* A client's CUdevice is its own ordinal; the session maps it to the host's GPU on use. */
void rm_handle_cuDeviceGet(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDeviceGetReq *req = (void *)rm_request_unpack(rq, &remora__cu_device_get__req__descriptor);
	if (!req)
		return;
	Remora__CuDeviceGetRep rep = REMORA__CU_DEVICE_GET__REP__INIT;
	CUdevice dev;
	CUresult r = rm_session_device(s, req->ordinal, &dev);
	rep.device = r == CUDA_SUCCESS ? req->ordinal : 0;
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuDevicePrimaryCtxRetain(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDevicePrimaryCtxRetainReq *req = (void *)rm_request_unpack(rq, &remora__cu_device_primary_ctx_retain__req__descriptor);
	if (!req)
		return;
	Remora__CuDevicePrimaryCtxRetainRep rep = REMORA__CU_DEVICE_PRIMARY_CTX_RETAIN__REP__INIT;
	CUdevice dev;
	CUcontext ctx = NULL;
	CUresult r = rm_session_device(s, req->dev, &dev);
	if (r == CUDA_SUCCESS)
		r = rm_session_add_ctx(s, dev, &ctx);
	rep.pctx = (uint64_t)(uintptr_t)ctx;
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* The session keeps its use of the context until it ends: releasing is only checked. */
static void release(struct rm_session *s, struct rm_request *rq, int dev_arg)
{
	CUdevice dev;
	CUresult r = rm_session_device(s, dev_arg, &dev);
	rm_request_finish(s, rq, r, NULL);
}

void rm_handle_cuDevicePrimaryCtxRelease(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDevicePrimaryCtxReleaseReq *req = (void *)rm_request_unpack(rq, &remora__cu_device_primary_ctx_release__req__descriptor);
	if (!req)
		return;
	release(s, rq, req->dev);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuDevicePrimaryCtxRelease_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDevicePrimaryCtxReleaseV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_device_primary_ctx_release_v2__req__descriptor);
	if (!req)
		return;
	release(s, rq, req->dev);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* Scheduling flags only change how the daemon's threads wait; the shared
 * context keeps the flags it was created with. */
static void set_flags(struct rm_session *s, struct rm_request *rq, int dev_arg, unsigned int flags)
{
	CUdevice dev;
	CUresult r = rm_session_device(s, dev_arg, &dev);
	if (r == CUDA_SUCCESS && (flags & ~(unsigned)(CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX)))
		r = CUDA_ERROR_INVALID_VALUE;
	if (r == CUDA_SUCCESS)
		rm_log(RM_LOG_DEBUG, "session %llu: primary context flags 0x%x noted; the shared context keeps its own",
		       (unsigned long long)s->id, flags);
	rm_request_finish(s, rq, r, NULL);
}

void rm_handle_cuDevicePrimaryCtxSetFlags(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDevicePrimaryCtxSetFlagsReq *req = (void *)rm_request_unpack(rq, &remora__cu_device_primary_ctx_set_flags__req__descriptor);
	if (!req)
		return;
	set_flags(s, rq, req->dev, req->flags);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuDevicePrimaryCtxSetFlags_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDevicePrimaryCtxSetFlagsV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_device_primary_ctx_set_flags_v2__req__descriptor);
	if (!req)
		return;
	set_flags(s, rq, req->dev, req->flags);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* Resetting the shared context would end every client's work: a reset frees
 * what this client holds instead, as a reset would for it. */
static void reset(struct rm_session *s, struct rm_request *rq, int dev_arg)
{
	CUdevice dev;
	CUresult r = rm_session_device(s, dev_arg, &dev);
	if (r == CUDA_SUCCESS)
		rm_session_release_all(s);
	rm_request_finish(s, rq, r, NULL);
}

void rm_handle_cuDevicePrimaryCtxReset(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDevicePrimaryCtxResetReq *req = (void *)rm_request_unpack(rq, &remora__cu_device_primary_ctx_reset__req__descriptor);
	if (!req)
		return;
	reset(s, rq, req->dev);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuDevicePrimaryCtxReset_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuDevicePrimaryCtxResetV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_device_primary_ctx_reset_v2__req__descriptor);
	if (!req)
		return;
	reset(s, rq, req->dev);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuCtxSynchronize(struct rm_session *s, struct rm_request *rq)
{
	rm_request_finish(s, rq, rm_session_synchronize(s), NULL);
}

void rm_handle_cuCtxSynchronize_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuCtxSynchronizeV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_ctx_synchronize_v2__req__descriptor);
	if (!req)
		return;
	void *ctx;
	CUresult r = CUDA_SUCCESS;
	if (req->ctx)
		r = rm_session_use(s, RM_H_CONTEXT, req->ctx, &ctx);
	if (r == CUDA_SUCCESS && req->ctx)
		r = rm_session_enter(s, req->ctx);
	if (r == CUDA_SUCCESS)
		r = rm_session_synchronize(s);
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuCtxSetLimit(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuCtxSetLimitReq *req = (void *)rm_request_unpack(rq, &remora__cu_ctx_set_limit__req__descriptor);
	if (!req)
		return;
	/* Limits belong to the shared context: a client may raise one, never lower it under others. */
	size_t cur = 0;
	CUresult r = rm_drv.cuCtxGetLimit(&cur, (CUlimit)req->limit);
	if (r == CUDA_SUCCESS && req->value > cur)
		r = rm_drv.cuCtxSetLimit((CUlimit)req->limit, req->value);
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}
