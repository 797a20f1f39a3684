/* drv_contexts IMAGE: explicit contexts, as NVRTC programs use them.
 *
 * Creates a context, queries it (device, flags, API version, id, limits, cache
 * preference), loads IMAGE in it and runs vecAdd; then creates a second context on the
 * same device, which must see none of the first's settings, runs vecAdd there on its own
 * memory, pushes and pops between the two, and destroys both: what each made goes with it
 * and a destroyed context is no longer current. Prints what a native run prints. */
#include "drv_common.h"

#define N 100003

/* The entry point of programs built before CUDA 12.5 (cuda.h declares only the newest). */
CUresult CUDAAPI cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);

static float host_a[N], host_b[N], host_c[N], expected[N];

/* Loads IMAGE in the current context and runs vecAdd on memory of its own; returns the
 * checksum of the result, after checking it. */
static uint64_t vec_add_here(const void *image, const char *which, CUmodule *out_module, CUdeviceptr *out_c)
{
	CUmodule module;
	CUfunction f;
	CUdeviceptr a, b, c;
	CHECK(cuModuleLoadData(&module, image));
	CHECK(cuModuleGetFunction(&f, module, "vecAdd"));
	CHECK(cuMemAlloc(&a, sizeof host_a));
	CHECK(cuMemAlloc(&b, sizeof host_b));
	CHECK(cuMemAlloc(&c, sizeof host_c));
	CHECK(cuMemcpyHtoD(a, host_a, sizeof host_a));
	CHECK(cuMemcpyHtoD(b, host_b, sizeof host_b));
	CHECK(cuMemsetD32(c, 0, N));
	int n = N;
	void *params[] = { &a, &b, &c, &n };
	CHECK(cuLaunchKernel(f, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(host_c, c, sizeof host_c));
	EXPECT(memcmp(host_c, expected, sizeof host_c) == 0, "%s: vecAdd differs", which);
	CHECK(cuMemFree(a));
	CHECK(cuMemFree(b));
	*out_module = module;
	*out_c = c;
	return drv_fnv1a(host_c, sizeof host_c);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	void *image = drv_read_file(argv[1], NULL);
	for (int i = 0; i < N; i++) {
		host_a[i] = (float)i * 0.5f;
		host_b[i] = (float)(N - i) * 0.25f;
		expected[i] = host_a[i] + host_b[i];
	}
	CUdevice dev;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));

	/* The first context, current once made. */
	CUcontext a, b, cur;
	CHECK(cuCtxCreate(&a, NULL, CU_CTX_SCHED_BLOCKING_SYNC, dev));
	CHECK(cuCtxGetCurrent(&cur));
	EXPECT(cur == a, "the created context is not current");
	CUdevice d;
	CHECK(cuCtxGetDevice(&d));
	EXPECT(d == dev, "cuCtxGetDevice gave %d", d);
	unsigned flags, version;
	CHECK(cuCtxGetFlags(&flags));
	printf("a: scheduling flags %u\n", flags & CU_CTX_SCHED_MASK);
	EXPECT((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_BLOCKING_SYNC, "a's flags 0x%x", flags);
	CHECK(cuCtxSetFlags(CU_CTX_SCHED_SPIN));
	CHECK(cuCtxGetFlags(&flags));
	EXPECT((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_SPIN, "a's flags after cuCtxSetFlags 0x%x", flags);
	CHECK(cuCtxGetApiVersion(a, &version));
	printf("a: api version %u\n", version);
	unsigned long long id_a, id_b, id_a2;
	CHECK(cuCtxGetId(a, &id_a));
	CHECK(cuCtxGetId(NULL, &id_a2));
	EXPECT(id_a == id_a2, "a's id by handle and as current differ");

	size_t stack_default, stack, fifo;
	CHECK(cuCtxGetLimit(&stack_default, CU_LIMIT_STACK_SIZE));
	CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack_default * 4));
	CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	printf("a: stack limit raised fourfold: %s\n", stack == stack_default * 4 ? "yes" : "no");
	CHECK(cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, 4 << 20));
	CHECK(cuCtxGetLimit(&fifo, CU_LIMIT_PRINTF_FIFO_SIZE));
	printf("a: printf fifo %zu\n", fifo);
	EXPECT(fifo == 4 << 20, "a's printf fifo %zu", fifo);
	CUfunc_cache cache;
	CHECK(cuCtxSetCacheConfig(CU_FUNC_CACHE_PREFER_SHARED));
	CHECK(cuCtxGetCacheConfig(&cache));
	printf("a: cache preference %d\n", (int)cache);
	EXPECT(cache == CU_FUNC_CACHE_PREFER_SHARED, "a's cache preference %d", (int)cache);
	CUsharedconfig shmem;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations" /* answered still, by every driver */
	CHECK(cuCtxGetSharedMemConfig(&shmem));
#pragma GCC diagnostic pop
	printf("a: shared memory bank config %d\n", (int)shmem);

	CUmodule module_a, module_b;
	CUdeviceptr c_a, c_b;
	uint64_t sum_a = vec_add_here(image, "a", &module_a, &c_a);
	printf("a: vecAdd checksum %016llx\n", (unsigned long long)sum_a);

	/* A second context on the same device: current on top of a, with none of a's settings. */
	CHECK(cuCtxCreate(&b, NULL, 0, dev));
	EXPECT(b != a, "the second context is the first");
	CHECK(cuCtxGetCurrent(&cur));
	EXPECT(cur == b, "the second context is not current");
	CHECK(cuCtxGetId(b, &id_b));
	printf("b: id differs from a's: %s\n", id_b != id_a ? "yes" : "no");
	CHECK(cuCtxGetFlags(&flags));
	printf("b: scheduling flags %u\n", flags & CU_CTX_SCHED_MASK);
	CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	printf("b: stack limit is the default: %s\n", stack == stack_default ? "yes" : "no");
	EXPECT(stack == stack_default, "b's stack limit %zu, default %zu", stack, stack_default);
	CHECK(cuCtxGetCacheConfig(&cache));
	printf("b: cache preference %d\n", (int)cache);
	EXPECT(cache == CU_FUNC_CACHE_PREFER_NONE, "b's cache preference %d", (int)cache);
	uint64_t sum_b = vec_add_here(image, "b", &module_b, &c_b);
	printf("b: vecAdd checksum %016llx, a's: %s\n", (unsigned long long)sum_b, sum_a == sum_b ? "same" : "differs");

	/* A stream's context is the one it was made in, and its NULL stream the current one's. */
	CUstream sb;
	CUcontext of_sb = NULL, of_null = NULL;
	CUgreenCtx green = (CUgreenCtx)1;
	CHECK(cuStreamCreate(&sb, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamGetCtx_v2(sb, &of_sb, &green));
	CHECK(cuStreamGetCtx_v2(NULL, &of_null, NULL));
	printf("b: a stream's context is b: %s, the NULL stream's: %s, green context none: %s\n", of_sb == b ? "yes" : "no",
	       of_null == b ? "yes" : "no", green == NULL ? "yes" : "no");
	EXPECT(of_sb == b && of_null == b && green == NULL, "cuStreamGetCtx_v2 named another context");
	CHECK(cuStreamDestroy(sb));
	CHECK(cuCtxResetPersistingL2Cache());

	/* Mapped pinned memory of b's, written by the device: it goes with b. */
	unsigned *pinned;
	CUdeviceptr pinned_dev;
	CHECK(cuMemHostAlloc((void **)&pinned, 4096, CU_MEMHOSTALLOC_DEVICEMAP));
	CHECK(cuMemHostGetDevicePointer(&pinned_dev, pinned, 0));
	CUfunction fill;
	CHECK(cuModuleGetFunction(&fill, module_b, "fillU32"));
	unsigned value = 0x5a5a5a5a;
	int count = 1024;
	void *fill_args[] = { &pinned_dev, &value, &count };
	CHECK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, NULL, fill_args, NULL));
	CHECK(cuCtxSynchronize());
	printf("b: mapped pinned memory written by the device: %s\n", pinned[1023] == 0x5a5a5a5a ? "yes" : "no");
	EXPECT(pinned[0] == 0x5a5a5a5a && pinned[1023] == 0x5a5a5a5a, "b's mapped memory reads 0x%x", pinned[0]);

	/* Pop b, back to a; a's memory and module still work there, then push b again. */
	CHECK(cuCtxPopCurrent(&cur));
	EXPECT(cur == b, "popped another context than b");
	CHECK(cuCtxGetCurrent(&cur));
	EXPECT(cur == a, "a is not current after popping b");
	CHECK(cuCtxGetCacheConfig(&cache));
	EXPECT(cache == CU_FUNC_CACHE_PREFER_SHARED, "a's cache preference after b: %d", (int)cache);
	CHECK(cuCtxSynchronize_v2(b)); /* b's work, named while a is current */
	CHECK(cuCtxGetDevice_v2(&d, b));
	EXPECT(d == dev, "cuCtxGetDevice_v2 of b gave %d", d);
	CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	EXPECT(stack == stack_default * 4, "a's stack limit after b: %zu", stack);
	memset(host_c, 0, sizeof host_c);
	CHECK(cuMemcpyDtoH(host_c, c_a, sizeof host_c));
	EXPECT(memcmp(host_c, expected, sizeof host_c) == 0, "a's result changed");
	CHECK(cuCtxPushCurrent(b));
	CHECK(cuCtxSynchronize());

	/* Destroying b, current: popped, a current again, b's module and memory gone. */
	CHECK(cuCtxDestroy(b));
	CHECK(cuCtxGetCurrent(&cur));
	printf("after destroying b, a is current: %s\n", cur == a ? "yes" : "no");
	EXPECT(cur == a, "a is not current after destroying b");
	CHECK(cuMemcpyDtoH(host_c, c_a, sizeof host_c));
	EXPECT(memcmp(host_c, expected, sizeof host_c) == 0, "a's result changed after destroying b");
	CHECK(cuCtxSynchronize());

	/* A third context after b is gone works as the others did. */
	CUcontext c3;
	CUmodule module_c;
	CUdeviceptr c_c;
	CHECK(cuCtxCreate(&c3, NULL, CU_CTX_SCHED_YIELD, dev));
	uint64_t sum_c = vec_add_here(image, "c", &module_c, &c_c);
	printf("c: vecAdd checksum same as a's: %s\n", sum_c == sum_a ? "yes" : "no");
	CHECK(cuModuleUnload(module_c));
	CHECK(cuMemFree(c_c));
	CHECK(cuCtxDestroy(c3));

	/* The same through the entry point older programs call. */
	CHECK(cuCtxCreate_v2(&c3, CU_CTX_SCHED_YIELD, dev));
	CHECK(cuCtxGetFlags(&flags));
	printf("cuCtxCreate_v2: scheduling flags %u\n", flags & CU_CTX_SCHED_MASK);
	EXPECT((flags & CU_CTX_SCHED_MASK) == CU_CTX_SCHED_YIELD, "cuCtxCreate_v2's flags 0x%x", flags);
	CHECK(cuCtxDestroy(c3));
	CHECK(cuCtxGetCurrent(&cur));
	EXPECT(cur == a, "a is not current after destroying c");
	CHECK(cuCtxDestroy(a));
	CHECK(cuCtxGetCurrent(&cur));
	printf("after destroying a, no context is current: %s\n", cur == NULL ? "yes" : "no");
	EXPECT(cur == NULL, "a context is current after destroying every one");

	/* memMapIPCDrv's pair: two made (each pushed), the second position set to the first,
	 * which is destroyed while current: the first place still holds it (natively, on an
	 * H100), and the other is then destroyed as well. */
	CUcontext p0, p1;
	CHECK(cuCtxCreate(&p0, NULL, 0, dev));
	CHECK(cuCtxCreate(&p1, NULL, 0, dev));
	CHECK(cuCtxSetCurrent(p0));
	CHECK(cuCtxDestroy(p0));
	CHECK(cuCtxGetCurrent(&cur));
	printf("after destroying the current one of a pair, current: %s\n",
	       cur == p0 ? "the destroyed one" : cur == p1 ? "the other" : cur ? "another" : "none");
	CHECK(cuCtxDestroy(p1));
	printf("a pair made, the current one destroyed, then the other: done\n");
	free(image);
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
