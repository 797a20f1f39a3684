/* drv_sleep IMAGE NS: sleepNs on the NULL stream; the wall time until
 * cuCtxSynchronize returns must be at least NS. */
#include "drv_common.h"

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s IMAGE NS\n", argv[0]);
		return 2;
	}
	unsigned long long ns = strtoull(argv[2], NULL, 10);
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction sleep_ns;
	CHECK(cuModuleGetFunction(&sleep_ns, module, "sleepNs"));

	void *params[] = { &ns };
	double start = drv_now_ms();
	CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
	double launched = drv_now_ms();
	CHECK(cuCtxSynchronize());
	double done = drv_now_ms();
	EXPECT((done - start) * 1e6 >= (double)ns, "slept %.3f ms, asked for %.3f ms", done - start, (double)ns / 1e6);
	printf("sleepNs ns=%llu ok\n", ns);
	printf("time_launch_ms=%.3f\ntime_wall_ms=%.3f\n", launched - start, done - start);

	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
