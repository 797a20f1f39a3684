/* drv_reload FILL_IMAGE VECADD_IMAGE: modules unloaded and others loaded in their place.
 *
 * Loads the image of fillU32 (3 parameters, 16 bytes), launches, unloads; then vecAdd's
 * (4 parameters, 28 bytes), then fillU32's again. Once a module is unloaded its function's
 * handle may come again for the next module's function, of another layout: each launch
 * must still pack its arguments by its own function's layout (a stale one would pack
 * vecAdd's arguments as fillU32's, or read a fourth pointer of fillU32's three).
 *
 * On stderr, for tests/robustness/param_layout.py: "drv_reload: first launch of NAME"
 * before and "drv_reload: first launch done" after each module's first launch, and
 * whether a function handle came again. */
#include "drv_common.h"

#define N 4099

static float host_a[N], host_b[N], host_c[N];
static unsigned host_x[N];

/* Loads path, launches its kernel name twice and checks the results; returns its handle. */
static CUfunction run_module(const char *path, const char *name, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)
{
	CUmodule module = drv_load_module(path);
	CUfunction f;
	CHECK(cuModuleGetFunction(&f, module, name));
	int n = N;
	int fill = strcmp(name, "fillU32") == 0;
	for (unsigned round = 0; round < 2; round++) {
		unsigned v = 0xabc00000u + round;
		/* One more pointer than fillU32 has, NULL: a launch reading it is refused. */
		void *fill_params[] = { &c, &v, &n, NULL };
		void *add_params[] = { &a, &b, &c, &n };
		if (round == 0)
			fprintf(stderr, "drv_reload: first launch of %s\n", name);
		CHECK(cuLaunchKernel(f, 8, 1, 1, 128, 1, 1, 0, NULL, fill ? fill_params : add_params, NULL));
		if (round == 0)
			fprintf(stderr, "drv_reload: first launch done\n");
		CHECK(cuCtxSynchronize());
		if (fill) {
			CHECK(cuMemcpyDtoH(host_x, c, sizeof host_x));
			size_t bad = 0;
			for (size_t i = 0; i < N; i++)
				bad += host_x[i] != v;
			EXPECT(bad == 0, "fillU32 left %zu of %d elements other than 0x%x", bad, N, v);
		} else {
			CHECK(cuMemcpyDtoH(host_c, c, sizeof host_c));
			size_t bad = 0;
			for (size_t i = 0; i < N; i++)
				bad += host_c[i] != host_a[i] + host_b[i];
			EXPECT(bad == 0, "vecAdd left %zu of %d elements other than a + b", bad, N);
		}
	}
	CHECK(cuModuleUnload(module));
	printf("%s: ok\n", name);
	return f;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s FILL_IMAGE VECADD_IMAGE\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < N; i++) {
		host_a[i] = (float)(i % 100) * 0.5f;
		host_b[i] = (float)(i % 77) + 1.0f;
	}
	drv_open_device0();
	CUdeviceptr a, b, c;
	CHECK(cuMemAlloc(&a, sizeof host_a));
	CHECK(cuMemAlloc(&b, sizeof host_b));
	CHECK(cuMemAlloc(&c, sizeof host_c));
	CHECK(cuMemcpyHtoD(a, host_a, sizeof host_a));
	CHECK(cuMemcpyHtoD(b, host_b, sizeof host_b));

	CUfunction fill = run_module(argv[1], "fillU32", a, b, c);
	CUfunction add = run_module(argv[2], "vecAdd", a, b, c);
	CUfunction again = run_module(argv[1], "fillU32", a, b, c);
	fprintf(stderr, "drv_reload: a function handle came again: %s\n", add == fill || again == add ? "yes" : "no");

	CHECK(cuMemFree(c));
	CHECK(cuMemFree(b));
	CHECK(cuMemFree(a));
	drv_close_device0();
	return drv_exit_status();
}
