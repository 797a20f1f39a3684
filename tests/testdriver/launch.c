/* Function attributes, kernel launches and occupancy. */
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
	case CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
	case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE: *value = 0; break;
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
	case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
	case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
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

static CUresult launch(CUfunction hfunc, const unsigned grid[3], const unsigned block[3], unsigned shared_bytes,
		       CUstream stream, void **params, void **extra)
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
	struct td_op *op = td_op_new(TD_OP_KERNEL);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = pack_arguments(f->kernel, params, extra, op->u.launch.args);
	if (rc != CUDA_SUCCESS) {
		free(op);
		return rc;
	}
	op->u.launch.kernel = f->kernel;
	memcpy(op->u.launch.shape.grid, grid, sizeof op->u.launch.shape.grid);
	memcpy(op->u.launch.shape.block, block, sizeof op->u.launch.shape.block);
	op->u.launch.shape.shared_bytes = shared_bytes;
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
	memcpy(op->u.launch.shape.grid, grid, sizeof grid);
	memcpy(op->u.launch.shape.block, block, sizeof block);
	op->u.launch.shape.shared_bytes = p->sharedMemBytes;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				  unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared_bytes,
				  CUstream stream, void **params, void **extra)
{
	const unsigned grid[3] = { gx, gy, gz }, block[3] = { bx, by, bz };
	return launch(f, grid, block, shared_bytes, stream, params, extra);
}

TD_EXPORT CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params, void **extra)
{
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	const unsigned grid[3] = { config->gridDimX, config->gridDimY, config->gridDimZ };
	const unsigned block[3] = { config->blockDimX, config->blockDimY, config->blockDimZ };
	return launch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra);
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

TD_EXPORT CUresult cuOccupancyMaxPotentialBlockSize(int *min_grid_size, int *block_size, CUfunction hfunc,
						    CUoccupancyB2DSize shared_for_block, size_t dynamic_shared,
						    int block_size_limit)
{
	struct td_function *f = td_function_from(hfunc);
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!min_grid_size || !block_size)
		return CUDA_ERROR_INVALID_VALUE;
	int limit = block_size_limit > 0 && block_size_limit < MAX_THREADS_PER_BLOCK ? block_size_limit
										   : MAX_THREADS_PER_BLOCK;
	int best_size = 0, best_blocks = 0, best_threads = 0;
	for (int size = limit / WARP * WARP; size >= WARP; size -= WARP) {
		size_t shared = shared_for_block ? shared_for_block(size) : dynamic_shared;
		int blocks = blocks_per_sm(f->kernel, size, shared);
		if (blocks * size > best_threads) {
			best_threads = blocks * size;
			best_size = size;
			best_blocks = blocks;
		}
	}
	if (best_size == 0)   /* limit below one warp */
		best_size = limit, best_blocks = blocks_per_sm(f->kernel, limit, dynamic_shared);
	*block_size = best_size;
	*min_grid_size = best_blocks * SM_COUNT;
	return CUDA_SUCCESS;
}
