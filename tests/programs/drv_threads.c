/* drv_threads IMAGE NS: client threads do not wait for one another's calls.
 * Thread A launches sleepNs(NS) on a stream of its own, records an event after it and
 * synchronizes. Meanwhile thread B allocates, copies, launches on its own stream, queries
 * events and records (it frees only at the end: cuMemFree waits for the device), then waits on A's event from its own stream (a cross-thread event
 * wait). Checked: B's short calls all finish before A's synchronize returns (they would
 * not if the threads' calls were served one after another), and B's wait on A's event
 * completes after A's kernel, not before. */
#include <pthread.h>
#include <unistd.h>

#include "drv_common.h"

static CUcontext ctx;
static CUfunction sleep_ns, fill;
static unsigned long long ns;
static CUevent a_done;        /* recorded by A after its long kernel */
static int a_recorded;        /* set by A once that record returned */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static double a_sync_done_ms, b_calls_done_ms, b_wait_done_ms, start_ms;
static int b_calls;

static void *thread_a(void *arg)
{
	(void)arg;
	CHECK(cuCtxSetCurrent(ctx));
	CUstream s;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	void *params[] = {&ns};
	CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
	CHECK(cuEventRecord(a_done, s));
	pthread_mutex_lock(&lock);
	a_recorded = 1; /* async record returned: another thread may now wait on it */
	pthread_cond_broadcast(&changed);
	pthread_mutex_unlock(&lock);
	CHECK(cuStreamSynchronize(s));
	a_sync_done_ms = drv_now_ms();
	CHECK(cuStreamDestroy(s));
	return NULL;
}

static void *thread_b(void *arg)
{
	(void)arg;
	CHECK(cuCtxSetCurrent(ctx));
	pthread_mutex_lock(&lock);
	while (!a_recorded)
		pthread_cond_wait(&changed, &lock);
	pthread_mutex_unlock(&lock);
	CUstream s;
	CUevent ev;
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&ev, CU_EVENT_DEFAULT));
	unsigned host[256];
	CUdeviceptr mem[50]; /* freed after: cuMemFree waits for the device, A's kernel too */
	for (int i = 0; i < 50; i++) {
		CUdeviceptr d;
		CHECK(cuMemAlloc(&d, sizeof(host)));
		mem[i] = d;
		unsigned v = (unsigned)i, n = 256;
		void *params[] = {&d, &v, &n};
		CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, s, params, NULL));
		CHECK(cuEventRecord(ev, s));
		CHECK(cuEventSynchronize(ev));
		CHECK(cuEventQuery(ev));
		CHECK(cuMemcpyDtoH(host, d, sizeof(host)));
		EXPECT(host[0] == v && host[255] == v, "fill %d gave %u", i, host[0]);
		b_calls++;
	}
	b_calls_done_ms = drv_now_ms();
	/* A cross-thread wait: B's stream waits for A's event, recorded by A before. */
	CHECK(cuStreamWaitEvent(s, a_done, 0));
	CHECK(cuEventRecord(ev, s));
	CHECK(cuEventSynchronize(ev));
	b_wait_done_ms = drv_now_ms();
	for (int i = 0; i < 50; i++)
		CHECK(cuMemFree(mem[i]));
	CHECK(cuEventDestroy(ev));
	CHECK(cuStreamDestroy(s));
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s IMAGE NS\n", argv[0]);
		return 2;
	}
	ns = strtoull(argv[2], NULL, 10);
	drv_open_device0();
	CHECK(cuCtxGetCurrent(&ctx));
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&sleep_ns, module, "sleepNs"));
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CHECK(cuEventCreate(&a_done, CU_EVENT_DISABLE_TIMING));
	start_ms = drv_now_ms();
	pthread_t a, b;
	if (pthread_create(&a, NULL, thread_a, NULL) || pthread_create(&b, NULL, thread_b, NULL)) {
		fprintf(stderr, "pthread_create failed\n");
		return 1;
	}
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	double kernel_ms = (double)ns / 1e6;
	EXPECT(b_calls == 50, "thread B made %d rounds", b_calls);
	EXPECT(a_sync_done_ms - start_ms >= kernel_ms, "A's sync returned after %.1f ms, kernel %.1f ms",
	       a_sync_done_ms - start_ms, kernel_ms);
	/* B's calls must not have waited for A's synchronize. */
	EXPECT(b_calls_done_ms < a_sync_done_ms, "B's calls ended at %.1f ms, after A's sync at %.1f ms",
	       b_calls_done_ms - start_ms, a_sync_done_ms - start_ms);
	EXPECT(b_wait_done_ms - start_ms >= kernel_ms, "B's wait on A's event ended at %.1f ms, before the kernel's %.1f ms",
	       b_wait_done_ms - start_ms, kernel_ms);
	printf("threads ok: B made %d rounds while A's kernel ran\n", b_calls);
	printf("time_b_calls_ms=%.3f\ntime_a_sync_ms=%.3f\n", b_calls_done_ms - start_ms, a_sync_done_ms - start_ms);
	CHECK(cuEventDestroy(a_done));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
