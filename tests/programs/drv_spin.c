/* drv_spin IMAGE ITERS: spinFma once (one thread, 4 dependent FMAs per
 * iteration), timed with events; the result must equal the host's own
 * fmaf chain bit for bit. */
#include "drv_common.h"

#include <math.h>

static float host_spin(long long iters)
{
	float x = 1.0f;
	for (long long i = 0; i < iters; i++) {
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
		x = fmaf(x, 0.999999f, 1e-7f);
	}
	return x;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s IMAGE ITERS\n", argv[0]);
		return 2;
	}
	long long iters = strtoll(argv[2], NULL, 10);
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction spin;
	CHECK(cuModuleGetFunction(&spin, module, "spinFma"));
	CUdeviceptr out;
	CUevent start, stop;
	CHECK(cuMemAlloc(&out, sizeof(float)));
	CHECK(cuEventCreate(&start, CU_EVENT_DEFAULT));
	CHECK(cuEventCreate(&stop, CU_EVENT_DEFAULT));

	void *params[] = { &out, &iters };
	CHECK(cuEventRecord(start, NULL));
	CHECK(cuLaunchKernel(spin, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	CHECK(cuEventRecord(stop, NULL));
	CHECK(cuEventSynchronize(stop));
	float ms, result;
	CHECK(cuEventElapsedTime(&ms, start, stop));
	CHECK(cuMemcpyDtoH(&result, out, sizeof result));

	float expected = host_spin(iters);
	uint32_t bits, expected_bits;
	memcpy(&bits, &result, 4);
	memcpy(&expected_bits, &expected, 4);
	EXPECT(bits == expected_bits, "spinFma gave %.9g (0x%08x), host %.9g (0x%08x)", result, bits, expected,
	       expected_bits);
	printf("spinFma iters=%lld result=%.9g bits=0x%08x\n", iters, result, bits);
	printf("time_ms=%.3f\n", ms);

	CHECK(cuEventDestroy(stop));
	CHECK(cuEventDestroy(start));
	CHECK(cuMemFree(out));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
