/* drv_nowait IMAGE KERNEL_MS: no call waits for another process's work (issue 35).
 *
 * A child process launches sleepNs for KERNEL_MS and waits for it. Meanwhile the parent,
 * a client of its own, runs a short sequence of the calls that synchronize implicitly
 * (module and library unload, free of every kind, host unregister, array destroy,
 * virtual memory unmap, context synchronize and destroy) with the work that uses their
 * objects. Natively the two are separate contexts; through Remora they are clients of one
 * tenant, sharing a context, where each call must wait for its caller's work only.
 * Code is loaded before the kernel starts (a load waits for every kernel of the context
 * on a GPU, which no client of a shared context avoids); a load beside it is timed apart.
 * The sequence must end while the child's kernel still runs, and within KERNEL_MS / 2.
 * Each step prints "NAME ok" and "time_NAME_ms=..." (how long it took); with
 * DRV_NOWAIT_ONLY=NAME only that step runs (a call that waits shows in its own figure). */
#include "drv_common.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define N 4096
#define MIB (1u << 20)

static double step_limit_ms;

static const char *only; /* DRV_NOWAIT_ONLY=NAME: that step alone (to time each on its own) */

#define STEP(name, body)                                                                       \
	do {                                                                                   \
		if (only && strcmp(only, name))                                                \
			break;                                                                 \
		double step_t0_ = drv_now_ms();                                                \
		body;                                                                          \
		double step_ms_ = drv_now_ms() - step_t0_;                                     \
		EXPECT(step_ms_ < step_limit_ms, "%s took %.0f ms: it waited for the other process's kernel", \
		       name, step_ms_);                                                        \
		printf("%s ok\ntime_%s_ms=%.1f\n", name, name, step_ms_);                     \
	} while (0)

/* The long kernel, in a process of its own: launched at 'G' on go; says 'L' on fd once
 * it runs. */
static int sleeper(const char *image, long ms, int go, int fd)
{
	unsigned long long ns = (unsigned long long)ms * 1000000ull;
	void *params[] = {&ns};
	CUfunction f;
	char said = 0;
	drv_open_device0();
	CUmodule m = drv_load_module(image);
	CHECK(cuModuleGetFunction(&f, m, "sleepNs"));
	if (read(go, &said, 1) != 1 || said != 'G')
		return 1;
	CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	if (cuStreamQuery(NULL) != CUDA_ERROR_NOT_READY)
		fprintf(stderr, "drv_nowait: the long kernel is not running\n");
	if (write(fd, "L", 1) != 1)
		return 1;
	CHECK(cuCtxSynchronize());
	CHECK(cuModuleUnload(m));
	return 0;
}

/* vecAdd on a + b through device memory and back; the result checked. */
static void vecadd(CUfunction f)
{
	static float a[N], b[N], c[N];
	CUdeviceptr da, db, dc;
	int n = N;
	for (int i = 0; i < N; i++)
		a[i] = (float)i, b[i] = (float)(2 * i);
	CHECK(cuMemAlloc(&da, sizeof a));
	CHECK(cuMemAlloc(&db, sizeof b));
	CHECK(cuMemAlloc(&dc, sizeof c));
	CHECK(cuMemcpyHtoD(da, a, sizeof a));
	CHECK(cuMemcpyHtoD(db, b, sizeof b));
	void *params[] = {&da, &db, &dc, &n};
	CHECK(cuLaunchKernel(f, N / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
	CHECK(cuMemcpyDtoH(c, dc, sizeof c));
	for (int i = 0; i < N; i++)
		EXPECT(c[i] == (float)(3 * i), "vecAdd: c[%d] = %g", i, c[i]);
	CHECK(cuCtxSynchronize());
	CHECK(cuMemFree(da));
	CHECK(cuMemFree(db));
	CHECK(cuMemFree(dc));
}

/* fillU32 into p (n words), then the words read back through host and checked. */
static void fill_check(CUfunction fill, CUdeviceptr p, unsigned v, int n, const char *what)
{
	void *params[] = {&p, &v, &n};
	CHECK(cuLaunchKernel(fill, (unsigned)(n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
	unsigned *back = malloc((size_t)n * 4);
	CHECK(cuMemcpyDtoH(back, p, (size_t)n * 4));
	EXPECT(back[0] == v && back[n - 1] == v, "%s: fillU32 gave %#x..%#x", what, back[0], back[n - 1]);
	free(back);
}

static void pinned(void)
{
	static unsigned src[N], dst[N];
	void *host;
	CUdeviceptr d;
	CHECK(cuMemAlloc(&d, sizeof src));
	CHECK(cuMemAllocHost(&host, 4 * MIB)); /* large enough to be shared with the daemon */
	for (int i = 0; i < N; i++)
		((unsigned *)host)[i] = (unsigned)i * 7u;
	CHECK(cuMemcpyHtoD(d, host, sizeof src));
	CHECK(cuMemFreeHost(host));
	for (int i = 0; i < N; i++)
		src[i] = (unsigned)i * 11u;
	CHECK(cuMemHostRegister(src, sizeof src, 0));
	CHECK(cuMemHostRegister(dst, sizeof dst, 0));
	CHECK(cuMemcpyHtoD(d, src, sizeof src));
	CHECK(cuMemcpyDtoH(dst, d, sizeof dst));
	CHECK(cuMemHostUnregister(src));
	CHECK(cuMemHostUnregister(dst));
	EXPECT(memcmp(src, dst, sizeof src) == 0, "registered memory's copy differs");
	CHECK(cuMemFree(d));
}

static void arrays(void)
{
	CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CUDA_ARRAY3D_DESCRIPTOR d3 = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	CUarray a;
	CUmipmappedArray m;
	CHECK(cuArrayCreate(&a, &d2));
	CHECK(cuArrayDestroy(a));
	CHECK(cuMipmappedArrayCreate(&m, &d3, 2));
	CHECK(cuMipmappedArrayDestroy(m));
}

static void virtual_memory(CUfunction fill)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	size_t gran = 0;
	CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	CUdeviceptr va;
	CUmemGenericAllocationHandle h;
	CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK(cuMemAddressReserve(&va, gran, 0, 0, 0));
	CHECK(cuMemCreate(&h, gran, &prop, 0));
	CHECK(cuMemMap(va, gran, 0, h, 0));
	CHECK(cuMemSetAccess(va, gran, &access, 1));
	fill_check(fill, va, 0x5a5a5a5au, N, "mapped memory");
	CHECK(cuMemUnmap(va, gran));
	CHECK(cuMemRelease(h));
	CHECK(cuMemAddressFree(va, gran));
}

static void other_memory(CUfunction fill)
{
	CUdeviceptr p;
	CUstream s;
	CHECK(cuMemAllocManaged(&p, N * 4, CU_MEM_ATTACH_GLOBAL));
	fill_check(fill, p, 0x11223344u, N, "managed memory");
	CHECK(cuMemFree(p));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemAllocAsync(&p, N * 4, s));
	CHECK(cuMemFreeAsync(p, s));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuStreamDestroy(s));
}

static void streams_events_graphs(CUdeviceptr scratch)
{
	CUstream s;
	CUevent e;
	CUgraph g;
	CUgraphNode node;
	CUgraphExec exec;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	CHECK(cuEventRecord(e, s));
	CHECK(cuEventSynchronize(e));
	CUDA_MEMSET_NODE_PARAMS ms = {.dst = scratch, .value = 7, .elementSize = 1, .width = 256, .height = 1};
	CUcontext ctx;
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuGraphCreate(&g, 0));
	CHECK(cuGraphAddMemsetNode(&node, g, NULL, 0, &ms, ctx));
	CHECK(cuGraphInstantiate(&exec, g, 0));
	CHECK(cuGraphLaunch(exec, s));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuGraphExecDestroy(exec));
	CHECK(cuGraphDestroy(g));
	CHECK(cuEventDestroy(e));
	CHECK(cuStreamDestroy(s));
}

/* A context of its own, with memory of each kind and an array in it, destroyed with them. */
static void context_destroy(void)
{
	CUcontext primary, ctx;
	CUdevice dev;
	CUdeviceptr p, managed;
	CUarray a;
	CUDA_ARRAY_DESCRIPTOR d2 = {.Width = 64, .Height = 64, .Format = CU_AD_FORMAT_FLOAT, .NumChannels = 1};
	static unsigned char back[4096];
	CHECK(cuCtxGetCurrent(&primary));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
	CHECK(cuMemAlloc(&p, sizeof back));
	CHECK(cuMemAllocManaged(&managed, sizeof back, CU_MEM_ATTACH_GLOBAL));
	CHECK(cuArrayCreate(&a, &d2));
	CHECK(cuMemsetD8(p, 0x5c, sizeof back));
	CHECK(cuMemcpyDtoH(back, p, sizeof back));
	EXPECT(back[0] == 0x5c && back[sizeof back - 1] == 0x5c, "memset in a context of its own");
	CHECK(cuCtxDestroy(ctx));
	CHECK(cuCtxSetCurrent(primary));
}

static void library(CUlibrary lib)
{
	CUkernel k;
	CHECK(cuLibraryGetKernel(&k, lib, "emptyKernel"));
	CHECK(cuLaunchKernel((CUfunction)k, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	CHECK(cuCtxSynchronize());
	CHECK(cuLibraryUnload(lib));
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s IMAGE KERNEL_MS\n", argv[0]);
		return 2;
	}
	long kernel_ms = atol(argv[2]);
	only = getenv("DRV_NOWAIT_ONLY");
	step_limit_ms = (double)kernel_ms / 2;
	int up[2], down[2];
	if (kernel_ms <= 0 || pipe(up) || pipe(down))
		return 2;
	pid_t child = fork(); /* before any CUDA call: each process a client of its own */
	if (child < 0)
		return 2;
	if (child == 0) {
		close(up[0]);
		close(down[1]);
		_exit(sleeper(argv[1], kernel_ms, down[0], up[1]));
	}
	close(up[1]);
	close(down[0]);
	/* Code is loaded before the long kernel starts: loading into a context waits for every
	 * kernel running in it on a GPU (docs/sharing.md), as no client of a shared context can
	 * avoid; it is timed apart, at the end. */
	CUmodule m;
	CUfunction add, fill;
	CUdeviceptr scratch;
	CUlibrary lib;
	drv_open_device0();
	void *bytes = drv_read_file(argv[1], NULL);
	CHECK(cuModuleLoadData(&m, bytes));
	CHECK(cuLibraryLoadData(&lib, bytes, NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuModuleGetFunction(&add, m, "vecAdd"));
	CHECK(cuModuleGetFunction(&fill, m, "fillU32"));
	char said = 0;
	if (write(down[1], "G", 1) != 1 || read(up[0], &said, 1) != 1 || said != 'L') {
		fprintf(stderr, "drv_nowait: the long kernel never started\n");
		kill(child, SIGKILL);
		return 1;
	}
	double t0 = drv_now_ms();
	STEP("vecadd_free", vecadd(add));
	STEP("ctx_synchronize", CHECK(cuCtxSynchronize()));
	STEP("pinned_unregister", pinned());
	STEP("array_destroy", arrays());
	STEP("vmm_unmap_release", virtual_memory(fill));
	STEP("managed_async_free", other_memory(fill));
	CHECK(cuMemAlloc(&scratch, 4096));
	STEP("stream_event_graph", streams_events_graphs(scratch));
	CHECK(cuMemFree(scratch));
	STEP("ctx_destroy", context_destroy());
	STEP("library_unload", library(lib));
	STEP("module_unload", CHECK(cuModuleUnload(m)));
	double total = drv_now_ms() - t0;
	int status = 0;
	pid_t done = waitpid(child, &status, WNOHANG);
	EXPECT(done == 0, "the long kernel (%ld ms) ended before the sequence did (%.0f ms)", kernel_ms, total);
	EXPECT(total < step_limit_ms, "the sequence took %.0f ms beside a %ld ms kernel", total, kernel_ms);
	printf("sequence ok\ntime_sequence_ms=%.1f\n", total);
	/* A load while the kernel may still run: timed, not checked. */
	double t1 = drv_now_ms();
	CHECK(cuModuleLoadData(&m, bytes));
	printf("time_module_load_ms=%.1f\n", drv_now_ms() - t1);
	CHECK(cuModuleUnload(m));
	free(bytes);
	drv_close_device0();
	if (done == 0 && waitpid(child, &status, 0) != child)
		status = -1;
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the sleeping process failed (status %#x)", status);
	if (!drv_failures)
		printf("PASS\n");
	return drv_exit_status();
}
