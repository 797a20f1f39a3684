/* drv_memkinds IMAGE [MODE]: memory of every kind PyTorch and cuDNN use, and what
 * the driver says about it.
 *
 *   (no mode)  pointer attributes of device, pinned, registered and unknown memory
 *              (cuPointerGetAttributes with the attributes cudaPointerGetAttributes asks
 *              for), cuMemGetAddressRange; mapped pinned memory written by kernels and
 *              by the host; stream-ordered allocation from the default and a created
 *              pool, with a data round trip; virtual memory: reserve, create, map twice
 *              (aliases), set access, copy and launch through the mapping, unmap,
 *              release, free; stream priorities, flags and cuFuncGetName.
 *   quota MB   run under a client memory limit of MB (a multiple of 16): cuMemAllocAsync,
 *              cuMemAllocFromPoolAsync and cuMemCreate past it fail with
 *              CUDA_ERROR_OUT_OF_MEMORY, and succeed again once memory is freed.
 *   hold       holds 16 MiB from cuMemAllocAsync, 16 MiB from a created pool, a mapped
 *              cuMemCreate allocation of 16 MiB and 4 KiB of mapped pinned memory,
 *              prints "ready" and waits for stdin to close, freeing nothing.
 * Through Remora (REMORA_SERVER set) it also checks that mapping more than 64 MiB of
 * pinned memory is refused. */
#include "drv_common.h"

#define MIB (1u << 20)

static CUfunction fill, scale;
static CUcontext ctx;

static void launch_fill(CUdeviceptr x, unsigned v, int n, CUstream stream)
{
	void *params[] = {&x, &v, &n};
	CHECK(cuLaunchKernel(fill, 1, 1, 1, 128, 1, 1, 0, stream, params, NULL));
}

static void launch_scale(CUdeviceptr x, float s, int n, CUstream stream)
{
	void *params[] = {&x, &s, &n};
	CHECK(cuLaunchKernel(scale, 16, 1, 1, 256, 1, 1, 0, stream, params, NULL));
}

/* What cudaPointerGetAttributes asks for, and more. */
struct attrs {
	CUcontext context;
	unsigned int type;
	CUdeviceptr dptr;
	void *hptr;
	int managed;
	int ordinal;
	CUdeviceptr start;
	size_t size;
	int mapped;
	unsigned long long buffer_id;
	unsigned long long handle_types;
	CUmemoryPool pool;
};

static struct attrs attributes_of(CUdeviceptr p)
{
	struct attrs a;
	memset(&a, 0xa5, sizeof(a)); /* every value must be written */
	CUpointer_attribute which[] = {
		CU_POINTER_ATTRIBUTE_CONTEXT,          CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
		CU_POINTER_ATTRIBUTE_DEVICE_POINTER,   CU_POINTER_ATTRIBUTE_HOST_POINTER,
		CU_POINTER_ATTRIBUTE_IS_MANAGED,       CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
		CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
		CU_POINTER_ATTRIBUTE_MAPPED,           CU_POINTER_ATTRIBUTE_BUFFER_ID,
		CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
	};
	void *data[] = {&a.context, &a.type,  &a.dptr,   &a.hptr,      &a.managed,      &a.ordinal,
			&a.start,   &a.size,  &a.mapped, &a.buffer_id, &a.handle_types, &a.pool};
	CHECK(cuPointerGetAttributes(sizeof(which) / sizeof(which[0]), which, data, p));
	return a;
}

static void pointer_attributes(void)
{
	const size_t n = 3 * 4096 + 100;
	CUdeviceptr d;
	CHECK(cuMemAlloc(&d, n));
	struct attrs a = attributes_of(d + 100);
	EXPECT(a.type == CU_MEMORYTYPE_DEVICE, "device memory: type %u", a.type);
	EXPECT(a.context == ctx, "device memory: context %p, not %p", (void *)a.context, (void *)ctx);
	EXPECT(a.dptr == d + 100, "device memory: device pointer 0x%llx", (unsigned long long)a.dptr);
	EXPECT(a.hptr == NULL, "device memory: host pointer %p", a.hptr);
	EXPECT(a.managed == 0 && a.ordinal == 0, "device memory: managed %d, ordinal %d", a.managed, a.ordinal);
	EXPECT(a.start == d && a.size >= n, "device memory: range 0x%llx+%zu", (unsigned long long)a.start, a.size);
	EXPECT(a.buffer_id != 0, "device memory: no buffer id");
	EXPECT(a.pool == NULL, "device memory of cuMemAlloc: pool %p", (void *)a.pool);
	void *hp = (void *)1;
	EXPECT_RESULT(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d), CUDA_ERROR_INVALID_VALUE);
	unsigned int type = 0;
	CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + n - 1));
	EXPECT(type == CU_MEMORYTYPE_DEVICE, "device memory, last byte: type %u", type);
	CUdeviceptr base = 0;
	size_t size = 0;
	CHECK(cuMemGetAddressRange(&base, &size, d + 4097));
	EXPECT(base == d && size >= n, "cuMemGetAddressRange: 0x%llx+%zu", (unsigned long long)base, size);
	CUdeviceptr base_only = 0; /* either output may be NULL */
	size_t size_only = 0;
	CHECK(cuMemGetAddressRange(&base_only, NULL, d + 4097));
	CHECK(cuMemGetAddressRange(NULL, &size_only, d + 4097));
	EXPECT(base_only == base && size_only == size, "cuMemGetAddressRange with one output NULL: 0x%llx+%zu",
	       (unsigned long long)base_only, size_only);

	char *pinned;
	CHECK(cuMemHostAlloc((void **)&pinned, n, 0));
	a = attributes_of((CUdeviceptr)(uintptr_t)(pinned + 10));
	EXPECT(a.type == CU_MEMORYTYPE_HOST, "pinned memory: type %u", a.type);
	EXPECT(a.hptr == pinned + 10, "pinned memory: host pointer %p, not %p", a.hptr, (void *)(pinned + 10));
	EXPECT(a.start == (CUdeviceptr)(uintptr_t)pinned && a.size >= n, "pinned memory: range 0x%llx+%zu",
	       (unsigned long long)a.start, a.size);
	EXPECT(a.context == ctx && a.ordinal == 0 && a.managed == 0 && a.mapped == 1,
	       "pinned memory: context %p, ordinal %d, managed %d, mapped %d", (void *)a.context, a.ordinal, a.managed,
	       a.mapped);
	unsigned long long pinned_id = a.buffer_id;

	size_t reg_n = 2 * 4096;
	char *reg = aligned_alloc(4096, reg_n);
	CHECK(cuMemHostRegister(reg, reg_n, 0));
	a = attributes_of((CUdeviceptr)(uintptr_t)(reg + 4096));
	EXPECT(a.type == CU_MEMORYTYPE_HOST && a.hptr == reg + 4096, "registered memory: type %u, host pointer %p", a.type,
	       a.hptr);
	EXPECT(a.start == (CUdeviceptr)(uintptr_t)reg && a.size == reg_n, "registered memory: range 0x%llx+%zu",
	       (unsigned long long)a.start, a.size);
	EXPECT(a.buffer_id != pinned_id, "registered and pinned memory share buffer id %llu", a.buffer_id);
	CHECK(cuMemHostUnregister(reg));
	EXPECT_RESULT(cuMemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

	/* Memory CUDA does not know: defaults, no error (cudaMemoryTypeUnregistered); its host
	 * pointer is itself (an H100's driver says so). */
	a = attributes_of((CUdeviceptr)(uintptr_t)reg);
	EXPECT(a.type == 0 && a.dptr == 0 && a.hptr == reg && a.context == NULL,
	       "unknown memory: type %u, device pointer 0x%llx, host pointer %p", a.type, (unsigned long long)a.dptr,
	       a.hptr);
	EXPECT_RESULT(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)reg),
		      CUDA_ERROR_INVALID_VALUE);
	free(reg);
	CHECK(cuMemFreeHost(pinned));
	CHECK(cuMemFree(d));
	printf("pointer attributes: ok\n");
}

/* Kernels write mapped pinned memory; the host writes it between launches. */
static void mapped_memory(void)
{
	const int n = 1024;
	unsigned *h;
	CHECK(cuMemHostAlloc((void **)&h, n * sizeof(unsigned), CU_MEMHOSTALLOC_DEVICEMAP));
	for (int i = 0; i < n; i++)
		h[i] = (unsigned)i;
	CUdeviceptr dh;
	CHECK(cuMemHostGetDevicePointer(&dh, h, 0));
	CUdeviceptr again;
	CHECK(cuMemHostGetDevicePointer(&again, h + 8, 0));
	EXPECT(again == dh + 8 * sizeof(unsigned), "device pointer of h+8: 0x%llx, not 0x%llx", (unsigned long long)again,
	       (unsigned long long)(dh + 8 * sizeof(unsigned)));
	CUdeviceptr attr = 0;
	CHECK(cuPointerGetAttribute(&attr, CU_POINTER_ATTRIBUTE_DEVICE_POINTER, (CUdeviceptr)(uintptr_t)h));
	EXPECT(attr == dh, "device pointer attribute of mapped memory: 0x%llx, not 0x%llx", (unsigned long long)attr,
	       (unsigned long long)dh);

	launch_fill(dh + 64 * sizeof(unsigned), 0xabcu, 32, NULL);
	CHECK(cuCtxSynchronize());
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += h[i] != (i >= 64 && i < 96 ? 0xabcu : (unsigned)i);
	EXPECT(!bad, "after a kernel and cuCtxSynchronize, %d of %d words of mapped memory are wrong", bad, n);

	h[0] = 42; /* the host's write goes up before the next launch, and survives it */
	CUstream st;
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	launch_fill(dh + 512 * sizeof(unsigned), 7u, 16, st);
	CHECK(cuStreamSynchronize(st));
	EXPECT(h[0] == 42 && h[512] == 7u && h[527] == 7u && h[528] == 528u && h[64] == 0xabcu,
	       "after a host write, a kernel on a stream and cuStreamSynchronize: %u %u %u %u %u", h[0], h[512], h[527],
	       h[528], h[64]);

	/* A kernel reads what the host wrote: copies mapped[1..] into device memory. */
	CUdeviceptr d;
	CHECK(cuMemAlloc(&d, n * sizeof(unsigned)));
	h[1] = 0x55u;
	launch_fill(d, 0u, n, st);
	CHECK(cuMemcpyDtoDAsync(d, dh, n * sizeof(unsigned), st));
	unsigned back[4];
	CHECK(cuStreamSynchronize(st));
	CHECK(cuMemcpyDtoH(back, d, sizeof(back)));
	EXPECT(back[0] == 42 && back[1] == 0x55u, "the device copy of mapped memory: %u %u", back[0], back[1]);
	CHECK(cuMemFree(d));
	CHECK(cuStreamDestroy(st));

	unsigned flags = 0;
	CHECK(cuMemHostGetFlags(&flags, h));
	EXPECT(flags == CU_MEMHOSTALLOC_DEVICEMAP, "cuMemHostGetFlags: %u", flags);
	CHECK(cuMemFreeHost(h));

	if (getenv("REMORA_SERVER")) { /* Remora bounds mapped memory; a GPU does not */
		void *big;
		CUdeviceptr dbig;
		CHECK(cuMemHostAlloc(&big, 65 * MIB, CU_MEMHOSTALLOC_DEVICEMAP));
		EXPECT_RESULT(cuMemHostGetDevicePointer(&dbig, big, 0), CUDA_ERROR_OUT_OF_MEMORY);
		CHECK(cuMemFreeHost(big));
	}
	printf("mapped memory: ok\n");
}

static void stream_ordered(CUdevice dev)
{
	const int n = 1 << 16;
	CUmemoryPool pool, current;
	CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
	CHECK(cuDeviceGetMemPool(&current, dev));
	EXPECT(pool == current && pool != NULL, "default pool %p, current pool %p", (void *)pool, (void *)current);
	cuuint64_t threshold = 32 * MIB, got = 0;
	CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold));
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &got));
	EXPECT(got == threshold, "release threshold %llu", (unsigned long long)got);
	int reuse = 0;
	CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
	reuse = 5;
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse));
	EXPECT(reuse == 0, "reuse attribute %d", reuse);

	CUstream st;
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	float *host = malloc(n * sizeof(float));
	for (int i = 0; i < n; i++)
		host[i] = (float)(i % 1000);
	CUdeviceptr a;
	CHECK(cuMemAllocAsync(&a, n * sizeof(float), st));
	CHECK(cuMemcpyHtoDAsync(a, host, n * sizeof(float), st));
	launch_scale(a, 3.0f, n, st);
	CHECK(cuMemcpyDtoHAsync(host, a, n * sizeof(float), st));
	CHECK(cuStreamSynchronize(st));
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += host[i] != (float)(i % 1000) * 3.0f;
	EXPECT(!bad, "cuMemAllocAsync round trip: %d of %d wrong", bad, n);
	CUmemoryPool of = NULL;
	CHECK(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, a));
	EXPECT(of == pool, "the allocation's pool %p, not %p", (void *)of, (void *)pool);
	cuuint64_t used = 0;
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	EXPECT(used >= n * sizeof(float), "pool in use: %llu bytes", (unsigned long long)used);
	CHECK(cuMemFreeAsync(a, st));
	CHECK(cuStreamSynchronize(st));
	CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
	EXPECT(used == 0, "pool in use after cuMemFreeAsync: %llu bytes", (unsigned long long)used);
	CHECK(cuMemPoolTrimTo(pool, 0));
	EXPECT_RESULT(cuMemPoolDestroy(pool), CUDA_ERROR_INVALID_VALUE);

	CUmemPoolProps props;
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.handleTypes = CU_MEM_HANDLE_TYPE_NONE;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	CUmemoryPool mine;
	CHECK(cuMemPoolCreate(&mine, &props));
	CUdeviceptr b;
	CHECK(cuMemAllocFromPoolAsync(&b, 4096, mine, st));
	launch_fill(b, 9u, 1024, st);
	unsigned word = 0;
	CHECK(cuMemcpyDtoHAsync(&word, b + 4092, sizeof(word), st));
	CHECK(cuStreamSynchronize(st));
	EXPECT(word == 9u, "created pool: %u", word);
	CHECK(cuPointerGetAttribute(&of, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, b));
	EXPECT(of == mine, "the allocation's pool %p, not %p", (void *)of, (void *)mine);
	CHECK(cuMemFreeAsync(b, st));
	CHECK(cuStreamSynchronize(st));
	CHECK(cuMemPoolDestroy(mine));
	CHECK(cuStreamDestroy(st));
	free(host);
	printf("stream-ordered allocation: ok\n");
}

static CUmemAllocationProp device0_prop(void)
{
	CUmemAllocationProp prop;
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	return prop;
}

static void virtual_memory(void)
{
	CUmemAllocationProp prop = device0_prop();
	size_t g = 0;
	CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	EXPECT(g && !(g & (g - 1)), "granularity %zu", g);
	CUmemGenericAllocationHandle h;
	CHECK(cuMemCreate(&h, 2 * g, &prop, 0));
	CUmemAllocationProp back;
	CHECK(cuMemGetAllocationPropertiesFromHandle(&back, h));
	EXPECT(back.type == CU_MEM_ALLOCATION_TYPE_PINNED && back.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
	       back.location.id == 0, "properties: type %d, location %d/%d", back.type, back.location.type, back.location.id);
	CUdeviceptr va;
	CHECK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
	CHECK(cuMemMap(va, 2 * g, 0, h, 0));
	CHECK(cuMemMap(va + 2 * g, 2 * g, 0, h, 0)); /* the same memory again: aliases */
	CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK(cuMemSetAccess(va, 4 * g, &access, 1));
	unsigned long long flags = 0;
	CHECK(cuMemGetAccess(&flags, &access.location, va + 100));
	EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "access flags %llu", flags);

	const int n = 4096;
	float *host = malloc(n * sizeof(float));
	for (int i = 0; i < n; i++)
		host[i] = (float)i;
	CUdeviceptr at = va + g - 1024; /* across the middle of the first mapping */
	CHECK(cuMemcpyHtoD(at, host, n * sizeof(float)));
	launch_scale(at, 0.5f, n, NULL);
	memset(host, 0, n * sizeof(float));
	CHECK(cuMemcpyDtoH(host, at + 2 * g, n * sizeof(float)));
	int bad = 0;
	for (int i = 0; i < n; i++)
		bad += host[i] != (float)i * 0.5f;
	EXPECT(!bad, "VMM: %d of %d floats wrong through the alias", bad, n);
	unsigned int type = 0;
	CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, at));
	EXPECT(type == CU_MEMORYTYPE_DEVICE, "mapped memory: type %u", type);

	CHECK(cuMemUnmap(va, 4 * g));
	EXPECT(cuMemcpyHtoD(at, host, 4) != CUDA_SUCCESS, "a copy into unmapped memory succeeded");
	CHECK(cuMemRelease(h));
	CHECK(cuMemAddressFree(va, 4 * g));

	/* Released while mapped: usable until unmapped. */
	CHECK(cuMemCreate(&h, g, &prop, 0));
	CHECK(cuMemAddressReserve(&va, g, 0, 0, 0));
	CHECK(cuMemMap(va, g, 0, h, 0));
	CHECK(cuMemRelease(h));
	CHECK(cuMemSetAccess(va, g, &access, 1));
	CHECK(cuMemsetD32(va, 0x1234u, g / 4));
	unsigned word = 0;
	CHECK(cuMemcpyDtoH(&word, va + g - 4, 4));
	EXPECT(word == 0x1234u, "released but mapped memory: 0x%x", word);
	CHECK(cuMemUnmap(va, g));
	CHECK(cuMemAddressFree(va, g));
	free(host);
	printf("virtual memory: ok\n");
}

static void streams_and_names(void)
{
	int least = 0, greatest = 0;
	CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
	EXPECT(greatest <= least, "priority range %d..%d", least, greatest);
	CUstream st;
	CHECK(cuStreamCreateWithPriority(&st, CU_STREAM_NON_BLOCKING, greatest));
	int priority = 1;
	unsigned flags = 0;
	CHECK(cuStreamGetPriority(st, &priority));
	CHECK(cuStreamGetFlags(st, &flags));
	EXPECT(priority == greatest && flags == CU_STREAM_NON_BLOCKING, "stream priority %d, flags %u", priority, flags);
	CHECK(cuStreamDestroy(st));
	const char *name = NULL;
	CHECK(cuFuncGetName(&name, fill));
	EXPECT(name && strstr(name, "fillU32"), "cuFuncGetName: %s", name ? name : "(null)");
	printf("streams and names: ok\n");
}

/* Each allocation call past the limit fails with CUDA_ERROR_OUT_OF_MEMORY. */
static void quota(unsigned limit_mb, CUdevice dev)
{
	CUstream st;
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CUdeviceptr held[64];
	/* What is left of the quota (cuMemGetInfo's free, which it narrows; the module loaded
	 * is charged too), in pieces charged as asked: 16 MiB, multiples of 2 MiB, of 512 bytes. */
	unsigned pieces = 0;
	size_t left, total;
	while (pieces < 64 && cuMemGetInfo(&left, &total) == CUDA_SUCCESS && left >= 512) {
		size_t piece = left >= 16 * MIB ? 16 * MIB : left >= 2 * MIB ? left / (2 * MIB) * (2 * MIB) : left / 512 * 512;
		CHECK(cuMemAllocAsync(&held[pieces++], piece, st));
	}
	if (pieces < limit_mb / 16) {
		fprintf(stderr, "quota: %u pieces filled a %u MiB quota\n", pieces, limit_mb);
		exit(1);
	}
	CUdeviceptr extra;
	EXPECT_RESULT(cuMemAllocAsync(&extra, 16 * MIB, st), CUDA_ERROR_OUT_OF_MEMORY);
	CUmemoryPool pool;
	CHECK(cuDeviceGetDefaultMemPool(&pool, dev));
	EXPECT_RESULT(cuMemAllocFromPoolAsync(&extra, 16 * MIB, pool, st), CUDA_ERROR_OUT_OF_MEMORY);
	CUmemAllocationProp prop = device0_prop();
	size_t g = 0;
	CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CUmemGenericAllocationHandle h;
	EXPECT_RESULT(cuMemCreate(&h, g, &prop, 0), CUDA_ERROR_OUT_OF_MEMORY);
	CHECK(cuMemFreeAsync(held[0], st));
	CHECK(cuStreamSynchronize(st));
	CHECK(cuMemCreate(&h, g, &prop, 0)); /* room again */
	CHECK(cuMemRelease(h));
	for (unsigned i = 1; i < pieces; i++)
		CHECK(cuMemFreeAsync(held[i], st));
	CHECK(cuStreamSynchronize(st));
	CHECK(cuStreamDestroy(st));
	printf("quota: ok\n");
}

/* Holds memory of every kind, for a test that kills this process. */
static void hold(CUdevice dev)
{
	CUstream st;
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CUdeviceptr a, b;
	CHECK(cuMemAllocAsync(&a, 16 * MIB, st));
	CUmemPoolProps props;
	memset(&props, 0, sizeof(props));
	props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
	props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	props.location.id = 0;
	CUmemoryPool mine;
	CHECK(cuMemPoolCreate(&mine, &props));
	CHECK(cuMemAllocFromPoolAsync(&b, 16 * MIB, mine, st));
	CUmemAllocationProp prop = device0_prop();
	CUmemGenericAllocationHandle h;
	CHECK(cuMemCreate(&h, 16 * MIB, &prop, 0));
	CUdeviceptr va;
	CHECK(cuMemAddressReserve(&va, 16 * MIB, 0, 0, 0));
	CHECK(cuMemMap(va, 16 * MIB, 0, h, 0));
	void *pinned;
	CUdeviceptr dp;
	CHECK(cuMemHostAlloc(&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
	CHECK(cuMemHostGetDevicePointer(&dp, pinned, 0));
	CHECK(cuStreamSynchronize(st));
	(void)dev;
	printf("ready\n");
	fflush(stdout);
	char c;
	while (fread(&c, 1, 1, stdin) == 1)
		;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE [quota MB | hold]\n", argv[0]);
		return 2;
	}
	ctx = drv_open_device0();
	CUdevice dev;
	CHECK(cuCtxGetDevice(&dev));
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CHECK(cuModuleGetFunction(&scale, module, "scaleArray"));
	if (argc > 3 && !strcmp(argv[2], "quota")) {
		quota((unsigned)atoi(argv[3]), dev);
	} else if (argc > 2 && !strcmp(argv[2], "hold")) {
		hold(dev);
		return 0;
	} else {
		pointer_attributes();
		mapped_memory();
		stream_ordered(dev);
		virtual_memory();
		streams_and_names();
	}
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
