/* Memory pool attributes: their value is an int or a cuuint64_t, as the attribute says,
 * so these two calls are written here; the rest of the pool API is generated (proto/api.spec). */
#include "client.h"

#include <string.h>

#include "remora.pb-c.h"

/* Bytes of an attribute's value, or 0 for one this library does not know. */
static size_t attribute_size(CUmemPool_attribute a)
{
	switch (a) {
	case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
	case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
		return sizeof(int);
	case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
	case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
	case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
	case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
		return sizeof(cuuint64_t);
	default:
		return 0;
	}
}

RM_EXPORT CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	size_t n = attribute_size(attr);
	if (!value || !n)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__MemPoolAttribute req = REMORA__MEM_POOL_ATTRIBUTE__INIT;
	req.pool = (uint64_t)(uintptr_t)pool;
	req.attr = attr;
	if (n == sizeof(int)) {
		int v;
		memcpy(&v, value, sizeof(v));
		req.value = (uint64_t)(int64_t)v;
	} else {
		memcpy(&req.value, value, sizeof(req.value));
	}
	return rm_rpc_simple(RM_OP_cuMemPoolSetAttribute, &req.base, NULL, NULL);
}

RM_EXPORT CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	size_t n = attribute_size(attr);
	if (!value || !n)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__MemPoolAttribute req = REMORA__MEM_POOL_ATTRIBUTE__INIT;
	req.pool = (uint64_t)(uintptr_t)pool;
	req.attr = attr;
	Remora__MemPoolAttributeReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuMemPoolGetAttribute, &req.base, &remora__mem_pool_attribute_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		if (n == sizeof(int)) {
			int v = (int)(int64_t)rep->value;
			memcpy(value, &v, sizeof(v));
		} else {
			memcpy(value, &rep->value, sizeof(rep->value));
		}
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}
