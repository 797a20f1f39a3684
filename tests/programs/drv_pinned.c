/* drv_pinned IMAGE [kill]: pinned copies of several sizes, synchronous and async, whole
 * allocations and parts of them, compared byte for byte; through Remora over shared
 * memory they go by shared pinned memory (docs/hotpath.md), over TCP as bytes.
 *   - per size: pinned -> device (cuMemcpyHtoD) -> pinned (cuMemcpyDtoH);
 *     async both ways on a stream with fillU32 between them, then one synchronize;
 *     from an offset inside the allocation to pageable memory and back
 *   - a pinned allocation too small to be shared (4 KiB), the same way
 *   - cuMemHostGetDevicePointer of a pinned allocation: fillU32 through the device
 *     pointer, seen by the host after a synchronize
 * kill: once the allocations are made and used, prints "ready" and kills itself
 * (SIGKILL), so that the daemon must release what it shared. */
#include "drv_common.h"

#include <signal.h>
#include <unistd.h>

static void fill_pattern(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed | 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

/* fillU32 over count words at d on stream. */
static void fill_words(CUfunction fill, CUdeviceptr d, unsigned value, int count, CUstream stream)
{
	void *params[] = {&d, &value, &count};
	CHECK(cuLaunchKernel(fill, (unsigned)(count + 255) / 256, 1, 1, 256, 1, 1, 0, stream, params, NULL));
}

static void one_size(CUfunction fill, size_t bytes, CUstream stream)
{
	uint8_t *src, *dst, *pageable = malloc(bytes);
	CUdeviceptr d;
	CHECK(cuMemAllocHost((void **)&src, bytes));
	CHECK(cuMemHostAlloc((void **)&dst, bytes, CU_MEMHOSTALLOC_PORTABLE));
	CHECK(cuMemAlloc(&d, bytes));
	EXPECT(pageable != NULL, "out of host memory");
	fill_pattern(src, bytes, bytes);

	/* Synchronous, whole. */
	memset(dst, 0, bytes);
	CHECK(cuMemcpyHtoD(d, src, bytes));
	CHECK(cuMemcpyDtoH(dst, d, bytes));
	EXPECT(memcmp(src, dst, bytes) == 0, "%zu bytes: synchronous round trip differs", bytes);

	/* Async both ways with a kernel between, one synchronize: the tail is the kernel's. */
	int words = bytes >= 4096 ? 256 : (int)(bytes / 4);
	unsigned value = 0xa5c3e1f0u ^ (unsigned)bytes;
	memset(dst, 0, bytes);
	CHECK(cuMemsetD8Async(d, 0, bytes, stream));
	CHECK(cuMemcpyHtoDAsync(d, src, bytes, stream));
	fill_words(fill, d + bytes - (size_t)words * 4, value, words, stream);
	CHECK(cuMemcpyDtoHAsync(dst, d, bytes, stream));
	CHECK(cuStreamSynchronize(stream));
	for (int i = 0; i < words; i++)
		memcpy(src + bytes - (size_t)(words - i) * 4, &value, 4);
	EXPECT(memcmp(src, dst, bytes) == 0, "%zu bytes: async round trip differs", bytes);

	/* Parts: from inside the pinned source to the device's start, back into pageable
	 * memory; then pageable to the device and back into the middle of the destination. */
	size_t off = bytes / 3 & ~(size_t)7, part = bytes - off - 5;
	CHECK(cuMemcpyHtoD(d, src + off, part));
	memset(pageable, 0, bytes);
	CHECK(cuMemcpyDtoH(pageable, d, part));
	EXPECT(memcmp(pageable, src + off, part) == 0, "%zu bytes: part from pinned differs", bytes);
	fill_pattern(pageable, bytes, bytes + 1);
	CHECK(cuMemcpyHtoD(d, pageable, part));
	memset(dst, 0, bytes);
	CHECK(cuMemcpyDtoHAsync(dst + off, d, part, stream));
	CHECK(cuStreamSynchronize(stream));
	EXPECT(memcmp(dst + off, pageable, part) == 0, "%zu bytes: part into pinned differs", bytes);
	size_t i = 0;
	while (i < off && !dst[i])
		i++;
	EXPECT(i == off, "%zu bytes: a copy into pinned wrote before its start (byte %zu)", bytes, i);
	printf("size=%zu synchronous async parts ok checksum=%016llx\n", bytes,
	       (unsigned long long)drv_fnv1a(dst, bytes));

	CHECK(cuMemFree(d));
	CHECK(cuMemFreeHost(dst));
	CHECK(cuMemFreeHost(src));
	free(pageable);
}

/* Mapped pinned memory: the kernel writes through the device pointer. */
static void mapped(CUfunction fill, CUstream stream)
{
	size_t bytes = 1 << 20;
	uint32_t *h;
	CUdeviceptr dp;
	CHECK(cuMemHostAlloc((void **)&h, bytes, CU_MEMHOSTALLOC_DEVICEMAP));
	memset(h, 0, bytes);
	CHECK(cuMemHostGetDevicePointer(&dp, h, 0));
	fill_words(fill, dp + 4096, 0x5eedu, 1024, stream);
	CHECK(cuStreamSynchronize(stream));
	size_t i = 0;
	while (i < bytes / 4 && h[i] == (i >= 1024 && i < 2048 ? 0x5eedu : 0))
		i++;
	EXPECT(i == bytes / 4, "mapped pinned memory: word %zu is %x", i, i < bytes / 4 ? h[i] : 0);
	printf("mapped pinned ok\n");
	CHECK(cuMemFreeHost(h));
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3 || (argc == 3 && strcmp(argv[2], "kill"))) {
		fprintf(stderr, "usage: %s IMAGE [kill]\n", argv[0]);
		return 2;
	}
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction fill;
	CUstream stream;
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	if (argc == 3) {
		void *keep[3];
		CUdeviceptr d;
		CHECK(cuMemAlloc(&d, 8 << 20));
		for (int i = 0; i < 3; i++) {
			CHECK(cuMemAllocHost(&keep[i], (size_t)(i + 1) << 20));
			CHECK(cuMemcpyHtoD(d, keep[i], (size_t)(i + 1) << 20));
		}
		printf("ready\n");
		fflush(stdout);
		raise(SIGKILL);
	}
	static const size_t sizes[] = {4096, 64 << 10, (1 << 20) + 4096 + 12, 8 << 20, (33 << 20) + 100};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		one_size(fill, sizes[i], stream);
	mapped(fill, stream);
	CHECK(cuStreamDestroy(stream));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
