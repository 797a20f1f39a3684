/* A small cuda.h for tests/unit/test_gen_api.py: the shapes of the real one that
 * scripts/gen_api.py reads, and a few functions of each kind of parameter. */
#ifndef TEST_GEN_CUDA_H
#define TEST_GEN_CUDA_H

#include <stddef.h>

#define CUDAAPI

typedef enum cudaError_enum {
    /**
     * The API call returned with no errors.
     */
    CUDA_SUCCESS = 0,
    /**
     * One or more of the parameters passed to the API call is not within an
     * acceptable range of values.
     */
    CUDA_ERROR_INVALID_VALUE = 1,
    /**
     * This indicates that a resource handle passed to the API call was not valid.
     */
    CUDA_ERROR_INVALID_HANDLE = 400
} CUresult;

typedef int CUdevice;
typedef unsigned long long CUdeviceptr;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUgraph_st *CUgraph; /* a handle type the daemon has no kind for */
typedef enum CUlimit_enum { CU_LIMIT_STACK_SIZE = 0 } CUlimit;
typedef struct CUuuid_st { char bytes[16]; } CUuuid;
typedef union CUstreamValue_union { int priority; struct { void *base; size_t bytes; } window; } CUstreamValue;

CUresult CUDAAPI cuInit(unsigned int Flags);
CUresult CUDAAPI cuDriverGetVersion(int *driverVersion);
CUresult CUDAAPI cuDeviceGet(CUdevice *device, int ordinal);
CUresult CUDAAPI cuDeviceGetName(char *name, int len, CUdevice dev);
CUresult CUDAAPI cuDeviceGetUuid(CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuDeviceCheckUuid(const CUuuid *uuid, CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev);
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev);
CUresult CUDAAPI cuCtxGetDevice(CUdevice *device);
CUresult CUDAAPI cuCtxSynchronize(void);
CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx);
CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value);
CUresult CUDAAPI cuMemAlloc(CUdeviceptr *dptr, size_t bytesize);
CUresult CUDAAPI cuMemFree(CUdeviceptr dptr);
CUresult CUDAAPI cuMemGetAddressRange(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr);
CUresult CUDAAPI cuMemsetD32(CUdeviceptr dstDevice, unsigned int ui, size_t N);
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream);
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount);
CUresult CUDAAPI cuModuleLoadData(CUmodule *module, const void *image);
CUresult CUDAAPI cuModuleUnload(CUmodule hmod);
CUresult CUDAAPI cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name);
CUresult CUDAAPI cuModuleGetGlobal(CUdeviceptr *dptr, size_t *bytes, CUmodule hmod, const char *name);
CUresult CUDAAPI cuFuncSetArgs(CUfunction hfunc, const int *args, unsigned int count);
CUresult CUDAAPI cuCtxGetLimitValue(CUlimit limit, void *value);
CUresult CUDAAPI cuStreamWaitStreams(CUstream hStream, CUstream *others, size_t count, const CUuuid *tag);
CUresult CUDAAPI cuCtxSetLimitValue(CUlimit limit, void *value);
CUresult CUDAAPI cuStreamCreate(CUstream *phStream, unsigned int Flags);
CUresult CUDAAPI cuStreamDestroy(CUstream hStream);
CUresult CUDAAPI cuStreamSynchronize(CUstream hStream);
CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream);
CUresult CUDAAPI cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult CUDAAPI cuGraphDestroy(CUgraph hGraph);
CUresult CUDAAPI cuStreamWriteWord(CUstream hStream, CUdeviceptr addr, unsigned value);
CUresult CUDAAPI cuStreamSetValue(CUstream hStream, const CUstreamValue *value);

#endif
