/* drv_copy_deferred IMAGE: blocking copies from pageable memory used at once. Through
 * Remora such a copy of 64 KiB or more returns once its bytes are sent, its reply not
 * waited for (frontend/memory.c), so each check below follows copies that may still be on
 * their way:
 *   - a kernel (vecAdd) adds what two such copies wrote, sizes 64 KiB to 4 MiB + odd;
 *   - the host buffer is overwritten as soon as a copy returns: the device has the old bytes;
 *   - copies in a row to one place, the last one wins; overlapping ones land in order;
 *   - a copy on a non-blocking stream reads what such a copy wrote;
 *   - another thread (another channel) reads back what this one just copied;
 *   - a copy to freed memory fails, at the copy or at the next synchronization (Remora's
 *     way, as an async call's error), and copies after it work.
 * Output is the same natively and through Remora; exits nonzero on wrong data. */
#include <pthread.h>

#include "drv_common.h"

static CUcontext ctx;

struct reader {
	CUdeviceptr at;
	float *out;
	size_t n;
	CUresult r;
};

static void *read_back(void *arg)
{
	struct reader *rd = arg;
	rd->r = cuCtxSetCurrent(ctx);
	if (rd->r == CUDA_SUCCESS)
		rd->r = cuMemcpyDtoH(rd->out, rd->at, rd->n * sizeof(float));
	return NULL;
}

static void fill(float *x, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		x[i] = (float)((i * 7 + seed) % 1000);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	ctx = drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction add;
	CHECK(cuModuleGetFunction(&add, module, "vecAdd"));
	static const size_t sizes[] = {(64 << 10) / 4, (256 << 10) / 4 + 3, (1 << 20) / 4, (1 << 20) / 4 + 1027,
				       (4 << 20) / 4 + 5};
	const size_t max = (4 << 20) / 4 + 5;
	float *a = malloc(max * 4), *b = malloc(max * 4), *c = malloc(max * 4), *want = malloc(max * 4);
	if (!a || !b || !c || !want) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	CUdeviceptr da, db, dc;
	CHECK(cuMemAlloc(&da, max * 4));
	CHECK(cuMemAlloc(&db, max * 4));
	CHECK(cuMemAlloc(&dc, max * 4));

	/* A kernel reads what the copies wrote; the sources are overwritten at once. */
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		int count = (int)n;
		fill(a, n, (unsigned)s);
		fill(b, n, (unsigned)s + 500);
		for (size_t i = 0; i < n; i++)
			want[i] = a[i] + b[i];
		CHECK(cuMemcpyHtoD(da, a, n * 4));
		memset(a, 0x7f, n * 4);
		CHECK(cuMemcpyHtoD(db, b, n * 4));
		memset(b, 0x7f, n * 4);
		void *params[] = {&da, &db, &dc, &count};
		CHECK(cuLaunchKernel(add, 64, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
		memset(c, 0, n * 4);
		CHECK(cuMemcpyDtoH(c, dc, n * 4));
		EXPECT(memcmp(c, want, n * 4) == 0, "%zu floats: the kernel read other bytes", n);
		printf("add %zu floats: checksum=%016llx\n", n, (unsigned long long)drv_fnv1a(c, n * 4));
	}

	/* Copies in a row to one place: the last one's bytes stay; then one overlapping it. */
	size_t n = (1 << 20) / 4;
	for (unsigned r = 0; r < 8; r++) {
		fill(a, n, 100 + r);
		CHECK(cuMemcpyHtoD(da, a, n * 4));
	}
	fill(b, n, 900);
	CHECK(cuMemcpyHtoD(da + n * 2, b, n * 4 / 2)); /* the second half */
	memcpy(want, a, n * 2);
	memcpy(want + n / 2, b, n * 2);
	memset(c, 0, n * 4);
	CHECK(cuMemcpyDtoH(c, da, n * 4));
	EXPECT(memcmp(c, want, n * 4) == 0, "copies in a row: not the last bytes written");
	printf("in a row: checksum=%016llx\n", (unsigned long long)drv_fnv1a(c, n * 4));

	/* A non-blocking stream reads what the copy wrote: natively settled in practice, and
	 * through Remora the copy is on the device before the next call runs. */
	CUstream nb;
	CHECK(cuStreamCreate(&nb, CU_STREAM_NON_BLOCKING));
	fill(a, n, 77);
	CHECK(cuMemcpyHtoD(da, a, n * 4));
	memcpy(want, a, n * 4);
	memset(a, 0, n * 4);
	memset(c, 0, n * 4);
	CHECK(cuMemcpyDtoHAsync(c, da, n * 4, nb));
	CHECK(cuStreamSynchronize(nb));
	EXPECT(memcmp(c, want, n * 4) == 0, "a non-blocking stream read other bytes");
	printf("non-blocking stream: checksum=%016llx\n", (unsigned long long)drv_fnv1a(c, n * 4));
	CHECK(cuStreamDestroy(nb));

	/* Another thread reads back what this one copied. */
	fill(a, max, 4242);
	CHECK(cuMemcpyHtoD(db, a, max * 4));
	memcpy(want, a, max * 4);
	memset(a, 0, max * 4);
	struct reader rd = {db, c, max, CUDA_ERROR_UNKNOWN};
	memset(c, 0, max * 4);
	pthread_t t;
	if (pthread_create(&t, NULL, read_back, &rd) || pthread_join(t, NULL)) {
		fprintf(stderr, "no thread\n");
		return 1;
	}
	EXPECT(rd.r == CUDA_SUCCESS, "the other thread's copy: %s", drv_error_name(rd.r));
	EXPECT(memcmp(c, want, max * 4) == 0, "the other thread read other bytes");
	printf("other thread: checksum=%016llx\n", (unsigned long long)drv_fnv1a(c, max * 4));

	/* A copy to freed memory: an error at the copy or the next synchronization. */
	CUdeviceptr gone;
	CHECK(cuMemAlloc(&gone, 1 << 20));
	CHECK(cuMemFree(gone));
	fill(a, n, 7);
	/* 128 KiB: deferred through Remora, and too small to be one kept waiting to measure the link */
	CUresult at_copy = cuMemcpyHtoD(gone, a, (128 << 10));
	CUresult at_sync = cuCtxSynchronize();
	EXPECT(at_copy != CUDA_SUCCESS || at_sync != CUDA_SUCCESS, "a copy to freed memory reported no error");
	EXPECT(at_copy == CUDA_SUCCESS || at_sync == CUDA_SUCCESS, "the error was reported twice");
	printf("copy to freed memory: error %s\n", at_copy != CUDA_SUCCESS || at_sync != CUDA_SUCCESS ? "reported" : "lost");
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyHtoD(da, a, n * 4));
	memset(c, 0, n * 4);
	CHECK(cuMemcpyDtoH(c, da, n * 4));
	EXPECT(memcmp(c, a, n * 4) == 0, "a copy after the failed one differs");
	printf("after the error: checksum=%016llx\n", (unsigned long long)drv_fnv1a(c, n * 4));

	CHECK(cuMemFree(dc));
	CHECK(cuMemFree(db));
	CHECK(cuMemFree(da));
	CHECK(cuModuleUnload(module));
	free(want);
	free(c);
	free(b);
	free(a);
	drv_close_device0();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
