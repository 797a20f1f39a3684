/* TMA descriptors, encoded by the GPU host's driver (backend/calls/tensor_maps.c): the
 * client sends what cuda.h's arrays hold for the rank, and keeps the 128 bytes it gets. */
#include "client.h"

#include <string.h>

#include "remora.pb-c.h"

#define MAX_RANK 5

static CUresult encode(uint32_t op, Remora__TensorMapEncode *req, CUtensorMap *tensorMap)
{
	Remora__TensorMapReply *rep = NULL;
	CUresult r = rm_rpc_simple(op, &req->base, &remora__tensor_map_reply__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && rep->map.len != sizeof(*tensorMap))
		r = rm_rpc_bad_reply("a tensor map of %zu bytes, not %zu", rep->map.len, sizeof(*tensorMap));
	else if (r == CUDA_SUCCESS && rep)
		memcpy(tensorMap, rep->map.data, sizeof(*tensorMap));
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* The parts every encoding has; NULL arrays and ranks out of range are the driver's
 * CUDA_ERROR_INVALID_VALUE, said here. */
static CUresult common(Remora__TensorMapEncode *req, CUtensorMap *tensorMap, CUtensorMapDataType type, cuuint32_t rank,
		       void *address, const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *elementStrides)
{
	if (!tensorMap || rank < 1 || rank > MAX_RANK || !dims || (rank > 1 && !strides) || !elementStrides)
		return CUDA_ERROR_INVALID_VALUE;
	req->data_type = type;
	req->rank = rank;
	req->address = (uint64_t)(uintptr_t)address;
	req->n_dims = rank;
	req->dims = (uint64_t *)dims;
	req->n_strides = rank - 1;
	req->strides = (uint64_t *)strides;
	req->n_element_strides = rank;
	req->element_strides = (uint32_t *)elementStrides;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
						  cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
						  const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
						  const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
						  CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
						  CUtensorMapFloatOOBfill oobFill)
{
	Remora__TensorMapEncode req = REMORA__TENSOR_MAP_ENCODE__INIT;
	CUresult r = common(&req, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
			    elementStrides);
	if (r != CUDA_SUCCESS || !boxDim)
		return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
	req.n_box = tensorRank;
	req.box = (uint32_t *)boxDim;
	req.interleave = interleave;
	req.swizzle = swizzle;
	req.l2_promotion = l2Promotion;
	req.oob_fill = oobFill;
	return encode(RM_OP_cuTensorMapEncodeTiled, &req, tensorMap);
}

RM_EXPORT CUresult CUDAAPI cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
						   cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
						   const cuuint64_t *globalStrides, const int *pixelBoxLowerCorner,
						   const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
						   cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
						   CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
						   CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	Remora__TensorMapEncode req = REMORA__TENSOR_MAP_ENCODE__INIT;
	CUresult r = tensorRank < 3 ? CUDA_ERROR_INVALID_VALUE
				    : common(&req, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim,
					     globalStrides, elementStrides);
	if (r != CUDA_SUCCESS || !pixelBoxLowerCorner || !pixelBoxUpperCorner)
		return r != CUDA_SUCCESS ? r : CUDA_ERROR_INVALID_VALUE;
	req.n_lower = req.n_upper = tensorRank - 2;
	req.lower = (int32_t *)pixelBoxLowerCorner;
	req.upper = (int32_t *)pixelBoxUpperCorner;
	req.channels_per_pixel = channelsPerPixel;
	req.pixels_per_column = pixelsPerColumn;
	req.interleave = interleave;
	req.swizzle = swizzle;
	req.l2_promotion = l2Promotion;
	req.oob_fill = oobFill;
	return encode(RM_OP_cuTensorMapEncodeIm2col, &req, tensorMap);
}

RM_EXPORT CUresult CUDAAPI cuTensorMapEncodeIm2colWide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
						       cuuint32_t tensorRank, void *globalAddress,
						       const cuuint64_t *globalDim, const cuuint64_t *globalStrides,
						       int pixelBoxLowerCornerWidth, int pixelBoxUpperCornerWidth,
						       cuuint32_t channelsPerPixel, cuuint32_t pixelsPerColumn,
						       const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
						       CUtensorMapIm2ColWideMode mode, CUtensorMapSwizzle swizzle,
						       CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	Remora__TensorMapEncode req = REMORA__TENSOR_MAP_ENCODE__INIT;
	CUresult r = common(&req, tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
			    elementStrides);
	if (r != CUDA_SUCCESS)
		return r;
	int32_t lower = pixelBoxLowerCornerWidth, upper = pixelBoxUpperCornerWidth;
	req.n_lower = req.n_upper = 1;
	req.lower = &lower;
	req.upper = &upper;
	req.channels_per_pixel = channelsPerPixel;
	req.pixels_per_column = pixelsPerColumn;
	req.interleave = interleave;
	req.mode = mode;
	req.swizzle = swizzle;
	req.l2_promotion = l2Promotion;
	req.oob_fill = oobFill;
	return encode(RM_OP_cuTensorMapEncodeIm2colWide, &req, tensorMap);
}

RM_EXPORT CUresult CUDAAPI cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
	if (!tensorMap)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__TensorMapEncode req = REMORA__TENSOR_MAP_ENCODE__INIT;
	req.address = (uint64_t)(uintptr_t)globalAddress;
	req.map.data = (uint8_t *)tensorMap;
	req.map.len = sizeof(*tensorMap);
	return encode(RM_OP_cuTensorMapReplaceAddress, &req, tensorMap);
}
