/* The smaller calls: device and peer queries, kernel and library getters, stream
 * attributes and ids, peer copies, pointer and flush calls, the profiler's switches.
 * Answers are what an H100 pair of the same kind gives, where the call has one. */
#include "testdriver.h"

#include <cudaProfiler.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct td_function *td_function_from(const void *handle);

static CUresult device_ok(CUdevice dev)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return dev >= 0 && dev < td_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* ---- devices ---- */

static unsigned format_bytes(CUarray_format f)
{
	switch (f) {
	case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: return 1;
	case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: return 2;
	case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: return 4;
	default: return 0;
	}
}

TD_EXPORT CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format,
						      unsigned numChannels, CUdevice dev)
{
	CUresult rc = device_ok(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	unsigned bytes = format_bytes(format);
	if (!maxWidthInElements || !bytes || (numChannels != 1 && numChannels != 2 && numChannels != 4))
		return CUDA_ERROR_INVALID_VALUE;
	*maxWidthInElements = ((size_t)1 << 31) / (bytes * numChannels); /* 2 GiB of texels */
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
	CUresult rc = device_ok(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pi || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT)
		return CUDA_ERROR_INVALID_VALUE;
	*pi = 0; /* as without MPS */
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetLuid(char *luid, unsigned int *deviceNodeMask, CUdevice dev)
{
	(void)luid, (void)deviceNodeMask;
	CUresult rc = device_ok(dev);
	return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_NOT_SUPPORTED; /* Windows only */
}

/* Every pair of distinct devices is peer-capable, as on an NVLink host; a device is not its own peer. */
TD_EXPORT CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
	CUresult rc = device_ok(dev);
	if (rc == CUDA_SUCCESS)
		rc = device_ok(peerDev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!canAccessPeer)
		return CUDA_ERROR_INVALID_VALUE;
	*canAccessPeer = dev != peerDev;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
					   CUdevice dstDevice)
{
	CUresult rc = device_ok(srcDevice);
	if (rc == CUDA_SUCCESS)
		rc = device_ok(dstDevice);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value || srcDevice == dstDevice)
		return CUDA_ERROR_INVALID_DEVICE;
	switch (attrib) {
	case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;
	case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = 1; break;
	case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED: *value = 0; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

/* Integer operations signed and unsigned at 32 and 64 bits, floating-point add at both. */
static CUresult atomic_caps(unsigned int *caps, const CUatomicOperation *ops, unsigned int count)
{
	if (!caps || (!ops && count))
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < count; i++) {
		if ((unsigned)ops[i] >= CU_ATOMIC_OPERATION_MAX)
			return CUDA_ERROR_INVALID_VALUE;
		unsigned int width = CU_ATOMIC_CAPABILITY_SCALAR_32 | CU_ATOMIC_CAPABILITY_SCALAR_64;
		if (ops[i] >= CU_ATOMIC_OPERATION_FLOAT_ADD)
			caps[i] = ops[i] == CU_ATOMIC_OPERATION_FLOAT_ADD ? width : 0;
		else
			caps[i] = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED | width;
	}
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities, const CUatomicOperation *operations,
						    unsigned int count, CUdevice srcDevice, CUdevice dstDevice)
{
	CUresult rc = device_ok(srcDevice);
	if (rc == CUDA_SUCCESS)
		rc = device_ok(dstDevice);
	if (rc != CUDA_SUCCESS)
		return rc;
	return srcDevice == dstDevice ? CUDA_ERROR_INVALID_DEVICE : atomic_caps(capabilities, operations, count);
}

TD_EXPORT CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *capabilities, const CUatomicOperation *operations,
						     unsigned int count, CUdevice dev)
{
	CUresult rc = device_ok(dev);
	return rc != CUDA_SUCCESS ? rc : atomic_caps(capabilities, operations, count);
}

TD_EXPORT CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
					      CUflushGPUDirectRDMAWritesScope scope)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
	    (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER && scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS; /* no third-party writes here to order */
}

/* ---- functions, kernels, libraries (a CUkernel is a CUfunction here, a library a module) ---- */

TD_EXPORT CUresult cuFuncGetModule(CUmodule *hmod, CUfunction hfunc)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct td_function *f = td_function_from(hfunc);
	if (!hmod)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	*hmod = (CUmodule)f->module;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuKernelGetLibrary(CUlibrary *pLib, CUkernel kernel)
{
	return cuFuncGetModule((CUmodule *)pLib, (CUfunction)kernel);
}

TD_EXPORT CUresult cuFuncIsLoaded(CUfunctionLoadingState *state, CUfunction function)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!state)
		return CUDA_ERROR_INVALID_VALUE;
	if (!td_function_from(function))
		return CUDA_ERROR_INVALID_HANDLE;
	*state = CU_FUNCTION_LOADING_STATE_LOADED; /* loaded with its module */
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuFuncLoad(CUfunction function)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return td_function_from(function) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

TD_EXPORT CUresult cuFuncSetSharedMemConfig(CUfunction hfunc, CUsharedconfig config)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!td_function_from(hfunc))
		return CUDA_ERROR_INVALID_HANDLE;
	return (unsigned)config > CU_SHARED_MEM_CONFIG_EIGHT_BYTE_BANK_SIZE ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

TD_EXPORT CUresult cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev)
{
	CUresult rc = device_ok(dev);
	return rc != CUDA_SUCCESS ? rc : cuFuncSetCacheConfig((CUfunction)kernel, config);
}

TD_EXPORT CUresult cuKernelGetName(const char **name, CUkernel hfunc)
{
	return cuFuncGetName(name, (CUfunction)hfunc);
}

TD_EXPORT CUresult cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t *paramOffset, size_t *paramSize)
{
	return cuFuncGetParamInfo((CUfunction)kernel, paramIndex, paramOffset, paramSize);
}

TD_EXPORT CUresult cuLibraryGetKernelCount(unsigned int *count, CUlibrary lib)
{
	return cuModuleGetFunctionCount(count, (CUmodule)lib);
}

TD_EXPORT CUresult cuLibraryEnumerateKernels(CUkernel *kernels, unsigned int numKernels, CUlibrary lib)
{
	return cuModuleEnumerateFunctions((CUfunction *)kernels, numKernels, (CUmodule)lib);
}

TD_EXPORT CUresult cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
					 void **jitOptionsValues, unsigned int numJitOptions,
					 CUlibraryOption *libraryOptions, void **libraryOptionValues,
					 unsigned int numLibraryOptions)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!library || !fileName)
		return CUDA_ERROR_INVALID_VALUE;
	FILE *file = fopen(fileName, "rb");
	if (!file)
		return CUDA_ERROR_FILE_NOT_FOUND;
	CUresult rc = CUDA_ERROR_INVALID_IMAGE;
	unsigned char *bytes = NULL;
	if (fseek(file, 0, SEEK_END) == 0) {
		long length = ftell(file);
		if (length > 0 && length < (1L << 30) && (bytes = calloc(1, (size_t)length + 1)) &&
		    fseek(file, 0, SEEK_SET) == 0 && fread(bytes, 1, (size_t)length, file) == (size_t)length)
			rc = cuLibraryLoadData(library, bytes, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
					       libraryOptionValues, numLibraryOptions);
	}
	free(bytes);
	fclose(file);
	return rc;
}

/* ---- streams: attributes kept beside each stream, ids given at first asking ---- */

struct stream_extra {
	const struct td_stream *stream;
	unsigned long long id;
	CUaccessPolicyWindow window;
	CUsynchronizationPolicy sync_policy;
	CUlaunchMemSyncDomainMap domain_map;
	CUlaunchMemSyncDomain domain;
	unsigned int nvlink_centric;
	struct stream_extra *next;
};
static struct stream_extra *extras; /* td_lock */
static unsigned long long next_stream_id = 1;

/* s's record, made with the defaults if absent; under td_lock. */
static struct stream_extra *extra_of(const struct td_stream *s)
{
	for (struct stream_extra *e = extras; e; e = e->next)
		if (e->stream == s)
			return e;
	struct stream_extra *e = calloc(1, sizeof(*e));
	if (!e)
		abort();
	e->stream = s;
	e->id = next_stream_id++;
	e->sync_policy = CU_SYNC_POLICY_AUTO;
	e->domain_map.default_ = 0;
	e->domain_map.remote = 1;
	e->next = extras;
	extras = e;
	return e;
}

TD_EXPORT CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(hStream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	memset(value, 0, sizeof(*value));
	pthread_mutex_lock(&td_lock);
	struct stream_extra *e = extra_of(s);
	switch (attr) {
	case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW: value->accessPolicyWindow = e->window; break;
	case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY: value->syncPolicy = e->sync_policy; break;
	case CU_LAUNCH_ATTRIBUTE_PRIORITY: value->priority = s->priority; break;
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: value->memSyncDomainMap = e->domain_map; break;
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: value->memSyncDomain = e->domain; break;
	case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING: value->nvlinkUtilCentricScheduling = e->nvlink_centric; break;
	default: rc = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&td_lock);
	return rc;
}

TD_EXPORT CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *param)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(hStream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!param)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	struct stream_extra *e = extra_of(s);
	switch (attr) {
	case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
		if (param->accessPolicyWindow.hitRatio < 0 || param->accessPolicyWindow.hitRatio > 1)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			e->window = param->accessPolicyWindow;
		break;
	case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
		if (param->syncPolicy < CU_SYNC_POLICY_AUTO || param->syncPolicy > CU_SYNC_POLICY_BLOCKING_SYNC)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			e->sync_policy = param->syncPolicy;
		break;
	case CU_LAUNCH_ATTRIBUTE_PRIORITY: /* clamped to [-5, 0], as cuStreamCreateWithPriority */
		s->priority = param->priority > 0 ? 0 : param->priority < -5 ? -5 : param->priority;
		break;
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP: e->domain_map = param->memSyncDomainMap; break;
	case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
		if (param->memSyncDomain > CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE)
			rc = CUDA_ERROR_INVALID_VALUE;
		else
			e->domain = param->memSyncDomain;
		break;
	case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
		e->nvlink_centric = param->nvlinkUtilCentricScheduling;
		break;
	default: rc = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&td_lock);
	return rc;
}

TD_EXPORT CUresult cuStreamCopyAttributes(CUstream dstStream, CUstream srcStream)
{
	struct td_stream *dst, *src;
	CUresult rc = td_resolve_stream(dstStream, &dst);
	if (rc == CUDA_SUCCESS)
		rc = td_resolve_stream(srcStream, &src);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&td_lock);
	struct stream_extra *d = extra_of(dst), *s = extra_of(src);
	d->window = s->window;
	d->sync_policy = s->sync_policy;
	d->domain_map = s->domain_map;
	d->domain = s->domain;
	d->nvlink_centric = s->nvlink_centric;
	dst->priority = src->priority;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamGetId(CUstream hStream, unsigned long long *streamId)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(hStream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!streamId)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	*streamId = extra_of(s)->id;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamGetDevice(CUstream hStream, CUdevice *device)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(hStream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	*device = s->ctx->device;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamGetCtx(CUstream hStream, CUcontext *pctx)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(hStream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)s->ctx;
	return CUDA_SUCCESS;
}

/* No green contexts: a stream's context is its context. */
TD_EXPORT CUresult cuStreamGetCtx_v2(CUstream hStream, CUcontext *pctx, CUgreenCtx *pgreen)
{
	CUresult rc = cuStreamGetCtx(hStream, pctx);
	if (rc == CUDA_SUCCESS && pgreen)
		*pgreen = NULL;
	return rc;
}

/* No L2 cache to reset: the current context is all it needs. */
TD_EXPORT CUresult cuCtxResetPersistingL2Cache(void)
{
	struct td_context *ctx;
	return td_require_context(&ctx);
}

/* ---- memory ---- */

/* One address space: a peer copy is a device-to-device copy, ordered on the stream. */
TD_EXPORT CUresult cuMemcpyPeerAsync(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
				     CUcontext srcContext, size_t ByteCount, CUstream hStream)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!td_context_valid((struct td_context *)dstContext) || !td_context_valid((struct td_context *)srcContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return cuMemcpyDtoDAsync_v2(dstDevice, srcDevice, ByteCount, hStream);
}

TD_EXPORT CUresult cuMemcpyPeer(CUdeviceptr dstDevice, CUcontext dstContext, CUdeviceptr srcDevice,
				CUcontext srcContext, size_t ByteCount)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!td_context_valid((struct td_context *)dstContext) || !td_context_valid((struct td_context *)srcContext))
		return CUDA_ERROR_INVALID_CONTEXT;
	return cuMemcpyDtoD_v2(dstDevice, srcDevice, ByteCount);
}

/* Only CU_POINTER_ATTRIBUTE_SYNC_MEMOPS may be set, on device memory; copies here are
 * synchronous already. */
TD_EXPORT CUresult cuPointerSetAttribute(const void *value, CUpointer_attribute attribute, CUdeviceptr ptr)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct td_alloc a;
	if (!value || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS)
		return CUDA_ERROR_INVALID_VALUE;
	if (!td_find_alloc((uintptr_t)ptr, 1, &a) || a.kind != TD_ALLOC_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemGetDefaultMemPool(CUmemoryPool *pool_out, CUmemLocation *location, CUmemAllocationType type)
{
	if (!location || type != CU_MEM_ALLOCATION_TYPE_PINNED || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return cuDeviceGetDefaultMemPool(pool_out, location->id);
}

TD_EXPORT CUresult cuMemGetMemPool(CUmemoryPool *pool, CUmemLocation *location, CUmemAllocationType type)
{
	if (!location || type != CU_MEM_ALLOCATION_TYPE_PINNED || location->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return cuDeviceGetMemPool(pool, location->id);
}

/* ---- profiler: no tool attached; cuProfilerInitialize gone since CUDA 12 ---- */

TD_EXPORT CUresult cuProfilerInitialize(const char *configFile, const char *outputFile, CUoutput_mode outputMode)
{
	(void)configFile, (void)outputFile, (void)outputMode;
	return CUDA_ERROR_NOT_SUPPORTED;
}

TD_EXPORT CUresult cuProfilerStart(void)
{
	struct td_context *ctx;
	return td_require_context(&ctx);
}

TD_EXPORT CUresult cuProfilerStop(void)
{
	struct td_context *ctx;
	return td_require_context(&ctx);
}
