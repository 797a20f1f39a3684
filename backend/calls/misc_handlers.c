/* The smaller calls' typed bodies (proto/api.spec, daemon_handlers.h): stream attributes
 * and ids on pool streams, kernels of a library, pool access by location, host atomics.
 * Handles arrive as the driver's, owned by the client; devices as the host's GPUs. */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "launch_replay.h"
#include "log.h"
#include "remora.pb-c.h"
#include "stream_attrs.h"

/* None: the host memory a client's kernels reach is the client's, kept by copies
 * (docs/managed-memory.md), where no atomic is atomic with the host's. The driver still
 * judges the operations, as natively; every capability reads 0 (the outputs are zeroed). */
CUresult rm_body_cuDeviceGetHostAtomicCapabilities(struct rm_channel *s, unsigned int *capabilities,
						   const CUatomicOperation *operations, unsigned int count, CUdevice dev)
{
	(void)s;
	CUresult r = rm_drv_cuDeviceGetHostAtomicCapabilities(capabilities, operations, count, dev);
	if (r == CUDA_SUCCESS)
		memset(capabilities, 0, (size_t)count * sizeof(*capabilities));
	return r;
}

/* ---- streams ---- */

/* An attribute a stream carries is saved as the pool had it before the client changes it
 * (stream_attrs.h). One the driver knows for streams and this file does not restore is
 * refused; one the driver does not know for streams gets the driver's answer. An access
 * policy window must lie in the client's memory: it steers the L2 cache others share. */
CUresult rm_body_cuStreamSetAttribute(struct rm_channel *s, CUstream hStream, CUstreamAttrID attr,
				      const CUstreamAttrValue *param)
{
	if (!rm_stream_attrs_known(attr)) {
		CUstreamAttrValue v;
		CUresult r = rm_drv_cuStreamGetAttribute(hStream, attr, &v);
		return r != CUDA_SUCCESS ? r : rm_unsupported_use("cuStreamSetAttribute of a stream attribute Remora does not restore");
	}
	if (attr == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW && param->accessPolicyWindow.num_bytes) {
		CUresult r = rm_session_check_range(s, (uint64_t)(uintptr_t)param->accessPolicyWindow.base_ptr,
						    param->accessPolicyWindow.num_bytes);
		if (r != CUDA_SUCCESS)
			return r;
	}
	CUresult r = rm_stream_attrs_save(hStream, attr);
	/* Graphs captured elsewhere would not carry it (a graph launch takes its stream's
	 * priority, as a launch does). */
	if (r == CUDA_SUCCESS && attr != CU_LAUNCH_ATTRIBUTE_PRIORITY)
		rm_launch_replay_stream_attrs_set(s);
	return r == CUDA_SUCCESS ? rm_drv_cuStreamSetAttribute(hStream, attr, param) : r;
}

CUresult rm_body_cuStreamCopyAttributes(struct rm_channel *s, CUstream dstStream, CUstream srcStream)
{
	rm_launch_replay_stream_attrs_set(s);
	static const CUstreamAttrID all[] = {
		CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY,
		CU_LAUNCH_ATTRIBUTE_PRIORITY,             CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
		CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,      CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
	};
	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
		CUresult r = rm_stream_attrs_save(dstStream, all[i]);
		/* An attribute the driver does not have (an older one) is not copied either. */
		if (r != CUDA_SUCCESS && r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_NOT_SUPPORTED)
			return r;
	}
	return rm_drv_cuStreamCopyAttributes(dstStream, srcStream);
}

CUresult rm_body_cuStreamGetId(struct rm_channel *s, CUstream hStream, unsigned long long *streamId)
{
	(void)s;
	return rm_stream_attrs_id(hStream, streamId);
}

/* ---- libraries ---- */

/* The kernels become the client's, children of their library (as cuLibraryGetKernel's). */
CUresult rm_body_cuLibraryEnumerateKernels(struct rm_channel *s, CUkernel *kernels, unsigned int numKernels,
					   CUlibrary lib)
{
	CUresult r = rm_drv_cuLibraryEnumerateKernels(kernels, numKernels, lib);
	for (unsigned int i = 0; r == CUDA_SUCCESS && i < numKernels; i++)
		if (kernels[i])
			rm_session_own(s, RM_H_KERNEL, kernels[i], (uint64_t)(uintptr_t)lib);
	return r;
}

/* The reply's name points into the driver's memory, which lives as long as the library. */
CUresult rm_body_cuKernelGetName(struct rm_channel *s, struct rm_request *rq, const Remora__FuncGetName *req,
				 Remora__FuncGetNameReply *rep)
{
	(void)rq;
	void *kernel;
	const char *name = NULL;
	CUresult r = rm_session_use(s, RM_H_KERNEL, req->func, &kernel);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuKernelGetName(&name, kernel);
	rep->name = (char *)(name ? name : "");
	return r;
}

/* ---- memory pools by location ---- */

/* The client's device location as the host's; other kinds (host, NUMA) are refused: a
 * pool of the daemon's host memory is not memory the client can reach. */
static CUresult location_in(struct rm_channel *s, CUmemLocation *loc, const char *what)
{
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return rm_unsupported_use(what);
	CUdevice dev;
	CUresult r = rm_session_device(s, loc->id, &dev);
	if (r == CUDA_SUCCESS)
		loc->id = dev;
	return r;
}

CUresult rm_body_cuMemPoolSetAccess(struct rm_channel *s, CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
	CUmemAccessDesc *m = calloc(count ? count : 1, sizeof(*m)); /* count is the request's length */
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult r = CUDA_SUCCESS;
	for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
		m[i] = map[i];
		r = location_in(s, &m[i].location, "cuMemPoolSetAccess for a location other than a device");
	}
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuMemPoolSetAccess(pool, m, count);
	free(m);
	return r;
}

CUresult rm_body_cuMemPoolGetAccess(struct rm_channel *s, CUmemAccess_flags *flags, CUmemoryPool memPool,
				    CUmemLocation *location)
{
	CUmemLocation loc = *location;
	CUresult r = location_in(s, &loc, "cuMemPoolGetAccess for a location other than a device");
	return r == CUDA_SUCCESS ? rm_drv_cuMemPoolGetAccess(flags, memPool, &loc) : r;
}

/* Also the body of cuMemGetMemPool: the client's pool of a device is its default one, as
 * for cuDeviceGetMemPool (mempool_handlers.c). */
CUresult rm_body_cuMemGetDefaultMemPool(struct rm_channel *s, CUmemoryPool *pool_out, CUmemLocation *location,
					CUmemAllocationType type)
{
	CUmemLocation loc = *location;
	if (type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return rm_unsupported_use("cuMemGetDefaultMemPool of an allocation type other than pinned");
	CUresult r = location_in(s, &loc, "cuMemGetDefaultMemPool for a location other than a device");
	return r == CUDA_SUCCESS ? rm_body_cuDeviceGetDefaultMemPool(s, pool_out, loc.id) : r;
}
