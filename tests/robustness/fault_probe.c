/* A driver-API client for the fault suite (fault_suite.py; the GPU suite runs it too).
 *   fault_probe fault IMAGE KIND   faults the context: KIND address (faultKernel on a bad
 *                                  pointer), assert (assertKernel: a device-side assert) or
 *                                  unreported (faultKernel, then exit before any call could
 *                                  report it) or departing (as unreported, behind a 300 ms
 *                                  kernel: the fault comes after the program has gone) or
 *                                  long (no fault: a 20 s kernel, for kernel_time_limit).
 *                                  Prints the synchronize's error name, then the next call's
 *                                  (the error is sticky), or "launched".
 *   fault_probe bystander IMAGE    computes (scaleArray) and checks, prints "ready", waits for a
 *                                  line on stdin, then prints the error names of its next two
 *                                  calls (a copy back, a synchronize)
 *   fault_probe capabilities IMAGE prints the device attributes of capabilities a remote
 *                                  client has only in part, one "NAME VALUE" line each
 *   fault_probe concurrent IMAGE   writes managed memory from the host while a kernel writes
 *                                  the same bytes (behind a 200 ms kernel), then prints the
 *                                  synchronize's error name: a concurrent managed access
 *   fault_probe compute IMAGE N    N rounds of scaleArray over 1 MiB of floats, each checked;
 *                                  prints a hash of the final bytes (bit-identical runs give
 *                                  the same hash) */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                        \
	do {                                                                               \
		CUresult r_ = (call);                                                      \
		if (r_ != CUDA_SUCCESS) {                                                  \
			fprintf(stderr, "fault_probe: %s failed: %d\n", #call, (int)r_);  \
			exit(1);                                                           \
		}                                                                          \
	} while (0)

#define N (1 << 18) /* floats */

static const char *name_of(CUresult r)
{
	const char *name = "?";
	cuGetErrorName(r, &name);
	return name;
}

/* Scales x (N floats, on the device) by s, rounds times, checking each round's bytes
 * against the host's own arithmetic; the host copy ends in host. */
static void scale_rounds(CUfunction scale, CUdeviceptr x, float *host, int rounds)
{
	static float want[N];
	for (int i = 0; i < N; i++)
		want[i] = host[i] = (float)(i % 1000) * 0.5f;
	CHECK(cuMemcpyHtoD(x, host, sizeof(float) * N));
	for (int k = 0; k < rounds; k++) {
		float s = 1.0f + (float)(k % 3) * 0.25f;
		int n = N;
		void *params[] = {&x, &s, &n};
		CHECK(cuLaunchKernel(scale, 64, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
		CHECK(cuMemcpyDtoH(host, x, sizeof(float) * N));
		for (int i = 0; i < N; i++) {
			want[i] *= s;
			if (host[i] != want[i]) {
				fprintf(stderr, "fault_probe: round %d element %d: %g, want %g\n", k, i, host[i], want[i]);
				exit(1);
			}
		}
	}
}

int main(int argc, char **argv)
{
	if (argc < 3)
		return 2;
	CUcontext ctx;
	CUmodule mod;
	CHECK(cuInit(0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuModuleLoad(&mod, argv[2]));
	if (!strcmp(argv[1], "fault") && argc > 3) {
		CUfunction f;
		CUdeviceptr bad = 16;
		int zero = 0;
		void *fault_params[] = {&bad}, *assert_params[] = {&zero};
		int asserting = !strcmp(argv[3], "assert"), departing = !strcmp(argv[3], "departing");
		int long_kernel = !strcmp(argv[3], "long");
		if (departing || long_kernel) {
			CUfunction sleep_ns;
			unsigned long long ns = long_kernel ? 20000000000ull : 300000000ull;
			void *sleep_params[] = {&ns};
			CHECK(cuModuleGetFunction(&sleep_ns, mod, "sleepNs"));
			CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, NULL, sleep_params, NULL));
		}
		if (!long_kernel) {
			CHECK(cuModuleGetFunction(&f, mod, asserting ? "assertKernel" : "faultKernel"));
			CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, asserting ? assert_params : fault_params, NULL));
		}
		if (!strcmp(argv[3], "unreported") || departing) {
			char gpu[64]; /* a call that sends the launch and says nothing of the fault */
			CHECK(cuDeviceGetName(gpu, sizeof(gpu), 0));
			printf("launched\n");
			return 0;
		}
		printf("%s\n", name_of(cuCtxSynchronize()));
		CUdeviceptr p;
		printf("%s\n", name_of(cuMemAlloc(&p, 4096)));
		return 0;
	}
	if (!strcmp(argv[1], "concurrent")) {
		CUfunction sleep_ns, fill;
		CUdeviceptr m;
		unsigned long long ns = 200000000ull;
		unsigned v = 7;
		int n = 1024;
		void *sleep_params[] = {&ns}, *fill_params[] = {&m, &v, &n};
		CHECK(cuModuleGetFunction(&sleep_ns, mod, "sleepNs"));
		CHECK(cuModuleGetFunction(&fill, mod, "fillU32"));
		CHECK(cuMemAllocManaged(&m, n * sizeof(unsigned), CU_MEM_ATTACH_GLOBAL));
		CHECK(cuCtxSynchronize());
		memset((void *)(uintptr_t)m, 0, n * sizeof(unsigned));
		CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, NULL, sleep_params, NULL));
		CHECK(cuLaunchKernel(fill, 4, 1, 1, 256, 1, 1, 0, NULL, fill_params, NULL));
		((volatile unsigned *)(uintptr_t)m)[0] = 5; /* while the kernels run */
		printf("%s\n", name_of(cuCtxSynchronize()));
		return 0;
	}
	if (!strcmp(argv[1], "capabilities")) {
		static const struct {
			const char *name;
			CUdevice_attribute attr;
		} caps[] = {
			{"concurrent_managed_access", CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS},
			{"pageable_memory_access", CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS},
			{"pageable_uses_host_page_tables", CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES},
			{"host_native_atomics", CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED},
			{"partial_host_native_atomics", CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED},
			{"direct_managed_access_from_host", CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST},
			{"host_pointer_for_registered_mem", CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM},
		};
		for (size_t i = 0; i < sizeof(caps) / sizeof(caps[0]); i++) {
			int v = -1;
			CHECK(cuDeviceGetAttribute(&v, caps[i].attr, 0));
			printf("%s %d\n", caps[i].name, v);
		}
		return 0;
	}
	CUfunction scale;
	CUdeviceptr x;
	static float host[N];
	CHECK(cuModuleGetFunction(&scale, mod, "scaleArray"));
	CHECK(cuMemAlloc(&x, sizeof(float) * N));
	if (!strcmp(argv[1], "bystander")) {
		scale_rounds(scale, x, host, 2);
		printf("ready\n");
		fflush(stdout);
		char line[16];
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		printf("%s\n", name_of(cuMemcpyDtoH(host, x, sizeof(float) * N)));
		printf("%s\n", name_of(cuCtxSynchronize()));
		return 0;
	}
	if (!strcmp(argv[1], "compute") && argc > 3) {
		scale_rounds(scale, x, host, atoi(argv[3]));
		uint64_t h = 1469598103934665603ull; /* FNV-1a over the bytes */
		const unsigned char *b = (const unsigned char *)host;
		for (size_t i = 0; i < sizeof(host); i++)
			h = (h ^ b[i]) * 1099511628211ull;
		printf("%016llx\n", (unsigned long long)h);
		return 0;
	}
	return 2;
}
