/* drv_copy_sizes IMAGE [ROUNDS]: blocking copies of 64 KiB to 16 MiB (odd sizes and
 * offsets among them) to the device and back, ROUNDS times each (12 by default), a new
 * pattern each time, compared byte for byte. Through Remora the first rounds measure the
 * link and the later ones are striped in the chunks chosen from it (common/copy_plan.h),
 * so every chunk and share boundary the plan picks is crossed with known data. The image
 * is not used (the tables give every program one). */
#include "drv_common.h"

static void fill_pattern(uint64_t *words, size_t count, uint64_t seed)
{
	uint64_t x = seed * 2 + 1;
	for (size_t i = 0; i < count; i++) {
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		words[i] = x;
	}
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s IMAGE [ROUNDS]\n", argv[0]);
		return 2;
	}
	long rounds = argc == 3 ? strtol(argv[2], NULL, 10) : 12;
	if (rounds <= 0) {
		fprintf(stderr, "bad rounds %s\n", argv[2]);
		return 2;
	}
	static const size_t sizes[] = {64 << 10, (192 << 10) + 4096, 256 << 10, 1 << 20, (1 << 20) + 4097,
				       2 << 20, (3 << 20) + 123, 4 << 20, (8 << 20) + 1, 16 << 20};
	const size_t max = 16 << 20, offset = 4096 + 8; /* device offsets: 0 and an odd one */
	drv_open_device0();
	CUdeviceptr d;
	CHECK(cuMemAlloc(&d, max + offset));
	uint64_t *src = malloc(max + 8), *dst = malloc(max + 8);
	if (!src || !dst) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		size_t n = sizes[s];
		uint64_t sum = 0;
		for (long r = 0; r < rounds; r++) {
			CUdeviceptr at = d + (r % 2 ? offset : 0);
			fill_pattern(src, n / 8 + 1, (uint64_t)n * 1000003u + (uint64_t)r);
			memset(dst, 0xa5, n);
			CHECK(cuMemcpyHtoD(at, src, n));
			CHECK(cuMemcpyDtoH(dst, at, n));
			EXPECT(memcmp(src, dst, n) == 0, "%zu bytes, round %ld: the copy back differs", n, r);
			sum ^= drv_fnv1a(dst, n);
		}
		printf("copy %zu bytes x %ld: checksum=%016llx\n", n, rounds, (unsigned long long)sum);
	}
	CHECK(cuMemFree(d));
	free(dst);
	free(src);
	drv_close_device0();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
