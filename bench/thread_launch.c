/* thread_launch IMAGE THREADS N: on a GPU host, natively or through Remora, how launches
 * from many threads of one context add up (docs/protocol.md#channels). THREADS threads,
 * each on a stream of its own, make N empty-kernel launches each after a common start,
 * then synchronize; prints the launches per second of all threads together and the mean
 * time of one launch call. */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK_PROGRAM "thread_launch"
#include "cuda_check.h"

#define MAX_THREADS 64
#define WARMUP 100

static CUcontext ctx;
static CUfunction empty;
static long launches;
static pthread_barrier_t start, stop;
static double call_us[MAX_THREADS];

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *launcher(void *arg)
{
	long id = (long)arg;
	CUstream s;
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
	for (int i = 0; i < WARMUP; i++)
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
	CHECK(cuStreamSynchronize(s));
	pthread_barrier_wait(&start);
	double t0 = now_s();
	for (long i = 0; i < launches; i++)
		CHECK(cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL));
	call_us[id] = (now_s() - t0) / (double)launches * 1e6;
	CHECK(cuStreamSynchronize(s));
	pthread_barrier_wait(&stop);
	CHECK(cuStreamDestroy(s));
	return NULL;
}

static void *read_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	long len;
	char *data = NULL;
	if (f && !fseek(f, 0, SEEK_END) && (len = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) &&
	    (data = malloc((size_t)len)) && fread(data, 1, (size_t)len, f) != (size_t)len) {
		free(data);
		data = NULL;
	}
	if (f)
		fclose(f);
	return data;
}

int main(int argc, char **argv)
{
	int threads = argc == 4 ? atoi(argv[2]) : 0;
	launches = argc == 4 ? atol(argv[3]) : 0;
	if (threads < 1 || threads > MAX_THREADS || launches < 1) {
		fprintf(stderr, "usage: thread_launch IMAGE THREADS(1..%d) N\n", MAX_THREADS);
		return 2;
	}
	void *image = read_file(argv[1]);
	if (!image) {
		fprintf(stderr, "thread_launch: cannot read %s\n", argv[1]);
		return 1;
	}
	CUdevice dev;
	CUmodule module;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoadData(&module, image));
	CHECK(cuModuleGetFunction(&empty, module, "emptyKernel"));
	pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
	pthread_barrier_init(&stop, NULL, (unsigned)threads + 1);
	pthread_t th[MAX_THREADS];
	for (long i = 0; i < threads; i++)
		if (pthread_create(&th[i], NULL, launcher, (void *)i)) {
			fprintf(stderr, "thread_launch: pthread_create failed\n");
			return 1;
		}
	pthread_barrier_wait(&start);
	double t0 = now_s();
	pthread_barrier_wait(&stop);
	double elapsed = now_s() - t0;
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	double mean = 0;
	for (int i = 0; i < threads; i++)
		mean += call_us[i] / threads;
	printf("threads=%d\nlaunches_per_s=%.0f\nlaunch_call_us=%.3f\n", threads, (double)threads * (double)launches / elapsed,
	       mean);
	CHECK(cuModuleUnload(module));
	CHECK(cuDevicePrimaryCtxRelease(dev));
	free(image);
	return 0;
}
