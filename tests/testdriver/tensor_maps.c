/* TMA descriptors: checked as cuda.h documents the arguments, and encoded in an order of
 * this file's (no kernel here reads one): the address in the first word, so that
 * cuTensorMapReplaceAddress changes only it, as on a GPU. */
#include "testdriver.h"

#include <string.h>

#define MAX_RANK 5

static CUresult check_common(const CUtensorMap *map, CUtensorMapDataType type, cuuint32_t rank, const void *address,
			     const cuuint64_t *dims, const cuuint64_t *strides, const cuuint32_t *element_strides,
			     CUtensorMapInterleave interleave)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!map || ((uintptr_t)map & 63) || rank < 1 || rank > MAX_RANK || !address || !dims ||
	    (rank > 1 && !strides) || !element_strides || (unsigned)type > CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B ||
	    (unsigned)interleave > CU_TENSOR_MAP_INTERLEAVE_32B)
		return CUDA_ERROR_INVALID_VALUE;
	if ((uintptr_t)address & (interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 31 : 15))
		return CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < rank; i++) {
		if (!dims[i] || dims[i] > (1ull << 32) || !element_strides[i] || element_strides[i] > 8)
			return CUDA_ERROR_INVALID_VALUE;
		if (i + 1 < rank && (strides[i] % 16 || strides[i] >= (1ull << 40)))
			return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static void encode_common(CUtensorMap *map, unsigned kind, CUtensorMapDataType type, cuuint32_t rank,
			  const void *address, const cuuint64_t *dims, const cuuint64_t *strides,
			  const cuuint32_t *element_strides, unsigned interleave, unsigned swizzle, unsigned l2,
			  unsigned oob)
{
	memset(map, 0, sizeof(*map));
	map->opaque[0] = (uint64_t)(uintptr_t)address;
	map->opaque[1] = (uint64_t)type | (uint64_t)rank << 8 | (uint64_t)interleave << 16 | (uint64_t)swizzle << 24 |
			 (uint64_t)l2 << 32 | (uint64_t)oob << 40 | (uint64_t)kind << 48;
	for (cuuint32_t i = 0; i < rank; i++) {
		map->opaque[2 + i] = dims[i];
		if (i + 1 < rank)
			map->opaque[7 + i] = strides[i];
		map->opaque[12] |= (uint64_t)element_strides[i] << (4 * i);
	}
}

TD_EXPORT CUresult cuTensorMapEncodeTiled(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					  cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
					  const cuuint64_t *globalStrides, const cuuint32_t *boxDim,
					  const cuuint32_t *elementStrides, CUtensorMapInterleave interleave,
					  CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
					  CUtensorMapFloatOOBfill oobFill)
{
	CUresult rc = check_common(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
				   elementStrides, interleave);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!boxDim)
		return CUDA_ERROR_INVALID_VALUE;
	for (cuuint32_t i = 0; i < tensorRank; i++)
		if (!boxDim[i] || boxDim[i] > 256)
			return CUDA_ERROR_INVALID_VALUE;
	encode_common(tensorMap, 1, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
		      interleave, swizzle, l2Promotion, oobFill);
	for (cuuint32_t i = 0; i < tensorRank; i++)
		tensorMap->opaque[11] |= (uint64_t)boxDim[i] << (12 * i);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTensorMapEncodeIm2col(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					   cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
					   const cuuint64_t *globalStrides, const int *pixelBoxLowerCorner,
					   const int *pixelBoxUpperCorner, cuuint32_t channelsPerPixel,
					   cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
					   CUtensorMapInterleave interleave, CUtensorMapSwizzle swizzle,
					   CUtensorMapL2promotion l2Promotion, CUtensorMapFloatOOBfill oobFill)
{
	CUresult rc = check_common(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
				   elementStrides, interleave);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (tensorRank < 3 || !pixelBoxLowerCorner || !pixelBoxUpperCorner || !channelsPerPixel ||
	    channelsPerPixel > 256 || !pixelsPerColumn || pixelsPerColumn > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	encode_common(tensorMap, 2, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
		      interleave, swizzle, l2Promotion, oobFill);
	for (cuuint32_t i = 0; i + 2 < tensorRank; i++)
		tensorMap->opaque[13] |= ((uint64_t)(uint16_t)pixelBoxLowerCorner[i] |
					  (uint64_t)(uint16_t)pixelBoxUpperCorner[i] << 16) << (32 * (i % 2));
	tensorMap->opaque[14] = channelsPerPixel | (uint64_t)pixelsPerColumn << 32;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTensorMapEncodeIm2colWide(CUtensorMap *tensorMap, CUtensorMapDataType tensorDataType,
					       cuuint32_t tensorRank, void *globalAddress, const cuuint64_t *globalDim,
					       const cuuint64_t *globalStrides, int pixelBoxLowerCornerWidth,
					       int pixelBoxUpperCornerWidth, cuuint32_t channelsPerPixel,
					       cuuint32_t pixelsPerColumn, const cuuint32_t *elementStrides,
					       CUtensorMapInterleave interleave, CUtensorMapIm2ColWideMode mode,
					       CUtensorMapSwizzle swizzle, CUtensorMapL2promotion l2Promotion,
					       CUtensorMapFloatOOBfill oobFill)
{
	CUresult rc = check_common(tensorMap, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides,
				   elementStrides, interleave);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (tensorRank < 3 || !channelsPerPixel || channelsPerPixel > 256 || !pixelsPerColumn || pixelsPerColumn > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	encode_common(tensorMap, 3, tensorDataType, tensorRank, globalAddress, globalDim, globalStrides, elementStrides,
		      interleave, swizzle, l2Promotion, oobFill);
	tensorMap->opaque[13] = (uint64_t)(uint16_t)pixelBoxLowerCornerWidth | (uint64_t)(uint16_t)pixelBoxUpperCornerWidth << 16;
	tensorMap->opaque[14] = channelsPerPixel | (uint64_t)pixelsPerColumn << 32;
	tensorMap->opaque[15] = (uint64_t)mode;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTensorMapReplaceAddress(CUtensorMap *tensorMap, void *globalAddress)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!tensorMap || ((uintptr_t)tensorMap & 63) || !globalAddress || !(tensorMap->opaque[1] >> 48))
		return CUDA_ERROR_INVALID_VALUE;
	unsigned interleave = (unsigned)(tensorMap->opaque[1] >> 16) & 0xff;
	if ((uintptr_t)globalAddress & (interleave == CU_TENSOR_MAP_INTERLEAVE_32B ? 31 : 15))
		return CUDA_ERROR_INVALID_VALUE;
	tensorMap->opaque[0] = (uint64_t)(uintptr_t)globalAddress;
	return CUDA_SUCCESS;
}
