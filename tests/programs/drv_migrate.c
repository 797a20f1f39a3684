/* Live migration's test program (docs/pool.md, "Live migration"): device state carried
 * from one iteration to the next, on two streams joined by an event, with a checksum per
 * iteration checked against the CPU. Moved between remorads mid-run
 * (tests/robustness/migrate.py), it must print what it prints unmoved, bit for bit.
 * usage: drv_migrate IMAGE [ITERATIONS [PAUSE_MS [global|threads|magic]]]; global: it holds
 * the address of the module's variable kernelsMagic and each iteration writes it by a copy,
 * adds to it by name (bumpMagic), writes it through a kernel's pointer argument (fillU32),
 * adds again and reads it by a copy, asking for its address again: wherever the module is
 * loaded anew, the address the client holds must still be the variable; it also reserves
 * an address range at the start and maps memory into it at the end; threads:
 * a second thread (a channel of its own) works on its own stream and buffer in step with
 * the first, so that a move finds it in its calls; magic: each iteration a kernel adds 1
 * to the module's variable kernelsMagic (kernels.cu), which a move must carry. */
#include <pthread.h>
#include <unistd.h>

#include "drv_common.h"

#define N (3 << 18) /* floats: 3 MiB, past one 2 MiB granule */
#define SMALL 1024  /* words of a small allocation beside it */

/* The second thread: each iteration e = e + b on a stream of its own, then waits. */
struct helper {
	CUcontext ctx;
	CUfunction vec_add;
	CUdeviceptr e, b;
	int iterations;
	pthread_barrier_t start, done;
};

static void *helper_main(void *arg)
{
	struct helper *h = arg;
	CUstream s3;
	int n = N;
	CHECK(cuCtxSetCurrent(h->ctx));
	CHECK(cuStreamCreate(&s3, CU_STREAM_NON_BLOCKING));
	for (int it = 0; it < h->iterations; it++) {
		pthread_barrier_wait(&h->start);
		void *args[] = {&h->e, &h->b, &h->e, &n};
		CHECK(cuLaunchKernel(h->vec_add, 64, 1, 1, 256, 1, 1, 0, s3, args, NULL));
		CHECK(cuStreamSynchronize(s3));
		pthread_barrier_wait(&h->done);
	}
	CHECK(cuStreamDestroy(s3));
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE [ITERATIONS [PAUSE_MS [global]]]\n", argv[0]);
		return 2;
	}
	int iterations = argc > 2 ? atoi(argv[2]) : 20, pause_ms = argc > 3 ? atoi(argv[3]) : 0;
	int threads = argc > 4 && !strcmp(argv[4], "threads"), magic = argc > 4 && !strcmp(argv[4], "magic");
	CUcontext ctx = drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CUfunction vec_add, scale, fill;
	CHECK(cuModuleGetFunction(&vec_add, module, "vecAdd"));
	CHECK(cuModuleGetFunction(&scale, module, "scaleArray"));
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	CUfunction bump = NULL;
	int global = argc > 4 && !strcmp(argv[4], "global");
	if (magic || global)
		CHECK(cuModuleGetFunction(&bump, module, "bumpMagic"));
	CUdeviceptr held = 0, reserved = 0;
	const size_t reserved_size = 64u << 20;
	if (global)
		CHECK(cuMemAddressReserve(&reserved, reserved_size, 0, 0, 0));
	if (global) {
		size_t bytes;
		CHECK(cuModuleGetGlobal(&held, &bytes, module, "kernelsMagic"));
		EXPECT(bytes == 4, "kernelsMagic is %zu bytes", bytes);
	}
	int lo, hi;
	CHECK(cuCtxGetStreamPriorityRange(&lo, &hi));
	CUstream s1, s2;
	CUevent joined;
	CHECK(cuStreamCreateWithPriority(&s1, CU_STREAM_NON_BLOCKING, hi));
	CHECK(cuStreamCreate(&s2, CU_STREAM_DEFAULT));
	CHECK(cuEventCreate(&joined, CU_EVENT_DISABLE_TIMING));
	CUdeviceptr a, b, c, tags;
	CHECK(cuMemAlloc(&a, N * sizeof(float)));
	CHECK(cuMemAlloc(&tags, SMALL * sizeof(unsigned)));
	CUdeviceptr bumped;
	CHECK(cuMemAlloc(&bumped, sizeof(unsigned)));
	CHECK(cuMemAlloc(&b, N * sizeof(float)));
	CHECK(cuMemAlloc(&c, N * sizeof(float)));
	float *ha = malloc(N * sizeof(float)), *hb = malloc(N * sizeof(float)), *hc = malloc(N * sizeof(float));
	float *got = malloc(N * sizeof(float));
	unsigned *htags = malloc(SMALL * sizeof(unsigned));
	if (!ha || !hb || !hc || !got || !htags)
		return 1;
	for (int i = 0; i < N; i++) {
		ha[i] = (float)(i % 977) * 0.25f;
		hb[i] = (float)(i % 131) - 65.0f;
	}
	CHECK(cuMemcpyHtoD(a, ha, N * sizeof(float)));
	CHECK(cuMemcpyHtoD(b, hb, N * sizeof(float)));
	struct helper helper = {.ctx = ctx, .vec_add = vec_add, .b = b, .iterations = iterations};
	pthread_t helper_thread;
	float *he = malloc(N * sizeof(float));
	if (!he)
		return 1;
	if (threads) {
		memset(he, 0, N * sizeof(float));
		CHECK(cuMemAlloc(&helper.e, N * sizeof(float)));
		CHECK(cuMemcpyHtoD(helper.e, he, N * sizeof(float)));
		pthread_barrier_init(&helper.start, NULL, 2);
		pthread_barrier_init(&helper.done, NULL, 2);
		if (pthread_create(&helper_thread, NULL, helper_main, &helper))
			return 1;
	}
	int n = N, blocks = 64, nthreads = 256;
	float half = 0.5f;
	for (int it = 0; it < iterations; it++) {
		/* s1: c = (a + b) * 0.5; s2, after it: a = c + b; tags = it. */
		void *add1[] = {&a, &b, &c, &n}, *scale1[] = {&c, &half, &n}, *add2[] = {&c, &b, &a, &n};
		unsigned tag = 0x5a000000u + (unsigned)it;
		int small = SMALL;
		void *fill1[] = {&tags, &tag, &small}, *bump1[] = {&bumped};
		if (threads)
			pthread_barrier_wait(&helper.start);
		CHECK(cuLaunchKernel(vec_add, blocks, 1, 1, nthreads, 1, 1, 0, s1, add1, NULL));
		CHECK(cuLaunchKernel(scale, blocks, 1, 1, nthreads, 1, 1, 0, s1, scale1, NULL));
		CHECK(cuEventRecord(joined, s1));
		CHECK(cuStreamWaitEvent(s2, joined, 0));
		CHECK(cuLaunchKernel(vec_add, blocks, 1, 1, nthreads, 1, 1, 0, s2, add2, NULL));
		CHECK(cuLaunchKernel(fill, 4, 1, 1, nthreads, 1, 1, 0, s2, fill1, NULL));
		if (magic)
			CHECK(cuLaunchKernel(bump, 1, 1, 1, 1, 1, 1, 0, s2, bump1, NULL));
		if (global) { /* the variable by its held address and by its name, in turn */
			unsigned start = 0x1000u + 16u * (unsigned)it, mid = start + 7, one = 1;
			CHECK(cuMemcpyHtoD(held, &start, sizeof(start)));
			CHECK(cuLaunchKernel(bump, 1, 1, 1, 1, 1, 1, 0, s2, bump1, NULL));
			void *fill_held[] = {&held, &mid, &one};
			CHECK(cuLaunchKernel(fill, 1, 1, 1, 32, 1, 1, 0, s2, fill_held, NULL));
			CHECK(cuLaunchKernel(bump, 1, 1, 1, 1, 1, 1, 0, s2, bump1, NULL));
		}
		CHECK(cuStreamSynchronize(s2)); /* where a move happens */
		if (global) {
			unsigned by_address = 0, by_name = 0, want = 0x1000u + 16u * (unsigned)it + 8;
			CUdeviceptr again = 0;
			size_t bytes = 0;
			CHECK(cuMemcpyDtoH(&by_address, held, sizeof(by_address)));
			CHECK(cuMemcpyDtoH(&by_name, bumped, sizeof(by_name)));
			CHECK(cuModuleGetGlobal(&again, &bytes, module, "kernelsMagic"));
			EXPECT(by_address == want && by_name == want, "iteration %d: kernelsMagic is %08x by its address, "
			       "%08x by its name, not %08x", it, by_address, by_name, want);
			EXPECT(again == held && bytes == 4, "iteration %d: kernelsMagic's address changed", it);
			/* A graph's kernel node given the held address reads it back as given. */
			CUgraph graph;
			CUgraphNode node;
			unsigned mark = 0, count = 1;
			void *node_args[] = {&held, &mark, &count};
			CUDA_KERNEL_NODE_PARAMS kp = {.func = fill, .gridDimX = 1, .gridDimY = 1, .gridDimZ = 1,
						      .blockDimX = 32, .blockDimY = 1, .blockDimZ = 1,
						      .kernelParams = node_args};
			CHECK(cuGraphCreate(&graph, 0));
			CHECK(cuGraphAddKernelNode(&node, graph, NULL, 0, &kp));
			CUDA_KERNEL_NODE_PARAMS back;
			memset(&back, 0, sizeof(back));
			CHECK(cuGraphKernelNodeGetParams(node, &back));
			CUdeviceptr node_ptr = 0;
			if (back.kernelParams && back.kernelParams[0])
				memcpy(&node_ptr, back.kernelParams[0], sizeof(node_ptr));
			EXPECT(node_ptr == held, "iteration %d: a graph node's pointer argument reads back as %llx", it,
			       (unsigned long long)node_ptr);
			CHECK(cuGraphDestroy(graph));
			printf("iter %d variable %08x\n", it, by_address);
		}
		for (int i = 0; i < N; i++) {
			volatile float sum = ha[i] + hb[i];
			hc[i] = sum * 0.5f;
			ha[i] = hc[i] + hb[i];
		}
		CHECK(cuMemcpyDtoH(got, a, N * sizeof(float)));
		CHECK(cuMemcpyDtoH(htags, tags, SMALL * sizeof(unsigned)));
		EXPECT(!memcmp(got, ha, N * sizeof(float)), "iteration %d: a differs from the CPU's", it);
		for (int i = 0; i < SMALL; i++)
			EXPECT(htags[i] == tag, "iteration %d: tag %d is %x", it, i, htags[i]);
		/* What the client knows of its memory and context holds wherever it runs. */
		CUdeviceptr base = 0;
		size_t size = 0;
		CUcontext owner = NULL;
		CHECK(cuMemGetAddressRange(&base, &size, a + 8));
		EXPECT(base == a && size == N * sizeof(float), "iteration %d: a's range is %llx + %zu", it,
		       (unsigned long long)base, size);
		CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, tags));
		EXPECT(owner == ctx, "iteration %d: tags' context is another", it);
		CHECK(cuPointerGetAttribute(&base, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, tags + 100));
		EXPECT(base == tags, "iteration %d: tags' range starts at %llx", it, (unsigned long long)base);
		if (threads) { /* the second thread's buffer: e = e + b each iteration */
			pthread_barrier_wait(&helper.done);
			float *ge = hc; /* its values no longer needed this iteration */
			CHECK(cuMemcpyDtoH(ge, helper.e, N * sizeof(float)));
			for (int i = 0; i < N; i++)
				he[i] = he[i] + hb[i];
			EXPECT(!memcmp(ge, he, N * sizeof(float)), "iteration %d: the second thread's buffer differs", it);
		}
		if (magic) { /* kernelsMagic, "REMO", plus one each iteration */
			unsigned got_magic = 0;
			CHECK(cuMemcpyDtoH(&got_magic, bumped, sizeof(got_magic)));
			EXPECT(got_magic == 0x52454d4fu + (unsigned)it + 1, "iteration %d: kernelsMagic is %08x", it, got_magic);
			printf("iter %d magic %08x\n", it, got_magic);
		}
		printf("iter %d checksum %016llx\n", it, (unsigned long long)(drv_fnv1a(got, N * sizeof(float)) ^
									    drv_fnv1a(htags, SMALL * sizeof(unsigned))));
		fflush(stdout);
		if (pause_ms)
			usleep((useconds_t)pause_ms * 1000);
	}
	if (threads) {
		pthread_join(helper_thread, NULL);
		CHECK(cuMemFree(helper.e));
	}
	free(he);
	if (global) { /* the range reserved before the moves holds a mapping at its address */
		CUdevice dev;
		CHECK(cuCtxGetDevice(&dev));
		CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
					    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
		size_t gran = 0;
		CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
		CUmemGenericAllocationHandle phys;
		CHECK(cuMemCreate(&phys, gran, &prop, 0));
		CHECK(cuMemMap(reserved + gran, gran, 0, phys, 0));
		CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
		CHECK(cuMemSetAccess(reserved + gran, gran, &access, 1));
		CHECK(cuMemsetD32(reserved + gran, 0x600dcafeu, gran / 4));
		unsigned last = 0;
		CHECK(cuMemcpyDtoH(&last, reserved + 2 * gran - 4, sizeof(last)));
		EXPECT(last == 0x600dcafeu, "the reserved range's mapping reads %08x", last);
		CHECK(cuMemUnmap(reserved + gran, gran));
		CHECK(cuMemRelease(phys));
		CHECK(cuMemAddressFree(reserved, reserved_size));
	}
	CHECK(cuEventDestroy(joined));
	CHECK(cuStreamDestroy(s1));
	CHECK(cuStreamDestroy(s2));
	CHECK(cuMemFree(a));
	CHECK(cuMemFree(b));
	CHECK(cuMemFree(c));
	CHECK(cuMemFree(tags));
	CHECK(cuMemFree(bumped));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	free(ha), free(hb), free(hc), free(got), free(htags);
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
