/* Pointer attributes: the client's own host allocations are answered here,
 * device pointers by the daemon, which checks that the client owns them. */
#include "client.h"
#include "client_stubs.h"

#include <string.h>

#include "api.pb-c.h"
#include "remora.pb-c.h"

/* Bytes the driver writes for an attribute, or 0 for one this library does not know
 * (proto/api.spec: size CUpointer_attribute). */
static size_t attribute_size(CUpointer_attribute a)
{
	return rm_size_of_CUpointer_attribute(a);
}

/* A host allocation or registration: what is known here about it. Attributes that do
 * not apply to host memory give CUDA_ERROR_INVALID_VALUE, as the driver does. */
static CUresult host_attribute(void *data, CUpointer_attribute a, CUdeviceptr ptr, const struct rm_host_info *h)
{
	uint64_t v64 = 0;
	unsigned int v32 = 0;
	CUdevice dev;
	switch (a) {
	case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: v32 = CU_MEMORYTYPE_HOST; break;
	case CU_POINTER_ATTRIBUTE_HOST_POINTER: v64 = ptr; break;
	case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: /* only once it has a device buffer (host_memory.c) */
		if (!h->mapped)
			return CUDA_ERROR_INVALID_VALUE;
		v64 = h->mapped + (ptr - (uint64_t)(uintptr_t)h->base);
		break;
	case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: v64 = (uint64_t)(uintptr_t)h->base; break;
	case CU_POINTER_ATTRIBUTE_RANGE_SIZE: v64 = h->size; break;
	case CU_POINTER_ATTRIBUTE_BUFFER_ID: v64 = h->buffer_id; break;
	case CU_POINTER_ATTRIBUTE_CONTEXT: v64 = (uint64_t)(uintptr_t)rm_ctx_current(); break;
	case CU_POINTER_ATTRIBUTE_MAPPED: v32 = 1; break;
	case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: v32 = CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE; break;
	case CU_POINTER_ATTRIBUTE_IS_MANAGED:
	case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
	case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
	case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
	case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: /* CU_MEM_HANDLE_TYPE_NONE */
	case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
		break;
	case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
		if (cuCtxGetDevice(&dev) != CUDA_SUCCESS)
			return CUDA_ERROR_INVALID_CONTEXT;
		v32 = (unsigned int)dev;
		break;
	default: /* not memory of the virtual memory API; no P2P tokens */
		return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy(data, attribute_size(a) == 8 ? (void *)&v64 : (void *)&v32, attribute_size(a));
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	size_t n = attribute_size(attribute);
	if (!data || !n)
		return CUDA_ERROR_INVALID_VALUE;
	struct rm_host_info h;
	if (rm_host_alloc_info((void *)(uintptr_t)ptr, &h))
		return host_attribute(data, attribute, ptr, &h);
	Remora__CuPointerGetAttributeReq req = REMORA__CU_POINTER_GET_ATTRIBUTE__REQ__INIT;
	req.data_len = n;
	req.attribute = attribute;
	req.ptr = ptr;
	Remora__CuPointerGetAttributeRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuPointerGetAttribute, &req.base, &remora__cu_pointer_get_attribute__rep__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && rep->data.len != n)
		r = rm_rpc_bad_reply("cuPointerGetAttribute: %zu bytes for a %zu-byte attribute", rep->data.len, n);
	else if (r == CUDA_SUCCESS && rep)
		memcpy(data, rep->data.data, n);
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* As the driver's: an attribute that does not apply, or a pointer CUDA does not know
 * (memory of no allocation of this client's), gets its default value, zero (the host
 * pointer of unknown memory: ptr itself, as an H100's driver answers), and CUDA_SUCCESS; only an attribute this library does not know is an error. Host memory
 * is answered here, device memory by the daemon in one call. */
RM_EXPORT CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute *attributes,
						  void **data, CUdeviceptr ptr)
{
	if (!attributes || !data || numAttributes > RM_MAX_POINTER_ATTRIBUTES)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < numAttributes; i++)
		if (!data[i] || !attribute_size(attributes[i]))
			return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < numAttributes; i++)
		memset(data[i], 0, attribute_size(attributes[i]));
	struct rm_host_info h;
	if (rm_host_alloc_info((void *)(uintptr_t)ptr, &h)) {
		for (unsigned int i = 0; i < numAttributes; i++)
			if (host_attribute(data[i], attributes[i], ptr, &h) != CUDA_SUCCESS)
				memset(data[i], 0, attribute_size(attributes[i]));
		return CUDA_SUCCESS;
	}
	uint32_t wanted[RM_MAX_POINTER_ATTRIBUTES];
	for (unsigned int i = 0; i < numAttributes; i++)
		wanted[i] = attributes[i];
	Remora__PointerAttributes req = REMORA__POINTER_ATTRIBUTES__INIT;
	req.n_attributes = numAttributes;
	req.attributes = wanted;
	req.ptr = ptr;
	Remora__PointerAttributesReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuPointerGetAttributes, &req.base, &remora__pointer_attributes_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	size_t want = (size_t)numAttributes * RM_POINTER_ATTRIBUTE_SLOT;
	if (r == CUDA_SUCCESS && rep && rep->owned && rep->data.len != want)
		r = rm_rpc_bad_reply("cuPointerGetAttributes: %zu bytes for %u attributes", rep->data.len, numAttributes);
	else if (r == CUDA_SUCCESS && rep && rep->owned)
		for (unsigned int i = 0; i < numAttributes; i++)
			memcpy(data[i], rep->data.data + (size_t)i * RM_POINTER_ATTRIBUTE_SLOT, attribute_size(attributes[i]));
	else if (r == CUDA_SUCCESS) /* as the driver answers for memory it does not know: the host pointer is ptr */
		for (unsigned int i = 0; i < numAttributes; i++)
			if (attributes[i] == CU_POINTER_ATTRIBUTE_HOST_POINTER)
				memcpy(data[i], &ptr, sizeof(ptr));
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}
