/* drv_memcpy IMAGE [MiB]: a deterministic pattern through host -> device ->
 * device -> host, from pageable and from pinned memory, compared byte for
 * byte.  The image's fillU32 also writes a known tail on the device. */
#include "drv_common.h"

static void fill_pattern(uint64_t *words, size_t count, uint64_t seed)
{
	uint64_t x = seed;
	for (size_t i = 0; i < count; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		words[i] = x;
	}
}

/* src -> d1 -> d2 -> dst; returns the checksum of dst. */
static uint64_t round_trip(const char *kind, void *src, void *dst, size_t bytes, CUdeviceptr d1, CUdeviceptr d2,
			   CUstream stream)
{
	double t0 = drv_now_ms();
	if (stream)
		CHECK(cuMemcpyHtoDAsync(d1, src, bytes, stream));
	else
		CHECK(cuMemcpyHtoD(d1, src, bytes));
	CHECK(cuCtxSynchronize());
	double t1 = drv_now_ms();
	if (stream)
		CHECK(cuMemcpyDtoDAsync(d2, d1, bytes, stream));
	else
		CHECK(cuMemcpyDtoD(d2, d1, bytes));
	CHECK(cuCtxSynchronize());
	double t2 = drv_now_ms();
	if (stream)
		CHECK(cuMemcpyDtoHAsync(dst, d2, bytes, stream));
	else
		CHECK(cuMemcpyDtoH(dst, d2, bytes));
	CHECK(cuCtxSynchronize());
	double t3 = drv_now_ms();
	EXPECT(memcmp(src, dst, bytes) == 0, "%s round trip differs", kind);
	double mib = (double)bytes / (1 << 20);
	printf("time_%s_h2d_mib_per_s=%.1f\ntime_%s_dtod_mib_per_s=%.1f\ntime_%s_d2h_mib_per_s=%.1f\n", kind,
	       mib / ((t1 - t0) / 1e3), kind, mib / ((t2 - t1) / 1e3), kind, mib / ((t3 - t2) / 1e3));
	return drv_fnv1a(dst, bytes);
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s IMAGE [MiB]\n", argv[0]);
		return 2;
	}
	long mib = argc == 3 ? strtol(argv[2], NULL, 10) : 1024;
	if (mib <= 0) {
		fprintf(stderr, "bad size %s\n", argv[2]);
		return 2;
	}
	size_t bytes = (size_t)mib << 20;

	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction fill;
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CUdeviceptr d1, d2;
	CHECK(cuMemAlloc(&d1, bytes));
	CHECK(cuMemAlloc(&d2, bytes));

	uint64_t *pageable_src = malloc(bytes), *pageable_dst = malloc(bytes);
	if (!pageable_src || !pageable_dst) {
		fprintf(stderr, "out of host memory\n");
		return 1;
	}
	fill_pattern(pageable_src, bytes / 8, 0x9e3779b97f4a7c15ull);
	memset(pageable_dst, 0, bytes);
	uint64_t sum = round_trip("pageable", pageable_src, pageable_dst, bytes, d1, d2, NULL);
	printf("pageable bytes=%zu checksum=%016llx\n", bytes, (unsigned long long)sum);

	void *pinned_src, *pinned_dst;
	CUstream stream;
	CHECK(cuMemAllocHost(&pinned_src, bytes));
	CHECK(cuMemAllocHost(&pinned_dst, bytes));
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	memcpy(pinned_src, pageable_src, bytes);
	memset(pinned_dst, 0, bytes);
	sum = round_trip("pinned", pinned_src, pinned_dst, bytes, d1, d2, stream);
	printf("pinned bytes=%zu checksum=%016llx\n", bytes, (unsigned long long)sum);

	/* fillU32 over the last 4096 words of d2, then read the whole buffer. */
	unsigned value = 0xfeedf00du;
	int count = 4096;
	CUdeviceptr tail = d2 + bytes - (size_t)count * 4;
	void *params[] = { &tail, &value, &count };
	CHECK(cuLaunchKernel(fill, 16, 1, 1, 256, 1, 1, 0, stream, params, NULL));
	CHECK(cuMemcpyDtoHAsync(pinned_dst, d2, bytes, stream));
	CHECK(cuStreamSynchronize(stream));
	uint32_t *src_words = pinned_src, *dst_words = pinned_dst;
	size_t words = bytes / 4;
	for (size_t i = words - (size_t)count; i < words; i++)
		src_words[i] = value;
	EXPECT(memcmp(src_words, dst_words, bytes) == 0, "fillU32 tail differs");
	printf("fillU32 tail words=%d checksum=%016llx\n", count, (unsigned long long)drv_fnv1a(pinned_dst, bytes));

	CHECK(cuStreamDestroy(stream));
	CHECK(cuMemFreeHost(pinned_dst));
	CHECK(cuMemFreeHost(pinned_src));
	free(pageable_dst);
	free(pageable_src);
	CHECK(cuMemFree(d2));
	CHECK(cuMemFree(d1));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
