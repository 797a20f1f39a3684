/* drv_replay IMAGE ROUNDS: a loop of launches that repeats, as a framework's steady step
 * does, checked every round. Through Remora the worker makes the runs it has seen before
 * as graphs (backend/worker/launch_replay.h); the results must be the launches' own.
 *
 * Each round runs a chain of 24 dependent launches (scaleArray and vecAdd over two
 * buffers) on a stream of its own, then another on the legacy stream over two other
 * buffers, synchronizes and checks both against the host's arithmetic (exact: one
 * rounding per operation, as on the GPU). One factor of the first chain changes every 8th
 * round, and of the second every round: the launches keep their shape, and a graph made of
 * them must take each round's parameters. In round ROUNDS/2 one launch of the first
 * chain asks for 2048 threads a block: its error comes at the launch or at the synchronize,
 * and the rest of the chain runs. In round 3*ROUNDS/4 the module is unloaded and loaded
 * again, and the chain goes on with the new functions. */
#include "drv_common.h"

#define N 4096
#define CHAIN 24

static CUfunction scale, add;

static void load(const char *image, CUmodule *mod)
{
	*mod = drv_load_module(image);
	CHECK(cuModuleGetFunction(&scale, *mod, "scaleArray"));
	CHECK(cuModuleGetFunction(&add, *mod, "vecAdd"));
}

/* Queues the chain on st over x and y, and applies it to the host's *hx, *hy; vary: its
 * factor is the other one; bad: the launch that asks for too many threads (-1: none). The
 * first error, or CUDA_SUCCESS. */
static CUresult chain(CUstream st, CUdeviceptr x, CUdeviceptr y, float *hx, float *hy, int round, int vary, int bad)
{
	CUresult first = CUDA_SUCCESS;
	int n = N;
	for (int j = 0; j < CHAIN; j++) {
		CUresult r;
		unsigned threads = j == bad ? 2048 : 256;
		if (j % 3 == 0) {
			float s = j == 9 && vary ? 0.5f : 2.0f;
			void *args[] = {&x, &s, &n};
			r = cuLaunchKernel(scale, N / 256, 1, 1, threads, 1, 1, 0, st, args, NULL);
			if (r == CUDA_SUCCESS && j != bad)
				*hx = *hx * s;
		} else if (j % 3 == 1) {
			void *args[] = {&x, &y, &x, &n};
			r = cuLaunchKernel(add, N / 256, 1, 1, threads, 1, 1, 0, st, args, NULL);
			if (r == CUDA_SUCCESS && j != bad)
				*hx = *hx + *hy;
		} else {
			float s = 0.75f;
			void *args[] = {&y, &s, &n};
			r = cuLaunchKernel(scale, N / 256, 1, 1, threads, 1, 1, 0, st, args, NULL);
			if (r == CUDA_SUCCESS && j != bad)
				*hy = *hy * s;
		}
		if (j == bad)
			EXPECT(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE, "round %d: the bad launch gave %s", round,
			       drv_error_name(r));
		else
			CHECK(r);
		if (first == CUDA_SUCCESS)
			first = r;
	}
	return first;
}

static void expect_all(CUdeviceptr d, float v, int round, const char *what)
{
	static float host[N];
	CHECK(cuMemcpyDtoH(host, d, sizeof(host)));
	for (int i = 0; i < N; i++)
		if (host[i] != v) {
			EXPECT(0, "round %d: %s[%d] is %a, not %a", round, what, i, host[i], v);
			return;
		}
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: %s IMAGE ROUNDS\n", argv[0]);
		return 2;
	}
	int rounds = atoi(argv[2]);
	drv_open_device0();
	CUmodule mod;
	load(argv[1], &mod);
	CUstream own;
	CHECK(cuStreamCreate(&own, CU_STREAM_NON_BLOCKING));
	CUdeviceptr d[4];
	for (int i = 0; i < 4; i++)
		CHECK(cuMemAlloc(&d[i], N * sizeof(float)));
	for (int round = 0; round < rounds; round++) {
		if (round == 3 * rounds / 4 && round > 0) {
			CHECK(cuModuleUnload(mod));
			load(argv[1], &mod);
		}
		float h[4] = {1.0f, 0.5f, 1.0f, 0.25f};
		for (int i = 0; i < 4; i++) {
			uint32_t bits;
			memcpy(&bits, &h[i], sizeof(bits));
			CHECK(cuMemsetD32(d[i], bits, N));
		}
		int bad = round == rounds / 2 ? 13 : -1;
		CUresult launched = chain(own, d[0], d[1], &h[0], &h[1], round, (round / 8) % 2, bad);
		CHECK(chain(NULL, d[2], d[3], &h[2], &h[3], round, round % 2, -1));
		CUresult synced = cuStreamSynchronize(own);
		if (bad >= 0)
			EXPECT((launched == CUDA_ERROR_INVALID_VALUE) != (synced == CUDA_ERROR_INVALID_VALUE),
			       "round %d: the bad launch's error came %s", round,
			       launched == synced ? "twice or never" : "as another error");
		else
			CHECK(synced);
		CHECK(cuCtxSynchronize());
		expect_all(d[0], h[0], round, "x");
		expect_all(d[1], h[1], round, "y");
		expect_all(d[2], h[2], round, "legacy x");
		expect_all(d[3], h[3], round, "legacy y");
	}
	for (int i = 0; i < 4; i++)
		CHECK(cuMemFree(d[i]));
	CHECK(cuStreamDestroy(own));
	CHECK(cuModuleUnload(mod));
	printf("drv_replay: %d rounds of %d launches checked\n", rounds, 2 * CHAIN);
	return drv_exit_status();
}
