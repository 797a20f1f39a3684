/* drv_hostfn IMAGE [hang]: host functions in stream order.
 *  - cuLaunchHostFunc and cuStreamAddCallback between kernels on one stream run in order,
 *    each after the work queued before it (a 50 ms kernel between two of them);
 *  - the work queued after a host function waits until it returns: an event recorded after a
 *    100 ms function is not complete while it runs, and is timed at least 100 ms after one
 *    recorded before it; what the function wrote in host memory is there once the event is;
 *  - a callback is told its stream and CUDA_SUCCESS;
 *  - many functions on two streams: each stream's run in its order, none lost;
 *  - a host function's own CUDA call gets an error, not a deadlock (through Remora
 *    CUDA_ERROR_NOT_PERMITTED; a GPU's driver may allow what CUDA forbids).
 * "hang": queues a function that sleeps 10 minutes, prints "pending" when it starts and
 * waits for its stream (tests/robustness: a client killed meanwhile). */
#include "drv_common.h"

#include <pthread.h>
#include <unistd.h>

#define N 1024
#define MANY 200

static char order[64];
static int norder;
static double times[8];
static volatile int slow_done;
static int slow_queried; /* set once the event after slow() was queried */
static CUresult inner_result = CUDA_SUCCESS;
static CUstream told_stream;
static CUresult told_status = CUDA_ERROR_UNKNOWN;
static int seen[2][MANY];
static int nseen[2];
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;

static void CUDA_CB mark(void *arg)
{
	char c = (char)(uintptr_t)arg;
	times[c - 'A'] = drv_now_ms();
	order[norder++] = c;
}

static void CUDA_CB callback(CUstream stream, CUresult status, void *arg)
{
	told_stream = stream;
	told_status = status;
	mark(arg);
}

/* Runs until the program has queried the event after it (at most 10 s), so that the query
 * finds the function running however loaded the machine is. */
static void CUDA_CB slow(void *arg)
{
	(void)arg;
	for (int i = 0; i < 1000 && !__atomic_load_n(&slow_queried, __ATOMIC_ACQUIRE); i++)
		usleep(10 * 1000);
	usleep(100 * 1000);
	slow_done = 1;
}

static void CUDA_CB calls_cuda(void *arg)
{
	CUdeviceptr p;
	inner_result = cuMemAlloc(&p, 64);
	if (inner_result == CUDA_SUCCESS)
		cuMemFree(p);
	(void)arg;
}

static void CUDA_CB count(void *arg)
{
	uintptr_t v = (uintptr_t)arg;
	int s = (int)(v >> 16), i = (int)(v & 0xffff);
	pthread_mutex_lock(&seen_lock);
	seen[s][nseen[s]++] = i;
	pthread_mutex_unlock(&seen_lock);
}

static void CUDA_CB hang(void *arg)
{
	(void)arg;
	printf("pending\n");
	fflush(stdout);
	sleep(600);
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE [hang]\n", argv[0]);
		return 2;
	}
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction fill, sleep_ns;
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CHECK(cuModuleGetFunction(&sleep_ns, module, "sleepNs"));
	CUstream s1, s2;
	CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
	CUdeviceptr buf;
	CHECK(cuMemAlloc(&buf, N * sizeof(unsigned)));

	if (argc > 2 && !strcmp(argv[2], "hang")) {
		CHECK(cuLaunchHostFunc(s1, hang, NULL));
		CHECK(cuStreamSynchronize(s1));
		return 0;
	}

	/* In order, each after the work before it. */
	unsigned v = 7;
	int n = N;
	unsigned long long ns = 50ull * 1000 * 1000;
	void *fill_params[] = {&buf, &v, &n};
	void *sleep_params[] = {&ns};
	CHECK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, s1, fill_params, NULL));
	CHECK(cuLaunchHostFunc(s1, mark, (void *)(uintptr_t)'A'));
	CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, s1, sleep_params, NULL));
	CHECK(cuLaunchHostFunc(s1, mark, (void *)(uintptr_t)'B'));
	CHECK(cuStreamAddCallback(s1, callback, (void *)(uintptr_t)'C', 0));
	CHECK(cuStreamSynchronize(s1));
	order[norder] = 0;
	printf("order: %s\n", order);
	EXPECT(!strcmp(order, "ABC"), "host functions ran as %s", order);
	EXPECT(times[1] - times[0] >= 45.0, "B ran %.1f ms after A, across a 50 ms kernel", times[1] - times[0]);
	EXPECT(told_stream == s1 && told_status == CUDA_SUCCESS, "the callback was told stream %p, status %d",
	       (void *)told_stream, (int)told_status);
	printf("callback told its stream and success: %s\n", told_stream == s1 && told_status == CUDA_SUCCESS ? "yes" : "no");
	printf("time_between_ms %.1f\n", times[1] - times[0]);

	/* Later work waits for the function. */
	CUevent before, after;
	CHECK(cuEventCreate(&before, 0));
	CHECK(cuEventCreate(&after, 0));
	CHECK(cuEventRecord(before, s1));
	CHECK(cuLaunchHostFunc(s1, slow, NULL));
	CHECK(cuEventRecord(after, s1));
	usleep(20 * 1000);
	CUresult q = cuEventQuery(after);
	__atomic_store_n(&slow_queried, 1, __ATOMIC_RELEASE);
	EXPECT(q == CUDA_ERROR_NOT_READY, "the event after a running host function says %s", drv_error_name(q));
	CHECK(cuEventSynchronize(after));
	EXPECT(slow_done, "the event completed before the host function returned");
	float ms = 0;
	CHECK(cuEventElapsedTime(&ms, before, after));
	EXPECT(ms >= 95.0f, "the events around a 100 ms host function are %.1f ms apart", ms);
	printf("later work waited for the host function: %s\n", slow_done && ms >= 95.0f ? "yes" : "no");
	printf("time_host_function_ms %.1f\n", ms);

	/* Many, on two streams. */
	for (int i = 0; i < MANY; i++) {
		CHECK(cuLaunchHostFunc(s1, count, (void *)(uintptr_t)i));
		CHECK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, s2, fill_params, NULL));
		CHECK(cuLaunchHostFunc(s2, count, (void *)(uintptr_t)(1 << 16 | i)));
	}
	CHECK(cuCtxSynchronize());
	int in_order = nseen[0] == MANY && nseen[1] == MANY;
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < nseen[s]; i++)
			in_order &= seen[s][i] == i;
	EXPECT(in_order, "%d and %d host functions ran, in order: %d", nseen[0], nseen[1], in_order);
	printf("%d host functions on two streams, each stream's in order: %s\n", 2 * MANY, in_order ? "yes" : "no");

	/* A host function that calls CUDA. */
	CHECK(cuLaunchHostFunc(s1, calls_cuda, NULL));
	CHECK(cuStreamSynchronize(s1));
	/* Natively whatever the driver gives (the test driver: no current context there). */
	if (getenv("REMORA_SERVER"))
		EXPECT(inner_result == CUDA_ERROR_NOT_PERMITTED, "through Remora, a CUDA call from a host function gave %s",
		       drv_error_name(inner_result));
	EXPECT_RESULT(cuLaunchHostFunc(s1, NULL, NULL), CUDA_ERROR_INVALID_VALUE);
	EXPECT_RESULT(cuStreamAddCallback(s1, callback, NULL, 1), CUDA_ERROR_INVALID_VALUE);

	/* The device's work still right. */
	unsigned host[N];
	CHECK(cuMemcpyDtoH(host, buf, sizeof host));
	int ok = 1;
	for (int i = 0; i < N; i++)
		ok &= host[i] == 7;
	EXPECT(ok, "the buffer filled around the host functions is wrong");
	CHECK(cuEventDestroy(before));
	CHECK(cuEventDestroy(after));
	CHECK(cuMemFree(buf));
	CHECK(cuStreamDestroy(s1));
	CHECK(cuStreamDestroy(s2));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
