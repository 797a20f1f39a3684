/* Pointer attributes: the client's own host allocations are answered here,
 * device pointers by the daemon, which checks that the client owns them. */
#include "client.h"

#include <string.h>

#include "remora.pb-c.h"

/* Bytes the driver writes for an attribute, or 0 for one this library does not know. */
static size_t attribute_size(CUpointer_attribute a)
{
	switch (a) {
	case CU_POINTER_ATTRIBUTE_CONTEXT:
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
	case CU_POINTER_ATTRIBUTE_HOST_POINTER:
	case CU_POINTER_ATTRIBUTE_BUFFER_ID:
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
	case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
	case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
	case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
		return 8;
	case CU_POINTER_ATTRIBUTE_P2P_TOKENS:
		return sizeof(CUDA_POINTER_ATTRIBUTE_P2P_TOKENS);
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_MAPPED:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
		return 4;
	}
	return 0;
}

/* A host allocation or registration: what is known here about it. */
static CUresult host_attribute(void *data, CUpointer_attribute a, CUdeviceptr ptr, void *base, size_t size)
{
	uint64_t v64;
	unsigned int v32;
	CUdevice dev;
	switch (a) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: v32 = CU_MEMORYTYPE_HOST; break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER: v64 = ptr; break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: v64 = (uint64_t)(uintptr_t)base; break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE: v64 = size; break;
	case CU_POINTER_ATTRIBUTE_CONTEXT: v64 = (uint64_t)(uintptr_t)rm_ctx_current(); break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED: v32 = 0; break;
	case CU_POINTER_ATTRIBUTE_MAPPED: v32 = 1; break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		if (cuCtxGetDevice(&dev) != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_CONTEXT;
		v32 = (unsigned int)dev;
		break;
	default: /* the GPU cannot reach this memory: no device pointer, tokens or ids */
		return rm_unsupported("cuPointerGetAttribute on host memory");
	}
	memcpy(data, attribute_size(a) == 8 ? (void *)&v64 : (void *)&v32, attribute_size(a));
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	size_t n = attribute_size(attribute);
	if (!data || !n)
		return CUDA_ERROR_INVALID_VALUE;
	void *base;
	size_t size;
	if (rm_host_alloc_find((void *)(uintptr_t)ptr, &base, &size, NULL))
		return host_attribute(data, attribute, ptr, base, size);
	Remora__PointerAttribute req = REMORA__POINTER_ATTRIBUTE__INIT;
	req.attribute = attribute;
	req.ptr = ptr;
	Remora__PointerAttributeReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuPointerGetAttribute, &req.base, &remora__pointer_attribute_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && rep->data.len < n) /* the daemon sends 16 bytes; the attribute has n */
		r = rm_rpc_bad_reply("cuPointerGetAttribute: %zu bytes for a %zu-byte attribute", rep->data.len, n);
	else if (r == CUDA_SUCCESS && rep)
		memcpy(data, rep->data.data, n);
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
						  void **data, CUdeviceptr ptr)
{
	if (!attributes || !data)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < numAttributes; i++) {
		CUresult r = cuPointerGetAttribute(data[i], attributes[i], ptr);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}
