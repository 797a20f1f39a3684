/* bench_nccl MAX_BYTES: NCCL all-reduce (float sum) across 2 GPUs of one process, one
 * thread driving both ranks in groups (ncclCommInitAll), for 1 MiB, 4 MiB, ... MAX_BYTES.
 * Prints allreduce.BYTES.us (per all-reduce, both ranks done) and allreduce.BYTES.busbw
 * (GB/s: bytes / time x 2(n-1)/n, NCCL's bus bandwidth) on stdout.
 *
 * BENCH_NCCL_NONBLOCKING=1 makes the communicators nonblocking (config.blocking = 0, each
 * group's end polled with ncclCommGetAsyncError until it settles), as a worker makes its own:
 * what NCCL's nonblocking groups cost natively, beside the blocking figures.
 *
 * Exit status: 0 measured; 1 a failure once NCCL ran; 3 NCCL cannot run here (fewer than 2
 * devices, or the first init fails), with the reason on stdout as unsupported=..., so the
 * section is reported skipped rather than failed. */
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK_PROGRAM "bench_nccl"
#include "cuda_check.h"

#define NRANKS 2

static void unsupported(const char *what, const char *why)
{
	printf("unsupported=%s: %s\n", what, why);
	exit(3);
}

#define NCK(call)                                                                                 \
	do {                                                                                      \
		ncclResult_t nck_ = (call);                                                       \
		if (nck_ != ncclSuccess) {                                                        \
			fprintf(stderr, "bench_nccl: %s failed: %s\n", #call, ncclGetErrorString(nck_)); \
			exit(1);                                                                  \
		}                                                                                 \
	} while (0)

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static CUcontext ctx[NRANKS];
static CUstream stream[NRANKS];
static CUdeviceptr buf[NRANKS][2];
static ncclComm_t comm[NRANKS];
static int nonblocking;

/* A nonblocking call's result once it settles (r itself for a blocking communicator). */
static ncclResult_t settle(ncclResult_t r)
{
	for (int k = 0; nonblocking && r == ncclInProgress && k < NRANKS; k++) {
		ncclResult_t e = ncclInProgress;
		while (e == ncclInProgress)
			if (ncclCommGetAsyncError(comm[k], &e) != ncclSuccess)
				e = ncclInternalError;
		if (e != ncclSuccess)
			return e;
		if (k == NRANKS - 1)
			r = ncclSuccess;
	}
	return r;
}

static void allreduce(size_t bytes)
{
	NCK(ncclGroupStart());
	for (int r = 0; r < NRANKS; r++)
		NCK(ncclAllReduce((void *)buf[r][0], (void *)buf[r][1], bytes / sizeof(float), ncclFloat, ncclSum, comm[r],
				  stream[r]));
	NCK(settle(ncclGroupEnd()));
}

static void wait_all(void)
{
	for (int r = 0; r < NRANKS; r++) {
		CHECK(cuCtxSetCurrent(ctx[r]));
		CHECK(cuStreamSynchronize(stream[r]));
	}
}

int main(int argc, char **argv)
{
	size_t max = argc > 1 ? strtoull(argv[1], NULL, 10) : (size_t)1 << 30;
	int n = 0, devs[NRANKS] = {0, 1};
	CHECK(cuInit(0));
	CHECK(cuDeviceGetCount(&n));
	if (n < NRANKS) {
		char why[64];
		snprintf(why, sizeof why, "%d device(s), the section needs 2", n);
		unsupported("cuDeviceGetCount", why);
	}
	for (int r = 0; r < NRANKS; r++) {
		CUdevice d;
		CHECK(cuDeviceGet(&d, r));
		CHECK(cuDevicePrimaryCtxRetain(&ctx[r], d));
		CHECK(cuCtxSetCurrent(ctx[r]));
		CHECK(cuStreamCreate(&stream[r], CU_STREAM_NON_BLOCKING));
		CHECK(cuMemAlloc(&buf[r][0], max));
		CHECK(cuMemAlloc(&buf[r][1], max));
		CHECK(cuMemsetD32(buf[r][0], 0x3f800000u, max / 4)); /* 1.0f */
	}
	ncclResult_t init;
	nonblocking = getenv("BENCH_NCCL_NONBLOCKING") && atoi(getenv("BENCH_NCCL_NONBLOCKING"));
	if (nonblocking) {
		ncclUniqueId id;
		ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
		config.blocking = 0;
		init = ncclGetUniqueId(&id);
		if (init == ncclSuccess) {
			ncclGroupStart();
			for (int r = 0; r < NRANKS && (init == ncclSuccess || init == ncclInProgress); r++) {
				CHECK(cuCtxSetCurrent(ctx[r]));
				init = ncclCommInitRankConfig(&comm[r], NRANKS, id, r, &config);
			}
			ncclResult_t end = ncclGroupEnd();
			init = init == ncclSuccess || init == ncclInProgress ? settle(end == ncclSuccess ? ncclInProgress : end) : init;
		}
		printf("nonblocking=1\n");
	} else {
		init = ncclCommInitAll(comm, NRANKS, devs);
	}
	if (init != ncclSuccess)
		unsupported("ncclCommInitAll", ncclGetErrorString(init));
	int version = 0;
	NCK(ncclGetVersion(&version));
	printf("nccl_version=%d\n", version);
	for (size_t bytes = (size_t)1 << 20; bytes <= max; bytes *= 4) {
		int iters = bytes <= ((size_t)16 << 20) ? 100 : bytes <= ((size_t)256 << 20) ? 20 : 10;
		for (int i = 0; i < 5; i++)
			allreduce(bytes);
		wait_all();
		double t = now_us();
		for (int i = 0; i < iters; i++)
			allreduce(bytes);
		wait_all();
		double us = (now_us() - t) / iters;
		double busbw = bytes / us / 1e3 * 2.0 * (NRANKS - 1) / NRANKS;
		printf("allreduce.%zu.us=%.4f\nallreduce.%zu.busbw=%.4f\n", bytes, us, bytes, busbw);
	}
	for (int r = 0; r < NRANKS; r++)
		NCK(ncclCommDestroy(comm[r]));
	return 0;
}
