/* drv_attrcache: answers a client keeps (proto/api.spec's `cached`) stay true. Device
 * attributes asked many times; a function's and a kernel's attributes read, changed with
 * cuFuncSetAttribute and cuKernelSetAttribute, and read again; the primary context's state
 * before and after it is retained. Then what PyTorch asks around each launch, REPEAT times: a
 * kernel's attribute set to the value it holds, the kernel's function, its attributes and
 * occupancy, the context's id, a stream's capture status; then the value changed, changed
 * back and set after a change through the function, each read again; a stream's capture
 * status while it captures. Prints what it read (the same natively and remotely).
 *   drv_attrcache IMAGE [REPEAT] */
#include "drv_common.h"

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: drv_attrcache IMAGE [REPEAT]\n");
		return 2;
	}
	int repeat = argc > 2 ? atoi(argv[2]) : 1000;
	CUdevice dev;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	unsigned flags = 0;
	int active = -1;
	CHECK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	printf("primary context before retain: active=%d\n", active);
	drv_open_device0();
	CHECK(cuDevicePrimaryCtxGetState(dev, &flags, &active));
	EXPECT(active == 1, "primary context not active after retain: %d", active);
	printf("primary context after retain: active=%d\n", active);

	int sms = 0, warp = 0;
	for (int i = 0; i < repeat; i++) {
		CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
		CHECK(cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
	}
	EXPECT(warp == 32, "warp size %d", warp);
	printf("multiprocessors=%d warp=%d\n", sms, warp);

	void *image = drv_read_file(argv[1], NULL);
	CUmodule mod;
	CUfunction f;
	CHECK(cuModuleLoadData(&mod, image));
	CHECK(cuModuleGetFunction(&f, mod, "vecAdd"));
	int smem = -1;
	for (int i = 0; i < repeat; i++)
		CHECK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	printf("function dynamic shared memory: %d\n", smem);
	CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 2048));
	CHECK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	EXPECT(smem == 2048, "after cuFuncSetAttribute(2048): %d", smem);
	printf("function dynamic shared memory after set: %d\n", smem);

	CUlibrary lib;
	CUkernel k;
	CHECK(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0));
	CHECK(cuLibraryGetKernel(&k, lib, "scaleArray"));
	for (int i = 0; i < repeat; i++)
		CHECK(cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
	printf("kernel dynamic shared memory: %d\n", smem);
	CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096, k, dev));
	CHECK(cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
	EXPECT(smem == 4096, "after cuKernelSetAttribute(4096): %d", smem);
	printf("kernel dynamic shared memory after set: %d\n", smem);

	CUfunction kf = NULL;
	CUstream st, urgent;
	int least = 0, greatest = 0;
	CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CHECK(cuStreamCreateWithPriority(&urgent, CU_STREAM_NON_BLOCKING, greatest));
	size_t stack0 = 0;
	CHECK(cuCtxGetLimit(&stack0, CU_LIMIT_STACK_SIZE));
	unsigned long long ctx_id = 0, id;
	for (int i = 0; i < repeat; i++) {
		CUfunction g;
		int blocks = 0, prio = 1, g_prio = 1;
		size_t stack = 0;
		CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		/* What cuDNN's RNNs ask at every call: kept by the client. */
		CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
		CHECK(cuCtxGetStreamPriorityRange(NULL, &g_prio));
		CHECK(cuStreamGetPriority(urgent, &prio));
		EXPECT(stack == stack0 && g_prio == greatest && prio == greatest,
		       "round %d: stack %zu (%zu), greatest priority %d, the stream's %d (%d)", i, stack, stack0, g_prio, prio,
		       greatest);
		CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096, k, dev));
		CHECK(cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
		CHECK(cuKernelGetFunction(&g, k));
		CHECK(cuFuncGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, g));
		CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, g, 128, 1024, 0));
		CHECK(cuCtxGetId(NULL, &id));
		CHECK(cuStreamIsCapturing(st, &cs));
		EXPECT(i == 0 || (g == kf && id == ctx_id), "round %d: another function or context id", i);
		EXPECT(smem == 4096 && blocks > 0 && cs == CU_STREAM_CAPTURE_STATUS_NONE,
		       "round %d: smem %d, %d blocks, capture status %d", i, smem, blocks, (int)cs);
		kf = g;
		ctx_id = id;
	}
	printf("kernel attribute set %d times to what it holds: %d\n", repeat, smem);
	printf("stream priorities %d to %d, asked %d times\n", least, greatest, repeat);
	/* A limit set, and a stream made again with another priority: read back as they are now. */
	size_t stack = 0;
	CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack0 + 1024));
	CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	EXPECT(stack >= stack0 + 1024, "stack size after cuCtxSetLimit(%zu): %zu", stack0 + 1024, stack);
	CHECK(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack0));
	CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	EXPECT(stack == stack0, "stack size after cuCtxSetLimit(%zu) back: %zu", stack0, stack);
	for (int i = 0; i < 4; i++) { /* the handle may come again for a stream of another priority */
		int prio = 1, want = i % 2 ? least : greatest;
		CHECK(cuStreamDestroy(urgent));
		CHECK(cuStreamCreateWithPriority(&urgent, CU_STREAM_NON_BLOCKING, want));
		CHECK(cuStreamGetPriority(urgent, &prio));
		EXPECT(prio == want, "a stream made with priority %d: %d", want, prio);
	}
	printf("limit set and read back, streams made again with their priorities: checked\n");
	/* Another kernel's attribute set again and again, to values in turn: this kernel's answer
	 * stays kept (cuKernelSetAttribute forgets the answers naming its own kernel only). */
	CUkernel other;
	CHECK(cuLibraryGetKernel(&other, lib, "fillU32"));
	for (int i = 0; i < 100; i++) {
		int mine = 0;
		CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, i % 2 ? 1024 : 2048, other, dev));
		CHECK(cuKernelGetAttribute(&mine, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
		EXPECT(mine == 4096, "round %d: this kernel's attribute %d after another's was set", i, mine);
	}
	CHECK(cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, other, dev));
	EXPECT(smem == 1024, "the other kernel's attribute after its last set (1024): %d", smem);
	printf("another kernel's attribute set 100 times: checked\n");
	CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 8192, k, dev));
	CHECK(cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
	EXPECT(smem == 8192, "after cuKernelSetAttribute(8192): %d", smem);
	CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096, k, dev));
	CHECK(cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
	EXPECT(smem == 4096, "after cuKernelSetAttribute(4096) again: %d", smem);
	CHECK(cuFuncSetAttribute(kf, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 1024));
	CHECK(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 4096, k, dev));
	CHECK(cuKernelGetAttribute(&smem, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, dev));
	EXPECT(smem == 4096, "after cuFuncSetAttribute(1024) and cuKernelSetAttribute(4096): %d", smem);
	printf("kernel attribute changed and back: %d\n", smem);
	CUstreamCaptureStatus cs = CU_STREAM_CAPTURE_STATUS_NONE;
	CUgraph graph;
	CHECK(cuStreamBeginCapture(st, CU_STREAM_CAPTURE_MODE_RELAXED));
	CHECK(cuStreamIsCapturing(st, &cs));
	EXPECT(cs == CU_STREAM_CAPTURE_STATUS_ACTIVE, "capture status while capturing: %d", (int)cs);
	CHECK(cuStreamEndCapture(st, &graph));
	CHECK(cuStreamIsCapturing(st, &cs));
	EXPECT(cs == CU_STREAM_CAPTURE_STATUS_NONE, "capture status after the capture: %d", (int)cs);
	printf("capture status during and after a capture: checked\n");
	CHECK(cuGraphDestroy(graph));
	CHECK(cuStreamDestroy(urgent));
	CHECK(cuStreamDestroy(st));
	CHECK(cuLibraryUnload(lib));
	CHECK(cuModuleUnload(mod));
	drv_close_device0();
	return drv_exit_status();
}
