/* drv_coop IMAGE (coop_kernels.cu): cooperative launches of a kernel that sums over a
 * grid-wide barrier (cuLaunchCooperativeKernel, cuLaunchKernelEx with the cooperative
 * attribute), at the largest co-resident grid and one block past it; thread block clusters
 * (the cluster dimension and scheduling policy attributes, cluster occupancy); and
 * cuOccupancyMaxPotentialBlockSize with and without a callback. Each result is checked. */
#include "drv_common.h"

#define N (1 << 20)
#define BLOCK 256
#define CLUSTER_GRID 16

static int host_in[N];
static unsigned long long expected_sum;

/* Runs gridSumCoop on grid blocks, cooperatively by cuLaunchCooperativeKernel (ex 0) or by
 * cuLaunchKernelEx's attribute (ex 1); checks that every block saw the whole sum. */
static CUresult sum_coop(CUfunction f, CUdeviceptr in, unsigned grid, unsigned shared, CUstream stream, int ex,
			 const char *what)
{
	CUdeviceptr partial, out;
	int n = N;
	CHECK(cuMemAlloc(&partial, (size_t)(grid + 1) * 8));
	CHECK(cuMemAlloc(&out, (size_t)(grid + 1) * 8));
	CHECK(cuMemsetD8(partial, 0xee, (size_t)(grid + 1) * 8));
	CHECK(cuMemsetD8(out, 0xee, (size_t)(grid + 1) * 8));
	void *params[] = { &in, &partial, &out, &n };
	CUresult r;
	if (ex) {
		CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE, .value.cooperative = 1 };
		CUlaunchConfig cfg = { .gridDimX = grid, .gridDimY = 1, .gridDimZ = 1, .blockDimX = BLOCK, .blockDimY = 1,
				       .blockDimZ = 1, .sharedMemBytes = shared, .hStream = stream, .attrs = &attr,
				       .numAttrs = 1 };
		r = cuLaunchKernelEx(&cfg, f, params, NULL);
	} else {
		r = cuLaunchCooperativeKernel(f, grid, 1, 1, BLOCK, 1, 1, shared, stream, params);
	}
	if (r == CUDA_SUCCESS) {
		CHECK(cuStreamSynchronize(stream));
		unsigned long long *got = malloc((size_t)grid * 8);
		CHECK(cuMemcpyDtoH(got, out, (size_t)grid * 8));
		unsigned bad = 0;
		for (unsigned b = 0; b < grid; b++)
			bad += got[b] != expected_sum;
		EXPECT(bad == 0, "%s: %u of %u blocks missed partial sums (block 0 saw %llu)", what, bad, grid, got[0]);
		printf("%s grid=%u sum=%llu blocks_wrong=%u\n", what, grid, got[0], bad);
		free(got);
	} else {
		printf("%s grid=%u result=%s\n", what, grid, drv_error_name(r));
	}
	CHECK(cuMemFree(out));
	CHECK(cuMemFree(partial));
	return r;
}

static void check_cooperative(CUfunction f, CUdeviceptr in, int sms)
{
	int per_sm = 0;
	CUstream stream;
	CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
	CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, f, BLOCK, 0));
	EXPECT(per_sm > 0, "no block of gridSumCoop fits a multiprocessor");
	unsigned full = (unsigned)(per_sm * sms);
	printf("coop blocks_per_sm=%d\n", per_sm);
	CHECK(sum_coop(f, in, full, 0, NULL, 0, "coop_full"));
	CHECK(sum_coop(f, in, (unsigned)sms, 0, stream, 1, "coop_ex_per_sm"));
	CHECK(sum_coop(f, in, 3, 0, stream, 0, "coop_three"));
	/* One block more than can be co-resident: refused at the call. */
	EXPECT_RESULT(sum_coop(f, in, full + 1, 0, stream, 0, "coop_too_large"), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
	EXPECT_RESULT(sum_coop(f, in, full + 1, 0, stream, 1, "coop_ex_too_large"), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
	CHECK(cuCtxSynchronize()); /* the refusals left no error behind */

	/* More dynamic shared memory per block: fewer co-resident blocks. */
	int big = 64 * 1024, read = 0, per_sm_big = 0;
	CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, big));
	CHECK(cuFuncGetAttribute(&read, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f));
	EXPECT(read == big, "max dynamic shared memory reads %d", read);
	CHECK(cuOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_big, f, BLOCK, (size_t)big));
	EXPECT(per_sm_big > 0 && per_sm_big < per_sm, "%d blocks per multiprocessor with %d bytes", per_sm_big, big);
	printf("coop blocks_per_sm_64k=%d\n", per_sm_big);
	CHECK(sum_coop(f, in, (unsigned)(per_sm_big * sms), (unsigned)big, stream, 1, "coop_64k_full"));
	EXPECT_RESULT(sum_coop(f, in, (unsigned)(per_sm_big * sms) + 1, (unsigned)big, stream, 0, "coop_64k_too_large"),
		      CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
	CHECK(cuStreamDestroy(stream));
}

/* clusterRanks with clusters of `size` blocks along x (0: no cluster attribute). */
static void cluster_launch(CUfunction f, CUdeviceptr out, unsigned size, CUclusterSchedulingPolicy policy)
{
	CUlaunchAttribute attrs[2] = {
		{ .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.clusterDim = { size, 1, 1 } },
		{ .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
		  .value.clusterSchedulingPolicyPreference = policy },
	};
	CUlaunchConfig cfg = { .gridDimX = CLUSTER_GRID, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
			       .blockDimZ = 1, .attrs = attrs, .numAttrs = size ? 2 : 0 };
	void *params[] = { &out };
	CHECK(cuMemsetD32(out, 0, CLUSTER_GRID));
	CHECK(cuLaunchKernelEx(&cfg, f, params, NULL));
	CHECK(cuCtxSynchronize());
	unsigned got[CLUSTER_GRID];
	CHECK(cuMemcpyDtoH(got, out, sizeof got));
	unsigned in_cluster = size ? size : 1, bad = 0;
	for (unsigned b = 0; b < CLUSTER_GRID; b++) {
		unsigned rank = b % in_cluster, neighbour = b - rank + (rank + 1) % in_cluster;
		bad += got[b] != (rank | in_cluster << 8 | (neighbour * 3 + 1) << 16);
	}
	EXPECT(bad == 0, "clusters of %u: %u blocks wrong (block 1: %08x)", size, bad, got[1]);
	printf("cluster size=%u policy=%d hash=%016llx blocks_wrong=%u\n", size, (int)policy,
	       (unsigned long long)drv_fnv1a(got, sizeof got), bad);
}

static void check_clusters(CUfunction f)
{
	int can = 0, value = -1;
	CHECK(cuDeviceGetAttribute(&can, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0));
	EXPECT(can == 1, "CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH reads %d", can);
	CUdeviceptr out;
	CHECK(cuMemAlloc(&out, CLUSTER_GRID * 4));
	cluster_launch(f, out, 0, CU_CLUSTER_SCHEDULING_POLICY_DEFAULT);
	cluster_launch(f, out, 2, CU_CLUSTER_SCHEDULING_POLICY_DEFAULT);
	cluster_launch(f, out, 4, CU_CLUSTER_SCHEDULING_POLICY_SPREAD);
	cluster_launch(f, out, 8, CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING);

	CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH, f));
	EXPECT(value == 0, "required cluster width %d", value);
	CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1));
	CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, f));
	EXPECT(value == 1, "non-portable cluster size allowed reads %d", value);
	CHECK(cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE,
				 CU_CLUSTER_SCHEDULING_POLICY_SPREAD));
	CHECK(cuFuncGetAttribute(&value, CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, f));
	EXPECT(value == CU_CLUSTER_SCHEDULING_POLICY_SPREAD, "cluster scheduling policy reads %d", value);

	CUlaunchAttribute attr = { .id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, .value.clusterDim = { 2, 1, 1 } };
	CUlaunchConfig cfg = { .gridDimX = CLUSTER_GRID, .gridDimY = 1, .gridDimZ = 1, .blockDimX = 32, .blockDimY = 1,
			       .blockDimZ = 1, .attrs = &attr, .numAttrs = 1 };
	int potential = 0, active = 0;
	CHECK(cuOccupancyMaxPotentialClusterSize(&potential, f, &cfg));
	CHECK(cuOccupancyMaxActiveClusters(&active, f, &cfg));
	EXPECT(potential >= 8, "largest cluster %d", potential);
	EXPECT(active > 0, "%d active clusters of 2", active);
	printf("cluster potential_size=%d active_clusters_of_2=%d\n", potential, active);
	CHECK(cuMemFree(out));
}

static size_t smem_const(int block) { (void)block; return 1024; }
static size_t smem_per_thread(int block) { return (size_t)block * 48; }

/* The callback runs on the client; without one the GPU host answers: the same question
 * asked both ways must get the same answer. */
static void check_block_size(CUfunction f)
{
	int g0 = 0, b0 = 0, g1 = 0, b1 = 0, g2 = 0, b2 = 0, g3 = 0, b3 = 0, g4 = 0, b4 = 0;
	CHECK(cuOccupancyMaxPotentialBlockSize(&g0, &b0, f, NULL, 1024, 0));
	CHECK(cuOccupancyMaxPotentialBlockSize(&g1, &b1, f, smem_const, 0, 0));
	EXPECT(g0 == g1 && b0 == b1, "with a callback %d/%d, without %d/%d", g1, b1, g0, b0);
	CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&g2, &b2, f, NULL, 1024, 512, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
	CHECK(cuOccupancyMaxPotentialBlockSizeWithFlags(&g3, &b3, f, smem_const, 0, 512, CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE));
	EXPECT(g2 == g3 && b2 == b3, "limited, with a callback %d/%d, without %d/%d", g3, b3, g2, b2);
	CHECK(cuOccupancyMaxPotentialBlockSize(&g4, &b4, f, smem_per_thread, 0, 0));
	EXPECT(b0 > 0 && b2 > 0 && b2 <= 512 && b4 > 0 && g4 > 0, "block sizes %d %d %d", b0, b2, b4);
	printf("block_size const=%d/%d limited=%d/%d per_thread=%d/%d\n", g0, b0, g2, b2, g4, b4);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE\n", argv[0]);
		return 2;
	}
	for (int i = 0; i < N; i++) {
		host_in[i] = (int)((unsigned)i * 2654435761u % 2001u) - 1000;
		expected_sum += (unsigned long long)(long long)host_in[i];
	}
	drv_open_device0();
	int coop = 0, sms = 0;
	CHECK(cuDeviceGetAttribute(&coop, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 0));
	CHECK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0));
	EXPECT(coop == 1, "CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH reads %d", coop);
	CUmodule module = drv_load_module(argv[1]);
	CUfunction sum, ranks;
	CHECK(cuModuleGetFunction(&sum, module, "gridSumCoop"));
	CHECK(cuModuleGetFunction(&ranks, module, "clusterRanks"));
	CUdeviceptr in;
	CHECK(cuMemAlloc(&in, sizeof host_in));
	CHECK(cuMemcpyHtoD(in, host_in, sizeof host_in));
	printf("expected sum=%llu\n", expected_sum);

	check_cooperative(sum, in, sms);
	check_clusters(ranks);
	check_block_size(sum);

	CHECK(cuMemFree(in));
	CHECK(cuModuleUnload(module));
	drv_close_device0();
	int status = drv_exit_status();
	printf("%s\n", status ? "FAIL" : "PASS");
	return status;
}
