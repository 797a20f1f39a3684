/* drv_ctxevents IMAGE: cuCtxRecordEvent and cuCtxWaitEvent. An event recorded for the context
 * is done only once a long kernel on a non-blocking stream of it is; after cuCtxWaitEvent a
 * stream of the context, one made before and one made after, runs its work only once the
 * event is done. Each check is one the program makes itself: a record or wait that missed a
 * stream leaves the long kernel running when the check looks. Through Remora (REMORA_SERVER
 * set) it also checks that a context not the client's is refused. */
#include "drv_common.h"

#define N 4096
#define LONG_NS 150000000ull /* long enough to be running still when a missed wait returns */

static CUfunction sleep_ns, fill_u32;

static void sleep_on(CUstream s)
{
	unsigned long long ns = LONG_NS;
	void *params[] = {&ns};
	CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, s, params, NULL));
}

/* fillU32 of v over buf on s, waited for; true if every word is v. */
static int fill_on(CUstream s, CUdeviceptr buf, unsigned v)
{
	int n = N;
	void *params[] = {&buf, &v, &n};
	CHECK(cuLaunchKernel(fill_u32, 16, 1, 1, 256, 1, 1, 0, s, params, NULL));
	CHECK(cuStreamSynchronize(s));
	static unsigned got[N];
	CHECK(cuMemcpyDtoH(got, buf, sizeof(got)));
	for (int i = 0; i < N; i++)
		if (got[i] != v)
			return 0;
	return 1;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	CUcontext ctx = drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&sleep_ns, module, "sleepNs"));
	CHECK(cuModuleGetFunction(&fill_u32, module, "fillU32"));
	CUstream busy, before, after;
	CUevent e;
	CUdeviceptr buf;
	CHECK(cuStreamCreate(&busy, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamCreate(&before, CU_STREAM_NON_BLOCKING));
	CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
	CHECK(cuMemAlloc(&buf, N * sizeof(unsigned)));

	/* A record takes in the busy stream's kernel. */
	sleep_on(busy);
	CHECK(cuCtxRecordEvent(ctx, e));
	CHECK(cuEventSynchronize(e));
	CUresult busy_state = cuStreamQuery(busy);
	printf("record: the busy stream is done once the event is: %s\n", busy_state == CUDA_SUCCESS ? "yes" : "no");
	EXPECT(busy_state == CUDA_SUCCESS, "cuCtxRecordEvent missed a stream (%s)", drv_error_name(busy_state));

	/* A wait holds up a stream made before it. */
	sleep_on(busy);
	CHECK(cuEventRecord(e, busy));
	CHECK(cuCtxWaitEvent(ctx, e));
	int filled = fill_on(before, buf, 0x1234u);
	CUresult state = cuEventQuery(e);
	printf("wait: a stream made before ran after the event: %s, filled %s\n", state == CUDA_SUCCESS ? "yes" : "no",
	       filled ? "yes" : "no");
	EXPECT(state == CUDA_SUCCESS && filled, "cuCtxWaitEvent missed a stream made before it (%s)",
	       drv_error_name(state));

	/* And one made after it. */
	sleep_on(busy);
	CHECK(cuEventRecord(e, busy));
	CHECK(cuCtxWaitEvent(ctx, e));
	CHECK(cuStreamCreate(&after, CU_STREAM_NON_BLOCKING));
	filled = fill_on(after, buf, 0x5678u);
	state = cuEventQuery(e);
	printf("wait: a stream made after ran after the event: %s, filled %s\n", state == CUDA_SUCCESS ? "yes" : "no",
	       filled ? "yes" : "no");
	EXPECT(state == CUDA_SUCCESS && filled, "cuCtxWaitEvent missed a stream made after it (%s)",
	       drv_error_name(state));

	if (getenv("REMORA_SERVER")) /* a context of no client's */
		EXPECT_RESULT(cuCtxRecordEvent((CUcontext)(uintptr_t)0x1000, e), CUDA_ERROR_INVALID_CONTEXT);
	CHECK(cuCtxSynchronize());
	CHECK(cuMemFree(buf));
	CHECK(cuEventDestroy(e));
	CHECK(cuStreamDestroy(busy));
	CHECK(cuStreamDestroy(before));
	CHECK(cuStreamDestroy(after));
	CHECK(cuModuleUnload(module));
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
