/* A steady run of async calls: CALLS launches of fillU32, each after GAP_US of host work
 * (a busy wait), then one synchronize; checks the last value landed. Through Remora,
 * REMORA_STATS=1 then says how many writes carried them (tests/flush_delay.sh).
 * usage: drv_async_run IMAGE [CALLS] [GAP_US] */
#include "drv_common.h"

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE [CALLS] [GAP_US]\n", argv[0]);
		return 2;
	}
	int calls = argc > 2 ? atoi(argv[2]) : 2000;
	double gap_ms = (argc > 3 ? atof(argv[3]) : 10) / 1e3;
	drv_open_device0();
	CUmodule mod = drv_load_module(argv[1]);
	CUfunction fill;
	CHECK(cuModuleGetFunction(&fill, mod, "fillU32"));
	int n = 256;
	CUdeviceptr d;
	CHECK(cuMemAlloc(&d, n * sizeof(unsigned)));
	double t0 = drv_now_ms();
	for (int i = 0; i < calls; i++) {
		unsigned v = (unsigned)i + 1;
		void *args[] = {&d, &v, &n};
		CHECK(cuLaunchKernel(fill, 1, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
		for (double until = drv_now_ms() + gap_ms; drv_now_ms() < until;)
			;
	}
	CHECK(cuCtxSynchronize());
	double ms = drv_now_ms() - t0;
	unsigned host[256];
	CHECK(cuMemcpyDtoH(host, d, sizeof(host)));
	int wrong = 0;
	for (int i = 0; i < n; i++)
		wrong += host[i] != (unsigned)calls;
	EXPECT(!wrong, "%d of %d words are not the last launch's %d", wrong, n, calls);
	printf("async run: %d launches\n", calls);
	printf("time_ms %.1f\n", ms);
	CHECK(cuMemFree(d));
	CHECK(cuModuleUnload(mod));
	drv_close_device0();
	return drv_exit_status();
}
