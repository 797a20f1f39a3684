// Kernels of drv_coop: a grid-wide barrier (cooperative launches) and thread block
// clusters, sm_90 and later. The test driver has CPU versions (tests/testdriver/kernels.c).
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// A grid-wide sum of in[0..n) in two phases that grid.sync() separates: each block writes
// its partial sum, then every block reads them all and writes the total to out[block].
// Without a grid-wide barrier some block reads a partial not yet written.
extern "C" __global__ void gridSumCoop(const int *in, unsigned long long *partial, unsigned long long *out, int n)
{
	cg::grid_group grid = cg::this_grid();
	__shared__ unsigned long long block_sum;
	if (threadIdx.x == 0)
		block_sum = 0;
	__syncthreads();
	unsigned long long mine = 0;
	for (unsigned long long i = grid.thread_rank(); i < (unsigned long long)n; i += grid.size())
		mine += (unsigned long long)(long long)in[i];
	atomicAdd(&block_sum, mine);
	__syncthreads();
	if (threadIdx.x == 0)
		partial[blockIdx.x] = block_sum;
	grid.sync();
	if (threadIdx.x == 0) {
		unsigned long long total = 0;
		for (unsigned b = 0; b < gridDim.x; b++)
			total += ((volatile unsigned long long *)partial)[b];
		out[blockIdx.x] = total;
	}
}

// Each block of a one-dimensional grid writes its rank in its cluster, the cluster's size
// and the mark its next neighbour in the cluster put in its shared memory.
extern "C" __global__ void clusterRanks(unsigned *out)
{
	cg::cluster_group cluster = cg::this_cluster();
	__shared__ unsigned mark;
	if (threadIdx.x == 0)
		mark = blockIdx.x * 3 + 1;
	cluster.sync();
	unsigned rank = cluster.block_rank(), size = cluster.num_blocks();
	unsigned *theirs = cluster.map_shared_rank(&mark, (int)((rank + 1) % size));
	if (threadIdx.x == 0)
		out[blockIdx.x] = rank | size << 8 | *theirs << 16;
	cluster.sync(); // the neighbour's read done before this block's shared memory goes
}
