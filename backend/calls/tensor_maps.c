/* TMA descriptors (cuTensorMapEncode*, cuTensorMapReplaceAddress): the GPU host's driver
 * encodes them, for device memory of the client's, and the client hands the 128 bytes to
 * its kernels. Typed bodies of hand calls (proto/api.spec, messages TensorMapEncode and
 * TensorMapReply of proto/remora.proto). */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "remora.pb-c.h"

#define MAX_RANK 5 /* cuda.h: tensorRank is at most 5 */

/* The request's arrays have the lengths rank gives them, and the address is the client's. */
static CUresult check(struct rm_channel *s, const Remora__TensorMapEncode *req, size_t box, size_t corners)
{
	uint32_t rank = req->rank;
	if (rank < 1 || rank > MAX_RANK || req->n_dims != rank || req->n_strides != rank - 1 || req->n_box != box ||
	    req->n_element_strides != rank || req->n_lower != corners || req->n_upper != corners)
		return CUDA_ERROR_INVALID_VALUE;
	return rm_session_check_range(s, req->address, 1);
}

/* The reply's map, in memory freed once the reply is sent. */
static CUresult reply(struct rm_request *rq, Remora__TensorMapReply *rep, CUtensorMap **out)
{
	*out = aligned_alloc(128, sizeof(CUtensorMap));
	if (!*out)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(*out, 0, sizeof(CUtensorMap));
	rq->reply_mem = *out;
	rep->map.data = (uint8_t *)*out;
	rep->map.len = sizeof(CUtensorMap);
	return CUDA_SUCCESS;
}

CUresult rm_body_cuTensorMapEncodeTiled(struct rm_channel *s, struct rm_request *rq, const Remora__TensorMapEncode *req,
					Remora__TensorMapReply *rep)
{
	CUtensorMap *map;
	CUresult r = check(s, req, req->rank, 0);
	if (r == CUDA_SUCCESS)
		r = reply(rq, rep, &map);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuTensorMapEncodeTiled(map, (CUtensorMapDataType)req->data_type, req->rank,
						  (void *)(uintptr_t)req->address, req->dims, req->strides, req->box,
						  req->element_strides, (CUtensorMapInterleave)req->interleave,
						  (CUtensorMapSwizzle)req->swizzle, (CUtensorMapL2promotion)req->l2_promotion,
						  (CUtensorMapFloatOOBfill)req->oob_fill);
	return r;
}

CUresult rm_body_cuTensorMapEncodeIm2col(struct rm_channel *s, struct rm_request *rq, const Remora__TensorMapEncode *req,
					 Remora__TensorMapReply *rep)
{
	CUtensorMap *map;
	CUresult r = req->rank < 3 ? CUDA_ERROR_INVALID_VALUE : check(s, req, 0, req->rank - 2);
	if (r == CUDA_SUCCESS)
		r = reply(rq, rep, &map);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuTensorMapEncodeIm2col(map, (CUtensorMapDataType)req->data_type, req->rank,
						   (void *)(uintptr_t)req->address, req->dims, req->strides, req->lower,
						   req->upper, req->channels_per_pixel, req->pixels_per_column,
						   req->element_strides, (CUtensorMapInterleave)req->interleave,
						   (CUtensorMapSwizzle)req->swizzle, (CUtensorMapL2promotion)req->l2_promotion,
						   (CUtensorMapFloatOOBfill)req->oob_fill);
	return r;
}

CUresult rm_body_cuTensorMapEncodeIm2colWide(struct rm_channel *s, struct rm_request *rq,
					     const Remora__TensorMapEncode *req, Remora__TensorMapReply *rep)
{
	CUtensorMap *map;
	CUresult r = check(s, req, 0, 1);
	if (r == CUDA_SUCCESS)
		r = reply(rq, rep, &map);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuTensorMapEncodeIm2colWide(map, (CUtensorMapDataType)req->data_type, req->rank,
						       (void *)(uintptr_t)req->address, req->dims, req->strides,
						       req->lower[0], req->upper[0], req->channels_per_pixel,
						       req->pixels_per_column, req->element_strides,
						       (CUtensorMapInterleave)req->interleave, (CUtensorMapIm2ColWideMode)req->mode,
						       (CUtensorMapSwizzle)req->swizzle, (CUtensorMapL2promotion)req->l2_promotion,
						       (CUtensorMapFloatOOBfill)req->oob_fill);
	return r;
}

CUresult rm_body_cuTensorMapReplaceAddress(struct rm_channel *s, struct rm_request *rq,
					   const Remora__TensorMapEncode *req, Remora__TensorMapReply *rep)
{
	CUtensorMap *map;
	CUresult r = req->map.len != sizeof(CUtensorMap) ? CUDA_ERROR_INVALID_VALUE
							  : rm_session_check_range(s, req->address, 1);
	if (r == CUDA_SUCCESS)
		r = reply(rq, rep, &map);
	if (r == CUDA_SUCCESS) {
		memcpy(map, req->map.data, sizeof(CUtensorMap));
		r = rm_drv_cuTensorMapReplaceAddress(map, (void *)(uintptr_t)req->address);
	}
	return r;
}
