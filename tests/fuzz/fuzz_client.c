/* Fuzz target `client`: the client library (frontend/) against a malicious server (issue 37).
 * A server thread on 127.0.0.1 answers the library's connection with the input's frames,
 * while this thread makes API calls through it: every generated stub (client_calls.c,
 * from scripts/gen_api.py) and each hand-written call that decodes a reply, so every reply
 * the library decodes meets the fuzzer's bytes.
 *
 * Input: reply frames as the wire carries them (common/wire.h: header, msg, bulk), one for
 * each call the library waits on, the hello's first. Before sending a frame the server
 * sets its op to the request's (unless it is a heartbeat or a going-away frame) and, where
 * its seq is 0, its seq to the request's; the rest goes as it is, a frame cut short by the
 * input's end too, after which the server closes. Which API call the driver makes next is
 * the low bits of the next unsent frame's ctx field (the client reads no reply's ctx): so
 * a corpus file names its calls and their answers together (make_corpus.py).
 *
 * The library must not crash, read or write past a buffer (the sanitizers say), or hang:
 * a reply it cannot use ends the call with an error. Between inputs the connection is
 * closed and every kept answer forgotten (rm_rpc_reset). FUZZ_CLIENT_VERBOSE=1 keeps the
 * library's log lines and names each call made. */
#undef __CUDA_API_VERSION_INTERNAL /* the names a program calls (cuMemAlloc: cuMemAlloc_v2) */
#include <arpa/inet.h>
#include <cuda.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client.h"
#include "log.h"
#include "nvml_bridge.h"
#include "param_layout.h"
#include "wire.h"

extern CUresult (*const rm_fuzz_calls[])(void);
extern const char *const rm_fuzz_call_names[];
extern const unsigned int rm_fuzz_ncalls;

/* The input, shared by the driver (which reads the next frame's ctx) and the server
 * thread (which sends frames), under lock. */
static struct {
	pthread_mutex_t lock;
	const uint8_t *data;
	size_t size, at; /* at: the next frame to send */
	int listener;
	int verbose;
} in = {.lock = PTHREAD_MUTEX_INITIALIZER, .listener = -1};

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Bytes of the frame at `at` as the input holds it (cut at the input's end). */
static size_t frame_extent(size_t at)
{
	size_t left = in.size - at;
	if (left < RM_FRAME_LEN)
		return left;
	uint64_t body = get_le(in.data + at + 16, 4) + get_le(in.data + at + 24, 8);
	return body > left - RM_FRAME_LEN ? left : RM_FRAME_LEN + (size_t)body;
}

static int read_all(int fd, void *buf, size_t n)
{
	for (uint8_t *p = buf; n;) {
		ssize_t k = read(fd, p, n);
		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

static int skip(int fd, uint64_t n)
{
	uint8_t scratch[4096];
	while (n) {
		size_t k = n < sizeof(scratch) ? (size_t)n : sizeof(scratch);
		if (read_all(fd, scratch, k))
			return -1;
		n -= k;
	}
	return 0;
}

/* Serves one connection: each request the client waits on gets the next frame. */
static void *serve(void *arg)
{
	int fd = (int)(intptr_t)arg;
	uint8_t head[RM_FRAME_LEN];
	while (!read_all(fd, head, sizeof(head))) {
		struct rm_frame f;
		if (rm_frame_decode(head, &f) || skip(fd, f.msg_len) || skip(fd, f.bulk_len))
			break;
		if (f.flags & RM_F_ASYNC)
			continue;
		pthread_mutex_lock(&in.lock); /* copied under the lock: the input is freed once the driver returns */
		size_t at = in.at, n = in.data ? frame_extent(at) : 0;
		int whole = n >= RM_FRAME_LEN && n == RM_FRAME_LEN + get_le(in.data + at + 16, 4) + get_le(in.data + at + 24, 8);
		uint8_t *out = n ? malloc(n) : NULL;
		if (out)
			memcpy(out, in.data + at, n);
		in.at += n;
		pthread_mutex_unlock(&in.lock);
		if (!out)
			break;
		if (n >= RM_FRAME_LEN) {
			uint32_t op = (uint32_t)get_le(out + 4, 4);
			if (op != RM_OP_HEARTBEAT && op != RM_OP_GOING_AWAY)
				put_le(out + 4, f.op, 4);
			if (!get_le(out + 8, 8))
				put_le(out + 8, f.seq, 8);
		}
		int sent = send(fd, out, n, MSG_NOSIGNAL) == (ssize_t)n;
		free(out);
		if (!sent || !whole) /* the input ended inside this frame: the server goes */
			break;
	}
	close(fd);
	return NULL;
}

/* Accepts connections until the listener is shut down, serving each in turn: the main
 * connection, and any channel the library opens. */
static void *accept_main(void *arg)
{
	(void)arg;
	for (;;) {
		int fd = accept(in.listener, NULL, NULL);
		if (fd < 0)
			return NULL;
		pthread_t t;
		if (pthread_create(&t, NULL, serve, (void *)(intptr_t)fd))
			abort();
		pthread_detach(t);
	}
}

/* ---- the driver: calls written by hand, then the generated ones ---- */

static struct {
	CUcontext ctx;
	CUmodule module;
	CUfunction func;
	CUlibrary library;
	CUkernel kernel;
	CUstream stream;
	CUgraph graph;
} h;

static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
			  ".visible .entry k(.param .u64 a, .param .u32 n, .param .u64 b)\n{\n\tret;\n}\n";

static CUresult drive_context(void)
{
	CUresult r = cuInit(0);
	if (r == CUDA_SUCCESS)
		r = cuDevicePrimaryCtxRetain(&h.ctx, 0);
	if (r == CUDA_SUCCESS)
		r = cuCtxSetCurrent(h.ctx);
	return r;
}

static CUresult drive_module(void)
{
	CUresult r = cuModuleLoadData(&h.module, ptx);
	return r == CUDA_SUCCESS ? cuModuleGetFunction(&h.func, h.module, "k") : r;
}

static CUresult drive_library(void)
{
	CUresult r = cuLibraryLoadData(&h.library, ptx, NULL, NULL, 0, NULL, NULL, 0);
	if (r == CUDA_SUCCESS)
		r = cuLibraryGetKernel(&h.kernel, h.library, "k");
	CUfunction f;
	if (r == CUDA_SUCCESS && (r = cuKernelGetFunction(&f, h.kernel)) == CUDA_SUCCESS)
		h.func = f;
	return r;
}

/* kernelParams for k(a, n, b) as far as the client may read it whatever the server says
 * (param_layout.h): RM_MAX_KERNEL_PARAMS pointers, each to RM_PARAM_LIMIT bytes, both heap
 * objects of exactly that size, so that AddressSanitizer reports a read past the bound. A
 * server that lies consistently (one 32764-byte parameter) gets these bytes, as the bound
 * allows; no server may make the client read further. */
static void **kernel_params(void)
{
	static void **params;
	if (!params) {
		uint8_t *arg = calloc(1, RM_PARAM_LIMIT);
		if (!arg || !(params = malloc(RM_MAX_KERNEL_PARAMS * sizeof(*params))))
			abort();
		arg[0] = 1;
		for (size_t i = 0; i < RM_MAX_KERNEL_PARAMS; i++)
			params[i] = arg;
	}
	return params;
}

/* Launches of k(a, n, b) by kernelParams and by extra: the layout is the server's. */
static CUresult drive_launch(void)
{
	CUfunction f = h.func ? h.func : (CUfunction)(uintptr_t)0x7200;
	void **params = kernel_params();
	size_t off, size;
	CUresult r = cuFuncGetParamInfo(f, 0, &off, &size);
	(void)r;
	r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, h.stream, params, NULL);
	CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1,
			      .blockDimZ = 1, .hStream = h.stream};
	if (r == CUDA_SUCCESS)
		r = cuLaunchKernelEx(&cfg, f, params, NULL);
	uint8_t buf[20] = {0};
	size_t buf_size = sizeof(buf);
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, buf, CU_LAUNCH_PARAM_BUFFER_SIZE, &buf_size, CU_LAUNCH_PARAM_END};
	if (r == CUDA_SUCCESS)
		r = cuLaunchKernel(f, 1, 1, 1, 1, 1, 1, 0, h.stream, NULL, extra);
	if (r == CUDA_SUCCESS)
		r = cuLaunchCooperativeKernel(f, 1, 1, 1, 1, 1, 1, 0, h.stream, params);
	if (r == CUDA_SUCCESS)
		r = cuCtxSynchronize();
	return r;
}

static CUresult drive_names(void)
{
	const char *name;
	return cuFuncGetName(&name, h.func ? h.func : (CUfunction)(uintptr_t)0x7200);
}

static CUresult drive_copies(void)
{
	uint8_t *buf = malloc(100);
	if (!buf)
		abort();
	memset(buf, 7, 100);
	CUdeviceptr d = 0x100000;
	CUresult r = cuMemAlloc(&d, 100);
	if (r == CUDA_SUCCESS)
		r = cuMemcpyHtoD(d, buf, 100);
	if (r == CUDA_SUCCESS)
		r = cuMemcpyDtoH(buf, d, 100);
	if (r == CUDA_SUCCESS)
		r = cuMemcpyDtoHAsync(buf, d, 37, h.stream);
	if (r == CUDA_SUCCESS)
		r = cuStreamSynchronize(h.stream);
	cuMemFree(d);
	free(buf);
	return r;
}

static CUresult drive_pointers(void)
{
	CUdeviceptr p = 0x100000;
	unsigned int mem_type = 0;
	CUresult r = cuPointerGetAttribute(&mem_type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p);
	CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_CONTEXT, CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
				       CU_POINTER_ATTRIBUTE_DEVICE_POINTER, CU_POINTER_ATTRIBUTE_BUFFER_ID,
				       CU_POINTER_ATTRIBUTE_RANGE_SIZE};
	CUcontext ctx;
	unsigned int type;
	CUdeviceptr dp;
	unsigned long long id;
	size_t range;
	void *data[] = {&ctx, &type, &dp, &id, &range};
	if (r == CUDA_SUCCESS)
		r = cuPointerGetAttributes(5, attrs, data, p);
	int v = 0;
	if (r == CUDA_SUCCESS)
		r = cuMemRangeGetAttribute(&v, sizeof(v), CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY, p, 4096);
	return r;
}

static CUresult drive_pool(void)
{
	cuuint64_t threshold;
	int reuse;
	CUmemoryPool pool = (CUmemoryPool)(uintptr_t)0x1000;
	CUresult r = cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &threshold);
	return r == CUDA_SUCCESS ? cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC, &reuse) : r;
}

static size_t smem_of(int block) { return (size_t)block; }

/* The block size query with a callback runs on the client over the server's answers. */
static CUresult drive_occupancy(void)
{
	int clusters, grid, block;
	CUfunction f = h.func ? h.func : (CUfunction)(uintptr_t)0x7200;
	CUlaunchConfig cfg = {.gridDimX = 1, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1};
	CUresult r = cuOccupancyMaxActiveClusters(&clusters, f, &cfg);
	if (r == CUDA_SUCCESS)
		r = cuOccupancyMaxPotentialClusterSize(&clusters, f, &cfg);
	if (r == CUDA_SUCCESS)
		r = cuOccupancyMaxPotentialBlockSize(&grid, &block, f, NULL, 0, 0);
	return r == CUDA_SUCCESS ? cuOccupancyMaxPotentialBlockSize(&grid, &block, f, smem_of, 0, 0) : r;
}

static CUresult drive_capture(void)
{
	CUstreamCaptureStatus status;
	cuuint64_t id;
	CUgraph graph;
	const CUgraphNode *deps;
	size_t ndeps;
	CUresult r = cuStreamCreate(&h.stream, 0);
	if (r == CUDA_SUCCESS)
		r = cuStreamBeginCapture(h.stream, CU_STREAM_CAPTURE_MODE_GLOBAL);
	if (r == CUDA_SUCCESS)
		r = cuStreamIsCapturing(h.stream, &status);
	if (r == CUDA_SUCCESS)
		r = cuStreamGetCaptureInfo(h.stream, &status, &id, &graph, &deps, NULL, &ndeps);
	if (r == CUDA_SUCCESS && ndeps && deps)
		(void)*(volatile CUgraphNode *)&deps[ndeps - 1];
	if (r == CUDA_SUCCESS)
		r = cuStreamEndCapture(h.stream, &h.graph);
	return r;
}

static CUresult drive_graph(void)
{
	CUgraphNode *nodes = malloc(3 * sizeof(*nodes)), node;
	size_t n = 3;
	if (!nodes)
		abort();
	CUgraph g = h.graph ? h.graph : (CUgraph)(uintptr_t)0x1000;
	CUresult r = cuGraphGetNodes(g, nodes, &n);
	free(nodes);
	CUgraphExecUpdateResultInfo info;
	if (r == CUDA_SUCCESS)
		r = cuGraphExecUpdate(( CUgraphExec)(uintptr_t)0x1000, g, &info);
	CUDA_KERNEL_NODE_PARAMS p = {.func = h.func ? h.func : (CUfunction)(uintptr_t)0x7200, .gridDimX = 1, .gridDimY = 1,
				     .gridDimZ = 1, .blockDimX = 1, .blockDimY = 1, .blockDimZ = 1,
				     .kernelParams = kernel_params()};
	if (r == CUDA_SUCCESS)
		r = cuGraphAddKernelNode(&node, g, NULL, 0, &p);
	return r;
}

static CUresult drive_nvml(void)
{
	struct rm_nvml_device_state s;
	return rm_nvml_bridge_table.device_state(0, &s);
}

static CUresult (*const hand_calls[])(void) = {
	drive_context, drive_module, drive_library, drive_launch, drive_names, drive_copies,
	drive_pointers, drive_pool, drive_occupancy, drive_capture, drive_graph, drive_nvml,
};
static const char *const hand_names[] = {
	"context", "module", "library", "launch", "names", "copies",
	"pointers", "pool", "occupancy", "capture", "graph", "nvml",
};
#define NHAND (sizeof(hand_calls) / sizeof(hand_calls[0]))

static void setup(void)
{
	signal(SIGPIPE, SIG_IGN);
	in.verbose = getenv("FUZZ_CLIENT_VERBOSE") != NULL;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	in.listener = socket(AF_INET, SOCK_STREAM, 0);
	if (in.listener < 0 || bind(in.listener, (struct sockaddr *)&a, sizeof(a)) || listen(in.listener, 16) ||
	    getsockname(in.listener, (struct sockaddr *)&a, &len))
		abort();
	char server[64];
	snprintf(server, sizeof(server), "127.0.0.1:%d", ntohs(a.sin_port));
	setenv("REMORA_SERVER", server, 1);
	setenv("REMORA_COPY_LINKS", "1", 1); /* one connection: no copy links to attach */
	setenv("REMORA_PEER_TIMEOUT", "5", 1);
	unsetenv("REMORA_POOL");
	unsetenv("REMORA_TOKEN");
	unsetenv("REMORA_VISIBLE_DEVICES");
	rm_client_init();
	if (!in.verbose)
		rm_log_level = -1;
	pthread_t t;
	if (pthread_create(&t, NULL, accept_main, NULL))
		abort();
	pthread_detach(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, setup);
	pthread_mutex_lock(&in.lock);
	in.data = data, in.size = size, in.at = 0;
	pthread_mutex_unlock(&in.lock);
	memset(&h, 0, sizeof(h));
	for (int calls = 0; calls < 256; calls++) {
		pthread_mutex_lock(&in.lock);
		size_t at = in.at, n = frame_extent(at);
		uint64_t pick = n >= RM_FRAME_LEN ? get_le(data + at + 32, 8) : 0;
		pthread_mutex_unlock(&in.lock);
		if (!n)
			break;
		unsigned int i = (unsigned int)(pick % (NHAND + rm_fuzz_ncalls));
		CUresult r = i < NHAND ? hand_calls[i]() : rm_fuzz_calls[i - NHAND]();
		if (in.verbose)
			fprintf(stderr, "fuzz-client: %s: %d\n", i < NHAND ? hand_names[i] : rm_fuzz_call_names[i - NHAND], r);
		pthread_mutex_lock(&in.lock);
		if (in.at == at) /* the call sent nothing it waited on (answered here, or refused): its frame goes unused */
			in.at += n;
		pthread_mutex_unlock(&in.lock);
	}
	rm_rpc_reset();
	/* The server's thread may still be sending what it took: the input stays valid until
	 * it is done, which closing the connection (above) and its reads ending bring about. */
	pthread_mutex_lock(&in.lock);
	in.data = NULL, in.size = 0, in.at = 0;
	pthread_mutex_unlock(&in.lock);
	return 0;
}
