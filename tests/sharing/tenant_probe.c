/* A driver-API client for the sharing tests (tests/sharing/sharing.py): one
 * program, a mode per role. Every line it prints to stdout is read by the test;
 * diagnostics go to stderr. Exit 0 only if everything the mode checks held.
 *
 *   tenant_probe info
 *       prints "count N"; for each device it sees "device I RESULT DEV" (cuDeviceGet)
 *       and "uuid I HEX", "past RESULT" (cuDeviceGet of ordinal N); then "ctx HANDLE"
 *       (device 0's primary context) and
 *       "mem FREE TOTAL" (cuMemGetInfo there)
 *   tenant_probe alloc MIB...
 *       allocates each size in turn on device 0, printing "alloc MIB RESULT" (an error
 *       name or CUDA_SUCCESS), then "mem FREE TOTAL" and "ready"; holds everything
 *       until stdin ends, then frees it and exits
 *   tenant_probe quota LIMIT_MIB CHUNK_MIB
 *       checks a client quota of LIMIT_MIB from inside: cuMemGetInfo's total is the
 *       quota and its free shrinks with each allocation, CHUNK_MIB pieces fit up to it,
 *       the next allocation fails with CUDA_ERROR_OUT_OF_MEMORY and freeing makes room
 *   tenant_probe hold IMAGE MIB N
 *       loads IMAGE, creates a stream and an event, allocates N pieces of MIB MiB and
 *       fills them with a kernel; prints "ready" and waits to be killed
 *   tenant_probe active IMAGE
 *       loads IMAGE, creates a stream, fills 1 MiB on it and synchronizes it; prints
 *       "ready", then queries the stream every 20 ms until killed (a stream in use)
 *   tenant_probe graphs IMAGE MIB
 *       loads IMAGE, allocates MIB MiB of managed memory and captures a graph that fills
 *       it and runs a host function; instantiates and launches it (checking the fill on
 *       the host and that the host function ran), builds a second graph explicitly (a
 *       memset node); prints "ready" and waits to be killed
 *   tenant_probe sleep IMAGE MS
 *       launches a kernel that sleeps MS milliseconds on its NULL stream, prints
 *       "launched", waits with cuCtxSynchronize and prints "slept ELAPSED_MS"
 *   tenant_probe timed IMAGE MS
 *       loads IMAGE, creates two timed events and prints "ready"; at the line "go" on
 *       stdin records one on its NULL stream, launches a kernel that sleeps MS
 *       milliseconds there, records the other, synchronizes with it and prints
 *       "timed WALL_MS ELAPSED_MS": the wall time since "go" and the events' elapsed time
 *   tenant_probe records IMAGE MS
 *       launches a kernel that sleeps MS milliseconds on its NULL stream, then records a
 *       CU_EVENT_DISABLE_TIMING event there and queries it, then a timed one and queries
 *       it; prints "records MS1 RESULT1 MS2 RESULT2": how long each record and query took
 *       and what the query answered
 *   tenant_probe quick
 *       allocates, sets, synchronizes its context and NULL stream and copies back;
 *       prints "quick ELAPSED_MS connect MS context MS", then frees and prints "free MS"
 *   tenant_probe owner IMAGE
 *       client A of the isolation test: allocates and fills memory, creates a stream and
 *       an event, loads IMAGE as a module (a function, a global) and as a library (a
 *       kernel), builds a graph (a memset node) and instantiates it; prints "handles
 *       ctx=.. ptr=.. stream=.. event=.. module=.. func=.. global=.. library=.. kernel=..
 *       graph=.. node=.. exec=..", then at
 *       the line "check" on stdin verifies its data is intact and its handles work and
 *       prints "intact"; at the end of stdin releases everything and exits
 *   tenant_probe intrude IMAGE CTX PTR STREAM EVENT MODULE FUNC GLOBAL LIBRARY KERNEL GRAPH NODE EXEC
 *       client B: tries A's values in every call that names a pointer or handle and
 *       prints "refused WHAT RESULT" for each call refused as CUDA refuses an invalid
 *       one, "FAIL WHAT ..." otherwise; then does the same work with its own objects
 *       and prints "own ok"
 */
#include <cuda.h>
#include <stdint.h>
#include <time.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MIB (1ull << 20)
#define WORDS (1u << 18) /* the owner's buffer: 1 MiB of 32-bit words */

static int failures;

static const char *name_of(CUresult r)
{
	const char *n = NULL;
	return cuGetErrorName(r, &n) == CUDA_SUCCESS && n ? n : "unknown CUresult";
}

#define CHECK(call)                                                                              \
	do {                                                                                     \
		CUresult r_ = (call);                                                            \
		if (r_ != CUDA_SUCCESS) {                                                        \
			fprintf(stderr, "tenant_probe: %s:%d: %s failed: %s\n", __FILE__, __LINE__, \
				#call, name_of(r_));                                             \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

#define EXPECT(cond, ...)                                                                        \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "tenant_probe: check failed: %s: ", #cond);              \
			fprintf(stderr, __VA_ARGS__);                                            \
			fputc('\n', stderr);                                                     \
			failures++;                                                              \
		}                                                                                \
	} while (0)

static CUcontext open_device0(void)
{
	CUcontext ctx;
	CHECK(cuInit(0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK(cuCtxSetCurrent(ctx));
	return ctx;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static unsigned pattern(unsigned i) { return i * 2654435761u + 12345u; }

/* Waits for a line of stdin; returns it in buf, or 0 at its end. */
static int read_line(char *buf, int len)
{
	if (!fgets(buf, len, stdin))
		return 0;
	buf[strcspn(buf, "\n")] = 0;
	return 1;
}

static void drain_stdin(void)
{
	char buf[256];
	while (read_line(buf, sizeof(buf)))
		;
}

static int mode_info(void)
{
	int count = 0;
	CHECK(cuInit(0));
	CHECK(cuDeviceGetCount(&count));
	printf("count %d\n", count);
	for (int i = 0; i < count; i++) {
		CUdevice dev = -1;
		CUuuid u;
		CUresult r = cuDeviceGet(&dev, i);
		printf("device %d %s %d\n", i, name_of(r), r == CUDA_SUCCESS ? (int)dev : -1);
		/* A CUdevice is its ordinal; the UUID is asked with the ordinal itself so that it
		 * shows the daemon's mapping of devices even where cuDeviceGet is wrong. */
		CHECK(cuDeviceGetUuid(&u, (CUdevice)i));
		printf("uuid %d ", i);
		for (int k = 0; k < 16; k++)
			printf("%02x", (unsigned char)u.bytes[k]);
		printf("\n");
	}
	CUdevice past;
	printf("past %s\n", name_of(cuDeviceGet(&past, count)));
	CUcontext ctx;
	size_t free_b, total_b;
	CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuMemGetInfo(&free_b, &total_b));
	printf("ctx %p\nmem %zu %zu\n", (void *)ctx, free_b, total_b);
	return 0;
}

static int mode_alloc(int n, char **sizes)
{
	CUdeviceptr *p = calloc((size_t)n, sizeof(*p));
	size_t free_b, total_b;
	open_device0();
	for (int i = 0; i < n; i++) {
		CUresult r = cuMemAlloc(&p[i], (size_t)atoll(sizes[i]) * MIB);
		if (r != CUDA_SUCCESS)
			p[i] = 0;
		printf("alloc %s %s\n", sizes[i], name_of(r));
	}
	CHECK(cuMemGetInfo(&free_b, &total_b));
	printf("mem %zu %zu\nready\n", free_b, total_b);
	fflush(stdout);
	drain_stdin();
	for (int i = n - 1; i >= 0; i--)
		if (p[i])
			CHECK(cuMemFree(p[i]));
	free(p);
	return 0;
}

static void expect_info(uint64_t want_free, uint64_t want_total, const char *when)
{
	size_t free_b, total_b;
	CHECK(cuMemGetInfo(&free_b, &total_b));
	EXPECT(free_b == want_free && total_b == want_total, "%s: cuMemGetInfo gave free %zu total %zu, expected %llu %llu",
	       when, free_b, total_b, (unsigned long long)want_free, (unsigned long long)want_total);
}

static int mode_quota(uint64_t limit_mib, uint64_t chunk_mib)
{
	const uint64_t limit = limit_mib * MIB, chunk = chunk_mib * MIB, n = limit / chunk;
	CUdeviceptr *p = calloc(n, sizeof(*p)), extra;
	char when[64];
	open_device0();
	expect_info(limit, limit, "before any allocation");
	for (uint64_t i = 0; i < n; i++) {
		CHECK(cuMemAlloc(&p[i], chunk));
		snprintf(when, sizeof(when), "after %llu MiB", (unsigned long long)((i + 1) * chunk_mib));
		expect_info(limit - (i + 1) * chunk, limit, when);
	}
	CUresult r = cuMemAlloc(&extra, chunk);
	EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "a piece past the quota gave %s", name_of(r));
	r = cuMemAlloc(&extra, 1);
	EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "one byte past the quota gave %s", name_of(r));
	CHECK(cuMemFree(p[0]));
	expect_info(chunk, limit, "after freeing one piece");
	r = cuMemAlloc(&p[0], chunk);
	EXPECT(r == CUDA_SUCCESS, "the freed room could not be allocated again: %s", name_of(r));
	for (uint64_t i = 0; i < n; i++)
		if (r == CUDA_SUCCESS || i > 0)
			CHECK(cuMemFree(p[i]));
	expect_info(limit, limit, "after freeing everything");
	r = cuMemAlloc(&extra, limit + 1);
	EXPECT(r == CUDA_ERROR_OUT_OF_MEMORY, "one allocation of the quota plus a byte gave %s", name_of(r));
	r = cuMemAlloc(&extra, limit);
	EXPECT(r == CUDA_SUCCESS, "one allocation of the whole quota gave %s", name_of(r));
	if (r == CUDA_SUCCESS)
		CHECK(cuMemFree(extra));
	free(p);
	if (!failures)
		printf("ok\n");
	return failures ? 1 : 0;
}

static void fill(CUfunction f, CUstream s, CUdeviceptr p, unsigned v, int n)
{
	void *params[] = {&p, &v, &n};
	CHECK(cuLaunchKernel(f, 4, 1, 1, 64, 1, 1, 0, s, params, NULL));
}

/* Loads image and fills n new pieces of mib MiB on a new stream, which it returns. */
static CUstream fill_pieces(const char *image, size_t mib, int n)
{
	CUmodule mod;
	CUfunction f;
	CUstream s;
	open_device0();
	CHECK(cuModuleLoad(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "fillU32"));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int i = 0; i < n; i++) {
		CUdeviceptr p;
		CHECK(cuMemAlloc(&p, mib * MIB));
		fill(f, s, p, 0x5a5a5a5au, (int)(mib * MIB / 4));
	}
	return s;
}

static int mode_hold(const char *image, size_t mib, int n)
{
	CUevent e;
	CUstream s = fill_pieces(image, mib, n);
	CHECK(cuEventCreate(&e, 0));
	CHECK(cuEventRecord(e, s));
	CHECK(cuEventSynchronize(e));
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* A stream in use: a fill on it, then a query of it every 20 ms until killed. */
static int mode_active(const char *image)
{
	CUstream s = fill_pieces(image, 1, 1);
	CHECK(cuStreamSynchronize(s));
	printf("ready\n");
	fflush(stdout);
	for (;;) {
		cuStreamQuery(s);
		nanosleep(&(struct timespec){0, 20000000}, NULL);
	}
}

static void CUDA_CB count_run(void *arg) { ++*(int *)arg; }

static int mode_graphs(const char *image, size_t mib)
{
	CUmodule mod;
	CUfunction f;
	CUstream s;
	CUdeviceptr m;
	CUgraph captured, built;
	CUgraphNode node;
	CUgraphExec exec;
	static int runs;
	CUcontext ctx = open_device0();
	CHECK(cuModuleLoad(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "fillU32"));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemAllocManaged(&m, mib * MIB, CU_MEM_ATTACH_GLOBAL));
	CHECK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL));
	fill(f, s, m, 0x5a5a5a5au, (int)(mib * MIB / 4));
	CHECK(cuLaunchHostFunc(s, count_run, &runs));
	CHECK(cuStreamEndCapture(s, &captured));
	CHECK(cuGraphInstantiate(&exec, captured, 0));
	CHECK(cuGraphLaunch(exec, s));
	CHECK(cuStreamSynchronize(s));
	unsigned *words = (unsigned *)(uintptr_t)m;
	EXPECT(runs == 1 && words[0] == 0x5a5a5a5au && words[mib * MIB / 4 - 1] == 0x5a5a5a5au,
	       "the captured graph: host function ran %d times, managed memory reads 0x%x", runs, words[0]);
	CUDA_MEMSET_NODE_PARAMS p = {.dst = m, .value = 0, .elementSize = 4, .width = 1024, .height = 1};
	CHECK(cuGraphCreate(&built, 0));
	CHECK(cuGraphAddMemsetNode(&node, built, NULL, 0, &p, ctx));
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* The whole of a kernel image file, NUL-terminated (PTX is text). */
static void *read_image(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n = -1;
	if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET) && (buf = calloc(1, (size_t)n + 1)) &&
	    fread(buf, 1, (size_t)n, f) == (size_t)n) {
		fclose(f);
		return buf;
	}
	fprintf(stderr, "tenant_probe: cannot read %s\n", path);
	exit(1);
}

static int mode_owner(const char *image)
{
	unsigned *host = malloc(WORDS * sizeof(*host)), *back = malloc(WORDS * sizeof(*back)), magic = 0;
	CUdeviceptr p, global;
	size_t global_size;
	CUstream s;
	CUevent e;
	CUmodule mod;
	CUfunction f, again, kf;
	CUlibrary lib;
	CUkernel k, kagain;
	CUgraph graph;
	CUgraphNode node;
	CUgraphExec exec;
	char line[64];
	void *code = read_image(image);
	CUcontext ctx = open_device0();
	for (unsigned i = 0; i < WORDS; i++)
		host[i] = pattern(i);
	CHECK(cuMemAlloc(&p, WORDS * sizeof(*host)));
	CHECK(cuMemcpyHtoD(p, host, WORDS * sizeof(*host)));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&e, 0));
	CHECK(cuModuleLoad(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "fillU32"));
	CHECK(cuModuleGetGlobal(&global, &global_size, mod, "kernelsMagic"));
	CHECK(cuLibraryLoadData(&lib, code, NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuLibraryGetKernel(&k, lib, "fillU32"));
	CHECK(cuEventRecord(e, s));
	/* A graph whose memset writes the last 1024 words as they are. */
	CUDA_MEMSET_NODE_PARAMS m = {.dst = p + (WORDS - 1024) * 4, .value = pattern(WORDS - 1024),
				     .elementSize = 4, .width = 1, .height = 1};
	CHECK(cuGraphCreate(&graph, 0));
	CHECK(cuGraphAddMemsetNode(&node, graph, NULL, 0, &m, ctx));
	CHECK(cuGraphInstantiate(&exec, graph, 0));
	printf("handles ctx=%p ptr=0x%llx stream=%p event=%p module=%p func=%p global=0x%llx library=%p kernel=%p "
	       "graph=%p node=%p exec=%p\n",
	       (void *)ctx, (unsigned long long)p, (void *)s, (void *)e, (void *)mod, (void *)f,
	       (unsigned long long)global, (void *)lib, (void *)k, (void *)graph, (void *)node, (void *)exec);
	fflush(stdout);
	while (read_line(line, sizeof(line)) && strcmp(line, "check"))
		;
	/* Nothing B tried changed the data, the global or the handles. */
	CHECK(cuMemcpyDtoH(back, p, WORDS * sizeof(*back)));
	EXPECT(!memcmp(back, host, WORDS * sizeof(*back)), "the owner's data changed");
	CHECK(cuMemcpyDtoH(&magic, global, sizeof(magic)));
	EXPECT(magic == 0x52454d4fu, "the module's global reads 0x%x", magic);
	CHECK(cuModuleGetFunction(&again, mod, "fillU32"));
	EXPECT(again == f, "the module gives another function now");
	CHECK(cuLibraryGetKernel(&kagain, lib, "fillU32"));
	EXPECT(kagain == k, "the library gives another kernel now");
	CHECK(cuKernelGetFunction(&kf, k));
	CHECK(cuStreamQuery(s));
	CHECK(cuEventQuery(e));
	size_t count = 0;
	CUgraphNodeType type;
	CHECK(cuGraphGetNodes(graph, NULL, &count));
	CHECK(cuGraphNodeGetType(node, &type));
	EXPECT(count == 1 && type == CU_GRAPH_NODE_TYPE_MEMSET, "the graph has %zu nodes, the first of type %d", count,
	       (int)type);
	CHECK(cuGraphLaunch(exec, s));
	/* The function, kernel, stream and event still work: fill the first 1024 words on the stream. */
	fill(kf, s, p, 0x5a5a5a5au, 1024);
	fill(f, s, p, 0xa5a5a5a5u, 1024);
	CHECK(cuEventRecord(e, s));
	CHECK(cuEventSynchronize(e));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuMemcpyDtoH(back, p, WORDS * sizeof(*back)));
	for (unsigned i = 0; i < WORDS; i++)
		host[i] = i < 1024 ? 0xa5a5a5a5u : pattern(i);
	EXPECT(!memcmp(back, host, WORDS * sizeof(*back)), "the owner's kernel did not fill its memory");
	if (!failures)
		printf("intact\n");
	fflush(stdout);
	drain_stdin();
	CHECK(cuGraphExecDestroy(exec));
	CHECK(cuGraphDestroy(graph));
	CHECK(cuLibraryUnload(lib));
	CHECK(cuModuleUnload(mod));
	CHECK(cuEventDestroy(e));
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFree(p));
	free(back);
	free(host);
	free(code);
	return failures ? 1 : 0;
}

/* One attempt with another client's value. An async call's error comes back at the
 * next synchronizing call (docs/protocol.md), so a call that returned success is
 * followed by cuCtxSynchronize, which then reports it. */
static void refused(const char *what, CUresult r, int async, CUresult want)
{
	if (async && r == CUDA_SUCCESS)
		r = cuCtxSynchronize();
	if (r == want) {
		printf("refused %s %s\n", what, name_of(r));
	} else {
		printf("FAIL %s: %s, expected %s\n", what, name_of(r), name_of(want));
		failures++;
	}
}

#define SYNC_CALL(what, call, want) refused(what, (call), 0, want)
#define ASYNC_CALL(what, call, want) refused(what, (call), 1, want)

static int mode_intrude(const char *image, char **v)
{
	CUdeviceptr aptr = strtoull(v[1], NULL, 0), aglobal = strtoull(v[6], NULL, 0);
	CUstream astream = (CUstream)(uintptr_t)strtoull(v[2], NULL, 0);
	CUevent aevent = (CUevent)(uintptr_t)strtoull(v[3], NULL, 0);
	CUmodule amod = (CUmodule)(uintptr_t)strtoull(v[4], NULL, 0);
	CUfunction afunc = (CUfunction)(uintptr_t)strtoull(v[5], NULL, 0);
	CUlibrary alib = (CUlibrary)(uintptr_t)strtoull(v[7], NULL, 0);
	CUkernel akernel = (CUkernel)(uintptr_t)strtoull(v[8], NULL, 0);
	CUgraph agraph = (CUgraph)(uintptr_t)strtoull(v[9], NULL, 0);
	CUgraphNode anode = (CUgraphNode)(uintptr_t)strtoull(v[10], NULL, 0);
	CUgraphExec aexec = (CUgraphExec)(uintptr_t)strtoull(v[11], NULL, 0);
	const size_t bytes = WORDS * 4;
	unsigned *host = calloc(WORDS, 4), *back = calloc(WORDS, 4);
	CUdeviceptr mine, mine2, out;
	CUstream s;
	CUevent e;
	CUmodule mod, mod2;
	CUfunction f, got;
	CUkernel kgot;
	size_t size;
	unsigned type;
	int attr;
	CUcontext ctx = open_device0();
	/* Same tenant, same worker: the same shared context, hence one address space. */
	printf("ctx %p\n", (void *)ctx);
	CHECK(cuMemAlloc(&mine, bytes));
	CHECK(cuMemAlloc(&mine2, bytes));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&e, 0));
	CHECK(cuModuleLoad(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "fillU32"));

	/* Memory. */
	SYNC_CALL("cuMemFree", cuMemFree(aptr), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemFree(inside)", cuMemFree(aptr + 256), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemcpyHtoD", cuMemcpyHtoD(aptr, host, 4096), CUDA_ERROR_INVALID_VALUE);
	ASYNC_CALL("cuMemcpyHtoDAsync", cuMemcpyHtoDAsync(aptr + 4096, host, 4096, s), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemcpyDtoH", cuMemcpyDtoH(back, aptr, 4096), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemcpyDtoHAsync", cuMemcpyDtoHAsync(back, aptr, 4096, s), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemcpyDtoD(from)", cuMemcpyDtoD(mine, aptr, 4096), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemcpyDtoD(into)", cuMemcpyDtoD(aptr, mine, 4096), CUDA_ERROR_INVALID_VALUE);
	ASYNC_CALL("cuMemcpyDtoDAsync(into)", cuMemcpyDtoDAsync(aptr, mine, 4096, s), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemsetD8", cuMemsetD8(aptr, 0, 4096), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemsetD32", cuMemsetD32(aptr + 8192, 0, 1024), CUDA_ERROR_INVALID_VALUE);
	ASYNC_CALL("cuMemsetD8Async", cuMemsetD8Async(aptr + 12288, 0, 4096, s), CUDA_ERROR_INVALID_VALUE);
	/* Its own memory only as far as it reaches: a range running past its end is refused. */
	SYNC_CALL("cuMemsetD8(own, overrunning)", cuMemsetD8(mine + bytes - 16, 0, 4096), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuPointerGetAttribute", cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, aptr),
		  CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemGetAddressRange", cuMemGetAddressRange(&out, &size, aptr + 16), CUDA_ERROR_NOT_FOUND);
	SYNC_CALL("cuMemcpyDtoH(global)", cuMemcpyDtoH(back, aglobal, 4), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuMemcpyHtoD(global)", cuMemcpyHtoD(aglobal, host, 4), CUDA_ERROR_INVALID_VALUE);

	/* Functions: with kernelParams the client library asks for the parameter layout
	 * first, which the daemon refuses; with extra the launch itself is refused. */
	CUdeviceptr target = mine;
	unsigned value = 7;
	int n = 16;
	void *params[] = {&target, &value, &n};
	SYNC_CALL("cuLaunchKernel(function)", cuLaunchKernel(afunc, 1, 1, 1, 16, 1, 1, 0, s, params, NULL),
		  CUDA_ERROR_INVALID_HANDLE);
	unsigned char buf[16];
	size_t buf_size = sizeof(buf);
	memcpy(buf, &target, 8);
	memcpy(buf + 8, &value, 4);
	memcpy(buf + 12, &n, 4);
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &buf_size, CU_LAUNCH_PARAM_END};
	ASYNC_CALL("cuLaunchKernel(function, extra)", cuLaunchKernel(afunc, 1, 1, 1, 16, 1, 1, 0, s, NULL, extra),
		   CUDA_ERROR_INVALID_HANDLE);
	ASYNC_CALL("cuLaunchKernel(stream)", cuLaunchKernel(f, 1, 1, 1, 16, 1, 1, 0, astream, params, NULL),
		   CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuFuncGetAttribute", cuFuncGetAttribute(&attr, CU_FUNC_ATTRIBUTE_NUM_REGS, afunc),
		  CUDA_ERROR_INVALID_HANDLE);
	/* Not checked, by design: a kernel's arguments are opaque bytes to the daemon, so
	 * a kernel of B's own given A's pointer as an argument would run; clients of one
	 * tenant share a context and so an address space, as under MPS. Isolation between
	 * tenants comes from their separate worker processes (tenant_isolation = process). */

	/* Streams and events. */
	SYNC_CALL("cuStreamSynchronize", cuStreamSynchronize(astream), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuStreamQuery", cuStreamQuery(astream), CUDA_ERROR_INVALID_HANDLE);
	ASYNC_CALL("cuStreamWaitEvent(event)", cuStreamWaitEvent(s, aevent, 0), CUDA_ERROR_INVALID_HANDLE);
	ASYNC_CALL("cuStreamWaitEvent(stream)", cuStreamWaitEvent(astream, e, 0), CUDA_ERROR_INVALID_HANDLE);
	ASYNC_CALL("cuEventRecord(event)", cuEventRecord(aevent, s), CUDA_ERROR_INVALID_HANDLE);
	ASYNC_CALL("cuEventRecord(stream)", cuEventRecord(e, astream), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuEventSynchronize", cuEventSynchronize(aevent), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuEventQuery", cuEventQuery(aevent), CUDA_ERROR_INVALID_HANDLE);

	/* Modules. */
	SYNC_CALL("cuModuleGetFunction", cuModuleGetFunction(&got, amod, "fillU32"), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuModuleGetGlobal", cuModuleGetGlobal(&out, &size, amod, "kernelsMagic"), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuModuleUnload", cuModuleUnload(amod), CUDA_ERROR_INVALID_HANDLE);

	/* Libraries and their kernels (a CUkernel stands for a CUfunction in launches). */
	SYNC_CALL("cuLibraryGetKernel", cuLibraryGetKernel(&kgot, alib, "fillU32"), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuLibraryGetModule", cuLibraryGetModule(&mod2, alib), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuLibraryGetGlobal", cuLibraryGetGlobal(&out, &size, alib, "kernelsMagic"), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuKernelGetFunction", cuKernelGetFunction(&got, akernel), CUDA_ERROR_INVALID_HANDLE);
	ASYNC_CALL("cuLaunchKernel(kernel, extra)", cuLaunchKernel((CUfunction)akernel, 1, 1, 1, 16, 1, 1, 0, s, NULL, extra),
		   CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuLibraryUnload", cuLibraryUnload(alib), CUDA_ERROR_INVALID_HANDLE);

	/* Graphs, their nodes and executable graphs; nodes of B's own naming A's memory. */
	CUgraph g, gclone;
	CUgraphNode gnode, gmine;
	CUgraphExec gexec;
	CUgraphNodeType gtype;
	CUgraphExecUpdateResultInfo ginfo;
	size_t gcount = 0;
	CHECK(cuGraphCreate(&g, 0));
	CHECK(cuGraphAddEmptyNode(&gmine, g, NULL, 0));
	ASYNC_CALL("cuGraphLaunch", cuGraphLaunch(aexec, s), CUDA_ERROR_INVALID_HANDLE);
	ASYNC_CALL("cuGraphUpload", cuGraphUpload(aexec, s), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphInstantiate", cuGraphInstantiate(&gexec, agraph, 0), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphClone", cuGraphClone(&gclone, agraph), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphGetNodes", cuGraphGetNodes(agraph, NULL, &gcount), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphAddEmptyNode(graph)", cuGraphAddEmptyNode(&gnode, agraph, NULL, 0), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphAddEmptyNode(dependency)", cuGraphAddEmptyNode(&gnode, g, &anode, 1), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuGraphAddDependencies", cuGraphAddDependencies(g, &anode, &gmine, NULL, 1), CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuGraphNodeGetType", cuGraphNodeGetType(anode, &gtype), CUDA_ERROR_INVALID_HANDLE);
	CUDA_MEMSET_NODE_PARAMS gm = {.dst = aptr, .value = 0, .elementSize = 4, .width = 16, .height = 1};
	SYNC_CALL("cuGraphAddMemsetNode(memory)", cuGraphAddMemsetNode(&gnode, g, NULL, 0, &gm, ctx),
		  CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuGraphExecMemsetNodeSetParams", cuGraphExecMemsetNodeSetParams(aexec, anode, &gm, ctx),
		  CUDA_ERROR_INVALID_HANDLE);
	CUDA_MEMCPY3D gc = {.srcMemoryType = CU_MEMORYTYPE_DEVICE, .srcDevice = aptr, .dstMemoryType = CU_MEMORYTYPE_DEVICE,
			    .dstDevice = mine, .WidthInBytes = 4096, .Height = 1, .Depth = 1};
	SYNC_CALL("cuGraphAddMemcpyNode(from)", cuGraphAddMemcpyNode(&gnode, g, NULL, 0, &gc, ctx),
		  CUDA_ERROR_INVALID_VALUE);
	gc.srcDevice = mine;
	gc.dstDevice = aptr;
	SYNC_CALL("cuGraphAddMemcpyNode(into)", cuGraphAddMemcpyNode(&gnode, g, NULL, 0, &gc, ctx),
		  CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuGraphAddChildGraphNode", cuGraphAddChildGraphNode(&gnode, g, NULL, 0, agraph),
		  CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphExecUpdate", cuGraphExecUpdate(aexec, g, &ginfo), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphExecDestroy", cuGraphExecDestroy(aexec), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphDestroy", cuGraphDestroy(agraph), CUDA_ERROR_INVALID_HANDLE);
	/* Conditional nodes, node getters and settings, captures into a graph, user objects. */
	CUgraphConditionalHandle gh;
	CUgraph gbody;
	CUDA_KERNEL_NODE_PARAMS gkp;
	unsigned gon;
	cuuint64_t gflags;
	CUevent gev;
	CUuserObject guo = (CUuserObject)astream; /* a value of A's: no user object of B's */
	SYNC_CALL("cuGraphConditionalHandleCreate", cuGraphConditionalHandleCreate(&gh, agraph, ctx, 0, 0),
		  CUDA_ERROR_INVALID_HANDLE);
	CUgraphNodeParams gcp = {.type = CU_GRAPH_NODE_TYPE_CONDITIONAL};
	gcp.conditional.handle = 0x1000; /* none of B's */
	gcp.conditional.type = CU_GRAPH_COND_TYPE_IF;
	gcp.conditional.size = 1;
	SYNC_CALL("cuGraphAddNode(conditional handle)", cuGraphAddNode_v2(&gnode, g, NULL, NULL, 0, &gcp),
		  CUDA_ERROR_INVALID_VALUE);
	SYNC_CALL("cuGraphAddNode(conditional graph)", cuGraphAddNode_v2(&gnode, agraph, NULL, NULL, 0, &gcp),
		  CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphKernelNodeGetParams", cuGraphKernelNodeGetParams(anode, &gkp), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphChildGraphNodeGetGraph", cuGraphChildGraphNodeGetGraph(anode, &gbody), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphEventRecordNodeGetEvent", cuGraphEventRecordNodeGetEvent(anode, &gev), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphNodeGetEnabled", cuGraphNodeGetEnabled(aexec, anode, &gon), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphNodeSetEnabled", cuGraphNodeSetEnabled(aexec, anode, 0), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphExecGetFlags", cuGraphExecGetFlags(aexec, &gflags), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuStreamBeginCaptureToGraph", cuStreamBeginCaptureToGraph(s, agraph, NULL, NULL, 0,
										  CU_STREAM_CAPTURE_MODE_GLOBAL),
		  CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuUserObjectRelease", cuUserObjectRelease(guo, 1), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuGraphRetainUserObject", cuGraphRetainUserObject(g, guo, 1, 0), CUDA_ERROR_INVALID_HANDLE);
	CHECK(cuGraphInstantiate(&gexec, g, 0));
	CHECK(cuGraphLaunch(gexec, s));
	CHECK(cuStreamSynchronize(s));
	CHECK(cuGraphExecDestroy(gexec));
	CHECK(cuGraphDestroy(g));

	/* Destroying them last: had any of these gone through, A would notice. */
	SYNC_CALL("cuEventDestroy", cuEventDestroy(aevent), CUDA_ERROR_INVALID_HANDLE);
	SYNC_CALL("cuStreamDestroy", cuStreamDestroy(astream), CUDA_ERROR_INVALID_HANDLE);

	/* B's own objects work all along: a kernel, copies, a memset, the event. */
	for (unsigned i = 0; i < WORDS; i++)
		host[i] = pattern(i) ^ 0xffu;
	CHECK(cuMemcpyHtoD(mine, host, bytes));
	CHECK(cuMemcpyDtoD(mine2, mine, bytes));
	fill(f, s, mine2, 0x11111111u, 1024);
	CHECK(cuEventRecord(e, s));
	CHECK(cuStreamWaitEvent(s, e, 0));
	CHECK(cuEventSynchronize(e));
	CHECK(cuMemsetD8(mine2 + bytes - 4096, 0x22, 4096));
	CHECK(cuMemcpyDtoH(back, mine2, bytes));
	for (unsigned i = 0; i < WORDS; i++)
		host[i] = i < 1024 ? 0x11111111u : i >= WORDS - 1024 ? 0x22222222u : pattern(i) ^ 0xffu;
	EXPECT(!memcmp(back, host, bytes), "the intruder's own work gave wrong data");
	CHECK(cuModuleGetFunction(&got, mod, "fillU32"));
	CHECK(cuModuleUnload(mod));
	CHECK(cuEventDestroy(e));
	CHECK(cuStreamDestroy(s));
	CHECK(cuMemFree(mine2));
	CHECK(cuMemFree(mine));
	if (!failures)
		printf("own ok\n");
	free(back);
	free(host);
	return failures ? 1 : 0;
}

static int mode_sleep(const char *image, long ms)
{
	CUmodule mod;
	CUfunction f;
	unsigned long long ns = (unsigned long long)ms * 1000000ull;
	void *params[] = {&ns};
	open_device0();
	CHECK(cuModuleLoad(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "sleepNs"));
	double t0 = now_ms();
	CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	CHECK(cuStreamQuery(NULL) == CUDA_ERROR_NOT_READY ? CUDA_SUCCESS : CUDA_ERROR_UNKNOWN);
	printf("launched\n");
	CHECK(cuCtxSynchronize());
	printf("slept %.0f\n", now_ms() - t0);
	CHECK(cuModuleUnload(mod));
	return 0;
}

static int mode_timed(const char *image, long ms)
{
	CUmodule mod;
	CUfunction f;
	CUevent start, stop;
	unsigned long long ns = (unsigned long long)ms * 1000000ull;
	void *params[] = {&ns};
	char line[16];
	float elapsed;
	open_device0();
	CHECK(cuModuleLoad(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "sleepNs"));
	CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
	CHECK(cuStreamSynchronize(NULL));
	printf("ready\n");
	if (!read_line(line, sizeof(line)) || strcmp(line, "go"))
		return 1;
	double t0 = now_ms();
	CHECK(cuEventRecord(start, NULL));
	CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	CHECK(cuEventRecord(stop, NULL));
	CHECK(cuEventSynchronize(stop));
	double wall = now_ms() - t0;
	CHECK(cuEventElapsedTime(&elapsed, start, stop));
	printf("timed %.0f %.1f\n", wall, elapsed);
	CHECK(cuEventDestroy(stop));
	CHECK(cuEventDestroy(start));
	CHECK(cuModuleUnload(mod));
	return 0;
}

static int mode_records(const char *image, long ms)
{
	CUmodule mod;
	CUfunction f;
	CUevent untimed, timed;
	unsigned long long ns = (unsigned long long)ms * 1000000ull;
	void *params[] = {&ns};
	open_device0();
	CHECK(cuModuleLoad(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "sleepNs"));
	CHECK(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING));
	CHECK(cuEventCreate(&timed, CU_EVENT_DEFAULT));
	CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	double t0 = now_ms();
	CHECK(cuEventRecord(untimed, NULL));
	CUresult q1 = cuEventQuery(untimed);
	double t1 = now_ms();
	CHECK(cuEventRecord(timed, NULL));
	CUresult q2 = cuEventQuery(timed);
	double t2 = now_ms();
	const char *n1 = NULL, *n2 = NULL;
	cuGetErrorName(q1, &n1);
	cuGetErrorName(q2, &n2);
	printf("records %.0f %s %.0f %s\n", t1 - t0, n1 ? n1 : "?", t2 - t1, n2 ? n2 : "?");
	CHECK(cuCtxSynchronize());
	CHECK(cuEventDestroy(timed));
	CHECK(cuEventDestroy(untimed));
	CHECK(cuModuleUnload(mod));
	return 0;
}

static int mode_quick(void)
{
	unsigned char back[4096];
	CUdeviceptr p;
	double t0 = now_ms();
	CHECK(cuInit(0));
	double t1 = now_ms();
	open_device0();
	double t2 = now_ms();
	CHECK(cuMemAlloc(&p, sizeof(back)));
	CHECK(cuMemsetD8(p, 0x3c, sizeof(back)));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(back, p, sizeof(back)));
	CHECK(cuStreamSynchronize(NULL));
	EXPECT(back[0] == 0x3c && back[sizeof(back) - 1] == 0x3c, "the memset did not reach the memory");
	printf("quick %.0f connect %.0f context %.0f\n", now_ms() - t2, t1 - t0, t2 - t1);
	double t3 = now_ms();
	CHECK(cuMemFree(p));
	printf("free %.0f\n", now_ms() - t3);
	return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc >= 2 && !strcmp(argv[1], "info"))
		return mode_info();
	if (argc >= 3 && !strcmp(argv[1], "alloc"))
		return mode_alloc(argc - 2, argv + 2);
	if (argc == 4 && !strcmp(argv[1], "quota"))
		return mode_quota(strtoull(argv[2], NULL, 10), strtoull(argv[3], NULL, 10));
	if (argc == 5 && !strcmp(argv[1], "hold"))
		return mode_hold(argv[2], strtoull(argv[3], NULL, 10), atoi(argv[4]));
	if (argc == 3 && !strcmp(argv[1], "active"))
		return mode_active(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "sleep"))
		return mode_sleep(argv[2], atol(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "timed"))
		return mode_timed(argv[2], atol(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "records"))
		return mode_records(argv[2], atol(argv[3]));
	if (argc == 2 && !strcmp(argv[1], "quick"))
		return mode_quick();
	if (argc == 3 && !strcmp(argv[1], "owner"))
		return mode_owner(argv[2]);
	if (argc == 4 && !strcmp(argv[1], "graphs"))
		return mode_graphs(argv[2], strtoull(argv[3], NULL, 10));
	if (argc == 15 && !strcmp(argv[1], "intrude"))
		return mode_intrude(argv[2], argv + 3);
	fprintf(stderr, "usage: tenant_probe info | alloc MIB... | quota LIMIT_MIB CHUNK_MIB | hold IMAGE MIB N | graphs IMAGE MIB |\n"
			"       sleep IMAGE MS | timed IMAGE MS | records IMAGE MS | quick | owner IMAGE |\n"
			"       intrude IMAGE CTX PTR STREAM EVENT MODULE FUNC GLOBAL LIBRARY KERNEL GRAPH NODE EXEC\n");
	return 2;
}
