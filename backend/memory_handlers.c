/* Device memory: allocations owned by the session, and copies pipelined
 * through two pinned staging buffers so the network and the copy engine overlap. */
#include "copy_links.h"
#include "dispatch.h"

#include <stdlib.h>

#include "api.pb-c.h"
#include "copy_profile.h"
#include "log.h"
#include "remora.pb-c.h"

void rm_handle_cuMemAlloc_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuMemAllocV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_mem_alloc_v2__req__descriptor);
	if (!req)
		return;
	Remora__CuMemAllocV2Rep rep = REMORA__CU_MEM_ALLOC_V2__REP__INIT;
	CUdeviceptr p = 0;
	CUresult r = s->cur ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS)
		r = rm_session_charge(s, req->bytesize);
	if (r == CUDA_SUCCESS) {
		r = rm_drv.cuMemAlloc_v2(&p, req->bytesize);
		if (r == CUDA_SUCCESS)
			rm_session_own_memory(s, RM_H_MEMORY, p, req->bytesize, 0);
		else
			rm_session_uncharge(s, req->bytesize);
	}
	rep.dptr = p;
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuMemFree_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuMemFreeV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_mem_free_v2__req__descriptor);
	if (!req)
		return;
	CUresult r = CUDA_SUCCESS;
	if (req->dptr) { /* freeing 0 is a no-op, as in CUDA */
		if (!rm_session_find(s, RM_H_MEMORY, req->dptr)) {
			rm_log(RM_LOG_WARN, "session %llu (%s): refused to free 0x%llx, not an allocation of its own",
			       (unsigned long long)s->id, s->name, (unsigned long long)req->dptr);
			r = CUDA_ERROR_INVALID_VALUE;
		} else {
			uint64_t size = rm_session_find(s, RM_H_MEMORY, req->dptr)->size;
			r = rm_session_free_memory(s, req->dptr);
			if (r == CUDA_SUCCESS) {
				rm_session_disown_value(s, RM_H_MEMORY, req->dptr);
				rm_session_uncharge(s, size);
			}
		}
	}
	rm_request_finish(s, rq, r, NULL);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

void rm_handle_cuMemGetInfo_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuMemGetInfoV2Rep rep = REMORA__CU_MEM_GET_INFO_V2__REP__INIT;
	size_t free_b = 0, total_b = 0;
	CUresult r = s->cur ? rm_drv.cuMemGetInfo_v2(&free_b, &total_b) : CUDA_ERROR_INVALID_CONTEXT;
	if (r == CUDA_SUCCESS)
		rm_session_memory_view(s, &free_b, &total_b);
	rep.free = free_b;
	rep.total = total_b;
	rm_request_finish(s, rq, r, &rep.base);
}

void rm_handle_cuMemGetAddressRange_v2(struct rm_session *s, struct rm_request *rq)
{
	Remora__CuMemGetAddressRangeV2Req *req = (void *)rm_request_unpack(rq, &remora__cu_mem_get_address_range_v2__req__descriptor);
	if (!req)
		return;
	Remora__CuMemGetAddressRangeV2Rep rep = REMORA__CU_MEM_GET_ADDRESS_RANGE_V2__REP__INIT;
	CUresult r = CUDA_ERROR_NOT_FOUND;
	for (size_t i = 0; i < s->nranges; i++) {
		const struct rm_handle *h = &s->ranges[i];
		if (req->dptr >= h->value && req->dptr - h->value < h->size) {
			rep.pbase = h->value;
			rep.psize = h->size;
			r = CUDA_SUCCESS;
			break;
		}
	}
	rm_request_finish(s, rq, r, &rep.base);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}

/* Host to device: each chunk is read from the network into a staging buffer
 * while the previous one is copied to the GPU. */
static void copy_in(struct rm_session *s, struct rm_request *rq, int wait)
{
	Remora__MemcpyHtoD *req = (void *)rm_request_unpack(rq, &remora__memcpy_hto_d__descriptor);
	if (!req)
		return;
	int striped = req->links > 1;
	uint64_t n = striped ? req->count : rq->frame.bulk_len;
	struct rm_copy_profile prof;
	rm_copy_profile_begin(&prof, "daemon", rm_op_names[rq->frame.op], n);
	prof.host = "staging";
	CUstream stream = NULL;
	CUresult r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &stream);
	if (r == CUDA_SUCCESS)
		r = rm_session_check_range(s, req->dst, n);
	if (striped)
		r = rm_copy_striped_in(s, rq, r, stream, req->dst, n, req->links);
	for (uint64_t done = 0; !striped && r == CUDA_SUCCESS && done < n;) {
		void *buf;
		int i = s->staging_next;
		uint64_t mark = rm_copy_profile_mark(&prof);
		r = rm_session_staging(s, i, &buf);
		rm_copy_profile_add(&prof, &prof.wait, mark);
		if (r != CUDA_SUCCESS)
			break;
		size_t chunk = n - done < s->staging_size ? (size_t)(n - done) : s->staging_size;
		if (rm_request_read_bulk(s, rq, buf, chunk))
			break;
		mark = rm_copy_profile_mark(&prof);
		r = rm_drv.cuMemcpyHtoDAsync_v2(req->dst + done, buf, chunk, stream);
		if (r == CUDA_SUCCESS)
			r = rm_drv.cuEventRecord(s->staging_done[i], stream);
		rm_copy_profile_add(&prof, &prof.dma, mark);
		s->staging_next = (i + 1) % RM_STAGING_BUFS;
		done += chunk;
	}
	if (r == CUDA_SUCCESS && wait) {
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
 * comes back as the result; then chunks are copied to staging and sent, the
 * next chunk's copy overlapping the send. */
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
	if (r == CUDA_SUCCESS && req->links > 1) {
		rm_copy_striped_out(s, rq, stream, req->src, n, req->links);
		goto out;
	}
	void *buf[RM_STAGING_BUFS];
	for (int i = 0; r == CUDA_SUCCESS && i < RM_STAGING_BUFS; i++)
		r = rm_session_staging(s, i, &buf[i]);
	rm_copy_profile_add(&prof, &prof.wait, mark);
	if (r != CUDA_SUCCESS) {
		rm_request_finish(s, rq, r, NULL);
		goto out;
	}
	if (rm_request_reply_bulk(s, rq, n))
		goto out;
	size_t chunk = s->staging_size;
	uint64_t nchunks = (n + chunk - 1) / chunk;
	mark = rm_copy_profile_mark(&prof);
	for (uint64_t k = 0; k < nchunks && k < RM_STAGING_BUFS; k++) {
		size_t len = n - k * chunk < chunk ? (size_t)(n - k * chunk) : chunk;
		rm_drv.cuMemcpyDtoHAsync_v2(buf[k % RM_STAGING_BUFS], req->src + k * chunk, len, stream);
		rm_drv.cuEventRecord(s->staging_done[k % RM_STAGING_BUFS], stream);
	}
	rm_copy_profile_add(&prof, &prof.dma, mark);
	for (uint64_t k = 0; k < nchunks; k++) {
		int i = (int)(k % RM_STAGING_BUFS);
		size_t len = n - k * chunk < chunk ? (size_t)(n - k * chunk) : chunk;
		mark = rm_copy_profile_mark(&prof);
		r = rm_drv.cuEventSynchronize(s->staging_done[i]);
		rm_copy_profile_add(&prof, &prof.wait, mark);
		if (r != CUDA_SUCCESS) {
			rm_log(RM_LOG_ERROR, "session %llu: copy from the GPU failed (%d) after the reply began; closing",
			       (unsigned long long)s->id, r);
			rq->fatal = 1;
			break;
		}
		if (rm_request_send_bulk(s, buf[i], len)) {
			rq->fatal = 1;
			break;
		}
		uint64_t next = k + RM_STAGING_BUFS;
		if (next < nchunks) {
			size_t nlen = n - next * chunk < chunk ? (size_t)(n - next * chunk) : chunk;
			mark = rm_copy_profile_mark(&prof);
			rm_drv.cuMemcpyDtoHAsync_v2(buf[i], req->src + next * chunk, nlen, stream);
			rm_drv.cuEventRecord(s->staging_done[i], stream);
			rm_copy_profile_add(&prof, &prof.dma, mark);
		}
	}
out:
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
