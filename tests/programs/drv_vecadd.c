/* drv_vecadd IMAGE [MODE]: vecAdd from an image loaded one way or several.
 *
 * MODE: data (cuModuleLoadData), dataex (cuModuleLoadDataEx with JIT log
 * options), fatbin (cuModuleLoadFatBinary: give it a fatbin), file
 * (cuModuleLoad), library (cuLibraryLoadData, launched through the CUkernel
 * as cudart does), or all (the default: data, dataex, file and library).
 * Each launch runs once with kernelParams and once with `extra`; the
 * __device__ variable kernelsMagic is read back too. */
#include <stddef.h>
#include "drv_common.h"

#define N 1000003
#define KERNELS_MAGIC 0x52454d4fu

/* vecAdd's parameters as the GPU lays them out, for CU_LAUNCH_PARAM_BUFFER_POINTER. */
struct vec_add_args { CUdeviceptr a, b, c; int n; };

static float host_a[N], host_b[N], host_c[N], expected[N];

static void check_param_layout(CUfunction f)
{
	static const size_t offsets[] = { 0, 8, 16, 24 }, sizes[] = { 8, 8, 8, 4 };
	for (size_t i = 0; i < 4; i++) {
		size_t offset, size;
		CHECK(cuFuncGetParamInfo(f, i, &offset, &size));
		EXPECT(offset == offsets[i] && size == sizes[i], "param %zu at %zu size %zu", i, offset, size);
	}
	size_t offset, size;
	EXPECT_RESULT(cuFuncGetParamInfo(f, 4, &offset, &size), CUDA_ERROR_INVALID_VALUE);
	const char *name;
	CHECK(cuFuncGetName(&name, f));
	EXPECT(strcmp(name, "vecAdd") == 0, "cuFuncGetName gave %s", name);
}

/* Launches f both ways and checks c; returns the checksum of c. */
static uint64_t run_vec_add(CUfunction f, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c, const char *mode)
{
	int n = N;
	void *params[] = { &a, &b, &c, &n };
	CHECK(cuMemsetD32(c, 0, N));
	CHECK(cuLaunchKernel(f, 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(host_c, c, sizeof host_c));
	EXPECT(memcmp(host_c, expected, sizeof host_c) == 0, "%s: vecAdd with kernelParams differs", mode);

	struct vec_add_args args = { a, b, c, n };
	size_t args_size = offsetof(struct vec_add_args, n) + sizeof(args.n); /* the parameters end at n, before padding */
	void *extra[] = { CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &args_size,
			  CU_LAUNCH_PARAM_END };
	CHECK(cuMemsetD32(c, 0, N));
	CHECK(cuLaunchKernel(f, 97, 1, 1, 128, 1, 1, 0, NULL, NULL, extra));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(host_c, c, sizeof host_c));
	EXPECT(memcmp(host_c, expected, sizeof host_c) == 0, "%s: vecAdd with extra differs", mode);
	return drv_fnv1a(host_c, sizeof host_c);
}

static void check_magic(CUdeviceptr global, size_t size, const char *mode)
{
	unsigned magic = 0;
	EXPECT(size == sizeof magic, "%s: kernelsMagic has %zu bytes", mode, size);
	CHECK(cuMemcpyDtoH(&magic, global, sizeof magic));
	EXPECT(magic == KERNELS_MAGIC, "%s: kernelsMagic is 0x%08x", mode, magic);
}

static void run_mode(const char *mode, const char *path, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)
{
	CUmodule module = NULL;
	CUlibrary library = NULL;
	CUfunction f;
	CUdeviceptr global;
	size_t global_size;
	void *image = drv_read_file(path, NULL);

	if (strcmp(mode, "data") == 0) {
		CHECK(cuModuleLoadData(&module, image));
	} else if (strcmp(mode, "dataex") == 0) {
		char info_log[4096] = "", error_log[4096] = "";
		CUjit_option options[] = { CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
					   CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES };
		void *values[] = { info_log, (void *)(uintptr_t)sizeof info_log, error_log,
				   (void *)(uintptr_t)sizeof error_log };
		CUresult rc = cuModuleLoadDataEx(&module, image, 4, options, values);
		if (rc != CUDA_SUCCESS)
			fprintf(stderr, "JIT error log: %s\n", error_log);
		CHECK(rc);
		if (info_log[0])
			fprintf(stderr, "JIT info log: %s\n", info_log);
	} else if (strcmp(mode, "fatbin") == 0) {
		CHECK(cuModuleLoadFatBinary(&module, image));
	} else if (strcmp(mode, "file") == 0) {
		CHECK(cuModuleLoad(&module, path));
	} else if (strcmp(mode, "library") == 0) {
		CUkernel kernel;
		CHECK(cuLibraryLoadData(&library, image, NULL, NULL, 0, NULL, NULL, 0));
		CHECK(cuLibraryGetKernel(&kernel, library, "vecAdd"));
		EXPECT_RESULT(cuLibraryGetKernel(&kernel, library, "noSuchKernel"), CUDA_ERROR_NOT_FOUND);
		CHECK(cuLibraryGetKernel(&kernel, library, "vecAdd"));
		CHECK(cuLibraryGetModule(&module, library));
		CHECK(cuKernelGetFunction(&f, kernel));
		check_param_layout(f);
		run_vec_add(f, a, b, c, mode);
		/* cudart hands the CUkernel itself to cuLaunchKernel. */
		uint64_t sum = run_vec_add((CUfunction)kernel, a, b, c, mode);
		CHECK(cuLibraryGetGlobal(&global, &global_size, library, "kernelsMagic"));
		check_magic(global, global_size, mode);
		CHECK(cuLibraryUnload(library));
		printf("mode=%s vecAdd n=%d checksum=%016llx kernelsMagic=ok\n", mode, N, (unsigned long long)sum);
		free(image);
		return;
	} else {
		fprintf(stderr, "unknown mode %s\n", mode);
		exit(2);
	}
	free(image);

	EXPECT_RESULT(cuModuleGetFunction(&f, module, "noSuchKernel"), CUDA_ERROR_NOT_FOUND);
	CHECK(cuModuleGetFunction(&f, module, "vecAdd"));
	check_param_layout(f);
	uint64_t sum = run_vec_add(f, a, b, c, mode);
	CHECK(cuModuleGetGlobal(&global, &global_size, module, "kernelsMagic"));
	check_magic(global, global_size, mode);
	CHECK(cuModuleUnload(module));
	printf("mode=%s vecAdd n=%d checksum=%016llx kernelsMagic=ok\n", mode, N, (unsigned long long)sum);
}

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: %s IMAGE [data|dataex|fatbin|file|library|all]\n", argv[0]);
		return 2;
	}
	const char *mode = argc == 3 ? argv[2] : "all";

	for (int i = 0; i < N; i++) {
		host_a[i] = (float)(i % 1000) * 0.5f;
		host_b[i] = (float)(i % 777) * 0.25f + 1.0f;
		expected[i] = host_a[i] + host_b[i];
	}
	drv_open_device0();
	CUdeviceptr a, b, c;
	CHECK(cuMemAlloc(&a, sizeof host_a));
	CHECK(cuMemAlloc(&b, sizeof host_b));
	CHECK(cuMemAlloc(&c, sizeof host_c));
	CHECK(cuMemcpyHtoD(a, host_a, sizeof host_a));
	CHECK(cuMemcpyHtoD(b, host_b, sizeof host_b));

	if (strcmp(mode, "all") == 0) {
		static const char *const modes[] = { "data", "dataex", "file", "library" };
		for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++)
			run_mode(modes[i], argv[1], a, b, c);
	} else {
		run_mode(mode, argv[1], a, b, c);
	}

	CHECK(cuMemFree(c));
	CHECK(cuMemFree(b));
	CHECK(cuMemFree(a));
	drv_close_device0();
	return drv_exit_status();
}
