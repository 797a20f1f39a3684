/* Device memory: allocations owned by the session (typed bodies of generated handlers),
 * and copies pipelined through two pinned staging buffers so the network and the copy
 * engine overlap (hand-written handlers: their data travels as bulk). */
#include "compressed.h"
#include "copy.h"
#include "dispatch.h"
#include "shared_host.h"
#include "worker.h"
#include "zchunk.h"

#include <stdlib.h>
#include <string.h>

#include "copy_profile.h"
#include "fault.h"
#include "ipc.h"
#include "log.h"
#include "handle_alias.h"
#include "migrate.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "memory_window.h"

/* Typed bodies of generated handlers (proto/api.spec, daemon_handlers.h). */

/* Charged to the client's and its tenant's quotas first; recorded with its size (dptr=new:body). */
CUresult rm_body_cuMemAlloc_v2(struct rm_channel *s, CUdeviceptr *dptr, size_t bytesize)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (rm_worker_config()->migratable_memory) /* at this worker's own addresses, to move (memory_window.h) */
		return rm_window_alloc(s, bytesize, dptr);
	CUresult r = rm_session_charge(s, bytesize);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuMemAlloc_v2(dptr, bytesize);
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_MEMORY, *dptr, bytesize, 0);
	else
		rm_session_uncharge(s, bytesize);
	return r;
}

/* Only an allocation of the client's own, freed without waiting for other clients'
 * work (rm_session_free_memory), and then no longer charged (dptr=del:body). */
CUresult rm_body_cuMemFree_v2(struct rm_channel *s, CUdeviceptr dptr)
{
	if (!dptr) /* freeing 0 is a no-op, as in CUDA */
		return CUDA_SUCCESS;
	/* Taken before it is freed: of two threads freeing it at once, one frees it, and the
	 * other cannot free what the driver may meanwhile have given another client. */
	struct rm_handle h;
	if (!rm_session_take(s, RM_H_MEMORY, dptr, &h)) {
		if (rm_session_take(s, RM_H_MOVED_MEMORY, dptr, &h)) { /* brought when it moved in, or the window's */
			if (rm_ipc_leave(s, RM_IPC_MEMORY, dptr) == RM_IPC_OTHERS_HOLD && !rm_migrate_orphan_moved(s, &h)) {
				rm_session_log(s, RM_LOG_INFO, "freed 0x%llx, which another client has open (CUDA IPC): "
					       "the memory stays until it closes it", (unsigned long long)dptr);
				return CUDA_SUCCESS;
			}
			return rm_migrate_free_moved(s, &h);
		}
		CUresult r = rm_graph_memory_free(s, dptr, NULL);
		if (r == CUDA_ERROR_NOT_FOUND) /* an allocation of a pool it imported (CUDA IPC)? */
			r = rm_ipc_free_imported(s, dptr, NULL);
		if (r != CUDA_ERROR_NOT_FOUND)
			return r;
		rm_session_log(s, RM_LOG_WARN, "refused to free 0x%llx, not an allocation of its own",
		               (unsigned long long)dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	if (rm_ipc_leave(s, RM_IPC_MEMORY, dptr) == RM_IPC_OTHERS_HOLD) {
		rm_session_log(s, RM_LOG_INFO, "freed 0x%llx, which another client has open (CUDA IPC): "
			       "the memory stays until it closes it", (unsigned long long)dptr);
		rm_session_uncharge(s, h.size);
		return CUDA_SUCCESS;
	}
	CUresult r = rm_session_free_memory(s, dptr);
	if (r == CUDA_SUCCESS)
		rm_session_uncharge(s, h.size);
	else
		rm_session_own_memory(s, RM_H_MEMORY, dptr, h.size, h.parent);
	return r;
}

/* The device's figures, narrowed by the client's quotas. */
CUresult rm_body_cuMemGetInfo_v2(struct rm_channel *s, size_t *free_b, size_t *total_b)
{
	CUresult r = s->cur ? rm_drv_cuMemGetInfo_v2(free_b, total_b) : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS)
		rm_session_memory_view(s, free_b, total_b);
	return r;
}

/* Only memory the client owns is found (dptr=unchecked: any other pointer is one CUDA
 * does not know). */
CUresult rm_body_cuMemGetAddressRange_v2(struct rm_channel *s, CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	struct rm_handle h;
	if (!rm_session_range_of(s, dptr, &h))
		return CUDA_ERROR_NOT_FOUND;
	if (pbase)
		*pbase = h.value;
	if (psize)
		*psize = h.size;
	return CUDA_SUCCESS;
}

/* Host to device (backend/copy/copy.c moves the bytes, over one connection or striped). */
static CUresult copy_in(struct rm_channel *s, struct rm_request *rq, const Remora__MemcpyHtoD *req, int wait)
{
	if (req->shared) { /* from shared pinned memory (shared_host.h): no bytes to move here; it replies */
		rm_shared_copy(s, rq, 1, req->dst, req->shared, req->shared_offset, req->count, req->stream, wait);
		return CUDA_SUCCESS;
	}
	uint32_t links = req->links > 1 ? req->links : 1;
	uint64_t n = links > 1 || req->compressed ? req->count : rq->frame.bulk_len;
	if (req->compressed && (links > 1 || !rm_zchunk_available() || !rm_worker_config()->compress_copies)) {
		rm_session_log(s, RM_LOG_WARN, "a compressed copy %s; closing",
		               links > 1 ? "striped" : "that this daemon does not take (compress_copies, zstd)");
		rq->fatal = 1;
		return CUDA_ERROR_INVALID_VALUE;
	}
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "daemon", rm_op_names[rq->frame.op], n);
	prof.host = "staging";
	CUstream stream = NULL;
	CUresult r = rm_fault_error(); /* the worker runs this body even then (striped), to drain the bytes */
	if (r == CUDA_SUCCESS)
		r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &stream);
	uint64_t dst = req->dst;
	if (r == CUDA_SUCCESS)
		r = rm_session_check_real(s, &dst, n);
	if (req->compressed) {
		prof.host = "compressed";
		r = rm_copy_in_compressed(s, rq, r, stream, dst, n, wait);
	} else {
		r = rm_copy_in(s, rq, r, stream, dst, n, links, req->chunk, wait, req->pageable, &prof);
	}
	if (r == CUDA_SUCCESS)
		rm_usage_add(&rm_registry()->clients[s->sh->slot].usage.bytes_htod, n);
	rm_copy_profile_end(&prof);
	return r;
}

/* A client may send a blocking copy from pageable memory async (frontend/memory.c): it
 * returned once its bytes were sent. The stream is still waited for, so that the copy is on
 * the device before this channel's next call runs, and before other channels' calls that
 * fence on it (a kernel or copy on a non-blocking stream reads what it wrote). */
CUresult rm_body_cuMemcpyHtoD_v2(struct rm_channel *s, struct rm_request *rq, const Remora__MemcpyHtoD *req)
{
	return copy_in(s, rq, req, 1);
}

CUresult rm_body_cuMemcpyHtoDAsync_v2(struct rm_channel *s, struct rm_request *rq, const Remora__MemcpyHtoD *req)
{
	return copy_in(s, rq, req, 0);
}

/* Device to host: backend/copy/copy.c waits for the stream's earlier work, so that its
 * error comes back as the result, and sends the bytes (it replies). */
static CUresult copy_out(struct rm_channel *s, struct rm_request *rq, const Remora__MemcpyDtoH *req, int wait)
{
	if (req->shared) { /* into shared pinned memory: the Async form returns once queued */
		rm_shared_copy(s, rq, 0, req->src, req->shared, req->shared_offset, req->count, req->stream, wait);
		return CUDA_SUCCESS;
	}
	uint64_t n = req->count;
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "daemon", rm_op_names[rq->frame.op], n);
	prof.host = "staging";
	CUstream stream = NULL;
	CUresult r = rm_fault_error();
	if (r == CUDA_SUCCESS)
		r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &stream);
	uint64_t src = req->src;
	if (r == CUDA_SUCCESS)
		r = rm_session_check_real(s, &src, n);
	if (r == CUDA_SUCCESS && req->compress && req->links <= 1 && rm_zchunk_available() && rm_worker_config()->compress_copies &&
	    rm_copy_out_compressed(s, rq, stream, src, n, req->link_bps) == 0) {
		prof.host = "compressed";
		if (!rq->fatal)
			rm_usage_add(&rm_registry()->clients[s->sh->slot].usage.bytes_dtoh, n);
	} else if (r == CUDA_SUCCESS) {
		rm_copy_out(s, rq, stream, src, n, req->links > 1 ? req->links : 1, req->chunk, &prof);
		if (!rq->fatal)
			rm_usage_add(&rm_registry()->clients[s->sh->slot].usage.bytes_dtoh, n);
	}
	rm_copy_profile_end(&prof);
	return r;
}

CUresult rm_body_cuMemcpyDtoH_v2(struct rm_channel *s, struct rm_request *rq, const Remora__MemcpyDtoH *req)
{
	return copy_out(s, rq, req, 1);
}

CUresult rm_body_cuMemcpyDtoHAsync_v2(struct rm_channel *s, struct rm_request *rq, const Remora__MemcpyDtoH *req)
{
	return copy_out(s, rq, req, 0);
}

/* The driver's answer for one attribute of owned memory, into data (its size, at most 64
 * bytes), in the client's terms: a device ordinal is the client's for that GPU. */
static CUresult owned_attribute(struct rm_channel *s, void *data, CUpointer_attribute a, uint64_t ptr)
{
	CUresult r = rm_drv_cuPointerGetAttribute(data, a, ptr);
	struct rm_handle h;
	int moved = rm_session_range_of(s, ptr, &h) && h.kind == RM_H_MOVED_MEMORY;
	if (r == CUDA_SUCCESS && a == CU_POINTER_ATTRIBUTE_CONTEXT) { /* the client's value of it (migrate.h) */
		uint64_t ctx;
		memcpy(&ctx, data, sizeof(ctx));
		struct rm_session_ctx *c = moved && h.ctx ? rm_session_ctx_at(s, (int)h.ctx - 1) : NULL;
		/* Memory the client brought is the worker's mapping, not a context's allocation:
		 * its context is the one the client made it in (the record's). */
		ctx = c ? c->handle : rm_session_out_value(s, RM_H_CONTEXT, ctx);
		memcpy(data, &ctx, sizeof(ctx));
	}
	/* Memory the client brought when it moved in is mapped here in spans: it is described
	 * as the allocation the client made (migrate.h). */
	if (r == CUDA_SUCCESS && moved) {
		uint64_t v = a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR ? h.value : h.size;
		if (a == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || a == CU_POINTER_ATTRIBUTE_RANGE_SIZE)
			memcpy(data, &v, sizeof(v));
	}
	if (r == CUDA_SUCCESS && a == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL) {
		int dev;
		memcpy(&dev, data, sizeof(dev));
		r = rm_session_device_out(s, dev, &dev);
		memcpy(data, &dev, sizeof(dev));
	}
	return r;
}

/* Only memory the client owns is described (ptr is checked as the client's): any other
 * pointer is refused as one CUDA does not know. */
CUresult rm_body_cuPointerGetAttribute(struct rm_channel *s, void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	return owned_attribute(s, data, attribute, ptr);
}

/* As the driver's cuPointerGetAttributes: an attribute that does not apply, or memory
 * that is not the client's, gets the default value (the client writes it: owned false),
 * not an error. */
CUresult rm_body_cuPointerGetAttributes(struct rm_channel *s, struct rm_request *rq, const Remora__PointerAttributes *req,
					Remora__PointerAttributesReply *rep)
{
	if (req->n_attributes > RM_MAX_POINTER_ATTRIBUTES)
		return CUDA_ERROR_INVALID_VALUE;
	if (!rm_session_range_of(s, req->ptr, NULL))
		return CUDA_SUCCESS;
	uint8_t *out = calloc(RM_MAX_POINTER_ATTRIBUTES, RM_POINTER_ATTRIBUTE_SLOT);
	if (!out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < req->n_attributes; i++) {
		uint8_t data[64] = {0};
		if (owned_attribute(s, data, (CUpointer_attribute)req->attributes[i], req->ptr) == CUDA_SUCCESS)
			memcpy(out + i * RM_POINTER_ATTRIBUTE_SLOT, data, RM_POINTER_ATTRIBUTE_SLOT);
	}
	rq->reply_mem = out;
	rep->owned = 1;
	rep->data.data = out;
	rep->data.len = req->n_attributes * RM_POINTER_ATTRIBUTE_SLOT;
	return CUDA_SUCCESS;
}

/* Managed memory (docs/managed-memory.md): a whole number of RM_MANAGED_ALIGN bytes, so that
 * the client can map its copy at the same address page by page; charged like cuMemAlloc,
 * and zeroed, since the client's copy starts as zeros. It is host memory here as well, so
 * the daemon's own CPU writes it. */
CUresult rm_body_cuMemAllocManaged(struct rm_channel *s, CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!bytesize || bytesize > SIZE_MAX - RM_MANAGED_ALIGN)
		return CUDA_ERROR_INVALID_VALUE;
	size_t size = (bytesize + RM_MANAGED_ALIGN - 1) / RM_MANAGED_ALIGN * RM_MANAGED_ALIGN;
	CUresult r = rm_session_charge(s, size);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuMemAllocManaged(dptr, size, flags);
	if (r == CUDA_SUCCESS) {
		memset((void *)(uintptr_t)*dptr, 0, size);
		rm_session_own_memory(s, RM_H_MEMORY, *dptr, size, 0);
	} else {
		rm_session_uncharge(s, size);
	}
	return r;
}
