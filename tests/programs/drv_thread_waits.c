/* drv_thread_waits IMAGE ROUNDS: each thread's synchronize waits for its own work, while
 * other threads wait for theirs. The main thread synchronizes first (remorad gives each
 * client thread's channel its own word to wait by, backend/gpu/stream_wait.h), then four
 * threads each ROUNDS times launch sleepNs of a few microseconds and fillU32 of the
 * round's number on a stream of their own, synchronize it (by stream, by context or by
 * an event recorded after the fill, in turn), and check that the stream is idle and the
 * buffer holds the round's number: a wait that ended early would see either undone. */
#include <pthread.h>

#include "drv_common.h"

#define THREADS 4
#define WORDS 256

static CUcontext ctx;
static CUfunction sleep_ns, fill;
static long rounds;

static void *waiter(void *arg)
{
	long id = (long)(intptr_t)arg;
	CHECK(cuCtxSetCurrent(ctx));
	CUstream s;
	CUevent done;
	CUdeviceptr buf;
	unsigned host[WORDS];
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING));
	CHECK(cuMemAlloc(&buf, sizeof(host)));
	int n = WORDS;
	for (long r = 1; r <= rounds; r++) {
		unsigned long long ns = 2000 + 1000 * (unsigned long long)id;
		unsigned v = (unsigned)(id << 24 | r);
		void *sleep_params[] = {&ns};
		void *fill_params[] = {&buf, &v, &n};
		CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, s, sleep_params, NULL));
		CHECK(cuLaunchKernel(fill, 1, 1, 1, WORDS, 1, 1, 0, s, fill_params, NULL));
		switch (r % 3) {
		case 0: CHECK(cuStreamSynchronize(s)); break;
		case 1: CHECK(cuCtxSynchronize()); break;
		default:
			CHECK(cuEventRecord(done, s));
			CHECK(cuEventSynchronize(done));
		}
		CUresult q = cuStreamQuery(s);
		EXPECT(q == CUDA_SUCCESS, "thread %ld round %ld: the stream is %s after its wait", id, r, drv_error_name(q));
		CHECK(cuMemcpyDtoH(host, buf, sizeof(host)));
		EXPECT(host[0] == v && host[WORDS - 1] == v, "thread %ld round %ld: %#x in the buffer, not %#x", id, r,
		       host[0], v);
	}
	CHECK(cuMemFree(buf));
	CHECK(cuEventDestroy(done));
	CHECK(cuStreamDestroy(s));
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s IMAGE ROUNDS\n", argv[0]);
		return 2;
	}
	rounds = strtol(argv[2], NULL, 10);
	drv_open_device0();
	CHECK(cuCtxGetCurrent(&ctx));
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&sleep_ns, module, "sleepNs"));
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	unsigned long long ns = 1000;
	void *params[] = {&ns};
	CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	CHECK(cuCtxSynchronize()); /* the main channel waits before the threads' channels open */
	pthread_t t[THREADS];
	for (long i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, waiter, (void *)(intptr_t)i)) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	printf("thread waits ok: %d threads, %ld rounds each\n", THREADS, rounds);
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
