/* The smaller driver calls (issue 34): the profiler's switches, device and peer queries,
 * kernel, library and function getters, stream attributes (and that what one stream was
 * given does not reach a stream made after it), stream ids and devices, stream memory
 * writes (one by one and in batches) into device and mapped host memory, copies by unified
 * addressing and between peers, pointer attributes set, memory pools by location.
 * usage: drv_smallcalls IMAGE
 * Prints what it found (device-dependent values too: native and remote runs on one host
 * print the same) and exits 1 on any wrong result. */
#include <cudaProfiler.h>

#include "drv_common.h"

/* cuProfilerInitialize and cuFuncSetSharedMemConfig are deprecated, and tested here. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* The first batch form (cuda.h names the second): programs built before CUDA 12 call it. */
#undef cuStreamBatchMemOp
CUresult CUDAAPI cuStreamBatchMemOp(CUstream stream, unsigned int count, CUstreamBatchMemOpParams *paramArray,
				    unsigned int flags);

#define N 4096

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void profiler(void)
{
	CUresult init = cuProfilerInitialize("/nonexistent/config", "/nonexistent/output", CU_OUT_CSV);
	EXPECT(init == CUDA_ERROR_NOT_SUPPORTED, "cuProfilerInitialize gave %s", drv_error_name(init));
	CHECK(cuProfilerStart());
	CHECK(cuProfilerStop());
	printf("profiler: start and stop succeed, initialize %s\n", drv_error_name(init));
}

static void devices(void)
{
	int count = 0, can = -1, affinity = -1;
	size_t width = 0;
	CHECK(cuDeviceGetCount(&count));
	CHECK(cuDeviceGetTexture1DLinearMaxWidth(&width, CU_AD_FORMAT_FLOAT, 4, 0));
	CHECK(cuDeviceGetExecAffinitySupport(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT, 0));
	CHECK(cuDeviceCanAccessPeer(&can, 0, 0));
	EXPECT(can == 0, "a device is its own peer: %d", can);
	char luid[8];
	unsigned int mask = 0;
	CUresult luid_rc = cuDeviceGetLuid(luid, &mask, 0);
	printf("devices %d: 1-D linear texture width (float4) %zu, exec affinity %d, self peer %d, luid %s\n", count,
	       width, affinity, can, luid_rc == CUDA_SUCCESS ? "given" : drv_error_name(luid_rc));
	EXPECT(width > 0, "no 1-D linear texture width");
	if (count < 2) {
		printf("peers: one device\n");
		return;
	}
	int access = -1, rank = -1;
	CUatomicOperation ops[2] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_FLOAT_ADD};
	unsigned int caps[2] = {0, 0};
	CHECK(cuDeviceCanAccessPeer(&can, 0, 1));
	CHECK(cuDeviceGetP2PAttribute(&access, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, 0, 1));
	CHECK(cuDeviceGetP2PAttribute(&rank, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 0, 1));
	CHECK(cuDeviceGetP2PAtomicCapabilities(caps, ops, 2, 0, 1));
	EXPECT(can == access, "can access peer %d, access supported %d", can, access);
	printf("peers 0-1: can access %d, rank %d, atomic add caps 0x%x, float add caps 0x%x\n", can, rank, caps[0],
	       caps[1]);
}

/* The library's kernels, enumerated and named; getters back to their library and module. */
static void kernels(CUlibrary lib, CUmodule mod)
{
	unsigned int count = 0;
	CHECK(cuLibraryGetKernelCount(&count, lib));
	EXPECT(count > 0 && count < 64, "kernel count %u", count);
	CUkernel ks[64];
	const char *names[64];
	CHECK(cuLibraryEnumerateKernels(ks, count, lib));
	for (unsigned int i = 0; i < count; i++) {
		CUlibrary back = NULL;
		CUkernel again = NULL;
		CHECK(cuKernelGetName(&names[i], ks[i]));
		CHECK(cuKernelGetLibrary(&back, ks[i]));
		CHECK(cuLibraryGetKernel(&again, lib, names[i]));
		EXPECT(back == lib, "%s: cuKernelGetLibrary gave another library", names[i]);
		EXPECT(again == ks[i], "%s: cuLibraryGetKernel gave another kernel", names[i]);
	}
	qsort(names, count, sizeof(names[0]), cmp_str);
	printf("library kernels %u:", count);
	for (unsigned int i = 0; i < count; i++)
		printf(" %s", names[i]);
	printf("\n");

	CUkernel vec;
	CHECK(cuLibraryGetKernel(&vec, lib, "vecAdd"));
	printf("vecAdd parameters:");
	for (size_t i = 0; i < 4; i++) {
		size_t at = 0, len = 0;
		CHECK(cuKernelGetParamInfo(vec, i, &at, &len));
		printf(" %zu+%zu", at, len);
	}
	printf("; past the last: %s\n", drv_error_name(cuKernelGetParamInfo(vec, 4, NULL, NULL)));
	CHECK(cuKernelSetCacheConfig(vec, CU_FUNC_CACHE_PREFER_SHARED, 0));

	CUfunction f;
	CUmodule of = NULL;
	CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_MAX;
	CHECK(cuModuleGetFunction(&f, mod, "fillU32"));
	CHECK(cuFuncGetModule(&of, f));
	EXPECT(of == mod, "cuFuncGetModule gave another module");
	CHECK(cuFuncLoad(f));
	CHECK(cuFuncIsLoaded(&state, f));
	EXPECT(state == CU_FUNCTION_LOADING_STATE_LOADED, "fillU32 not loaded after cuFuncLoad: %d", (int)state);
	CUresult bank = cuFuncSetSharedMemConfig(f, CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE);
	printf("module function: its module, loaded; shared memory bank config %s\n", drv_error_name(bank));
}

struct attrs {
	CUstreamAttrValue window, sync, priority, domain;
};

static void get_attrs(CUstream s, struct attrs *a)
{
	memset(a, 0, sizeof(*a));
	CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &a->window));
	CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &a->sync));
	CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &a->priority));
	CHECK(cuStreamGetAttribute(s, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &a->domain));
}

static int same_attrs(const struct attrs *a, const struct attrs *b)
{
	return a->window.accessPolicyWindow.num_bytes == b->window.accessPolicyWindow.num_bytes &&
	       a->sync.syncPolicy == b->sync.syncPolicy && a->priority.priority == b->priority.priority &&
	       a->domain.memSyncDomain == b->domain.memSyncDomain;
}

/* Attributes set, read, copied; streams made after the changed ones are destroyed have
 * every attribute a fresh stream has. Ids unique, devices right. */
static void streams(CUdeviceptr buf)
{
	int least = 0, greatest = 0;
	CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
	int only_least = 1, only_greatest = 1; /* either output may be NULL, as cuDNN's RNNs pass it */
	CHECK(cuCtxGetStreamPriorityRange(&only_least, NULL));
	CHECK(cuCtxGetStreamPriorityRange(NULL, &only_greatest));
	CHECK(cuCtxGetStreamPriorityRange(NULL, NULL));
	EXPECT(only_least == least && only_greatest == greatest,
	       "cuCtxGetStreamPriorityRange with one output NULL: %d %d, not %d %d", only_least, only_greatest, least, greatest);
	CUstream fresh, s1, s2;
	struct attrs defaults, a;
	CHECK(cuStreamCreate(&fresh, CU_STREAM_NON_BLOCKING));
	get_attrs(fresh, &defaults);
	printf("stream defaults: window %zu bytes, sync policy %d, priority %d, sync domain %d\n",
	       defaults.window.accessPolicyWindow.num_bytes, (int)defaults.sync.syncPolicy, defaults.priority.priority,
	       (int)defaults.domain.memSyncDomain);
	CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));

	CUstreamAttrValue v;
	memset(&v, 0, sizeof(v));
	v.accessPolicyWindow.base_ptr = (void *)(uintptr_t)buf;
	v.accessPolicyWindow.num_bytes = 4096;
	v.accessPolicyWindow.hitRatio = 0.5f;
	v.accessPolicyWindow.hitProp = CU_ACCESS_PROPERTY_PERSISTING;
	v.accessPolicyWindow.missProp = CU_ACCESS_PROPERTY_STREAMING;
	CHECK(cuStreamSetAttribute(s1, CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, &v));
	memset(&v, 0, sizeof(v));
	v.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
	/* Through Remora refused: a pool stream's unset policy cannot be put back (stream_attrs.c). */
	CUresult sync_set = cuStreamSetAttribute(s1, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v);
	EXPECT(sync_set == CUDA_SUCCESS || sync_set == CUDA_ERROR_NOT_SUPPORTED, "sync policy set: %d", (int)sync_set);
	if (sync_set != CUDA_SUCCESS)
		fprintf(stderr, "the synchronization policy is not supported here\n");
	memset(&v, 0, sizeof(v));
	v.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
	CHECK(cuStreamSetAttribute(s1, CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN, &v));
	memset(&v, 0, sizeof(v));
	v.priority = greatest;
	CHECK(cuStreamSetAttribute(s2, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v));

	get_attrs(s1, &a);
	EXPECT(a.window.accessPolicyWindow.base_ptr == (void *)(uintptr_t)buf &&
	       a.window.accessPolicyWindow.num_bytes == 4096 && a.window.accessPolicyWindow.hitRatio == 0.5f &&
	       a.window.accessPolicyWindow.hitProp == CU_ACCESS_PROPERTY_PERSISTING,
	       "the access policy window read back differs");
	EXPECT(sync_set != CUDA_SUCCESS || a.sync.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC, "sync policy %d",
	       (int)a.sync.syncPolicy);
	EXPECT(a.domain.memSyncDomain == CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE, "sync domain %d", (int)a.domain.memSyncDomain);
	int prio = 0;
	CHECK(cuStreamGetPriority(s2, &prio));
	get_attrs(s2, &a);
	EXPECT(a.priority.priority == greatest && prio == greatest, "priority %d, cuStreamGetPriority %d, set %d",
	       a.priority.priority, prio, greatest);
	CHECK(cuStreamCopyAttributes(s2, s1));
	get_attrs(s2, &a);
	EXPECT((sync_set != CUDA_SUCCESS || a.sync.syncPolicy == CU_SYNC_POLICY_BLOCKING_SYNC) &&
	       a.window.accessPolicyWindow.num_bytes == 4096,
	       "attributes not copied");
	printf("stream attributes: set, read back and copied; priority range %d..%d\n", greatest, least);

	unsigned long long ids[6];
	CHECK(cuStreamGetId(s1, &ids[0]));
	CHECK(cuStreamGetId(s2, &ids[1]));
	CHECK(cuStreamGetId(fresh, &ids[2]));
	CHECK(cuStreamSynchronize(s1));
	CHECK(cuStreamSynchronize(s2));
	CHECK(cuStreamDestroy(s1));
	CHECK(cuStreamDestroy(s2));

	/* Streams made now may be the very driver streams given back (through Remora, from its pool). */
	CUstream later[4];
	int leaks = 0;
	for (int i = 0; i < 4; i++) {
		CHECK(cuStreamCreate(&later[i], CU_STREAM_NON_BLOCKING));
		get_attrs(later[i], &a);
		leaks += !same_attrs(&a, &defaults);
	}
	EXPECT(!leaks, "%d stream(s) made later carry attributes set on destroyed ones", leaks);
	CHECK(cuStreamGetId(later[0], &ids[3]));
	CHECK(cuStreamGetId(later[1], &ids[4]));
	CHECK(cuStreamGetId(later[0], &ids[5]));
	EXPECT(ids[5] == ids[3], "a stream's id changed");
	int distinct = 1;
	for (int i = 0; i < 5; i++)
		for (int j = i + 1; j < 5; j++)
			distinct &= ids[i] != ids[j];
	EXPECT(distinct, "stream ids repeat among live and destroyed streams");
	CUdevice dev = -1;
	CUcontext current = NULL, of_stream = NULL;
	CHECK(cuStreamGetDevice(later[0], &dev));
	CHECK(cuCtxGetCurrent(&current));
	CHECK(cuStreamGetCtx(later[1], &of_stream));
	EXPECT(dev == 0, "stream device %d", dev);
	EXPECT(of_stream == current, "a stream's context is not the one it was made in");
	printf("later streams: default attributes %s, ids distinct %d, device %d\n", leaks ? "no" : "yes", distinct, dev);

	/* Stream writes: into device memory, and into mapped host memory, which the host reads. */
	unsigned int *host = NULL, got = 0;
	CUdeviceptr mapped;
	CHECK(cuMemHostAlloc((void **)&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
	memset(host, 0, 4096);
	CHECK(cuMemHostGetDevicePointer(&mapped, host, 0));
	CHECK(cuStreamWriteValue32(later[0], buf + 8, 0xabcd1234u, CU_STREAM_WRITE_VALUE_DEFAULT));
	CHECK(cuStreamWriteValue32(later[0], mapped + 12, 0x5eed5eedu, CU_STREAM_WRITE_VALUE_DEFAULT));
	CHECK(cuStreamSynchronize(later[0]));
	CHECK(cuMemcpyDtoH(&got, buf + 8, 4));
	EXPECT(got == 0xabcd1234u, "device word 0x%x", got);
	EXPECT(host[3] == 0x5eed5eedu, "mapped host word 0x%x", host[3]);
	printf("stream writes: device 0x%x, mapped host 0x%x\n", got, host[3]);

	/* A batch: a 32-bit and a 64-bit write with a barrier between, into device memory and
	 * into mapped host memory. */
	CUstreamBatchMemOpParams ops[3];
	memset(ops, 0, sizeof(ops));
	ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
	ops[0].writeValue.address = buf + 16;
	ops[0].writeValue.value = 0x0badcafeu;
	ops[1].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
	ops[1].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_GPU;
	ops[2].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
	ops[2].writeValue.address = mapped + 24;
	ops[2].writeValue.value64 = 0x0123456789abcdefull;
	/* A GPU's driver may refuse some of these operations (the H100's, with driver 580, refuses
	 * this batch): then the device write alone, and the driver's answer printed. */
	CUresult batch = cuStreamBatchMemOp(later[1], 3, ops, 0);
	int nops = 3;
	if (batch == CUDA_ERROR_NOT_SUPPORTED)
		batch = cuStreamBatchMemOp(later[1], nops = 1, ops, 0);
	if (batch == CUDA_SUCCESS) {
		CHECK(cuStreamSynchronize(later[1]));
		unsigned long long got64 = 0;
		CHECK(cuMemcpyDtoH(&got, buf + 16, 4));
		memcpy(&got64, (char *)host + 24, 8);
		EXPECT(got == 0x0badcafeu && (nops == 1 || got64 == 0x0123456789abcdefull), "batch writes 0x%x 0x%llx", got,
		       got64);
		printf("stream batch of %d: device 0x%x, mapped host 0x%llx\n", nops, got, got64);
	} else {
		EXPECT(batch == CUDA_ERROR_NOT_SUPPORTED, "cuStreamBatchMemOp gave %d", (int)batch);
		printf("stream batch: not supported by the driver\n");
	}
	if (getenv("REMORA_SERVER")) { /* a write outside the client's memory; a wait by a word */
		ops[0].writeValue.address = buf + (1ull << 40);
		EXPECT_RESULT(cuStreamBatchMemOp(later[1], 1, ops, 0), CUDA_ERROR_INVALID_VALUE);
		ops[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
		ops[0].waitValue.address = buf + 16;
		ops[0].waitValue.value = 0x0badcafeu;
		EXPECT_RESULT(cuStreamBatchMemOp_v2(later[1], 1, ops, 0), CUDA_ERROR_NOT_SUPPORTED);
	}
	CHECK(cuMemFreeHost(host));
	for (int i = 0; i < 4; i++)
		CHECK(cuStreamDestroy(later[i]));
	CHECK(cuStreamDestroy(fresh));
}

static void fill(unsigned char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(i * 31 + seed);
}

/* cuMemcpy(Async) in every direction, each pointer's side found by unified addressing. */
static void copies(CUcontext ctx)
{
	unsigned char *a = malloc(N), *b = malloc(N), *pinned = NULL;
	CUdeviceptr d1, d2;
	CUstream s;
	CHECK(cuMemAlloc(&d1, N));
	CHECK(cuMemAlloc(&d2, N));
	CHECK(cuMemAllocHost((void **)&pinned, N));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	fill(a, N, 1);
	CHECK(cuMemcpy(d1, (CUdeviceptr)(uintptr_t)a, N));                 /* host to device */
	CHECK(cuMemcpy(d2, d1, N));                                          /* device to device */
	memset(b, 0, N);
	CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)b, d2, N));                 /* device to host */
	EXPECT(!memcmp(a, b, N), "cuMemcpy through the device changed the bytes");
	memset(pinned, 0, N);
	CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)pinned, (CUdeviceptr)(uintptr_t)a, N)); /* host to host */
	EXPECT(!memcmp(a, pinned, N), "cuMemcpy host to host");

	fill(pinned, N, 7);
	CHECK(cuMemcpyAsync(d1, (CUdeviceptr)(uintptr_t)pinned, N, s));
	CHECK(cuMemcpyAsync(d2, d1, N, s));
	CHECK(cuMemcpyAsync((CUdeviceptr)(uintptr_t)b, d2, N, s));
	CHECK(cuStreamSynchronize(s));
	EXPECT(!memcmp(pinned, b, N), "cuMemcpyAsync through the device changed the bytes");

	/* Peers: both sides on device 0 here, with its context named twice. */
	fill(a, N, 3);
	CHECK(cuMemcpyHtoD(d1, a, N));
	CHECK(cuMemcpyPeer(d2, ctx, d1, ctx, N));
	memset(b, 0, N);
	CHECK(cuMemcpyDtoH(b, d2, N));
	EXPECT(!memcmp(a, b, N), "cuMemcpyPeer");
	CHECK(cuMemsetD8(d2, 0, N));
	CHECK(cuMemcpyPeerAsync(d2 + 256, ctx, d1, ctx, N - 256, s));
	CHECK(cuStreamSynchronize(s));
	memset(b, 0xff, N);
	CHECK(cuMemcpyDtoH(b, d2, N));
	int ok = !memcmp(a, b + 256, N - 256);
	for (int i = 0; i < 256; i++)
		ok &= b[i] == 0;
	EXPECT(ok, "cuMemcpyPeerAsync");
	printf("copies: unified (4 directions, sync and async) and peer copies of %d bytes, hash %016llx\n", N,
	       (unsigned long long)drv_fnv1a(b, N));

	unsigned int one = 1;
	CUresult set = cuPointerSetAttribute(&one, CU_POINTER_ATTRIBUTE_SYNC_MEMOPS, d1);
	printf("pointer sync memops set: %s\n", drv_error_name(set));
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFreeHost(pinned));
	CHECK(cuMemFree(d1));
	CHECK(cuMemFree(d2));
	free(a);
	free(b);
}

static void pools(void)
{
	CUmemoryPool by_device, by_location, current, current_by_location;
	CUmemLocation loc = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
	CHECK(cuDeviceGetDefaultMemPool(&by_device, 0));
	CHECK(cuMemGetDefaultMemPool(&by_location, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
	CHECK(cuDeviceGetMemPool(&current, 0));
	CHECK(cuMemGetMemPool(&current_by_location, &loc, CU_MEM_ALLOCATION_TYPE_PINNED));
	EXPECT(by_device == by_location, "cuMemGetDefaultMemPool differs from cuDeviceGetDefaultMemPool");
	EXPECT(current == current_by_location, "cuMemGetMemPool differs from cuDeviceGetMemPool");
	CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
	CUmemAccessDesc own = {.location = loc, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUresult set = cuMemPoolSetAccess(by_device, &own, 1);
	CHECK(cuMemPoolGetAccess(&flags, by_device, &loc));
	EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "own device's access %d", (int)flags);
	printf("pools: by location as by device; own device's access %d, set to it again: %s\n", (int)flags,
	       drv_error_name(set));
}

/* TMA descriptors: the driver's encoding is opaque, and the device addresses differ between
 * runs, so what is printed is what holds anywhere: an encoding repeats, a replaced address
 * gives what encoding at that address gives, bad arguments are refused. */
static void tensor_maps(CUdeviceptr buf)
{
	static CUtensorMap m1 __attribute__((aligned(128))), m2 __attribute__((aligned(128))),
		again __attribute__((aligned(128))), moved __attribute__((aligned(128)));
	cuuint64_t dims[2] = {64, 64}, strides[1] = {256};
	cuuint32_t box[2] = {16, 16}, es[2] = {1, 1};
#define TILED(map, at, rank)                                                                                      \
	cuTensorMapEncodeTiled(map, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank, (void *)(uintptr_t)(at), dims, strides, box, \
			       es, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_NONE,                     \
			       CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
	CHECK(TILED(&m1, buf, 2));
	CHECK(TILED(&again, buf, 2));
	CHECK(TILED(&m2, buf + 4096, 2));
	moved = m1;
	CHECK(cuTensorMapReplaceAddress(&moved, (void *)(uintptr_t)(buf + 4096)));
	EXPECT(!memcmp(&m1, &again, sizeof(m1)), "an encoding does not repeat");
	EXPECT(!memcmp(&moved, &m2, sizeof(m2)), "a replaced address differs from an encoding at it");
	EXPECT(memcmp(&m1, &m2, sizeof(m1)), "the address is not in the encoding");
	CUresult rank0 = TILED(&again, buf, 0), misaligned = TILED(&again, buf + 4, 2);
	EXPECT(rank0 == CUDA_ERROR_INVALID_VALUE && misaligned == CUDA_ERROR_INVALID_VALUE, "bad tiled maps: %s, %s",
	       drv_error_name(rank0), drv_error_name(misaligned));
#undef TILED

	/* im2col over N=4 x W=16 x C=8 floats. */
	cuuint64_t idims[3] = {8, 16, 4}, istrides[2] = {32, 512};
	cuuint32_t ies[3] = {1, 1, 1};
	int lower[1] = {-1}, upper[1] = {1};
	CUresult im2col = cuTensorMapEncodeIm2col(&m1, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)(uintptr_t)buf, idims,
						  istrides, lower, upper, 8, 16, ies, CU_TENSOR_MAP_INTERLEAVE_NONE,
						  CU_TENSOR_MAP_SWIZZLE_NONE, CU_TENSOR_MAP_L2_PROMOTION_NONE,
						  CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	CUresult wide = cuTensorMapEncodeIm2colWide(&m2, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 3, (void *)(uintptr_t)buf, idims,
						    istrides, -1, 1, 8, 16, ies, CU_TENSOR_MAP_INTERLEAVE_NONE,
						    CU_TENSOR_MAP_IM2COL_WIDE_MODE_W, CU_TENSOR_MAP_SWIZZLE_128B,
						    CU_TENSOR_MAP_L2_PROMOTION_NONE, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
	printf("tensor maps: tiled repeat and move, bad ones %s; im2col %s, im2col wide %s\n", drv_error_name(rank0),
	       drv_error_name(im2col), drv_error_name(wide));
}

/* A PTX image linked as ptxjit links one (wall time, logs, verbose), loaded, and run. */
static void link_ptx(const char *path, CUdeviceptr buf)
{
	size_t size;
	char *image = drv_read_file(path, &size);
	if (!strstr(image, ".version")) {
		printf("link: not a PTX image\n");
		free(image);
		return;
	}
	char info[4096], error[4096];
	float wall = 0;
	CUjit_option options[6] = {CU_JIT_WALL_TIME, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
				   CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_LOG_VERBOSE};
	void *values[6] = {&wall, info, (void *)(uintptr_t)sizeof(info), error, (void *)(uintptr_t)sizeof(error),
			   (void *)(uintptr_t)1};
	CUlinkState link;
	void *cubin = NULL;
	size_t cubin_size = 0;
	CHECK(cuLinkCreate(6, options, values, &link));
	CHECK(cuLinkAddData(link, CU_JIT_INPUT_PTX, image, size + 1, "kernels.ptx", 0, NULL, NULL));
	CHECK(cuLinkComplete(link, &cubin, &cubin_size));
	size_t info_len = (size_t)(uintptr_t)values[2];
	EXPECT(info_len <= sizeof(info) && (info_len == strlen(info) || info_len == strlen(info) + 1),
	       "an info log of %zu bytes said %zu", strlen(info), info_len);
	CUmodule linked;
	CUfunction fill;
	CHECK(cuModuleLoadData(&linked, cubin));
	CHECK(cuLinkDestroy(link));
	CHECK(cuModuleGetFunction(&fill, linked, "fillU32"));
	unsigned value = 0x600dcafe;
	int n = 1024;
	void *args[3] = {&buf, &value, &n};
	CHECK(cuLaunchKernel(fill, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	unsigned *got = malloc(n * sizeof(*got));
	CHECK(cuMemcpyDtoH(got, buf, n * sizeof(*got)));
	int wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += got[i] != value;
	EXPECT(!wrong, "%d words wrong after the linked fillU32", wrong);
	/* The image's form is the linking driver's (the GPU host's through Remora): stderr only. */
	fprintf(stderr, "link: the linked image is %s\n",
		cubin_size > 4 && !memcmp(cubin, "\177ELF", 4) ? "ELF" : "not ELF");
	printf("link: PTX linked, loaded, fillU32 ran: %d wrong\n", wrong);
	CHECK(cuModuleUnload(linked));
	free(got);
	free(image);
	EXPECT(cuLinkComplete(NULL, &cubin, &cubin_size) == CUDA_ERROR_INVALID_HANDLE, "a NULL link completes");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	CUcontext ctx = drv_open_device0();
	void *image = drv_read_file(argv[1], NULL);
	CUlibrary lib;
	CUmodule mod;
	CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuModuleLoadData(&mod, image));
	free(image);
	CUdeviceptr buf;
	CHECK(cuMemAlloc(&buf, 1 << 16));
	CHECK(cuMemsetD8(buf, 0, 1 << 16));

	profiler();
	devices();
	kernels(lib, mod);
	streams(buf);
	copies(ctx);
	pools();
	tensor_maps(buf);
	link_ptx(argv[1], buf);

	/* The same image as a library from its file: the same kernels. */
	CUlibrary from_file;
	unsigned int here = 0, there = 0;
	CHECK(cuLibraryLoadFromFile(&from_file, argv[1], NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuLibraryGetKernelCount(&here, lib));
	CHECK(cuLibraryGetKernelCount(&there, from_file));
	EXPECT(here == there, "%u kernels from the data, %u from the file", here, there);
	EXPECT(cuLibraryLoadFromFile(&from_file, "/nonexistent/image", NULL, NULL, 0, NULL, NULL, 0) ==
	       CUDA_ERROR_FILE_NOT_FOUND, "a missing file loads");
	CHECK(cuLibraryUnload(from_file));
	printf("library from its file: %u kernels\n", there);

	CHECK(cuMemFree(buf));
	CHECK(cuModuleUnload(mod));
	CHECK(cuLibraryUnload(lib));
	drv_close_device0();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
