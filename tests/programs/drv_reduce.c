/* drv_reduce IMAGE: reduceSum over 16M ints (two launch shapes), memsets of
 * 8, 16 and 32 bits (synchronous and on a stream) and device-to-device
 * copies, each checked on the host. */
#include "drv_common.h"

#define N (16 * 1024 * 1024)
#define BYTES (1 << 20)

static int host_in[N];
static unsigned char host_bytes[BYTES], expected_bytes[BYTES];

static void check_device_bytes(CUdeviceptr buffer, const char *what)
{
	CHECK(cuMemcpyDtoH(host_bytes, buffer, BYTES));
	EXPECT(memcmp(host_bytes, expected_bytes, BYTES) == 0, "%s differs", what);
	printf("%s checksum=%016llx\n", what, (unsigned long long)drv_fnv1a(host_bytes, BYTES));
}

static void fill16(unsigned char *p, uint16_t v, size_t count) { for (size_t i = 0; i < count; i++) memcpy(p + 2 * i, &v, 2); }
static void fill32(unsigned char *p, uint32_t v, size_t count) { for (size_t i = 0; i < count; i++) memcpy(p + 4 * i, &v, 4); }

static void check_memsets(void)
{
	CUdeviceptr x, y;
	CUstream stream;
	CHECK(cuMemAlloc(&x, BYTES));
	CHECK(cuMemAlloc(&y, BYTES));
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));

	CHECK(cuMemsetD8(x, 0xa5, BYTES));
	memset(expected_bytes, 0xa5, BYTES);
	CHECK(cuMemsetD16(x + 2, 0x1234, 1000));
	fill16(expected_bytes + 2, 0x1234, 1000);
	CHECK(cuMemsetD32(x + 4096, 0xdeadbeefu, 5000));
	fill32(expected_bytes + 4096, 0xdeadbeefu, 5000);
	check_device_bytes(x, "memset_sync");

	CHECK(cuMemsetD8Async(x + 100001, 0x3c, 77777, stream));
	memset(expected_bytes + 100001, 0x3c, 77777);
	CHECK(cuMemsetD16Async(x + 300000, 0xbeef, 12345, stream));
	fill16(expected_bytes + 300000, 0xbeef, 12345);
	CHECK(cuMemsetD32Async(x + 500000, 0x01020304u, 54321, stream));
	fill32(expected_bytes + 500000, 0x01020304u, 54321);
	CHECK(cuStreamSynchronize(stream));
	check_device_bytes(x, "memset_async");

	/* y := x, then a shifted window of x over part of y. */
	CHECK(cuMemcpyDtoD(y, x, BYTES));
	check_device_bytes(y, "dtod_whole");
	CHECK(cuMemcpyDtoDAsync(y + 1000, x + 777777, 123457, stream));
	memcpy(expected_bytes + 1000, expected_bytes + 777777, 123457);
	CHECK(cuStreamSynchronize(stream));
	check_device_bytes(y, "dtod_window");

	CHECK(cuStreamDestroy(stream));
	CHECK(cuMemFree(y));
	CHECK(cuMemFree(x));
}

static unsigned long long run_reduce(CUfunction reduce, CUdeviceptr in, CUdeviceptr out, unsigned grid, unsigned block)
{
	int n = N;
	void *params[] = { &in, &out, &n };
	unsigned long long sum = 0;
	CHECK(cuMemsetD32(out, 0, 2));
	CHECK(cuLaunchKernel(reduce, grid, 1, 1, block, 1, 1, 0, NULL, params, NULL));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(&sum, out, sizeof sum));
	return sum;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	unsigned long long expected = 0;
	for (int i = 0; i < N; i++) {
		host_in[i] = (int)((unsigned)i * 2654435761u % 2001u) - 1000;
		expected += (unsigned long long)(long long)host_in[i];
	}

	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction reduce;
	CHECK(cuModuleGetFunction(&reduce, module, "reduceSum"));
	CUdeviceptr in, out;
	CHECK(cuMemAlloc(&in, sizeof host_in));
	CHECK(cuMemAlloc(&out, sizeof(unsigned long long)));
	CHECK(cuMemcpyHtoD(in, host_in, sizeof host_in));

	unsigned long long sum = run_reduce(reduce, in, out, 1024, 256);
	EXPECT(sum == expected, "reduceSum 1024x256 gave %lld, expected %lld", (long long)sum, (long long)expected);
	sum = run_reduce(reduce, in, out, 7, 1000);
	EXPECT(sum == expected, "reduceSum 7x1000 gave %lld, expected %lld", (long long)sum, (long long)expected);
	printf("reduceSum n=%d sum=%lld\n", N, (long long)sum);

	check_memsets();

	CHECK(cuMemFree(out));
	CHECK(cuMemFree(in));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
