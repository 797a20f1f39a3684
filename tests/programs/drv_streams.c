/* drv_streams IMAGE: four streams, each copying its slice of pinned memory
 * to the device, scaling it and copying it back, with events in every
 * stream, a cross-stream cuStreamWaitEvent, and the busy/idle answers of
 * cuStreamQuery and cuEventQuery. */
#include "drv_common.h"

#define STREAMS 4
#define SLICE (1 << 18)             /* floats per stream */
#define BUSY_NS 200000000ull        /* long enough to be caught busy, remotely too */

static CUfunction scale, sleep_ns;

static void launch_scale(CUdeviceptr x, float s, int n, CUstream stream)
{
	void *params[] = { &x, &s, &n };
	CHECK(cuLaunchKernel(scale, 64, 1, 1, 256, 1, 1, 0, stream, params, NULL));
}

static void launch_sleep(unsigned long long ns, CUstream stream)
{
	void *params[] = { &ns };
	CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, stream, params, NULL));
}

static void pipeline(CUstream *streams)
{
	float *host;
	CUdeviceptr device;
	CUevent start[STREAMS], stop[STREAMS];
	size_t bytes = sizeof(float) * SLICE * STREAMS;

	CHECK(cuMemHostAlloc((void **)&host, bytes, 0));
	EXPECT((uintptr_t)host % 4096 == 0, "pinned memory at %p is not page aligned", (void *)host);
	CHECK(cuMemAlloc(&device, bytes));
	for (int i = 0; i < SLICE * STREAMS; i++)
		host[i] = (float)(i % 4099) - 2000.0f;

	for (int s = 0; s < STREAMS; s++) {
		size_t offset = (size_t)s * SLICE;
		CHECK(cuEventCreate(&start[s], CU_EVENT_DEFAULT));
		CHECK(cuEventCreate(&stop[s], CU_EVENT_DEFAULT));
		CHECK(cuEventRecord(start[s], streams[s]));
		CHECK(cuMemcpyHtoDAsync(device + offset * sizeof(float), host + offset, SLICE * sizeof(float), streams[s]));
		launch_scale(device + offset * sizeof(float), (float)(s + 2), SLICE, streams[s]);
		CHECK(cuMemcpyDtoHAsync(host + offset, device + offset * sizeof(float), SLICE * sizeof(float), streams[s]));
		CHECK(cuEventRecord(stop[s], streams[s]));
	}
	for (int s = 0; s < STREAMS; s++) {
		CHECK(cuEventSynchronize(stop[s]));
		float ms = -1.0f;
		CHECK(cuEventElapsedTime(&ms, start[s], stop[s]));
		EXPECT(ms >= 0.0f, "stream %d: elapsed %f ms", s, ms);
		printf("time_stream%d_ms=%.3f\n", s, ms);
	}
	for (int s = 0; s < STREAMS; s++) {
		for (int i = 0; i < SLICE; i++) {
			int index = s * SLICE + i;
			float want = ((float)(index % 4099) - 2000.0f) * (float)(s + 2);
			if (host[index] != want) {
				EXPECT(host[index] == want, "stream %d element %d: %g, expected %g", s, i, host[index], want);
				break;
			}
		}
		printf("stream %d scale=%d checksum=%016llx\n", s, s + 2,
		       (unsigned long long)drv_fnv1a(host + (size_t)s * SLICE, SLICE * sizeof(float)));
		CHECK(cuEventDestroy(start[s]));
		CHECK(cuEventDestroy(stop[s]));
	}
	CHECK(cuMemFree(device));
	CHECK(cuMemFreeHost(host));
}

/* streams[1] must not scale x before streams[0] has set it, though
 * streams[0] sleeps first. */
static void cross_stream_wait(CUstream *streams)
{
	CUdeviceptr x;
	CUevent ready, never_recorded, timing_off;
	float host[256];
	const float one = 1.0f;
	uint32_t one_bits;
	memcpy(&one_bits, &one, sizeof one_bits);

	CHECK(cuMemAlloc(&x, sizeof host));
	CHECK(cuMemsetD32(x, 0, 256));
	CHECK(cuEventCreate(&ready, CU_EVENT_DEFAULT));
	CHECK(cuEventCreate(&never_recorded, CU_EVENT_DEFAULT));
	CHECK(cuEventCreate(&timing_off, CU_EVENT_DISABLE_TIMING));

	EXPECT_RESULT(cuEventQuery(never_recorded), CUDA_SUCCESS);
	launch_sleep(BUSY_NS, streams[0]);
	CHECK(cuMemsetD32Async(x, one_bits, 256, streams[0]));
	CHECK(cuEventRecord(ready, streams[0]));
	CHECK(cuEventRecord(timing_off, streams[0]));
	CHECK(cuStreamWaitEvent(streams[1], ready, 0));
	launch_scale(x, 3.0f, 256, streams[1]);

	CUresult stream_busy = cuStreamQuery(streams[0]);
	CUresult event_busy = cuEventQuery(ready);
	CUresult waiter_busy = cuStreamQuery(streams[1]);
	EXPECT(stream_busy == CUDA_ERROR_NOT_READY, "cuStreamQuery while busy gave %s", drv_error_name(stream_busy));
	EXPECT(event_busy == CUDA_ERROR_NOT_READY, "cuEventQuery while busy gave %s", drv_error_name(event_busy));
	EXPECT(waiter_busy == CUDA_ERROR_NOT_READY, "cuStreamQuery of the waiting stream gave %s",
	       drv_error_name(waiter_busy));
	printf("busy: stream_query=%s event_query=%s waiting_stream_query=%s\n", drv_error_name(stream_busy),
	       drv_error_name(event_busy), drv_error_name(waiter_busy));

	CHECK(cuStreamSynchronize(streams[1]));
	EXPECT_RESULT(cuEventQuery(ready), CUDA_SUCCESS);
	CHECK(cuStreamSynchronize(streams[0]));
	EXPECT_RESULT(cuStreamQuery(streams[0]), CUDA_SUCCESS);
	EXPECT_RESULT(cuStreamQuery(streams[1]), CUDA_SUCCESS);
	float ms;
	EXPECT_RESULT(cuEventElapsedTime(&ms, ready, timing_off), CUDA_ERROR_INVALID_HANDLE);
	printf("idle: stream_query=CUDA_SUCCESS event_query=CUDA_SUCCESS elapsed_without_timing=CUDA_ERROR_INVALID_HANDLE\n");

	CHECK(cuMemcpyDtoH(host, x, sizeof host));
	int ordered = 1;
	for (int i = 0; i < 256; i++)
		ordered &= host[i] == 3.0f;
	EXPECT(ordered, "streams[1] ran before the event it waited on (x[0] = %g)", host[0]);
	printf("cross_stream_wait x=%g\n", host[0]);

	CHECK(cuEventDestroy(timing_off));
	CHECK(cuEventDestroy(never_recorded));
	CHECK(cuEventDestroy(ready));
	CHECK(cuMemFree(x));
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&scale, module, "scaleArray"));
	CHECK(cuModuleGetFunction(&sleep_ns, module, "sleepNs"));

	CUstream streams[STREAMS];
	for (int s = 0; s < STREAMS; s++) {
		CHECK(s % 2 ? cuStreamCreate(&streams[s], CU_STREAM_NON_BLOCKING)
			    : cuStreamCreateWithPriority(&streams[s], CU_STREAM_DEFAULT, 0));
		unsigned flags;
		int priority;
		CHECK(cuStreamGetFlags(streams[s], &flags));
		CHECK(cuStreamGetPriority(streams[s], &priority));
		EXPECT(flags == (s % 2 ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT), "stream %d flags %u", s, flags);
		EXPECT(priority == 0, "stream %d priority %d", s, priority);
	}

	pipeline(streams);
	cross_stream_wait(streams);

	CHECK(cuCtxSynchronize());
	for (int s = 0; s < STREAMS; s++)
		CHECK(cuStreamDestroy(streams[s]));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	return drv_exit_status();
}
