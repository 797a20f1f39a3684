/* drv_attrcache: answers a client keeps (proto/api.spec's `cached`) stay true. Device
 * attributes asked many times; a function's and a kernel's attributes read, changed with
 * cuFuncSetAttribute and cuKernelSetAttribute, and read again; the primary context's state
 * before and after it is retained. Prints what it read (the same natively and remotely).
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

	CHECK(cuLibraryUnload(lib));
	CHECK(cuModuleUnload(mod));
	drv_close_device0();
	return drv_exit_status();
}
