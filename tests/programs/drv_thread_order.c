/* drv_thread_order IMAGE ROUNDS: work one thread queues comes before work another thread
 * queues after it on the same stream, after it through the legacy stream, and after it
 * through an event, while threads' work on their own streams stays unordered (rpc.c keys
 * its fences by stream and event). Each round thread A queues a long kernel and then a
 * fill with 1, and only then lets thread B queue a fill of the same buffer with 2, which
 * must come last: the buffer must read 2. Thread B also keeps a stream of its own busy
 * meanwhile, whose fills must read back as queued. In two more cases B queues nothing but
 * waits for A's work, synchronizing the stream or the event A recorded after it (keyed
 * fences too): the wait must cover that work, so the stream or event then reads as done
 * and the buffer as A's 1 (read by a copy on the legacy stream, which does not wait for
 * A's non-blocking stream). In the last two B copies on A's stream instead of filling:
 * 2s in, which must land after A's fill, and the buffer out, which must read A's 1. */
#include <pthread.h>

#include "drv_common.h"

#define WORDS 256

enum { SAME_STREAM, LEGACY_STREAM, EVENT, SYNC_STREAM, SYNC_EVENT, COPY_IN, COPY_OUT, CASES };
static const char *const case_name[CASES] = {"same stream",       "legacy stream", "event",
					     "stream synchronize", "event synchronize", "async copy in",
					     "async copy out"};

static CUcontext ctx;
static CUfunction sleep_ns, fill;
static CUdeviceptr buf;
static CUstream shared;
static CUevent a_done;
static int a_queued, b_done;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static int rounds;

static void launch_fill(CUstream s, CUdeviceptr d, unsigned v)
{
	unsigned n = WORDS;
	void *params[] = {&d, &v, &n};
	CHECK(cuLaunchKernel(fill, 1, 1, 1, WORDS, 1, 1, 0, s, params, NULL));
}

static void await_flag(int *flag, int want)
{
	pthread_mutex_lock(&lock);
	while (*flag != want)
		pthread_cond_wait(&changed, &lock);
	pthread_mutex_unlock(&lock);
}

static void set_flag(int *flag, int v)
{
	pthread_mutex_lock(&lock);
	*flag = v;
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
}

static void *thread_a(void *arg)
{
	(void)arg;
	CHECK(cuCtxSetCurrent(ctx));
	CUstream own; /* blocking: the legacy stream waits for it */
	CHECK(cuStreamCreate(&own, CU_STREAM_DEFAULT));
	CUstream own_unjoined; /* non-blocking: a copy on the legacy stream does not wait for it */
	CHECK(cuStreamCreate(&own_unjoined, CU_STREAM_NON_BLOCKING));
	unsigned long long ns = 2000000;
	for (int r = 0; r < rounds * CASES; r++) {
		int c = r % CASES;
		CUstream s = c == SAME_STREAM || c == SYNC_STREAM || c == COPY_IN || c == COPY_OUT ? shared
			     : c == SYNC_EVENT                                                ? own_unjoined
											      : own;
		void *params[] = {&ns};
		CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
		launch_fill(s, buf, 1);
		if (c == EVENT || c == SYNC_EVENT)
			CHECK(cuEventRecord(a_done, s));
		set_flag(&a_queued, r + 1); /* queued and returned: B may go */
		await_flag(&b_done, r + 1);
	}
	CHECK(cuStreamSynchronize(own));
	CHECK(cuStreamSynchronize(own_unjoined));
	CHECK(cuStreamDestroy(own));
	CHECK(cuStreamDestroy(own_unjoined));
	return NULL;
}

static void *thread_b(void *arg)
{
	(void)arg;
	CHECK(cuCtxSetCurrent(ctx));
	CUstream own, mine;
	CHECK(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamCreate(&mine, CU_STREAM_NON_BLOCKING));
	CUdeviceptr side;
	CHECK(cuMemAlloc(&side, WORDS * sizeof(unsigned)));
	unsigned host[WORDS];
	for (int r = 0; r < rounds * CASES; r++) {
		int c = r % CASES;
		await_flag(&a_queued, r + 1);
		launch_fill(mine, side, 100 + r); /* its own stream: needs nothing of A's */
		if (c == SYNC_STREAM || c == SYNC_EVENT || c == COPY_OUT) {
			CUresult done = CUDA_SUCCESS;
			if (c == SYNC_STREAM) {
				CHECK(cuStreamSynchronize(shared));
				done = cuStreamQuery(shared);
			} else if (c == SYNC_EVENT) {
				CHECK(cuEventSynchronize(a_done));
				done = cuEventQuery(a_done);
			}
			EXPECT(done == CUDA_SUCCESS, "round %d, %s: A's work not done after the wait (%d)", r,
			       case_name[c], (int)done);
			if (c == COPY_OUT) {
				CHECK(cuMemcpyDtoHAsync(host, buf, sizeof(host), shared));
				CHECK(cuStreamSynchronize(shared));
			} else {
				CHECK(cuMemcpyDtoH(host, buf, sizeof(host)));
			}
			EXPECT(host[0] == 1 && host[WORDS - 1] == 1, "round %d, %s: the wait returned before A's fill (%u)",
			       r, case_name[c], host[0]);
			CHECK(cuMemsetD32(buf, 2, WORDS)); /* the next round's A writes 1 over it */
			CHECK(cuStreamSynchronize(mine));
			CHECK(cuMemcpyDtoH(host, side, sizeof(host)));
			EXPECT(host[0] == 100u + (unsigned)r, "round %d: B's own stream gave %u", r, host[0]);
			set_flag(&b_done, r + 1);
			continue;
		}
		if (c == COPY_IN) {
			for (int i = 0; i < WORDS; i++)
				host[i] = 2;
			CHECK(cuMemcpyHtoDAsync(buf, host, sizeof(host), shared));
			CHECK(cuStreamSynchronize(shared));
		} else if (c == SAME_STREAM) {
			launch_fill(shared, buf, 2);
			CHECK(cuStreamSynchronize(shared));
		} else if (c == LEGACY_STREAM) {
			launch_fill(CU_STREAM_LEGACY, buf, 2);
			CHECK(cuStreamSynchronize(CU_STREAM_LEGACY));
		} else {
			CHECK(cuStreamWaitEvent(own, a_done, 0));
			launch_fill(own, buf, 2);
			CHECK(cuStreamSynchronize(own));
		}
		CHECK(cuMemcpyDtoH(host, buf, sizeof(host)));
		EXPECT(host[0] == 2 && host[WORDS - 1] == 2, "round %d, %s: B's fill ran before A's (%u)", r,
		       case_name[c], host[0]);
		CHECK(cuStreamSynchronize(mine));
		CHECK(cuMemcpyDtoH(host, side, sizeof(host)));
		EXPECT(host[0] == 100u + (unsigned)r, "round %d: B's own stream gave %u", r, host[0]);
		set_flag(&b_done, r + 1);
	}
	CHECK(cuMemFree(side));
	CHECK(cuStreamDestroy(own));
	CHECK(cuStreamDestroy(mine));
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s IMAGE ROUNDS\n", argv[0]);
		return 2;
	}
	rounds = atoi(argv[2]);
	drv_open_device0();
	CHECK(cuCtxGetCurrent(&ctx));
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&sleep_ns, module, "sleepNs"));
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CHECK(cuEventCreate(&a_done, CU_EVENT_DISABLE_TIMING));
	CHECK(cuStreamCreate(&shared, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemAlloc(&buf, WORDS * sizeof(unsigned)));
	pthread_t a, b;
	if (pthread_create(&a, NULL, thread_a, NULL) || pthread_create(&b, NULL, thread_b, NULL)) {
		fprintf(stderr, "pthread_create failed\n");
		return 1;
	}
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	printf("thread order ok: %d rounds of each case\n", rounds);
	CHECK(cuMemFree(buf));
	CHECK(cuStreamDestroy(shared));
	CHECK(cuEventDestroy(a_done));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
