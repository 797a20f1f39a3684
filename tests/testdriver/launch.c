/* Function attributes, kernel launches (cooperative ones and clusters too) and occupancy. */
#include "testdriver.h"

#include <stdlib.h>
#include <string.h>

#define MAX_THREADS_PER_BLOCK 1024
#define MAX_THREADS_PER_SM 2048
#define MAX_BLOCKS_PER_SM 32
#define REGISTERS_PER_SM 65536
#define SHARED_PER_SM 233472
#define SHARED_PER_BLOCK_OPTIN 232448
#define SM_COUNT 132
#define WARP 32
#define PORTABLE_CLUSTER 8
#define NON_PORTABLE_CLUSTER 16

struct td_function *td_function_from(const void *handle);

/* ---- attributes ---- */

static CUresult function_attribute(int *value, CUfunction_attribute attrib, const struct td_function *f)
{
	if (!value)
		return CUDA_ERROR_INVALID_VALUE;
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = MAX_THREADS_PER_BLOCK; break;
	case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: *value = (int)f->kernel->static_shared_bytes; break;
	case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES: *value = 0; break;
	case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: *value = 0; break;
	case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = (int)f->kernel->registers; break;
	case CU_FUNC_ATTRIBUTE_PTX_VERSION: *value = 90; break;
	case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; break;
	case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA: *value = 0; break;
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = f->max_dynamic_shared; break;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = f->preferred_carveout; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET: *value = 0; break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH: *value = f->required_cluster[0]; break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT: *value = f->required_cluster[1]; break;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH: *value = f->required_cluster[2]; break;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED: *value = f->non_portable_cluster; break;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *value = f->cluster_policy; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

static CUresult set_function_attribute(struct td_function *f, CUfunction_attribute attrib, int value)
{
	switch (attrib) {
	case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
		if (value < 0 || value + (int)f->kernel->static_shared_bytes > SHARED_PER_BLOCK_OPTIN)
			return CUDA_ERROR_INVALID_VALUE;
		f->max_dynamic_shared = value;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
		if (value < -1 || value > 100)
			return CUDA_ERROR_INVALID_VALUE;
		f->preferred_carveout = value;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
		if (value != 0 && value != 1)
			return CUDA_ERROR_INVALID_VALUE;
		f->non_portable_cluster = value;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
		if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT || value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
			return CUDA_ERROR_INVALID_VALUE;
		f->cluster_policy = value;
		return CUDA_SUCCESS;
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
		if (value < 0 || value > NON_PORTABLE_CLUSTER)
			return CUDA_ERROR_INVALID_VALUE;
		f->required_cluster[attrib - CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] = value;
		return CUDA_SUCCESS;
	default:
		return CUDA_ERROR_INVALID_VALUE;
	}
}

TD_EXPORT CUresult cuFuncGetAttribute(int *value, CUfunction_attribute attrib, CUfunction hfunc)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return f ? function_attribute(value, attrib, f) : CUDA_ERROR_INVALID_HANDLE;
}

TD_EXPORT CUresult cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	return f ? set_function_attribute(f, attrib, value) : CUDA_ERROR_INVALID_HANDLE;
}

TD_EXPORT CUresult cuKernelGetAttribute(int *value, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev)
{
	struct td_function *f = td_function_from(kernel);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= td_device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	return f ? function_attribute(value, attrib, f) : CUDA_ERROR_INVALID_HANDLE;
}

TD_EXPORT CUresult cuKernelSetAttribute(CUfunction_attribute attrib, int value, CUkernel kernel, CUdevice dev)
{
	struct td_function *f = td_function_from(kernel);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= td_device_count())
		return CUDA_ERROR_INVALID_DEVICE;
	return f ? set_function_attribute(f, attrib, value) : CUDA_ERROR_INVALID_HANDLE;
}

TD_EXPORT CUresult cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if ((unsigned)config > CU_FUNC_CACHE_PREFER_EQUAL)
		return CUDA_ERROR_INVALID_VALUE;
	f->cache_config = config;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuFuncGetName(const char **name, CUfunction hfunc)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	*name = f->kernel->name;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuFuncGetParamInfo(CUfunction hfunc, size_t index, size_t *offset, size_t *size)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (index >= f->kernel->param_count)
		return CUDA_ERROR_INVALID_VALUE;
	if (offset)
		*offset = td_param_offset(f->kernel, (unsigned)index);
	if (size)
		*size = f->kernel->param_size[index];
	return CUDA_SUCCESS;
}

/* ---- launches ---- */

/* Packs the arguments from kernelParams or from extra's buffer. */
static CUresult pack_arguments(const struct td_kernel *k, void **params, void **extra, unsigned char *args)
{
	size_t needed = td_args_size(k);
	if (extra) {
		const void *buffer = NULL;
		size_t size = 0;
		bool has_size = false;
		for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
			if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
				buffer = extra[i + 1];
			else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
				size = *(const size_t *)extra[i + 1], has_size = true;
			else
				return CUDA_ERROR_INVALID_VALUE;
		}
		if (params || !has_size || size < needed || (needed && !buffer))
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(args, buffer, needed);
		return CUDA_SUCCESS;
	}
	if (k->param_count && !params)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < k->param_count; i++)
		memcpy(args + td_param_offset(k, i), params[i], k->param_size[i]);
	return CUDA_SUCCESS;
}

static int blocks_per_sm(const struct td_kernel *k, int block_size, size_t dynamic_shared);

/* What a launch's attributes ask for: co-residency, cluster dimensions. */
struct launch_options {
	bool cooperative;
	unsigned cluster[3];
};

static CUresult read_attributes(const CUlaunchAttribute *attrs, unsigned n, struct launch_options *o)
{
	if (n && !attrs)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned i = 0; i < n; i++) {
		const CUlaunchAttributeValue *v = &attrs[i].value;
		switch (attrs[i].id) {
		case CU_LAUNCH_ATTRIBUTE_COOPERATIVE: o->cooperative = v->cooperative != 0; break;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
			o->cluster[0] = v->clusterDim.x, o->cluster[1] = v->clusterDim.y, o->cluster[2] = v->clusterDim.z;
			break;
		case CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
			if ((unsigned)v->clusterSchedulingPolicyPreference > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
				return CUDA_ERROR_INVALID_VALUE;
			break;
		default: break; /* the others change nothing the test driver models */
		}
	}
	return CUDA_SUCCESS;
}

/* Clusters must tile the grid, and hold at most 8 blocks (16 where the function allows). */
static CUresult check_cluster(const struct td_function *f, const unsigned grid[3], unsigned cluster[3])
{
	if (!cluster[0] && !cluster[1] && !cluster[2])
		for (int d = 0; d < 3; d++)
			cluster[d] = (unsigned)f->required_cluster[d];
	if (!cluster[0] && !cluster[1] && !cluster[2])
		return CUDA_SUCCESS;
	unsigned long long blocks = 1;
	for (int d = 0; d < 3; d++) {
		if (!cluster[d] || grid[d] % cluster[d])
			return CUDA_ERROR_INVALID_CLUSTER_SIZE;
		blocks *= cluster[d];
	}
	return blocks > (f->non_portable_cluster ? NON_PORTABLE_CLUSTER : PORTABLE_CLUSTER) ? CUDA_ERROR_INVALID_CLUSTER_SIZE
											      : CUDA_SUCCESS;
}

static CUresult launch(CUfunction hfunc, const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
		       CUstream stream, void **params, void **extra, struct launch_options o)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((rc = td_capture_usable(s)) != CUDA_SUCCESS)
		return rc;
	struct td_function *f = td_function_from(hfunc);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	static const unsigned max_grid[3] = { 2147483647u, 65535, 65535 }, max_block[3] = { 1024, 1024, 64 };
	for (int d = 0; d < 3; d++)
		if (grid[d] == 0 || block[d] == 0 || grid[d] > max_grid[d] || block[d] > max_block[d])
			return CUDA_ERROR_INVALID_VALUE;
	if ((unsigned long long)block[0] * block[1] * block[2] > MAX_THREADS_PER_BLOCK)
		return CUDA_ERROR_INVALID_VALUE;
	if (shared_bytes > (unsigned)f->max_dynamic_shared)
		return CUDA_ERROR_INVALID_VALUE;
	if ((rc = check_cluster(f, grid, o.cluster)) != CUDA_SUCCESS)
		return rc;
	if (o.cooperative && (unsigned long long)grid[0] * grid[1] * grid[2] >
				     (unsigned long long)blocks_per_sm(f->kernel, (int)(block[0] * block[1] * block[2]),
								       shared_bytes) * SM_COUNT)
		return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
	struct td_op *op = td_op_new(TD_OP_KERNEL);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = pack_arguments(f->kernel, params, extra, op->u.launch.args);
	if (rc != CUDA_SUCCESS) {
		free(op);
		return rc;
	}
	op->u.launch.kernel = f->kernel;
	op->u.launch.handle = (void *)hfunc; /* what a captured node's parameters name (cuGraphKernelNodeGetParams) */
	memcpy(op->u.launch.shape.grid, grid, sizeof op->u.launch.shape.grid);
	memcpy(op->u.launch.shape.block, block, sizeof op->u.launch.shape.block);
	op->u.launch.shape.shared_bytes = shared_bytes;
	op->u.launch.shape.cooperative = o.cooperative;
	memcpy(op->u.launch.shape.cluster, o.cluster, sizeof o.cluster);
	op->u.launch.shape.magic = td_module_global(f->module, "kernelsMagic");
	td_enqueue(s, op);
	return CUDA_SUCCESS;
}

CUresult td_kernel_node_op(const CUDA_KERNEL_NODE_PARAMS *p, struct td_op *op)
{
	struct td_function *f = td_function_from(p->func ? (const void *)p->func : (const void *)p->kern);
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	const unsigned grid[3] = { p->gridDimX, p->gridDimY, p->gridDimZ };
	const unsigned block[3] = { p->blockDimX, p->blockDimY, p->blockDimZ };
	for (int d = 0; d < 3; d++)
		if (grid[d] == 0 || block[d] == 0 || block[d] > 1024)
			return CUDA_ERROR_INVALID_VALUE;
	if ((unsigned long long)block[0] * block[1] * block[2] > MAX_THREADS_PER_BLOCK ||
	    p->sharedMemBytes > (unsigned)f->max_dynamic_shared)
		return CUDA_ERROR_INVALID_VALUE;
	memset(op, 0, sizeof *op);
	op->kind = TD_OP_KERNEL;
	CUresult rc = pack_arguments(f->kernel, p->kernelParams, p->extra, op->u.launch.args);
	if (rc != CUDA_SUCCESS)
		return rc;
	op->u.launch.kernel = f->kernel;
	op->u.launch.handle = p->func ? (void *)p->func : (void *)p->kern;
	memcpy(op->u.launch.shape.grid, grid, sizeof grid);
	memcpy(op->u.launch.shape.block, block, sizeof block);
	op->u.launch.shape.shared_bytes = p->sharedMemBytes;
	op->u.launch.shape.magic = td_module_global(f->module, "kernelsMagic");
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
				  CUstream stream, void **params, void **extra)
{
	const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
	return launch(f, grid, block, shared_bytes, stream, params, extra, (struct launch_options){ 0 });
}

TD_EXPORT CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
					     unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
					     CUstream stream, void **params)
{
	const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
	return launch(f, grid, block, shared_bytes, stream, params, NULL, (struct launch_options){ .cooperative = true });
}

TD_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	const unsigned grid[3] = { config->gridDimX, config->gridDimY, config->gridDimZ };
	const unsigned block[3] = { config->blockDimX, config->blockDimY, config->blockDimZ };
	struct launch_options o = { 0 };
	CUresult rc = read_attributes(config->attrs, config->numAttrs, &o);
	return rc == CUDA_SUCCESS ? launch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra, o) : rc;
}

/* ---- occupancy ---- */

static int blocks_per_sm(const struct td_kernel *k, int block_size, size_t dynamic_shared)
{
	if (block_size <= 0 || block_size > MAX_THREADS_PER_BLOCK)
		return 0;
	int warps = (block_size + WARP - 1) / WARP;
	int by_threads = MAX_THREADS_PER_SM / (warps * WARP);
	int by_registers = REGISTERS_PER_SM / (int)(k->registers * (unsigned)warps * WARP);
	size_t shared = k->static_shared_bytes + dynamic_shared + 1024;   /* 1 KiB reserved per block */
	int by_shared = (int)(SHARED_PER_SM / shared);
	int blocks = MAX_BLOCKS_PER_SM;
	if (by_threads < blocks) blocks = by_threads;
	if (by_registers < blocks) blocks = by_registers;
	if (by_shared < blocks) blocks = by_shared;
	return blocks;
}

TD_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int *blocks, CUfunction hfunc,
									int block_size, size_t dynamic_shared,
									unsigned int flags)
{
	(void)flags;
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!blocks || block_size <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	*blocks = blocks_per_sm(f->kernel, block_size, dynamic_shared);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *blocks, CUfunction hfunc, int block_size,
							       size_t dynamic_shared)
{
	return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(blocks, hfunc, block_size, dynamic_shared, 0);
}

/* As cuda_runtime.h's cudaOccupancyMaxPotentialBlockSizeVariableSMemWithFlags: the block
 * size of the most resident threads, the largest on a tie, trying the limit first. */
TD_EXPORT CUresult cuOccupancyMaxPotentialBlockSizeWithFlags(int *min_grid_size, int *block_size, CUfunction hfunc,
							     CUoccupancyB2DSize shared_for_block, size_t dynamic_shared,
							     int block_size_limit, unsigned int flags)
{
	(void)flags;
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!min_grid_size || !block_size)
		return CUDA_ERROR_INVALID_VALUE;
	int limit = block_size_limit == 0 || block_size_limit > MAX_THREADS_PER_BLOCK ? MAX_THREADS_PER_BLOCK
										      : block_size_limit;
	int best_size = 0, best_blocks = 0, best_threads = 0;
	for (int aligned = (limit + WARP - 1) / WARP * WARP; aligned > 0; aligned -= WARP) {
		int size = limit < aligned ? limit : aligned;
		size_t shared = shared_for_block ? shared_for_block(size) : dynamic_shared;
		int blocks = blocks_per_sm(f->kernel, size, shared);
		if (blocks * size > best_threads) {
			best_threads = blocks * size;
			best_size = size;
			best_blocks = blocks;
		}
		if (best_threads == MAX_THREADS_PER_SM)
			break;
	}
	*block_size = best_size;
	*min_grid_size = best_blocks * SM_COUNT;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid_size, int *block_size, CUfunction hfunc,
						    CUoccupancyB2DSize shared_for_block, size_t dynamic_shared,
						    int block_size_limit)
{
	return cuOccupancyMaxPotentialBlockSizeWithFlags(min_grid_size, block_size, hfunc, shared_for_block,
							 dynamic_shared, block_size_limit, 0);
}

/* The largest cluster a launch of config could have, and how many clusters of config's
 * (its cluster dimension attribute) fit on the device at once. */
TD_EXPORT CUresult cuOccupancyMaxPotentialClusterSize(int *size, CUfunction hfunc, const CUlaunchConfig *config)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!size || !config)
		return CUDA_ERROR_INVALID_VALUE;
	*size = f->non_portable_cluster ? NON_PORTABLE_CLUSTER : PORTABLE_CLUSTER;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuOccupancyMaxActiveClusters(int *clusters, CUfunction hfunc, const CUlaunchConfig *config)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!clusters || !config)
		return CUDA_ERROR_INVALID_VALUE;
	struct launch_options o = { 0 };
	CUresult rc = read_attributes(config->attrs, config->numAttrs, &o);
	const unsigned grid[3] = { config->gridDimX, config->gridDimY, config->gridDimZ };
	if (rc == CUDA_SUCCESS)
		rc = check_cluster(f, grid, o.cluster);
	if (rc != CUDA_SUCCESS)
		return rc;
	unsigned per_cluster = o.cluster[0] ? o.cluster[0] * o.cluster[1] * o.cluster[2] : 1;
	int block = (int)(config->blockDimX * config->blockDimY * config->blockDimZ);
	*clusters = blocks_per_sm(f->kernel, block, config->sharedMemBytes) * SM_COUNT / (int)per_cluster;
	return CUDA_SUCCESS;
}
