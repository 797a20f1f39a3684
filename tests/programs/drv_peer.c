/* drv_peer IMAGE [hold|hostmem]: two devices of one host through the driver API (issue 39).
 *
 * Peer queries (cuDeviceCanAccessPeer, every P2P attribute both ways), peer access between
 * the primary contexts with the driver's errors, a kernel of device 1 reading device 0's
 * memory, cuMemcpyPeer(Async) and cuMemcpy3DPeer between the contexts, and virtual memory
 * located on the host (HOST, HOST_NUMA, HOST_NUMA_CURRENT): granularity, create, map,
 * access for both devices, copies and a kernel over it, release. A CPU access location for
 * host-located memory is the one answer that differs by design (Remora refuses it: the
 * client's CPU cannot reach the GPU host's memory), so it is said on stderr only.
 * With hold, it enables access both ways, says "held" and keeps it until stdin ends: a
 * client beside it must see none of it (tests/sharing/peer_clients.py). With hostmem, it makes
 * host-located allocations within and past a host memory limit, and keeps the last.
 * Needs two devices: on one it says so and exits 77 (a skip for meson). */
#include "drv_common.h"

#define N (1 << 18)
#define W 256 /* the 3-D copy's rows of W floats */
#define H 64

static void fill(float *x, int n, float base)
{
	for (int i = 0; i < n; i++)
		x[i] = base + (float)(i % 1000) * 0.5f;
}

static CUfunction function(CUmodule m, const char *name)
{
	CUfunction f;
	CHECK(cuModuleGetFunction(&f, m, name));
	return f;
}

static void peer_queries(void)
{
	static const struct { CUdevice_P2PAttribute a; const char *name; } attrs[] = {
		{CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, "performance rank"},
		{CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, "access supported"},
		{CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, "native atomics"},
		{CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED, "array access"},
		{CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED, "partial atomics"},
	};
	for (int from = 0; from < 2; from++)
		for (int to = 0; to < 2; to++) {
			int can = -1;
			CHECK(cuDeviceCanAccessPeer(&can, from, to));
			printf("can access peer %d -> %d: %d\n", from, to, can);
			EXPECT(can == (from != to ? can : 0), "a device is not its own peer");
			for (size_t k = 0; k < sizeof attrs / sizeof attrs[0]; k++) {
				int v = -1;
				CUresult r = cuDeviceGetP2PAttribute(&v, attrs[k].a, from, to);
				printf("  p2p %d -> %d %s: %s %d\n", from, to, attrs[k].name, drv_error_name(r),
				       r == CUDA_SUCCESS ? v : -1);
			}
		}
}

/* Peer access from ctx to peer: the errors the driver gives, each once. */
static int peer_access(CUcontext ctx, CUcontext peer)
{
	int can;
	CUdevice d, pd;
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuCtxGetDevice(&d));
	CHECK(cuCtxSetCurrent(peer));
	CHECK(cuCtxGetDevice(&pd));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuDeviceCanAccessPeer(&can, d, pd));
	if (!can)
		return 0;
	EXPECT_RESULT(cuCtxDisablePeerAccess(peer), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
	EXPECT_RESULT(cuCtxEnablePeerAccess(ctx, 0), CUDA_ERROR_PEER_ACCESS_UNSUPPORTED); /* its own device (the H100s say so) */
	CHECK(cuCtxEnablePeerAccess(peer, 0));
	EXPECT_RESULT(cuCtxEnablePeerAccess(peer, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
	CHECK(cuCtxDisablePeerAccess(peer));
	EXPECT_RESULT(cuCtxDisablePeerAccess(peer), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
	CHECK(cuCtxEnablePeerAccess(peer, 0));
	printf("peer access %d -> %d: enabled, errors as the driver's\n", (int)d, (int)pd);
	return 1;
}

static void peer_copies(CUcontext c0, CUcontext c1, CUmodule m1)
{
	size_t bytes = N * sizeof(float);
	float *h = malloc(bytes), *g = malloc(bytes), *want = malloc(bytes);
	CUdeviceptr a, b, sum;
	CUstream s1;
	fill(h, N, 1.0f);
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuMemAlloc(&a, bytes));
	CHECK(cuMemcpyHtoD(a, h, bytes));
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuMemAlloc(&b, bytes));
	CHECK(cuMemAlloc(&sum, bytes));
	CHECK(cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemsetD32(b, 0, N));
	/* Blocking and stream-ordered, with each device's context current in turn. */
	CHECK(cuMemcpyPeer(b, c1, a, c0, bytes));
	CHECK(cuMemcpyDtoH(g, b, bytes));
	EXPECT(!memcmp(g, h, bytes), "cuMemcpyPeer device 0 -> 1");
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuMemsetD32(a, 0, N));
	CHECK(cuMemcpyPeerAsync(a, c0, b, c1, bytes, s1)); /* device 1's stream, device 0 current */
	CHECK(cuStreamSynchronize(s1));
	CHECK(cuMemcpyDtoH(g, a, bytes));
	EXPECT(!memcmp(g, h, bytes), "cuMemcpyPeerAsync device 1 -> 0 on device 1's stream");
	printf("peer copies: %016llx\n", (unsigned long long)drv_fnv1a(g, bytes));

	/* A rectangle of W/2 x H/2 floats between pitched layouts of the two devices (each a
	 * buffer of N / W rows: the second rectangle's rows reach past row H). */
	CUDA_MEMCPY3D_PEER p = {0};
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuMemsetD32(b, 0, N));
	p.srcMemoryType = CU_MEMORYTYPE_DEVICE, p.srcDevice = a, p.srcContext = c0, p.srcPitch = W * sizeof(float);
	p.srcHeight = N / W, p.srcXInBytes = 8 * sizeof(float), p.srcY = 4;
	p.dstMemoryType = CU_MEMORYTYPE_DEVICE, p.dstDevice = b, p.dstContext = c1, p.dstPitch = W * sizeof(float);
	p.dstHeight = N / W, p.dstXInBytes = 16 * sizeof(float), p.dstY = 2;
	p.WidthInBytes = W / 2 * sizeof(float), p.Height = H / 2, p.Depth = 1;
	CHECK(cuMemcpy3DPeer(&p));
	p.dstY = 2 + H / 2; /* the same rectangle again below, stream-ordered */
	CHECK(cuMemcpy3DPeerAsync(&p, s1));
	CHECK(cuStreamSynchronize(s1));
	CHECK(cuMemcpyDtoH(g, b, W * H * sizeof(float)));
	memset(want, 0, W * H * sizeof(float));
	for (int y = 0; y < H / 2; y++)
		for (int x = 0; x < W / 2; x++) {
			want[(2 + y) * W + 16 + x] = h[(4 + y) * W + 8 + x];
			want[(2 + H / 2 + y) * W + 16 + x] = h[(4 + y) * W + 8 + x];
		}
	EXPECT(!memcmp(g, want, W * H * sizeof(float)), "cuMemcpy3DPeer(Async) rectangles");
	printf("3-D peer copies: %016llx\n", (unsigned long long)drv_fnv1a(g, W * H * sizeof(float)));

	/* With access enabled, a kernel of device 1 adds device 0's memory to its own. */
	CHECK(cuMemcpyHtoD(b, h, bytes));
	int n = N;
	void *args[] = {&a, &b, &sum, &n};
	CHECK(cuLaunchKernel(function(m1, "vecAdd"), 64, 1, 1, 256, 1, 1, 0, s1, args, NULL));
	CHECK(cuStreamSynchronize(s1));
	CHECK(cuMemcpyDtoH(g, sum, bytes));
	int ok = 1;
	for (int i = 0; i < N && ok; i++)
		ok = g[i] == h[i] + h[i];
	EXPECT(ok, "device 1's kernel read device 0's memory");
	printf("peer kernel: %016llx\n", (unsigned long long)drv_fnv1a(g, bytes));
	CHECK(cuStreamDestroy(s1));
	CHECK(cuMemFree(b));
	CHECK(cuMemFree(sum));
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuMemFree(a));
	free(h), free(g), free(want);
}

/* Host-located virtual memory, mapped for both devices: filled from device 1, scaled by a
 * kernel of device 0, read back. */
static void host_vmm(CUcontext c0, CUcontext c1, CUmodule m0, CUmemLocationType type, int id, const char *name)
{
	CUmemAllocationProp prop = {0};
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = type;
	prop.location.id = id;
	size_t gran = 0, bytes;
	CHECK(cuCtxSetCurrent(c0));
	CUresult r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	printf("%s: granularity %s\n", name, drv_error_name(r));
	if (r != CUDA_SUCCESS)
		return;
	bytes = (N * sizeof(float) + gran - 1) / gran * gran;
	CUmemGenericAllocationHandle hnd;
	CUdeviceptr va;
	CHECK(cuMemCreate(&hnd, bytes, &prop, 0));
	CUmemAllocationProp back;
	CHECK(cuMemGetAllocationPropertiesFromHandle(&back, hnd));
	EXPECT(back.location.type == type, "%s: the allocation's location type is kept (%d)", name, (int)back.location.type);
	CHECK(cuMemAddressReserve(&va, bytes, 0, 0, 0));
	CHECK(cuMemMap(va, bytes, 0, hnd, 0));
	CUmemAccessDesc acc[2] = {
		{.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
		{.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 1}, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE},
	};
	CHECK(cuMemSetAccess(va, bytes, acc, 2));
	unsigned long long flags = 0;
	CHECK(cuMemGetAccess(&flags, &acc[1].location, va));
	EXPECT(flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE, "%s: device 1 may read and write it", name);
	CUmemAccessDesc cpu = {.location = {.type = CU_MEM_LOCATION_TYPE_HOST_NUMA, .id = 0},
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	fprintf(stderr, "%s: CPU access: %s\n", name, drv_error_name(cuMemSetAccess(va, bytes, &cpu, 1)));

	float *h = malloc(N * sizeof(float)), *g = malloc(N * sizeof(float));
	fill(h, N, -3.0f);
	CHECK(cuCtxSetCurrent(c1));
	CHECK(cuMemcpyHtoD(va, h, N * sizeof(float)));
	CHECK(cuCtxSetCurrent(c0));
	float s = 2.0f;
	int n = N;
	void *args[] = {&va, &s, &n};
	CHECK(cuLaunchKernel(function(m0, "scaleArray"), 64, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
	CHECK(cuCtxSynchronize());
	CHECK(cuMemcpyDtoH(g, va, N * sizeof(float)));
	int ok = 1;
	for (int i = 0; i < N && ok; i++)
		ok = g[i] == h[i] * 2.0f;
	EXPECT(ok, "%s: filled from device 1, scaled on device 0", name);
	printf("%s: %016llx\n", name, (unsigned long long)drv_fnv1a(g, N * sizeof(float)));
	CHECK(cuMemUnmap(va, bytes));
	CHECK(cuMemRelease(hnd));
	CHECK(cuMemAddressFree(va, bytes));
	free(h), free(g);
}

/* A host-located allocation of mib MiB, mapped, and unless keep, unmapped and released. */
static CUresult host_round(size_t mib, int keep)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED, .location = {.type = CU_MEM_LOCATION_TYPE_HOST}};
	CUmemAccessDesc acc = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
			       .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CUmemGenericAllocationHandle h;
	CUdeviceptr va;
	size_t bytes = mib << 20;
	CUresult r = cuMemCreate(&h, bytes, &prop, 0);
	if (r != CUDA_SUCCESS)
		return r;
	CHECK(cuMemAddressReserve(&va, bytes, 0, 0, 0));
	CHECK(cuMemMap(va, bytes, 0, h, 0));
	CHECK(cuMemSetAccess(va, bytes, &acc, 1));
	CHECK(cuMemsetD32(va, 7, bytes / 4));
	if (keep)
		return CUDA_SUCCESS; /* released with the session */
	CHECK(cuMemUnmap(va, bytes));
	CHECK(cuMemRelease(h));
	CHECK(cuMemAddressFree(va, bytes));
	return CUDA_SUCCESS;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	int ndev = 0;
	CHECK(cuInit(0));
	CHECK(cuDeviceGetCount(&ndev));
	if (ndev < 2) {
		printf("drv_peer: needs 2 devices, this host has %d: skipped\n", ndev);
		return 77;
	}
	CUcontext c0, c1;
	CHECK(cuDevicePrimaryCtxRetain(&c0, 0));
	CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
	if (argc > 2 && !strcmp(argv[2], "hostmem")) { /* charged and given back (peer_clients.py) */
		CHECK(cuCtxSetCurrent(c0));
		for (int i = 0; i < 3; i++)
			printf("48 MiB released: %s\n", drv_error_name(host_round(48, 0)));
		printf("512 MiB: %s\n", drv_error_name(host_round(512, 0)));
		printf("48 MiB kept: %s\n", drv_error_name(host_round(48, 1)));
		return 0;
	}
	if (argc > 2 && !strcmp(argv[2], "hold")) { /* another client's access, held until stdin ends */
		CHECK(cuCtxSetCurrent(c0));
		CHECK(cuCtxEnablePeerAccess(c1, 0));
		CHECK(cuCtxSetCurrent(c1));
		CHECK(cuCtxEnablePeerAccess(c0, 0));
		printf("held\n");
		fflush(stdout);
		while (getchar() != EOF)
			;
		EXPECT_RESULT(cuCtxEnablePeerAccess(c0, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
		printf("still held\n");
		return 0;
	}
	peer_queries();
	CHECK(cuCtxSetCurrent(c0));
	CUmodule m0 = drv_load_module(argv[1]);
	CHECK(cuCtxSetCurrent(c1));
	CUmodule m1 = drv_load_module(argv[1]);
	int both = peer_access(c1, c0) & peer_access(c0, c1);
	if (both)
		peer_copies(c0, c1, m1);

	int numa = -1, host_vmm_ok = 0, numa_vmm_ok = 0;
	CHECK(cuDeviceGetAttribute(&numa, CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, 0));
	CHECK(cuDeviceGetAttribute(&host_vmm_ok, CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	CHECK(cuDeviceGetAttribute(&numa_vmm_ok, CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0));
	printf("host virtual memory: %d, NUMA: %d\n", host_vmm_ok, numa_vmm_ok);
	if (host_vmm_ok)
		host_vmm(c0, c1, m0, CU_MEM_LOCATION_TYPE_HOST, 0, "host");
	if (numa_vmm_ok && numa >= 0) {
		host_vmm(c0, c1, m0, CU_MEM_LOCATION_TYPE_HOST_NUMA, numa, "host NUMA node");
		host_vmm(c0, c1, m0, CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT, 0, "host NUMA current");
	}

	if (both) {
		CHECK(cuCtxSetCurrent(c0));
		CHECK(cuCtxDisablePeerAccess(c1));
		CHECK(cuCtxSetCurrent(c1));
		CHECK(cuCtxDisablePeerAccess(c0));
	}
	CHECK(cuModuleUnload(m1));
	CHECK(cuCtxSetCurrent(c0));
	CHECK(cuModuleUnload(m0));
	CHECK(cuCtxSetCurrent(NULL));
	CHECK(cuDevicePrimaryCtxRelease(1));
	CHECK(cuDevicePrimaryCtxRelease(0));
	int rc = drv_exit_status();
	printf("%s\n", rc ? "FAIL" : "PASS");
	return rc;
}
