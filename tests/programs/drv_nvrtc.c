/* drv_nvrtc: what NVIDIA's NVRTC samples do (vectorAdd_nvrtc and its kin): compile a
 * kernel at run time with NVRTC, once to a CUBIN for the device's architecture and once
 * to PTX, and run each in a context of the program's own (cuCtxCreate, cuModuleLoadData,
 * cuLaunchKernel, cuCtxDestroy). Prints what a native run prints. */
#include <nvrtc.h>

#include "drv_common.h"

#define N 50000

static const char source[] =
	"extern \"C\" __global__ void vecAdd(const float *a, const float *b, float *c, int n)\n"
	"{\n"
	"    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
	"        c[i] = a[i] + b[i];\n"
	"}\n";

#define NVRTC_CHECK(call)                                                                      \
	do {                                                                                   \
		nvrtcResult nvrtc_rc_ = (call);                                                \
		if (nvrtc_rc_ != NVRTC_SUCCESS) {                                              \
			fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,   \
				nvrtcGetErrorString(nvrtc_rc_));                               \
			exit(1);                                                               \
		}                                                                              \
	} while (0)

static float host_a[N], host_b[N], host_c[N], expected[N];

/* The source compiled with option arch: a CUBIN (cubin) or PTX, in a new buffer. */
static char *compile(const char *arch, int cubin)
{
	nvrtcProgram prog;
	NVRTC_CHECK(nvrtcCreateProgram(&prog, source, "vecAdd.cu", 0, NULL, NULL));
	const char *options[] = { arch };
	nvrtcResult rc = nvrtcCompileProgram(prog, 1, options);
	if (rc != NVRTC_SUCCESS) {
		size_t log_size;
		NVRTC_CHECK(nvrtcGetProgramLogSize(prog, &log_size));
		char *log = malloc(log_size + 1);
		NVRTC_CHECK(nvrtcGetProgramLog(prog, log));
		fprintf(stderr, "compiling with %s failed: %s\n%s\n", arch, nvrtcGetErrorString(rc), log);
		exit(1);
	}
	size_t size;
	char *code;
	if (cubin) {
		NVRTC_CHECK(nvrtcGetCUBINSize(prog, &size));
		code = malloc(size);
		NVRTC_CHECK(nvrtcGetCUBIN(prog, code));
	} else {
		NVRTC_CHECK(nvrtcGetPTXSize(prog, &size));
		code = malloc(size);
		NVRTC_CHECK(nvrtcGetPTX(prog, code));
	}
	NVRTC_CHECK(nvrtcDestroyProgram(&prog));
	return code;
}

/* As a sample does: a context, the module, the launch, the result checked, the context
 * destroyed with what it holds. Returns the result's checksum. */
static uint64_t run(CUdevice dev, const char *code, const char *what)
{
	CUcontext ctx;
	CUmodule module;
	CUfunction f;
	CUdeviceptr a, b, c;
	CHECK(cuCtxCreate(&ctx, NULL, 0, dev));
	CHECK(cuModuleLoadData(&module, code));
	CHECK(cuModuleGetFunction(&f, module, "vecAdd"));
	CHECK(cuMemAlloc(&a, sizeof host_a));
	CHECK(cuMemAlloc(&b, sizeof host_b));
	CHECK(cuMemAlloc(&c, sizeof host_c));
	CHECK(cuMemcpyHtoD(a, host_a, sizeof host_a));
	CHECK(cuMemcpyHtoD(b, host_b, sizeof host_b));
	int n = N;
	void *args[] = { &a, &b, &c, &n };
	CHECK(cuLaunchKernel(f, (N + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, args, NULL));
	CHECK(cuCtxSynchronize());
	memset(host_c, 0, sizeof host_c);
	CHECK(cuMemcpyDtoH(host_c, c, sizeof host_c));
	EXPECT(memcmp(host_c, expected, sizeof host_c) == 0, "%s: vecAdd differs", what);
	CHECK(cuMemFree(a));
	CHECK(cuMemFree(b));
	CHECK(cuMemFree(c));
	CHECK(cuModuleUnload(module));
	CHECK(cuCtxDestroy(ctx));
	return drv_fnv1a(host_c, sizeof host_c);
}

int main(void)
{
	for (int i = 0; i < N; i++) {
		host_a[i] = (float)(i % 1000) / 8.0f;
		host_b[i] = (float)(i / 1000) * 3.0f;
		expected[i] = host_a[i] + host_b[i];
	}
	CUdevice dev;
	int major, minor;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, 0));
	CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	char arch[64];
	snprintf(arch, sizeof arch, "--gpu-architecture=sm_%d%d", major, minor);
	char *cubin = compile(arch, 1), *ptx = compile("--gpu-architecture=compute_75", 0);
	uint64_t sum_cubin = run(dev, cubin, "cubin"), sum_ptx = run(dev, ptx, "ptx");
	printf("vecAdd from NVRTC's CUBIN: %016llx\n", (unsigned long long)sum_cubin);
	printf("vecAdd from NVRTC's PTX: %s\n", sum_ptx == sum_cubin ? "the same" : "differs");
	EXPECT(sum_ptx == sum_cubin, "the PTX's result differs from the CUBIN's");
	CUcontext cur;
	CHECK(cuCtxGetCurrent(&cur));
	EXPECT(cur == NULL, "a context is current after destroying both");
	free(cubin);
	free(ptx);
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
