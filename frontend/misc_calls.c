/* The smaller calls written by hand in the client: the profiler's switches, kernel
 * names, stream memory writes, and copies between pointers of either side (unified
 * addressing), which the client sorts into the host and device copies it forwards,
 * libraries loaded from the program's files. */
#include "client.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"
#include "remora.pb-c.h"

/* ---- profiler ---- */

/* The profiler of the GPU host is not the program's: starting and stopping it succeed and
 * do nothing, as they do natively when no profiling tool is attached; they need a context.
 * cuProfilerInitialize is CUDA_ERROR_NOT_SUPPORTED, as from every driver since CUDA 12. */
RM_EXPORT CUresult CUDAAPI cuProfilerInitialize(const char *configFile, const char *outputFile, CUoutput_mode outputMode)
{
	(void)configFile;
	(void)outputFile;
	(void)outputMode;
	return CUDA_ERROR_NOT_SUPPORTED;
}

RM_EXPORT CUresult CUDAAPI cuProfilerStart(void)
{
	return rm_ctx_current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

RM_EXPORT CUresult CUDAAPI cuProfilerStop(void)
{
	return rm_ctx_current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/* ---- kernel names ---- */

/* Every name given out, kept for the program's lifetime (the driver keeps a kernel's name
 * while its library lives); one copy of each. Not cached by kernel: a kernel's handle may
 * come again for another kernel once its library is unloaded. */
struct interned {
	char *name;
	struct interned *next;
};
static struct interned *interned;
static pthread_mutex_t interned_lock = PTHREAD_MUTEX_INITIALIZER;

static const char *intern(const char *name)
{
	const char *out = NULL;
	pthread_mutex_lock(&interned_lock);
	for (struct interned *e = interned; e && !out; e = e->next)
		if (!strcmp(e->name, name))
			out = e->name;
	if (!out) {
		struct interned *e = malloc(sizeof(*e));
		char *copy = strdup(name);
		if (e && copy) {
			e->name = copy;
			e->next = interned;
			interned = e;
			out = copy;
		} else {
			free(e);
			free(copy);
		}
	}
	pthread_mutex_unlock(&interned_lock);
	return out;
}

RM_EXPORT CUresult CUDAAPI cuKernelGetName(const char **name, CUkernel hfunc)
{
	if (!name || !hfunc)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__FuncGetName req = REMORA__FUNC_GET_NAME__INIT;
	req.func = (uint64_t)(uintptr_t)hfunc;
	Remora__FuncGetNameReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuKernelGetName, &req.base, &remora__func_get_name_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep && !(*name = intern(rep->name)))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* ---- libraries from files ---- */

/* The file is the program's: read here, and loaded as cuLibraryLoadData loads an image. */
RM_EXPORT CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary *library, const char *fileName, CUjit_option *jitOptions,
						 void **jitOptionsValues, unsigned int numJitOptions,
						 CUlibraryOption *libraryOptions, void **libraryOptionValues,
						 unsigned int numLibraryOptions)
{
	if (!library || !fileName)
		return CUDA_ERROR_INVALID_VALUE;
	uint8_t *image = NULL;
	CUresult r = rm_read_image_file(fileName, &image);
	if (r == CUDA_SUCCESS)
		r = cuLibraryLoadData(library, image, jitOptions, jitOptionsValues, numJitOptions, libraryOptions,
				      libraryOptionValues, numLibraryOptions);
	free(image);
	return r;
}

/* ---- stream memory writes ---- */

/* A write is device work like a kernel: host changes to mapped and managed memory go up
 * before it, and what it writes there comes down at the next synchronization. */
#define WRITE_VALUE(NAME, TYPE, REQ, INIT)                                                              \
	RM_EXPORT CUresult CUDAAPI NAME(CUstream stream, CUdeviceptr addr, TYPE value, unsigned int flags) \
	{                                                                                                \
		CUresult r = rm_mapped_before_launch(stream);                                             \
		if (r != CUDA_SUCCESS)                                                                   \
			return r;                                                                        \
		REQ req = INIT;                                                                          \
		req.stream = (uint64_t)(uintptr_t)stream;                                                \
		req.addr = addr;                                                                         \
		req.value = value;                                                                       \
		req.flags = flags;                                                                       \
		return rm_rpc_ordered(RM_OP_##NAME, &req.base, req.stream, 0);                            \
	}

WRITE_VALUE(cuStreamWriteValue32, cuuint32_t, Remora__CuStreamWriteValue32Req, REMORA__CU_STREAM_WRITE_VALUE32__REQ__INIT)
WRITE_VALUE(cuStreamWriteValue32_v2, cuuint32_t, Remora__CuStreamWriteValue32V2Req,
	    REMORA__CU_STREAM_WRITE_VALUE32_V2__REQ__INIT)
WRITE_VALUE(cuStreamWriteValue64, cuuint64_t, Remora__CuStreamWriteValue64Req, REMORA__CU_STREAM_WRITE_VALUE64__REQ__INIT)
WRITE_VALUE(cuStreamWriteValue64_v2, cuuint64_t, Remora__CuStreamWriteValue64V2Req,
	    REMORA__CU_STREAM_WRITE_VALUE64_V2__REQ__INIT)

/* A batch of writes is device work as one write is (the daemon refuses waits by a word); its
 * answer is the call's, as the driver's refusal of a batch is. */
#define BATCH_MEM_OP(NAME, REQ, INIT)                                                                  \
	RM_EXPORT CUresult CUDAAPI NAME(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray, \
					unsigned int flags)                                             \
	{                                                                                                \
		if ((count && !paramArray) || count >= 256)                                              \
			return CUDA_ERROR_INVALID_VALUE;                                                 \
		CUresult r = rm_mapped_before_launch(stream);                                             \
		if (r != CUDA_SUCCESS)                                                                   \
			return r;                                                                        \
		REQ req = INIT;                                                                          \
		req.stream = (uint64_t)(uintptr_t)stream;                                                \
		req.count = count;                                                                       \
		req.paramarray.data = (uint8_t *)paramArray;                                             \
		req.paramarray.len = (size_t)count * sizeof(*paramArray);                                \
		req.flags = flags;                                                                       \
		return rm_rpc_ordered(RM_OP_##NAME, &req.base, req.stream, 0);                            \
	}

BATCH_MEM_OP(cuStreamBatchMemOp, Remora__CuStreamBatchMemOpReq, REMORA__CU_STREAM_BATCH_MEM_OP__REQ__INIT)
BATCH_MEM_OP(cuStreamBatchMemOp_v2, Remora__CuStreamBatchMemOpV2Req, REMORA__CU_STREAM_BATCH_MEM_OP_V2__REQ__INIT)

/* ---- copies by unified addressing ---- */

/* Whether [p, p + n) is device memory: managed memory is (its copy here follows the
 * device's), host memory the client knows is not, and otherwise the daemon says whether
 * it is device memory of the client's; anything else is the program's own memory. */
int rm_on_device(CUdeviceptr p, size_t n)
{
	if (rm_host_alloc_find((const void *)(uintptr_t)p, NULL, NULL, NULL))
		return 0;
	if (rm_managed_holds(p, n))
		return 1;
	unsigned int type = 0;
	return cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p) == CUDA_SUCCESS &&
	       type == CU_MEMORYTYPE_DEVICE;
}

static CUresult unified_copy(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, int async)
{
	if (!n)
		return CUDA_SUCCESS;
	int d = rm_on_device(dst, n), s = rm_on_device(src, n);
	void *hd = (void *)(uintptr_t)dst;
	const void *hs = (const void *)(uintptr_t)src;
	if (d && s)
		return async ? cuMemcpyDtoDAsync_v2(dst, src, n, stream) : cuMemcpyDtoD_v2(dst, src, n);
	if (d)
		return async ? cuMemcpyHtoDAsync_v2(dst, hs, n, stream) : cuMemcpyHtoD_v2(dst, hs, n);
	if (s)
		return async ? cuMemcpyDtoHAsync_v2(hd, src, n, stream) : cuMemcpyDtoH_v2(hd, src, n);
	/* Host to host: after the stream's earlier work, as the driver orders it (waiting for
	 * it is stronger than CUDA promises an async copy, never weaker). */
	CUresult r = async ? cuStreamSynchronize(stream) : cuCtxSynchronize();
	if (r == CUDA_SUCCESS)
		memmove(hd, hs, n);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	return unified_copy(dst, src, ByteCount, NULL, 0);
}

RM_EXPORT CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	return unified_copy(dst, src, ByteCount, hStream, 1);
}
