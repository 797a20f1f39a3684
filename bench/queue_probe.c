/* queue_probe IMAGE [STREAMS [ITERS]]: on a GPU host, natively, what holds up a
 * context's hardware queues (docs/sharing.md). Each case puts a one-thread spinFma
 * kernel on each of STREAMS streams (default 128) of one context and prints the wall
 * time over one kernel's:
 *
 *   timed events, stream by stream   [record, kernel, record] per stream
 *   timed events, stops last         all starts, all kernels, then all stops
 *   kernel, kernel                   two kernels per stream (2x one kernel at best)
 *   kernel, memset                   a memset after each kernel
 *   kernel, untimed record           a CU_EVENT_DISABLE_TIMING record after each
 *   green contexts (4), ...          the first case over 4 green contexts of all SMs
 *   clients: poll / blocking / spin  a thread per stream, as remorad's client threads:
 *                                    start record, kernel, then wait for the stream by
 *                                    polling cuStreamQuery with sleeps, by a blocking-sync
 *                                    event, or by a spinning one, then the stop record
 *
 * Run with CUDA_DEVICE_MAX_CONNECTIONS=32 CUDA_MODULE_LOADING=EAGER to see a worker's setting. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_STREAMS 1024
#define GREEN_CONTEXTS 4

#define CHECK_PROGRAM "queue_probe"
#include "cuda_check.h"

enum pattern { TIMED, TIMED_STOPS_LAST, KERNEL_KERNEL, KERNEL_MEMSET, KERNEL_UNTIMED };
enum wait_style { WAIT_POLL, WAIT_BLOCKING_EVENT, WAIT_SPINNING_EVENT };

static CUfunction spin;
static long long iters;
static int nstreams;
static CUstream streams[MAX_STREAMS];
static CUevent starts[MAX_STREAMS], stops[MAX_STREAMS], untimed[MAX_STREAMS];
static CUdeviceptr out;
static double one_kernel_ms;

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void launch(int i)
{
	CUdeviceptr slot = out + 4 * (CUdeviceptr)i;
	void *params[] = {&slot, &iters};
	CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, streams[i], params, NULL));
}

/* Issues pattern p on the first n streams from this thread; the wall time until all are done. */
static double run_pattern(enum pattern p, int n)
{
	double t = now_ms();
	for (int i = 0; i < n; i++) {
		if (p == TIMED || p == TIMED_STOPS_LAST)
			CHECK(cuEventRecord(starts[i], streams[i]));
		if (p != TIMED_STOPS_LAST) {
			launch(i);
			if (p == TIMED)
				CHECK(cuEventRecord(stops[i], streams[i]));
			if (p == KERNEL_KERNEL)
				launch(i);
			if (p == KERNEL_MEMSET)
				CHECK(cuMemsetD32Async(out + 4 * (CUdeviceptr)i, 0, 1, streams[i]));
			if (p == KERNEL_UNTIMED)
				CHECK(cuEventRecord(untimed[i], streams[i]));
		}
	}
	if (p == TIMED_STOPS_LAST) {
		for (int i = 0; i < n; i++)
			launch(i);
		for (int i = 0; i < n; i++)
			CHECK(cuEventRecord(stops[i], streams[i]));
	}
	for (int i = 0; i < n; i++)
		CHECK(cuStreamSynchronize(streams[i]));
	return now_ms() - t;
}

struct client {
	int index;
	enum wait_style wait;
	CUcontext ctx;
	pthread_barrier_t *go;
	double wall_ms;
};

static void *client_main(void *arg)
{
	struct client *c = arg;
	CHECK(cuCtxSetCurrent(c->ctx));
	CUevent marker;
	CHECK(cuEventCreate(&marker, CU_EVENT_DISABLE_TIMING |
					     (c->wait == WAIT_BLOCKING_EVENT ? CU_EVENT_BLOCKING_SYNC : 0)));
	pthread_barrier_wait(c->go);
	double t = now_ms();
	CUstream st = streams[c->index];
	CHECK(cuEventRecord(starts[c->index], st));
	launch(c->index);
	if (c->wait == WAIT_POLL) {
		long sleep_ns = 10000;
		CUresult r;
		while ((r = cuStreamQuery(st)) == CUDA_ERROR_NOT_READY) {
			nanosleep(&(struct timespec){0, sleep_ns}, NULL);
			if (sleep_ns < 500000)
				sleep_ns *= 2;
		}
		CHECK(r);
	} else {
		CHECK(cuEventRecord(marker, st));
		CHECK(cuEventSynchronize(marker));
	}
	CHECK(cuEventRecord(stops[c->index], st));
	CHECK(cuEventSynchronize(stops[c->index]));
	c->wall_ms = now_ms() - t;
	CHECK(cuEventDestroy(marker));
	return NULL;
}

/* One thread per stream, released together; the mean and slowest wall time. */
static void run_clients(CUcontext ctx, enum wait_style wait, double *mean, double *slowest)
{
	static struct client clients[MAX_STREAMS];
	static pthread_t threads[MAX_STREAMS];
	pthread_barrier_t go;
	pthread_barrier_init(&go, NULL, (unsigned)nstreams);
	for (int i = 0; i < nstreams; i++) {
		clients[i] = (struct client){.index = i, .wait = wait, .ctx = ctx, .go = &go};
		if (pthread_create(&threads[i], NULL, client_main, &clients[i])) {
			fprintf(stderr, "queue_probe: cannot start client thread %d\n", i);
			exit(1);
		}
	}
	*mean = *slowest = 0;
	for (int i = 0; i < nstreams; i++) {
		pthread_join(threads[i], NULL);
		*mean += clients[i].wall_ms / nstreams;
		*slowest = clients[i].wall_ms > *slowest ? clients[i].wall_ms : *slowest;
	}
	pthread_barrier_destroy(&go);
}

static void report(const char *what, double ms)
{
	printf("%-36s %9.1f ms  %5.2fx one kernel\n", what, ms, ms / one_kernel_ms);
}

static void make_streams(CUgreenCtx *green, int ngreen)
{
	for (int i = 0; i < nstreams; i++) {
		if (ngreen)
			CHECK(cuGreenCtxStreamCreate(&streams[i], green[i % ngreen], CU_STREAM_NON_BLOCKING, 0));
		else
			CHECK(cuStreamCreate(&streams[i], CU_STREAM_NON_BLOCKING));
	}
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 4) {
		fprintf(stderr, "usage: queue_probe IMAGE [STREAMS [ITERS]]\n");
		return 2;
	}
	nstreams = argc > 2 ? atoi(argv[2]) : 128;
	iters = argc > 3 ? atoll(argv[3]) : 20000000;
	if (nstreams < 1 || nstreams > MAX_STREAMS || iters < 1) {
		fprintf(stderr, "queue_probe: STREAMS 1..%d, ITERS > 0\n", MAX_STREAMS);
		return 2;
	}
	CUdevice dev;
	CUcontext ctx;
	CUlibrary library;
	CUkernel kernel;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	/* A library's kernel launches in any context of the device, green ones included. */
	CHECK(cuLibraryLoadFromFile(&library, argv[1], NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuLibraryGetKernel(&kernel, library, "spinFma"));
	spin = (CUfunction)kernel;
	CHECK(cuMemAlloc(&out, 4 * (size_t)nstreams));
	for (int i = 0; i < nstreams; i++) {
		CHECK(cuEventCreate(&starts[i], CU_EVENT_DEFAULT));
		CHECK(cuEventCreate(&stops[i], CU_EVENT_DEFAULT));
		CHECK(cuEventCreate(&untimed[i], CU_EVENT_DISABLE_TIMING));
	}
	make_streams(NULL, 0);
	run_pattern(KERNEL_UNTIMED, 1); /* warm-up */
	one_kernel_ms = run_pattern(TIMED, 1);
	const char *max_conn = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
	printf("%d streams, one kernel %.1f ms, CUDA_DEVICE_MAX_CONNECTIONS=%s\n", nstreams, one_kernel_ms,
	       max_conn ? max_conn : "(unset)");

	report("timed events, stream by stream", run_pattern(TIMED, nstreams));
	report("timed events, stops last", run_pattern(TIMED_STOPS_LAST, nstreams));
	report("kernel, kernel (2x at best)", run_pattern(KERNEL_KERNEL, nstreams));
	report("kernel, memset", run_pattern(KERNEL_MEMSET, nstreams));
	report("kernel, untimed record", run_pattern(KERNEL_UNTIMED, nstreams));

	static const char *const waits[] = {"poll", "blocking event", "spinning event"};
	for (int w = WAIT_POLL; w <= WAIT_SPINNING_EVENT; w++) {
		double mean, slowest;
		char what[64];
		run_clients(ctx, (enum wait_style)w, &mean, &slowest);
		snprintf(what, sizeof what, "clients, %s: mean", waits[w]);
		report(what, mean);
		snprintf(what, sizeof what, "clients, %s: slowest", waits[w]);
		report(what, slowest);
	}

	CUdevResource sms;
	CUdevResourceDesc desc;
	CUgreenCtx green[GREEN_CONTEXTS];
	if (cuDeviceGetDevResource(dev, &sms, CU_DEV_RESOURCE_TYPE_SM) != CUDA_SUCCESS) {
		printf("green contexts: not supported by this driver\n");
		return 0;
	}
	CHECK(cuDevResourceGenerateDesc(&desc, &sms, 1));
	for (int k = 0; k < GREEN_CONTEXTS; k++)
		CHECK(cuGreenCtxCreate(&green[k], desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
	for (int i = 0; i < nstreams; i++)
		CHECK(cuStreamDestroy(streams[i]));
	make_streams(green, GREEN_CONTEXTS);
	report("green contexts (4), stream by stream", run_pattern(TIMED, nstreams));
	return 0;
}
