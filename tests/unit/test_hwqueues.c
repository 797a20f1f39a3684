/* The test driver's hardware queues (tests/testdriver/stream.c), run directly on
 * it as libcuda.so.1 with CUDA_DEVICE_MAX_CONNECTIONS as meson sets it.
 *
 *   test_hwqueues CHANNELS
 *
 * CHANNELS is the number of channels the driver should have made of that
 * setting, 0 where it should have none (unset or invalid: streams independent).
 * Each case runs in a fresh context on three streams per channel (streams
 * i, i + C and i + 2C share a channel) with kernels that sleep T, and checks the
 * wall time in units of T against the H200's behaviour (or, with no channels,
 * that of independent streams).  At the end no thread of the driver is left.
 *
 * Load can only make things slower than the model: a kernel never sleeps less
 * than T, but every hand-over between the driver's threads waits for a CPU, and
 * on a busy machine (two cores, the suite and more) a case took 5.5 T where the
 * model gives 3.  So a result faster than the model, or a query answer the
 * model forbids, fails at once; one that only a slow machine explains (too slow,
 * or a query made too late to tell) makes the attempt late, and the case runs
 * again in a fresh context, up to ATTEMPTS times, failing only if every attempt
 * is late.  The bounds stay tight (-0.1 T, +0.5 T): a model that serializes too
 * much or too little is off by a whole T on every attempt.
 */
#include <cuda.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define T_MS 150
#define MAX_STREAMS 96
#define ATTEMPTS 5

/* The test driver offers the catalogue kernels an image names; this is no real PTX. */
static const char image[] = ".version 8.0\n.target sm_90\n.visible .entry sleepNs(.param .u64 ns) { ret; }\n";

static int failures;
static bool last_attempt;   /* a late check fails only on a case's last attempt */
static bool late;           /* this attempt had a late check */
static int channels;        /* C, as expected */
static int stream_count;    /* 3C, or 6 with no channels */
static CUfunction sleep_ns;
static CUstream streams[MAX_STREAMS];

#define CHECK(call)                                                                              \
	do {                                                                                     \
		CUresult r_ = (call);                                                            \
		if (r_ != CUDA_SUCCESS) {                                                        \
			fprintf(stderr, "test_hwqueues: %s:%d: %s failed: %d\n", __FILE__, __LINE__, \
				#call, (int)r_);                                                 \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int thread_count(void)
{
	DIR *d = opendir("/proc/self/task");
	int n = 0;
	for (struct dirent *e; d && (e = readdir(d));)
		n += e->d_name[0] != '.';
	if (d)
		closedir(d);
	return n;
}

static void launch_sleep(CUstream s)
{
	unsigned long long ns = T_MS * 1000000ull;
	void *params[] = {&ns};
	CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
}

/* A fresh context with its module and stream_count streams, created in order. */
static CUcontext open_case(void)
{
	CUcontext ctx;
	CUmodule mod;
	CHECK(cuCtxCreate(&ctx, NULL, 0, 0));
	CHECK(cuModuleLoadData(&mod, image));
	CHECK(cuModuleGetFunction(&sleep_ns, mod, "sleepNs"));
	for (int i = 0; i < stream_count; i++)
		CHECK(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
	return ctx;
}

/* Prints a timing check, ok, late (slow, again on a later attempt) or FAIL. */
static void report(bool ok, bool slow, const char *what)
{
	if (ok) {
		printf("ok   %s\n", what);
	} else if (slow && !last_attempt) {
		printf("late %s\n", what);
		late = true;
	} else {
		printf("FAIL %s\n", what);
		failures++;
	}
}

/* Checks the wall time since t0 against want (with channels) or want_off (without), in T. */
static void expect_wall(const char *what, double t0, double want, double want_off)
{
	double took = (now_ms() - t0) / T_MS, w = channels ? want : want_off;
	char line[200];
	snprintf(line, sizeof line, "%s: %.2f T (want %.0f)", what, took, w);
	report(took > w - 0.1 && took < w + 0.5, took >= w + 0.5, line);
}

static void expect(int cond, const char *what)
{
	printf("%s %s\n", cond ? "ok  " : "FAIL", what);
	failures += !cond;
}

/* [record timed start; kernel; record timed stop] per stream, stream by stream:
 * each stop holds its channel until its kernel ends. Then the same with the stop
 * records issued after all the kernels: nothing waits. */
static void case_timed_records(int stops_last)
{
	CUcontext ctx = open_case();
	CUevent start[MAX_STREAMS], stop[MAX_STREAMS];
	for (int i = 0; i < stream_count; i++) {
		CHECK(cuEventCreate(&start[i], CU_EVENT_DEFAULT));
		CHECK(cuEventCreate(&stop[i], CU_EVENT_DEFAULT));
	}
	double t0 = now_ms();
	for (int i = 0; i < stream_count; i++) {
		CHECK(cuEventRecord(start[i], streams[i]));
		launch_sleep(streams[i]);
		if (!stops_last)
			CHECK(cuEventRecord(stop[i], streams[i]));
	}
	for (int i = 0; stops_last && i < stream_count; i++)
		CHECK(cuEventRecord(stop[i], streams[i]));
	if (channels && !stops_last) {
		/* The last stream's records and kernel still sit in its channel, behind the
		 * kernels of two streams before it: its start event and the stream count as
		 * unfinished until 2 T after t0.  A query answered later proves nothing. */
		struct timespec half = {0, T_MS * 500000L};
		nanosleep(&half, NULL);
		CUstream last = streams[stream_count - 1];
		bool event_busy = cuEventQuery(start[stream_count - 1]) == CUDA_ERROR_NOT_READY;
		bool stream_busy = cuStreamQuery(last) == CUDA_ERROR_NOT_READY;
		bool in_time = now_ms() - t0 < 1.9 * T_MS;
		report(event_busy, !in_time, "cuEventQuery of a record still in its channel: not ready");
		report(stream_busy, !in_time, "cuStreamQuery of a stream whose ops are in its channel: not ready");
	}
	for (int i = 0; i < stream_count; i++)
		CHECK(cuEventSynchronize(stop[i]));
	expect_wall(stops_last ? "[start; kernel] per stream, then every stop" : "[start; kernel; stop] per stream", t0,
		    stops_last ? 1 : 3, 1);
	float ms;
	CHECK(cuEventElapsedTime(&ms, start[0], stop[0]));
	char line[200];
	snprintf(line, sizeof line, "the first stream's events time its kernel: %.2f T", ms / T_MS);
	report(ms >= T_MS * 0.95 && ms < T_MS * 1.5, ms >= T_MS * 1.5, line);
	for (int i = 0; i < stream_count; i++) {
		CHECK(cuEventDestroy(start[i]));
		CHECK(cuEventDestroy(stop[i]));
	}
	CHECK(cuCtxDestroy(ctx));
}

/* [kernel; X] per stream, X chosen by what. */
enum second { KERNEL, UNTIMED_RECORD, MEMSET };

static void case_kernel_then(int what)
{
	CUcontext ctx = open_case();
	CUevent done[MAX_STREAMS];
	CUdeviceptr p;
	CHECK(cuMemAlloc(&p, 4096 * MAX_STREAMS));
	double t0 = now_ms();
	for (int i = 0; i < stream_count; i++) {
		launch_sleep(streams[i]);
		if (what == KERNEL)
			launch_sleep(streams[i]);
		else if (what == MEMSET)
			CHECK(cuMemsetD8Async(p + 4096 * i, (unsigned char)i, 4096, streams[i]));
		else {
			CHECK(cuEventCreate(&done[i], CU_EVENT_DISABLE_TIMING));
			CHECK(cuEventRecord(done[i], streams[i]));
		}
	}
	CHECK(cuCtxSynchronize());
	if (what == KERNEL)
		expect_wall("[kernel; kernel] per stream", t0, 4, 2);
	else if (what == MEMSET)
		expect_wall("[kernel; memset] per stream", t0, 3, 1);
	else
		expect_wall("[kernel; record untimed event] per stream", t0, 1, 1);
	for (int i = 0; what == UNTIMED_RECORD && i < stream_count; i++)
		CHECK(cuEventDestroy(done[i]));
	CHECK(cuMemFree(p));
	CHECK(cuCtxDestroy(ctx));
}

/* A stream-wait on an incomplete event holds the channel: a kernel of a third
 * stream behind it starts only when the awaited kernel ends. */
static void case_stream_wait(int unused)
{
	(void)unused;
	CUcontext ctx = open_case();
	int c = channels ? channels : 1;
	CUstream a = streams[0], waiter = streams[c], behind = streams[2 * c];
	CUevent e;
	CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	double t0 = now_ms();
	launch_sleep(a);
	CHECK(cuEventRecord(e, a));
	CHECK(cuStreamWaitEvent(waiter, e, 0));
	launch_sleep(behind);
	CHECK(cuStreamSynchronize(behind));
	expect_wall("a kernel queued behind a stream-wait on a running kernel", t0, 2, 1);
	CHECK(cuEventDestroy(e));
	CHECK(cuCtxDestroy(ctx));
}

/* Teardown with ops still in the channels: cuStreamDestroy and cuCtxDestroy drain them. */
static void case_teardown(int unused)
{
	(void)unused;
	CUcontext ctx = open_case();
	CUevent stop;
	CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));
	double t0 = now_ms();
	for (int i = 0; i < stream_count; i++) {
		launch_sleep(streams[i]);
		CHECK(cuEventRecord(stop, streams[i]));
	}
	CHECK(cuStreamDestroy(streams[stream_count - 1]));
	CHECK(cuEventDestroy(stop));
	CHECK(cuCtxDestroy(ctx));
	expect_wall("cuStreamDestroy and cuCtxDestroy with work queued in the channels", t0, 3, 1);
}

/* Runs a case again while it is late, ATTEMPTS times at most. */
static void run_case(void (*run)(int), int arg)
{
	for (int attempt = 1;; attempt++) {
		late = false;
		last_attempt = attempt == ATTEMPTS;
		run(arg);
		if (!late)
			break;
		printf("     (attempt %d of %d late, which load alone can cause: again)\n", attempt, ATTEMPTS);
	}
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc != 2) {
		fprintf(stderr, "usage: test_hwqueues CHANNELS (0: none expected)\n");
		return 2;
	}
	channels = atoi(argv[1]);
	stream_count = channels ? 3 * channels : 6;
	if (channels < 0 || stream_count > MAX_STREAMS)
		return 2;
	CHECK(cuInit(0));
	const char *env = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	printf("CUDA_DEVICE_MAX_CONNECTIONS=%s: %d channels expected, %d streams, T = %d ms\n", env ? env : "(unset)",
	       channels, stream_count, T_MS);
	int threads = thread_count();
	run_case(case_timed_records, 0);
	run_case(case_timed_records, 1);
	run_case(case_kernel_then, KERNEL);
	run_case(case_kernel_then, UNTIMED_RECORD);
	run_case(case_kernel_then, MEMSET);
	run_case(case_stream_wait, 0);
	run_case(case_teardown, 0);
	expect(thread_count() == threads, "every stream worker and channel dispatcher has ended");
	return failures ? 1 : 0;
}
