/* bench_worker IMAGE SECTION [ARGS]: one section of `remora bench`, measured
 * through whatever libcuda.so.1 the loader finds (the real driver natively,
 * Remora's client library remotely).  Driver API only, so it also runs
 * directly on the CPU test driver.
 *
 * Prints key=value lines on stdout, one figure each; diagnostics on stderr.
 * Every CUDA call is checked; any failure or wrong data exits 1.
 *
 *   info                          gpu_name, driver_version, device_count
 *   launch ASYNC_N SYNC_N         empty kernel: N async launches then one sync;
 *                                 N times launch + cuCtxSynchronize (µs each)
 *   memcpy MAX_BYTES              H2D and D2H, pageable and pinned, 4 KiB .. MAX
 *                                 in powers of 4 (µs per copy, GB/s); from 256 KiB,
 *                                 pageable compressible and random data too
 *   memset MAX_BYTES              cuMemsetD32 of 4 KiB .. MAX in powers of 16
 *   event N                       cuEventRecord + cuEventSynchronize (µs each)
 *   graph NODES LAUNCHES          a graph of NODES empty kernels in a chain, launched
 *                                 LAUNCHES times in a row: issue and until the last
 *                                 has run (µs per graph launch); and one empty
 *                                 kernel's async launch beside it (µs)
 *   spin ITERS                    the concurrency client: set up, write one byte
 *                                 to fd 3, wait for EOF on fd 4, then time one
 *                                 <<<1,1>>> spinFma with events (ms), and the
 *                                 wall time from the start to the end of the
 *                                 stop event's synchronize (ms)
 *   launch_streams N              N times launch + synchronize, then N async launches,
 *                                 on the legacy stream and on a created non-blocking one
 *                                 (as remorad's stream pool), each synchronized with
 *                                 cuCtxSynchronize and with cuStreamSynchronize, and on
 *                                 the created one by a word the GPU writes (µs each)
 *   latency N                     the latency client: set up and wait as spin does,
 *                                 then N times launch + cuCtxSynchronize, each timed:
 *                                 the median and the 99th percentile (µs)
 *   latency_threads T N           T threads of this one program (one context), each on
 *                                 a non-blocking stream of its own, after a common start
 *                                 N times launch + cuStreamSynchronize, each timed: the
 *                                 median of the threads' medians, the median and the
 *                                 largest of their 99th percentiles (µs)
 */
#include <cuda.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define READY_FD 3
#define GO_FD 4

#define CHECK_PROGRAM "bench_worker"
#include "cuda_check.h"

static void die(const char *what)
{
	fprintf(stderr, "bench_worker: %s\n", what);
	exit(1);
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static long long parse_count(const char *s)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	if (*end || v <= 0)
		die("counts must be positive integers");
	return v;
}

static CUmodule load_image(const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "bench_worker: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *image = n > 0 ? malloc((size_t)n + 1) : NULL;
	if (!image || fread(image, 1, (size_t)n, f) != (size_t)n)
		die("cannot read the kernel image");
	image[n] = 0;
	fclose(f);
	CUmodule module;
	CHECK(cuModuleLoadData(&module, image));
	free(image);
	return module;
}

/* The primary context of device 0, made current, as cudart would. */
static void open_device(void)
{
	CUdevice dev;
	CUcontext ctx;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
}

static void run_info(void)
{
	char name[256];
	int version, count;
	CUdevice dev;
	CHECK(cuInit(0));
	CHECK(cuDriverGetVersion(&version));
	CHECK(cuDeviceGetCount(&count));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDeviceGetName(name, sizeof name, dev));
	printf("gpu_name=%s\ndriver_version=%d\ndevice_count=%d\n", name, version, count);
}

static void run_launch(CUmodule module, long long async_n, long long sync_n)
{
	CUfunction empty;
	CHECK(cuModuleGetFunction(&empty, module, "emptyKernel"));
	for (int i = 0; i < 100; i++) /* warm-up: module, launch path, connection */
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	CHECK(cuCtxSynchronize());

	double t = now_us();
	for (long long i = 0; i < async_n; i++)
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	double issued = now_us();
	CHECK(cuCtxSynchronize());
	double done = now_us();
	printf("async_launch_us=%.4f\n", (issued - t) / (double)async_n);
	printf("async_launch_drain_us=%.4f\n", (done - t) / (double)async_n);

	t = now_us();
	for (long long i = 0; i < sync_n; i++) {
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
		CHECK(cuCtxSynchronize());
	}
	printf("launch_sync_us=%.4f\n", (now_us() - t) / (double)sync_n);
}

/* Waits for st as remorad's stream waits do (backend/gpu/stream_wait.c): a query, and while
 * not ready, a write of the next value to a mapped page-locked word behind st's work and
 * a spin on the word, for at most a second before the driver's wait (which reports a
 * fault that kept the word from being written). */
static void wait_by_word(CUstream st, volatile uint32_t *word, CUdeviceptr word_dev, uint32_t *value)
{
	CUresult r = cuStreamQuery(st);
	if (r == CUDA_SUCCESS)
		return;
	if (r != CUDA_ERROR_NOT_READY)
		CHECK(r);
	CHECK(cuStreamWriteValue32(st, word_dev, ++*value, 0));
	double t0 = now_us();
	for (unsigned looks = 1; *word != *value; looks++)
		if (looks % 4096 == 0 && now_us() - t0 > 1e6) {
			CHECK(cuStreamSynchronize(st));
			return;
		}
}

/* Launch + synchronize as the program asks for it (the legacy stream, cuCtxSynchronize)
 * and as remorad does it for the program (a created non-blocking stream of its pool,
 * cuStreamSynchronize, or its wait by a word the GPU writes): what the driver itself
 * charges for each, with no Remora between. */
static void run_launch_streams(CUmodule module, long long n)
{
	CUfunction empty;
	CUstream pool_like;
	uint32_t *word, value = 0;
	CUdeviceptr word_dev;
	CHECK(cuModuleGetFunction(&empty, module, "emptyKernel"));
	CHECK(cuStreamCreateWithPriority(&pool_like, CU_STREAM_NON_BLOCKING, 0));
	CHECK(cuMemHostAlloc((void **)&word, 64, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP));
	CHECK(cuMemHostGetDevicePointer(&word_dev, word, 0));
	*word = 0;
	static const char *const names[] = {"legacy_ctxsync", "legacy_streamsync", "created_ctxsync",
					    "created_streamsync", "created_word"};
	for (int round = 0; round < 2; round++) /* the first round warms up */
		for (int form = 0; form < 5; form++) {
			CUstream st = form < 2 ? NULL : pool_like;
			int ctx_sync = form % 2 == 0;
			double t = now_us();
			for (long long i = 0; i < n; i++) {
				CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, st, NULL, NULL));
				if (form == 4)
					wait_by_word(st, word, word_dev, &value);
				else
					CHECK(ctx_sync ? cuCtxSynchronize() : cuStreamSynchronize(st));
			}
			double pair = (now_us() - t) / (double)n;
			t = now_us();
			for (long long i = 0; i < n; i++)
				CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, st, NULL, NULL));
			double launch = (now_us() - t) / (double)n;
			CHECK(cuCtxSynchronize());
			if (round)
				printf("launch_sync.%s.us=%.4f\nasync_launch.%s.us=%.4f\n", names[form], pair, names[form], launch);
		}
	CHECK(cuStreamDestroy(pool_like));
	CHECK(cuMemFreeHost(word));
}

/* Enough repetitions of one copy to be stable: about 1 GiB moved, 3 .. 1000 times. */
static int copy_reps(size_t bytes)
{
	size_t reps = ((size_t)1 << 30) / bytes;
	return reps < 3 ? 3 : reps > 1000 ? 1000 : (int)reps;
}

static void fill_pattern(uint32_t *p, size_t bytes, uint32_t seed)
{
	for (size_t i = 0; i < bytes / 4; i++)
		p[i] = (uint32_t)i * 2654435761u ^ seed;
}

/* What a copy carries: the pattern above; runs of 256 equal bytes (compressible: zstd takes
 * them to a few percent); random bytes (incompressible), docs/performance.md "Compression". */
enum fill { FILL_PATTERN, FILL_COMPRESSIBLE, FILL_RANDOM };

static void fill(unsigned char *p, size_t bytes, enum fill how)
{
	uint64_t x = 0x9e3779b97f4a7c15ull ^ bytes;
	if (how == FILL_PATTERN)
		fill_pattern((uint32_t *)p, bytes, (uint32_t)bytes);
	for (size_t i = 0; how == FILL_COMPRESSIBLE && i < bytes; i++)
		p[i] = (unsigned char)(i / 256 % 251);
	for (size_t i = 0; how == FILL_RANDOM && i + 8 <= bytes; i += 8) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		memcpy(p + i, &x, 8);
	}
}

/* Times H2D from src then D2H into dst, checks dst == src, prints both. */
static void time_copies(const char *kind, CUdeviceptr dev, unsigned char *src, unsigned char *dst, size_t bytes,
			enum fill how)
{
	int reps = copy_reps(bytes);
	fill(src, bytes, how);
	memset(dst, 0, bytes);
	CHECK(cuMemcpyHtoD(dev, src, bytes)); /* warm-up, and the pages of both buffers touched */
	CHECK(cuMemcpyDtoH(dst, dev, bytes));
	if (memcmp(src, dst, bytes) != 0)
		die("memcpy: data read back differs from data written");

	double t = now_us();
	for (int i = 0; i < reps; i++)
		CHECK(cuMemcpyHtoD(dev, src, bytes));
	CHECK(cuCtxSynchronize()); /* from pageable memory a copy may return once staged: all counted */
	double h2d = (now_us() - t) / reps;
	t = now_us();
	for (int i = 0; i < reps; i++)
		CHECK(cuMemcpyDtoH(dst, dev, bytes));
	double d2h = (now_us() - t) / reps;
	if (memcmp(src, dst, bytes) != 0)
		die("memcpy: data read back differs from data written");
	printf("memcpy.h2d.%s.%zu.us=%.4f\nmemcpy.h2d.%s.%zu.gbps=%.4f\n", kind, bytes, h2d, kind, bytes, bytes / h2d / 1e3);
	printf("memcpy.d2h.%s.%zu.us=%.4f\nmemcpy.d2h.%s.%zu.gbps=%.4f\n", kind, bytes, d2h, kind, bytes, bytes / d2h / 1e3);
}

static void run_memcpy(size_t max_bytes)
{
	CUdeviceptr dev;
	void *pin_src, *pin_dst;
	unsigned char *src = malloc(max_bytes), *dst = malloc(max_bytes);
	if (!src || !dst)
		die("out of host memory");
	CHECK(cuMemAlloc(&dev, max_bytes));
	CHECK(cuMemAllocHost(&pin_src, max_bytes));
	CHECK(cuMemAllocHost(&pin_dst, max_bytes));
	for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
		time_copies("pageable", dev, src, dst, bytes, FILL_PATTERN);
		time_copies("pinned", dev, pin_src, pin_dst, bytes, FILL_PATTERN);
		if (bytes >= (256u << 10)) { /* what compression makes of the data (REMORA_COMPRESS) */
			time_copies("compressible", dev, src, dst, bytes, FILL_COMPRESSIBLE);
			time_copies("random", dev, src, dst, bytes, FILL_RANDOM);
		}
		fflush(stdout);
	}
	CHECK(cuMemFreeHost(pin_dst));
	CHECK(cuMemFreeHost(pin_src));
	CHECK(cuMemFree(dev));
	free(dst);
	free(src);
}

static void run_memset(size_t max_bytes)
{
	CUdeviceptr dev;
	uint32_t tail[4];
	CHECK(cuMemAlloc(&dev, max_bytes));
	for (size_t bytes = 4096; bytes <= max_bytes; bytes *= 16) {
		int reps = copy_reps(bytes);
		size_t words = bytes / 4;
		CHECK(cuMemsetD32(dev, 1, words)); /* warm-up */
		CHECK(cuCtxSynchronize());
		double t = now_us();
		for (int i = 0; i < reps; i++)
			CHECK(cuMemsetD32(dev, 0xc0ffee00u + (unsigned)i, words));
		CHECK(cuCtxSynchronize());
		double us = (now_us() - t) / reps;
		CHECK(cuMemcpyDtoH(tail, dev + bytes - sizeof tail, sizeof tail));
		for (int i = 0; i < 4; i++)
			if (tail[i] != 0xc0ffee00u + (unsigned)(reps - 1))
				die("memset: the last value set is not what the device holds");
		printf("memset.%zu.us=%.4f\nmemset.%zu.gbps=%.4f\n", bytes, us, bytes, bytes / us / 1e3);
	}
	CHECK(cuMemFree(dev));
}

static void run_event(long long n)
{
	CUevent ev;
	CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
	for (int i = 0; i < 100; i++) {
		CHECK(cuEventRecord(ev, NULL));
		CHECK(cuEventSynchronize(ev));
	}
	double t = now_us();
	for (long long i = 0; i < n; i++) {
		CHECK(cuEventRecord(ev, NULL));
		CHECK(cuEventSynchronize(ev));
	}
	printf("event_record_sync_us=%.4f\n", (now_us() - t) / (double)n);
	CHECK(cuEventDestroy(ev));
}

/* The host's own fmaf chain, stopped once x no longer moves (it then stays put). */
static float host_spin(long long iters)
{
	float x = 1.0f;
	for (long long i = 0; i < iters; i++) {
		float prev = x;
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
		if (x == prev)
			break;
	}
	return x;
}

/* Tells `remora bench` this client is set up (a byte on fd 3), then waits for everyone's
 * start (end of file on fd 4: the bench closes its end once all are ready). */
static void wait_for_go(void)
{
	char byte = 'r', sink;
	if (write(READY_FD, &byte, 1) != 1)
		die("cannot signal ready on fd 3");
	close(READY_FD);
	while (read(GO_FD, &sink, 1) > 0)
		;
}

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static void run_latency(CUmodule module, long long n)
{
	CUfunction empty;
	double *us = malloc((size_t)n * sizeof(*us));
	if (!us)
		die("latency: out of memory");
	CHECK(cuModuleGetFunction(&empty, module, "emptyKernel"));
	for (int i = 0; i < 100; i++) { /* warm-up */
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
		CHECK(cuCtxSynchronize());
	}
	wait_for_go();
	for (long long i = 0; i < n; i++) {
		double t = now_us();
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
		CHECK(cuCtxSynchronize());
		us[i] = now_us() - t;
	}
	qsort(us, (size_t)n, sizeof(*us), compare_doubles);
	printf("latency_p50_us=%.4f\n", us[n / 2]);
	printf("latency_p99_us=%.4f\n", us[(n * 99) / 100]);
	free(us);
}

#define MAX_LATENCY_THREADS 64

struct latency_thread {
	pthread_t thread;
	CUcontext ctx;
	CUfunction empty;
	long long n;
	pthread_barrier_t *start;
	double *us;
};

static void *latency_thread(void *arg)
{
	struct latency_thread *t = arg;
	CUstream s;
	CHECK(cuCtxSetCurrent(t->ctx));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int i = 0; i < 100; i++) { /* warm-up */
		CHECK(cuLaunchKernel(t->empty, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
		CHECK(cuStreamSynchronize(s));
	}
	pthread_barrier_wait(t->start);
	for (long long i = 0; i < t->n; i++) {
		double t0 = now_us();
		CHECK(cuLaunchKernel(t->empty, 1, 1, 1, 1, 1, 1, 0, s, NULL, NULL));
		CHECK(cuStreamSynchronize(s));
		t->us[i] = now_us() - t0;
	}
	CHECK(cuStreamDestroy(s));
	qsort(t->us, (size_t)t->n, sizeof(*t->us), compare_doubles);
	return NULL;
}

static void run_latency_threads(CUmodule module, long long threads, long long n)
{
	if (threads > MAX_LATENCY_THREADS)
		die("latency_threads: at most 64 threads");
	struct latency_thread t[MAX_LATENCY_THREADS];
	double p50[MAX_LATENCY_THREADS], p99[MAX_LATENCY_THREADS];
	pthread_barrier_t start;
	CUcontext ctx;
	CUfunction empty;
	CHECK(cuCtxGetCurrent(&ctx));
	CHECK(cuModuleGetFunction(&empty, module, "emptyKernel"));
	pthread_barrier_init(&start, NULL, (unsigned)threads);
	for (long long i = 0; i < threads; i++) {
		t[i] = (struct latency_thread){.ctx = ctx, .empty = empty, .n = n, .start = &start,
					       .us = malloc((size_t)n * sizeof(double))};
		if (!t[i].us || pthread_create(&t[i].thread, NULL, latency_thread, &t[i]))
			die("latency_threads: cannot start a thread");
	}
	for (long long i = 0; i < threads; i++) {
		pthread_join(t[i].thread, NULL);
		p50[i] = t[i].us[n / 2];
		p99[i] = t[i].us[(n * 99) / 100];
		free(t[i].us);
	}
	pthread_barrier_destroy(&start);
	qsort(p50, (size_t)threads, sizeof(*p50), compare_doubles);
	qsort(p99, (size_t)threads, sizeof(*p99), compare_doubles);
	printf("threads_p50_us=%.4f\n", p50[threads / 2]);
	printf("threads_p99_median_us=%.4f\n", p99[threads / 2]);
	printf("threads_p99_max_us=%.4f\n", p99[threads - 1]);
}

static void run_spin(CUmodule module, long long iters)
{
	CUfunction spin, empty;
	CUdeviceptr out;
	CUevent start, stop;
	CHECK(cuModuleGetFunction(&spin, module, "spinFma"));
	CHECK(cuModuleGetFunction(&empty, module, "emptyKernel"));
	CHECK(cuMemAlloc(&out, sizeof(float)));
	CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
	CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL));
	CHECK(cuCtxSynchronize());

	wait_for_go();
	void *params[] = { &out, &iters };
	double go_us = now_us();
	CHECK(cuEventRecord(start, NULL));
	CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	CHECK(cuEventRecord(stop, NULL));
	CHECK(cuEventSynchronize(stop));
	double wall_ms = (now_us() - go_us) / 1e3;
	float ms, result;
	CHECK(cuEventElapsedTime(&ms, start, stop));
	CHECK(cuMemcpyDtoH(&result, out, sizeof result));
	float expected = host_spin(iters);
	if (memcmp(&result, &expected, sizeof result) != 0) {
		fprintf(stderr, "bench_worker: spinFma gave %a, the host's chain %a\n", result, expected);
		exit(1);
	}
	printf("spin_ms=%.4f\n", ms);
	printf("spin_wall_ms=%.4f\n", wall_ms);
	CHECK(cuEventDestroy(stop));
	CHECK(cuEventDestroy(start));
	CHECK(cuMemFree(out));
}

static void run_graph(CUmodule module, long long nodes, long long launches)
{
	CUfunction empty;
	CUgraph graph;
	CUgraphExec exec;
	CUgraphNode prev = NULL, node;
	CHECK(cuModuleGetFunction(&empty, module, "emptyKernel"));
	CHECK(cuGraphCreate(&graph, 0));
	CUDA_KERNEL_NODE_PARAMS p = { 0 };
	p.func = empty;
	p.gridDimX = p.gridDimY = p.gridDimZ = 1;
	p.blockDimX = p.blockDimY = p.blockDimZ = 1;
	for (long long i = 0; i < nodes; i++, prev = node)
		CHECK(cuGraphAddKernelNode(&node, graph, prev ? &prev : NULL, prev ? 1 : 0, &p));
	CHECK(cuGraphInstantiate(&exec, graph, 0));
	CUstream stream;
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	CHECK(cuGraphUpload(exec, stream));
	for (int i = 0; i < 10; i++) /* warm-up */
		CHECK(cuGraphLaunch(exec, stream));
	for (int i = 0; i < 100; i++)
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
	CHECK(cuStreamSynchronize(stream));

	double t = now_us();
	for (long long i = 0; i < launches; i++)
		CHECK(cuGraphLaunch(exec, stream));
	double issued = now_us();
	CHECK(cuStreamSynchronize(stream));
	double done = now_us();
	printf("graph_launch_us=%.4f\n", (issued - t) / (double)launches);
	printf("graph_launch_drain_us=%.4f\n", (done - t) / (double)launches);

	t = now_us();
	for (long long i = 0; i < launches; i++)
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 1, 1, 1, 0, stream, NULL, NULL));
	issued = now_us();
	CHECK(cuStreamSynchronize(stream));
	printf("graph_async_launch_us=%.4f\n", (issued - t) / (double)launches);

	CHECK(cuGraphExecDestroy(exec));
	CHECK(cuGraphDestroy(graph));
	CHECK(cuStreamDestroy(stream));
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: bench_worker IMAGE info|launch|launch_streams|memcpy|memset|event|graph|spin|latency|latency_threads [ARGS]\n");
		return 2;
	}
	const char *section = argv[2];
	if (!strcmp(section, "info")) {
		run_info();
		return 0;
	}
	open_device();
	CUmodule module = load_image(argv[1]);
	if (!strcmp(section, "launch") && argc == 5)
		run_launch(module, parse_count(argv[3]), parse_count(argv[4]));
	else if (!strcmp(section, "memcpy") && argc == 4)
		run_memcpy((size_t)parse_count(argv[3]));
	else if (!strcmp(section, "memset") && argc == 4)
		run_memset((size_t)parse_count(argv[3]));
	else if (!strcmp(section, "event") && argc == 4)
		run_event(parse_count(argv[3]));
	else if (!strcmp(section, "graph") && argc == 5)
		run_graph(module, parse_count(argv[3]), parse_count(argv[4]));
	else if (!strcmp(section, "spin") && argc == 4)
		run_spin(module, parse_count(argv[3]));
	else if (!strcmp(section, "launch_streams") && argc == 4)
		run_launch_streams(module, parse_count(argv[3]));
	else if (!strcmp(section, "latency") && argc == 4)
		run_latency(module, parse_count(argv[3]));
	else if (!strcmp(section, "latency_threads") && argc == 5)
		run_latency_threads(module, parse_count(argv[3]), parse_count(argv[4]));
	else {
		fprintf(stderr, "bench_worker: unknown section or wrong arguments: %s\n", section);
		return 2;
	}
	CHECK(cuModuleUnload(module));
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuDevicePrimaryCtxRelease(0));
	return 0;
}
