/* A driver-API client for the robustness tests.
 *   probe free        prints the device's free memory in bytes
 *   probe heap        prints the context's device malloc heap in bytes
 *   probe hold MIB    allocates and fills MIB MiB, prints "ready", then waits to be killed
 *   probe work SECS   allocates, copies and checks in a loop for SECS seconds, prints "ok"
 *   probe fault IMAGE [quietly]  launches faultKernel from IMAGE on a bad pointer; prints the
 *                     error's name (quietly: exits after a call that does not report it)
 *   probe pointers    checks pointer attributes of device, pinned and registered memory; prints "ok"
 *   probe stripes     copies odd sizes up to 64 MiB both ways, pageable and pinned, sync and
 *                     async, and checks every byte; prints "ok" (run with copy links on)
 *   probe wrap        asks for memsets whose byte length wraps past 2^64 (refused), then checks
 *                     that the session still works; prints "ok"
 *   probe idle SECS   allocates and fills memory, makes no call for SECS seconds, then reads
 *                     it back; prints "ok"
 *   probe soak IMAGE SECS  for SECS seconds: allocates, copies 64 KiB of floats in, scales
 *                     them with a kernel (scaleArray), copies them back and checks them,
 *                     frees; prints "ok ROUNDS" (the loops done, at least 3)
 *   probe late-copy IMAGE SECS  copies 32 MiB from the device, then 32 MiB to it, each behind
 *                     a kernel of SECS seconds (sleepNs) on the same stream; checks the bytes;
 *                     prints "ok"
 *   probe threads N SECS  N threads (each with a channel of its own) copy 8 MiB to the device
 *                     once; prints "copied K of N" once all have tried, then keeps the threads
 *                     for SECS seconds
 *   probe tiny N      makes up to N one-byte allocations, stopping at the first refusal;
 *                     prints "allocated K" and the refusal's error (0: none)
 *   probe modules N   loads up to N modules of a PTX image holding a 3 MiB variable
 *                     (stateBlock), stopping at the first refusal, then unloads them; then
 *                     the same as libraries with no context current; then loads a
 *                     kernel's PTX twice, unloads the first and asks the second for its
 *                     kernel; prints "modules K R libraries K R twice R" (R the refusal's
 *                     or the question's error, 0: none) and "free F1 F2 F3":
 *                     cuMemGetInfo's free before, with the modules loaded, and after
 *   probe limits      raises and lowers the printf FIFO, the malloc heap and the stack limit,
 *                     and the FIFO in a context it creates and destroys; prints "limits R..."
 *                     (each cuCtxSetLimit's result, in the order of probe_limits) and "free
 *                     F..." (cuMemGetInfo's free before, and after steps 1, 7, 8 and the destroy)
 *   probe exit [busy] a forked child exits (its library's destructor runs), then the parent
 *                     makes a call and prints "after a child's exit: RESULT"; an atexit handler
 *                     makes one more and prints "at exit: RESULT" (busy: a thread that holds a
 *                     channel is still running when the process exits) */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(call)                                                                   \
	do {                                                                          \
		CUresult r_ = (call);                                                 \
		if (r_ != CUDA_SUCCESS) {                                             \
			fprintf(stderr, "probe: %s failed: %d\n", #call, (int)r_);    \
			exit(1);                                                      \
		}                                                                     \
	} while (0)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* probe threads: one thread's copy, then its wait until the process is done. */
static CUcontext threads_ctx;
static pthread_mutex_t threads_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t threads_cond = PTHREAD_COND_INITIALIZER;
static int threads_tried, threads_copied, threads_release;

static void *copy_thread(void *arg)
{
	(void)arg;
	size_t n = 8u << 20; /* a channel's full staging: 2 buffers of 8 MiB */
	void *host = calloc(1, n);
	CUdeviceptr d = 0;
	int ok = host && cuCtxSetCurrent(threads_ctx) == CUDA_SUCCESS && cuMemAlloc(&d, n) == CUDA_SUCCESS &&
		 cuMemcpyHtoD(d, host, n) == CUDA_SUCCESS;
	pthread_mutex_lock(&threads_lock);
	threads_tried++;
	threads_copied += ok;
	pthread_cond_broadcast(&threads_cond);
	while (!threads_release)
		pthread_cond_wait(&threads_cond, &threads_lock);
	pthread_mutex_unlock(&threads_lock);
	free(host);
	return NULL;
}

/* probe modules: PTX of one 3 MiB variable (valid for NVIDIA's JIT as for the test driver). */
static const char state_ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n"
				".visible .global .align 4 .b8 stateBlock[3145728];\n";

/* A kernel and no state: an image the worker may share between clients. */
static const char kernel_ptx[] = ".version 8.0\n.target sm_80\n.address_size 64\n"
				 ".visible .entry bumpMagic(.param .u64 p)\n{\n\tret;\n}\n";

static int probe_modules(CUcontext ctx, int n)
{
	CUmodule mods[64];
	CUlibrary libs[64];
	size_t free0, free1, free2, total;
	int km = 0, kl = 0;
	CUresult rm = CUDA_SUCCESS, rl = CUDA_SUCCESS;
	n = n < 64 ? n : 64;
	CHECK(cuMemGetInfo(&free0, &total));
	while (km < n && (rm = cuModuleLoadData(&mods[km], state_ptx)) == CUDA_SUCCESS)
		km++;
	CHECK(cuMemGetInfo(&free1, &total));
	for (int i = 0; i < km; i++)
		CHECK(cuModuleUnload(mods[i]));
	CUcontext popped;
	CHECK(cuCtxPopCurrent(&popped));
	while (kl < n && (rl = cuLibraryLoadData(&libs[kl], state_ptx, NULL, NULL, 0, NULL, NULL, 0)) == CUDA_SUCCESS)
		kl++;
	for (int i = 0; i < kl; i++)
		CHECK(cuLibraryUnload(libs[i]));
	CHECK(cuCtxPushCurrent(ctx));
	CHECK(cuMemGetInfo(&free2, &total));
	CUmodule first, second;
	CUfunction f;
	CHECK(cuModuleLoadData(&first, kernel_ptx));
	CHECK(cuModuleLoadData(&second, kernel_ptx));
	CHECK(cuModuleUnload(first));
	CUresult twice = cuModuleGetFunction(&f, second, "bumpMagic"), unload = cuModuleUnload(second);
	twice = twice != CUDA_SUCCESS ? twice : unload;
	printf("modules %d %d libraries %d %d twice %d\nfree %zu %zu %zu\n", km, (int)rm, kl, (int)rl, (int)twice,
	       free0, free1, free2);
	return 0;
}

/* probe limits: 1 FIFO +32 MiB, 2 heap +48 MiB, 3 FIFO back, 4 heap +48 MiB, 5 stack +64
 * bytes a thread, 6 heap back, 7 stack +64, 8 FIFO +32 MiB in a created context. */
static int probe_limits(CUcontext ctx)
{
	size_t stack, fifo, heap, f[5], total;
	CUresult r[8];
	CHECK(cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE));
	CHECK(cuCtxGetLimit(&fifo, CU_LIMIT_PRINTF_FIFO_SIZE));
	CHECK(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
	CHECK(cuMemGetInfo(&f[0], &total));
	r[0] = cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo + (32u << 20));
	CHECK(cuMemGetInfo(&f[1], &total));
	r[1] = cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap + (48u << 20));
	r[2] = cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo);
	r[3] = cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap + (48u << 20));
	r[4] = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack + 64);
	r[5] = cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, heap);
	r[6] = cuCtxSetLimit(CU_LIMIT_STACK_SIZE, stack + 64);
	CHECK(cuMemGetInfo(&f[2], &total));
	CUdevice dev;
	CUcontext mine;
	CHECK(cuCtxGetDevice(&dev));
	CHECK(cuCtxCreate(&mine, NULL, 0, dev));
	r[7] = cuCtxSetLimit(CU_LIMIT_PRINTF_FIFO_SIZE, fifo + (32u << 20));
	CHECK(cuMemGetInfo(&f[3], &total));
	CHECK(cuCtxDestroy(mine));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuMemGetInfo(&f[4], &total));
	printf("limits");
	for (int i = 0; i < 8; i++)
		printf(" %d", (int)r[i]);
	printf("\nfree %zu %zu %zu %zu %zu\n", f[0], f[1], f[2], f[3], f[4]);
	return 0;
}

static int probe_threads(CUcontext ctx, int n, double secs)
{
	pthread_t t[256];
	threads_ctx = ctx;
	if (n < 1 || n > 256)
		return 2;
	for (int i = 0; i < n; i++)
		if (pthread_create(&t[i], NULL, copy_thread, NULL))
			return 1;
	pthread_mutex_lock(&threads_lock);
	while (threads_tried < n)
		pthread_cond_wait(&threads_cond, &threads_lock);
	printf("copied %d of %d\n", threads_copied, n);
	fflush(stdout);
	pthread_mutex_unlock(&threads_lock);
	usleep((useconds_t)(secs * 1e6));
	pthread_mutex_lock(&threads_lock);
	threads_release = 1;
	pthread_cond_broadcast(&threads_cond);
	pthread_mutex_unlock(&threads_lock);
	for (int i = 0; i < n; i++)
		pthread_join(t[i], NULL);
	return 0;
}

/* probe exit: calls after a forked child's exit, in an atexit handler, and in a thread
 * still running at exit. */
static void call_at_exit(void)
{
	size_t free_b, total_b;
	printf("at exit: %d\n", (int)cuMemGetInfo(&free_b, &total_b));
	fflush(stdout);
}

static void *busy_thread(void *arg)
{
	size_t free_b, total_b;
	cuCtxSetCurrent(arg);
	cuMemGetInfo(&free_b, &total_b); /* a channel of its own */
	for (;;)
		pause();
	return NULL;
}

static int probe_exit(CUcontext ctx, int busy)
{
	size_t free_b, total_b;
	pthread_t t;
	if (busy && pthread_create(&t, NULL, busy_thread, ctx))
		return 1;
	pid_t child = fork();
	if (child == 0)
		exit(0);
	int status;
	if (child < 0 || waitpid(child, &status, 0) != child)
		return 1;
	printf("after a child's exit: %d\n", (int)cuMemGetInfo(&free_b, &total_b));
	fflush(stdout);
	atexit(call_at_exit);
	if (busy)
		sleep(1); /* the thread has its channel */
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	CUcontext ctx;
	CHECK(cuInit(0));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
	CHECK(cuCtxSetCurrent(ctx));
	if (!strcmp(argv[1], "heap")) {
		size_t heap;
		CHECK(cuCtxGetLimit(&heap, CU_LIMIT_MALLOC_HEAP_SIZE));
		printf("%zu\n", heap);
		return 0;
	}
	if (!strcmp(argv[1], "free")) {
		size_t free_b, total_b;
		CHECK(cuMemGetInfo(&free_b, &total_b));
		printf("%zu\n", free_b);
		return 0;
	}
	if (!strcmp(argv[1], "hold") && argc > 2) {
		size_t bytes = (size_t)atoi(argv[2]) << 20;
		CUdeviceptr p;
		CUstream s;
		CHECK(cuMemAlloc(&p, bytes));
		CHECK(cuStreamCreate(&s, 0));
		CHECK(cuMemsetD8Async(p, 0x5a, bytes, s));
		CHECK(cuStreamSynchronize(s));
		printf("ready\n");
		fflush(stdout);
		for (;;)
			pause();
	}
	if (!strcmp(argv[1], "exit"))
		return probe_exit(ctx, argc > 2 && !strcmp(argv[2], "busy"));
	if (!strcmp(argv[1], "threads") && argc > 3)
		return probe_threads(ctx, atoi(argv[2]), atof(argv[3]));
	if (!strcmp(argv[1], "limits"))
		return probe_limits(ctx);
	if (!strcmp(argv[1], "modules") && argc > 2)
		return probe_modules(ctx, atoi(argv[2]));
	if (!strcmp(argv[1], "tiny") && argc > 2) {
		int n = atoi(argv[2]), k = 0;
		CUresult r = CUDA_SUCCESS;
		for (CUdeviceptr p; k < n && (r = cuMemAlloc(&p, 1)) == CUDA_SUCCESS; k++)
			;
		printf("allocated %d %d\n", k, (int)r);
		return 0;
	}
	if (!strcmp(argv[1], "stripes")) {
		static const size_t sizes[] = {(1u << 20) - 1, (4u << 20) * 3 + 1, (16u << 20) + 12345, (64u << 20) - 3};
		size_t max = sizes[3];
		unsigned char *src = malloc(max), *back = malloc(max), *pinned;
		CUdeviceptr d;
		CUstream s;
		if (!src || !back)
			return 1;
		CHECK(cuMemAlloc(&d, max));
		CHECK(cuMemAllocHost((void **)&pinned, max));
		CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			size_t n = sizes[k];
			for (size_t i = 0; i < n; i++)
				src[i] = (unsigned char)(i * 131 + k * 7 + (i >> 20));
			CHECK(cuMemcpyHtoD(d, src, n));
			memset(back, 0, n);
			CHECK(cuMemcpyDtoH(back, d, n));
			if (memcmp(src, back, n)) {
				fprintf(stderr, "probe: %zu bytes pageable came back different\n", n);
				return 1;
			}
			memcpy(pinned, src, n);
			CHECK(cuMemsetD8(d, 0, n));
			CHECK(cuMemcpyHtoDAsync(d, pinned, n, s));
			memset(pinned, 0, n);
			CHECK(cuMemcpyDtoHAsync(pinned, d, n, s));
			CHECK(cuStreamSynchronize(s));
			if (memcmp(src, pinned, n)) {
				fprintf(stderr, "probe: %zu bytes pinned async came back different\n", n);
				return 1;
			}
		}
		printf("ok\n");
		return 0;
	}
	if (!strcmp(argv[1], "work") && argc > 2) {
		double end = now() + atof(argv[2]);
		unsigned char in[65536], out[65536];
		int rounds = 0;
		while (now() < end || rounds < 10) {
			CUdeviceptr p;
			for (size_t i = 0; i < sizeof(in); i++)
				in[i] = (unsigned char)(i * 7 + (size_t)rounds);
			CHECK(cuMemAlloc(&p, sizeof(in)));
			CHECK(cuMemcpyHtoD(p, in, sizeof(in)));
			CHECK(cuMemcpyDtoH(out, p, sizeof(out)));
			CHECK(cuMemFree(p));
			if (memcmp(in, out, sizeof(in))) {
				fprintf(stderr, "probe: round %d read back different data\n", rounds);
				return 1;
			}
			rounds++;
		}
		printf("ok\n");
		return 0;
	}
	if (!strcmp(argv[1], "soak") && argc > 3) {
		CUmodule mod;
		CUfunction scale;
		CHECK(cuModuleLoad(&mod, argv[2]));
		CHECK(cuModuleGetFunction(&scale, mod, "scaleArray"));
		double end = now() + atof(argv[3]);
		enum { N = 16384 };
		static float in[N], out[N];
		int rounds = 0;
		while (now() < end || rounds < 3) {
			CUdeviceptr p;
			for (int i = 0; i < N; i++)
				in[i] = (float)(i + rounds);
			CHECK(cuMemAlloc(&p, sizeof(in)));
			CHECK(cuMemcpyHtoD(p, in, sizeof(in)));
			float factor = 2.0f;
			int n = N;
			void *params[] = {&p, &factor, &n};
			CHECK(cuLaunchKernel(scale, (N + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, params, NULL));
			CHECK(cuMemcpyDtoH(out, p, sizeof(out)));
			CHECK(cuMemFree(p));
			for (int i = 0; i < N; i++)
				if (out[i] != 2.0f * in[i]) {
					fprintf(stderr, "probe: round %d element %d is %g, not %g\n", rounds, i, out[i], 2.0 * in[i]);
					return 1;
				}
			rounds++;
		}
		printf("ok %d\n", rounds);
		return 0;
	}
	if (!strcmp(argv[1], "idle") && argc > 2) {
		CUdeviceptr p;
		unsigned int back = 0;
		CHECK(cuMemAlloc(&p, 4096));
		CHECK(cuMemsetD32(p, 0x600dcafe, 1024));
		usleep((useconds_t)(atof(argv[2]) * 1e6));
		CHECK(cuMemcpyDtoH(&back, p + 4092, sizeof(back)));
		if (back != 0x600dcafe) {
			fprintf(stderr, "probe: read back %#x after idling\n", back);
			return 1;
		}
		printf("ok\n");
		return 0;
	}
	if (!strcmp(argv[1], "late-copy") && argc > 3) {
		const size_t n = 32u << 20;
		unsigned long long ns = (unsigned long long)(atof(argv[3]) * 1e9);
		void *params[] = {&ns};
		CUmodule mod;
		CUfunction sleep_ns;
		CUdeviceptr p;
		unsigned char *host = malloc(n);
		if (!host)
			return 1;
		CHECK(cuModuleLoad(&mod, argv[2]));
		CHECK(cuModuleGetFunction(&sleep_ns, mod, "sleepNs"));
		CHECK(cuMemAlloc(&p, n));
		CHECK(cuMemsetD8(p, 0x5a, n));
		CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
		CHECK(cuMemcpyDtoH(host, p, n)); /* waits for the kernel */
		for (size_t i = 0; i < n; i++)
			if (host[i] != 0x5a) {
				fprintf(stderr, "probe: byte %zu read back as %#x\n", i, host[i]);
				return 1;
			}
		for (size_t i = 0; i < n; i++)
			host[i] = (unsigned char)(i * 13);
		CHECK(cuLaunchKernel(sleep_ns, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
		CHECK(cuMemcpyHtoD(p, host, n)); /* its bytes wait for the kernel */
		memset(host, 0, n);
		CHECK(cuMemcpyDtoH(host, p, n));
		for (size_t i = 0; i < n; i++)
			if (host[i] != (unsigned char)(i * 13)) {
				fprintf(stderr, "probe: byte %zu written as %#x\n", i, host[i]);
				return 1;
			}
		free(host);
		printf("ok\n");
		return 0;
	}
	if (!strcmp(argv[1], "wrap")) {
		CUdeviceptr p;
		CUstream s;
		unsigned int back = 0;
		CHECK(cuMemAlloc(&p, 4096));
		CHECK(cuStreamCreate(&s, 0));
		/* 2^63+1 16-bit and 2^62+1 32-bit elements: 2 and 4 bytes once multiplied out. */
		CUresult d16 = cuMemsetD16Async(p, 0x1234, (1ull << 63) + 1, s);
		if (d16 == CUDA_SUCCESS)
			d16 = cuStreamSynchronize(s);
		CUresult d32 = cuMemsetD32Async(p, 0x12345678, (1ull << 62) + 1, s);
		if (d32 == CUDA_SUCCESS)
			d32 = cuStreamSynchronize(s);
		if (d16 == CUDA_SUCCESS || d32 == CUDA_SUCCESS) {
			fprintf(stderr, "probe: a wrapping memset was taken (D16 %d, D32 %d)\n", (int)d16, (int)d32);
			return 1;
		}
		CHECK(cuMemsetD32Async(p, 0xabcdef01, 1024, s));
		CHECK(cuStreamSynchronize(s));
		CHECK(cuMemcpyDtoH(&back, p + 4092, sizeof(back)));
		if (back != 0xabcdef01) {
			fprintf(stderr, "probe: memset after the refused ones wrote %#x\n", back);
			return 1;
		}
		printf("ok\n");
		return 0;
	}
	if (!strcmp(argv[1], "pointers")) {
		CUdeviceptr d;
		unsigned int type = 0, flags = 0;
		size_t range = 0;
		void *pinned, *reg = aligned_alloc(4096, 1 << 16);
		CHECK(cuMemAlloc(&d, 3 << 20));
		CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 4096));
		CHECK(cuPointerGetAttribute(&range, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 4096));
		if (type != CU_MEMORYTYPE_DEVICE || range != 3 << 20) {
			fprintf(stderr, "probe: device pointer: type %u range %zu\n", type, range);
			return 1;
		}
		CHECK(cuMemHostAlloc(&pinned, 1 << 20, CU_MEMHOSTALLOC_PORTABLE));
		CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)pinned));
		CHECK(cuMemHostGetFlags(&flags, pinned));
		if (type != CU_MEMORYTYPE_HOST || !(flags & CU_MEMHOSTALLOC_PORTABLE) || ((uintptr_t)pinned & 4095)) {
			fprintf(stderr, "probe: pinned memory: type %u flags %u at %p\n", type, flags, pinned);
			return 1;
		}
		CHECK(cuMemHostRegister(reg, 1 << 16, 0));
		CHECK(cuMemcpyHtoD(d, reg, 1 << 16));
		if (cuMemHostRegister(reg, 1 << 16, 0) != CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED) {
			fprintf(stderr, "probe: registered the same memory twice\n");
			return 1;
		}
		CHECK(cuMemHostUnregister(reg));
		if (cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 0x1000) == CUDA_SUCCESS) {
			fprintf(stderr, "probe: a pointer nobody allocated has attributes\n");
			return 1;
		}
		CHECK(cuMemFreeHost(pinned));
		CHECK(cuMemFree(d));
		free(reg);
		printf("ok\n");
		return 0;
	}
	if (!strcmp(argv[1], "fault") && argc > 2) {
		CUmodule mod;
		CUfunction f;
		CUdeviceptr bad = 16;
		void *params[] = {&bad};
		const char *name = "?";
		CHECK(cuModuleLoad(&mod, argv[2]));
		CHECK(cuModuleGetFunction(&f, mod, "faultKernel"));
		CHECK(cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
		if (argc > 3 && !strcmp(argv[3], "quietly")) {
			char gpu[64]; /* a call that sends the launch and says nothing of the fault */
			CHECK(cuDeviceGetName(gpu, sizeof(gpu), 0));
			return 0;
		}
		cuGetErrorName(cuCtxSynchronize(), &name);
		printf("%s\n", name);
		return 0;
	}
	return 2;
}
