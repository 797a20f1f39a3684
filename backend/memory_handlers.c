/* Device memory: allocations owned by the session (typed bodies of generated handlers),
 * and copies pipelined through two pinned staging buffers so the network and the copy
 * engine overlap (hand-written handlers: their data travels as bulk). */
#include "copy_links.h"
#include "dispatch.h"

#include <stdlib.h>

#include "copy_profile.h"
#include "log.h"
#include "registry.h"
#include "remora.pb-c.h"

/* Typed bodies of generated handlers (proto/api.spec, daemon_handlers.h). */

/* Charged to the client's and its tenant's quotas first; recorded with its size (dptr=new:body). */
CUresult rm_body_cuMemAlloc_v2(struct rm_session *s, CUdeviceptr *dptr, size_t bytesize)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	CUresult r = rm_session_charge(s, bytesize);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv.cuMemAlloc_v2(dptr, bytesize);
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_MEMORY, *dptr, bytesize, 0);
	else
		rm_session_uncharge(s, bytesize);
	return r;
}

/* Only an allocation of the client's own, freed without waiting for other clients'
 * work (rm_session_free_memory), and then no longer charged (dptr=del:body). */
CUresult rm_body_cuMemFree_v2(struct rm_session *s, CUdeviceptr dptr)
{
	if (!dptr) /* freeing 0 is a no-op, as in CUDA */
		return CUDA_SUCCESS;
	/* Taken before it is freed: of two threads freeing it at once, one frees it, and the
	 * other cannot free what the driver may meanwhile have given another client. */
	struct rm_handle h;
	if (!rm_session_take(s, RM_H_MEMORY, dptr, &h)) {
		rm_log(RM_LOG_WARN, "session %llu (%s): refused to free 0x%llx, not an allocation of its own",
		       (unsigned long long)s->id, s->name, (unsigned long long)dptr);
		return CUDA_ERROR_INVALID_VALUE;
	}
	CUresult r = rm_session_free_memory(s, dptr);
	if (r == CUDA_SUCCESS)
		rm_session_uncharge(s, h.size);
	else
		rm_session_own_memory(s, RM_H_MEMORY, dptr, h.size, h.parent);
	return r;
}

/* The device's figures, narrowed by the client's quotas. */
CUresult rm_body_cuMemGetInfo_v2(struct rm_session *s, size_t *free_b, size_t *total_b)
{
	CUresult r = s->cur ? rm_drv.cuMemGetInfo_v2(free_b, total_b) : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS)
		rm_session_memory_view(s, free_b, total_b);
	return r;
}

/* Only memory the client owns is found (dptr=unchecked: any other pointer is one CUDA
 * does not know). */
CUresult rm_body_cuMemGetAddressRange_v2(struct rm_session *s, CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
	CUresult r = CUDA_ERROR_NOT_FOUND;
	pthread_mutex_lock(&s->sh->lock);
	for (size_t i = 0; i < s->sh->nranges && r != CUDA_SUCCESS; i++) {
		const struct rm_handle *h = &s->sh->ranges[i];
		if (dptr >= h->value && dptr - h->value < h->size) {
			*pbase = h->value;
			*psize = h->size;
			r = CUDA_SUCCESS;
		}
	}
	pthread_mutex_unlock(&s->sh->lock);
	return r;
}

/* Host to device (backend/copy_links.c moves the bytes, over one connection or striped). */
static void copy_in(struct rm_session *s, struct rm_request *rq, int wait)
{
	Remora__MemcpyHtoD *req = (void *)rm_request_unpack(rq, &remora__memcpy_hto_d__descriptor);
	if (!req)
		return;
	uint32_t links = req->links > 1 ? req->links : 1;
	uint64_t n = links > 1 ? req->count : rq->frame.bulk_len;
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "daemon", rm_op_names[rq->frame.op], n);
	prof.host = "staging";
	CUstream stream = NULL;
	CUresult r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &stream);
	if (r == CUDA_SUCCESS)
		r = rm_session_check_range(s, req->dst, n);
	r = rm_copy_in(s, rq, r, stream, req->dst, n, links, &prof);
	if (r == CUDA_SUCCESS)
		rm_usage_add(&rm_registry()->clients[s->slot].usage.bytes_htod, n);
	if (r == CUDA_SUCCESS && wait && !rq->fatal) {
		uint64_t mark = rm_copy_profile_mark(&prof);
		r = rm_drv.cuStreamSynchronize(stream);
		rm_copy_profile_add(&prof, &prof.wait, mark);
	}
	if (!rq->fatal)
		rm_request_finish(s, rq, r, NULL);
	rm_copy_profile_end(&prof);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuMemcpyHtoD_v2(struct rm_session *s, struct rm_request *rq)
{
	copy_in(s, rq, 1);
}

void rm_handle_cuMemcpyHtoDAsync_v2(struct rm_session *s, struct rm_request *rq)
{
	copy_in(s, rq, 0);
}

/* Device to host: earlier work of the stream is waited for first so its error
 * comes back as the result; then backend/copy_links.c sends the bytes. */
static void copy_out(struct rm_session *s, struct rm_request *rq)
{
	Remora__MemcpyDtoH *req = (void *)rm_request_unpack(rq, &remora__memcpy_dto_h__descriptor);
	if (!req)
		return;
	uint64_t n = req->count;
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "daemon", rm_op_names[rq->frame.op], n);
	prof.host = "staging";
	CUstream stream = NULL;
	CUresult r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &stream);
	if (r == CUDA_SUCCESS)
		r = rm_session_check_range(s, req->src, n);
	uint64_t mark = rm_copy_profile_mark(&prof);
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuStreamSynchronize(stream);
	rm_copy_profile_add(&prof, &prof.wait, mark);
	if (r == CUDA_SUCCESS) {
		rm_copy_out(s, rq, stream, req->src, n, req->links > 1 ? req->links : 1, &prof);
		if (!rq->fatal)
			rm_usage_add(&rm_registry()->clients[s->slot].usage.bytes_dtoh, n);
	}
	else
		rm_request_finish(s, rq, r, NULL);
	rm_copy_profile_end(&prof);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuMemcpyDtoH_v2(struct rm_session *s, struct rm_request *rq)
{
	copy_out(s, rq);
}

void rm_handle_cuMemcpyDtoHAsync_v2(struct rm_session *s, struct rm_request *rq)
{
	copy_out(s, rq);
}

/* Only memory the client owns is described; any other pointer is refused as
 * one CUDA does not know. */
void rm_handle_cuPointerGetAttribute(struct rm_session *s, struct rm_request *rq)
{
	Remora__PointerAttribute *req = (void *)rm_request_unpack(rq, &remora__pointer_attribute__descriptor);
	if (!req)
		return;
	Remora__PointerAttributeReply rep = REMORA__POINTER_ATTRIBUTE_REPLY__INIT;
	uint8_t data[64] = {0};
	CUresult r = rm_session_check_range(s, req->ptr, 1);
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuPointerGetAttribute ? rm_drv.cuPointerGetAttribute(data, (CUpointer_attribute)req->attribute, req->ptr)
						 : rm_unsupported_by_driver("cuPointerGetAttribute");
	if (r == CUDA_SUCCESS) {
		rep.data.data = data;
		rep.data.len = 16; /* the largest attribute, P2P tokens; the client takes its attribute's size */
	}
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}
