/* Kernel launches and their occupancy: arguments are packed at their offsets into one
 * buffer and sent without waiting (a cooperative launch waits for its answer). Each
 * function's parameter layout is asked of the GPU host in one round trip
 * (rmFuncGetParamLayout), checked (param_layout.h: what a lying host can make the client
 * read) and kept in the query cache as cuFuncGetParamInfo's answers are, until they are
 * forgotten (a module unloaded: its functions' handles may come again for other functions). */
#include "client.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "param_layout.h"
#include "query_cache.h"
#include "remora.pb-c.h"

/* Layouts are kept as every cuFuncGetParamInfo answer of their function: forgotten with them. */
#define LAYOUT_OP RM_OP_cuFuncGetParamInfo

static pthread_mutex_t names_lock = PTHREAD_MUTEX_INITIALIZER;

/* Asks the GPU host for f's layout. A layout param_layout.h refuses comes back refused,
 * after one line naming f; a reply no host sends fails the connection. */
static CUresult ask_layout(CUfunction f, struct rm_param_layout **out)
{
	Remora__FuncGetParamLayout req = REMORA__FUNC_GET_PARAM_LAYOUT__INIT;
	req.func = (uint64_t)(uintptr_t)f;
	Remora__FuncGetParamLayoutReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_rmFuncGetParamLayout, &req.base, &remora__func_get_param_layout_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	char why[200];
	int err = 0;
	if (r == CUDA_SUCCESS && !rep)
		r = rm_rpc_bad_reply("rmFuncGetParamLayout: no reply");
	if (r == CUDA_SUCCESS)
		err = rm_param_layout_decode(rep->offset, rep->n_offset, rep->size, rep->n_size, rep->too_many,
					     rm_param_limit(rm_remote_driver_version()), out, why, sizeof(why));
	if (err == -EPROTO)
		r = rm_rpc_bad_reply("rmFuncGetParamLayout: %s", why);
	else if (err)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	else if (r == CUDA_SUCCESS && (*out)->refused)
		rm_log(RM_LOG_ERROR, "cuFuncGetParamInfo: the GPU server describes function %p's parameters as no kernel "
		       "has them (%s): its launches are refused with CUDA_ERROR_INVALID_IMAGE", (void *)f, why);
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* f's layout, asked for if none is kept; on CUDA_SUCCESS held (rm_query_cache_hold) until
 * the caller, done with it, releases it. */
static CUresult layout_of(CUfunction f, const struct rm_param_layout **out)
{
	uint64_t key = (uint64_t)(uintptr_t)f;
	if ((*out = rm_query_cache_hold(LAYOUT_OP, key)))
		return CUDA_SUCCESS;
	uint64_t epoch = rm_query_cache_epoch(LAYOUT_OP); /* before asking: a forget meanwhile shows */
	struct rm_param_layout *l = NULL;
	CUresult r = ask_layout(f, &l);
	if (r != CUDA_SUCCESS)
		return r;
	*out = rm_query_cache_keep(LAYOUT_OP, key, epoch, l, free);
	return *out ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Finds the argument buffer the `extra` array points at. */
static CUresult parse_extra(void **extra, const void **buf, size_t *size)
{
	*buf = NULL;
	*size = 0;
	for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			*buf = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && extra[i + 1])
			*size = *(size_t *)extra[i + 1];
		else
			return CUDA_ERROR_INVALID_VALUE;
	}
	/* The program's buffer and size: no kernel takes more than the limit. */
	if (*size > RM_PARAM_LIMIT)
		return CUDA_ERROR_INVALID_VALUE;
	return *buf || !*size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Fills the launch message shared by cuLaunchKernel, cuLaunchKernelEx and the cluster query. */
static void describe_launch(Remora__LaunchKernel *req, CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared, CUstream stream)
{
	req->func = (uint64_t)(uintptr_t)f;
	req->grid_x = gx;
	req->grid_y = gy;
	req->grid_z = gz;
	req->block_x = bx;
	req->block_y = by;
	req->block_z = bz;
	req->shared_mem = shared;
	req->stream = (uint64_t)(uintptr_t)stream;
}

/* Launch attributes travel as the array the program gave; those naming an
 * event would need translating and are refused. */
static CUresult describe_attrs(Remora__LaunchKernel *req, const CUlaunchAttribute *attrs, unsigned int n)
{
	if (n && !attrs)
		return CUDA_ERROR_INVALID_VALUE;
	for (unsigned int i = 0; i < n; i++)
		if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
		    attrs[i].id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT)
			return rm_unsupported("cuLaunchKernelEx with an event attribute");
	req->attrs.data = (uint8_t *)attrs;
	req->attrs.len = (size_t)n * sizeof(*attrs);
	return CUDA_SUCCESS;
}

/* Packs kernelParams by l into dst (l->size bytes). */
static CUresult pack(const struct rm_param_layout *l, void **kernelParams, uint8_t *dst)
{
	if (l->count && !kernelParams)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < l->count; i++)
		if (!kernelParams[i])
			return CUDA_ERROR_INVALID_VALUE;
	memset(dst, 0, l->size);
	/* Exactly len[i] bytes from each of count pointers: param_layout.h says why no more. */
	for (size_t i = 0; i < l->count; i++)
		memcpy(dst + l->offset[i], kernelParams[i], l->len[i]);
	return CUDA_SUCCESS;
}

static CUresult pack_params(CUfunction f, void **kernelParams, void **extra, Remora__LaunchKernel *req,
			    uint8_t *scratch, size_t scratch_len, uint8_t **heap)
{
	*heap = NULL;
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (kernelParams && extra)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r;
	if (extra) {
		const void *buf;
		size_t size;
		if ((r = parse_extra(extra, &buf, &size)) != CUDA_SUCCESS)
			return r;
		req->params.data = (uint8_t *)buf;
		req->params.len = size;
		return CUDA_SUCCESS;
	}
	const struct rm_param_layout *l;
	if ((r = layout_of(f, &l)) != CUDA_SUCCESS)
		return r;
	uint8_t *dst = NULL;
	if (l->refused)
		r = CUDA_ERROR_INVALID_IMAGE;
	else if (!(dst = l->size <= scratch_len ? scratch : (*heap = malloc(l->size ? l->size : 1))))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	else
		r = pack(l, kernelParams, dst);
	if (r == CUDA_SUCCESS) {
		req->params.data = dst;
		req->params.len = l->size;
	}
	rm_query_cache_release();
	return r;
}

/* Packed, then the pinned host memory they point into given its device memory at the same
 * address (host_alias.h). */
CUresult rm_pack_kernel_params(CUfunction f, void **kernelParams, void **extra, Remora__LaunchKernel *req,
			       uint8_t *scratch, size_t scratch_len, uint8_t **heap)
{
	CUresult r = pack_params(f, kernelParams, extra, req, scratch, scratch_len, heap);
	if (r == CUDA_SUCCESS)
		r = rm_host_alias_params(req->params.data, req->params.len);
	if (r != CUDA_SUCCESS) {
		free(*heap);
		*heap = NULL;
	}
	return r;
}

CUresult rm_unpack_kernel_params(CUfunction f, const uint8_t *packed, size_t len, void ***params, void **block)
{
	const struct rm_param_layout *l;
	*params = NULL;
	*block = NULL;
	CUresult r = layout_of(f, &l);
	if (r != CUDA_SUCCESS)
		return r;
	if (l->refused || len != l->size)
		r = rm_rpc_bad_reply("a kernel node's %zu bytes of arguments for a layout of %zu", len, l->size);
	void **p = r == CUDA_SUCCESS ? malloc(l->count * sizeof(*p) + len + 1) : NULL;
	if (r == CUDA_SUCCESS && !p)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS) {
		uint8_t *copy = (uint8_t *)(p + l->count);
		memcpy(copy, packed, len);
		for (size_t i = 0; i < l->count; i++)
			p[i] = copy + l->offset[i];
		*params = l->count ? p : NULL;
		*block = p;
	}
	rm_query_cache_release();
	return r;
}

static CUresult launch(uint32_t op, Remora__LaunchKernel *req, CUfunction f, void **kernelParams, void **extra)
{
	uint8_t packed[4096];
	uint8_t *heap;
	CUresult r = rm_pack_kernel_params(f, kernelParams, extra, req, packed, sizeof(packed), &heap);
	if (r == CUDA_SUCCESS) /* mapped host memory the kernel may read */
		r = rm_mapped_before_launch((CUstream)(uintptr_t)req->stream);
	if (r == CUDA_SUCCESS) /* after other threads' work on its stream, not on others' */
		r = rm_rpc_ordered(op, &req->base, req->stream, 0);
	if (r == CUDA_SUCCESS && !(rm_op_flags[op] & RM_OPF_ASYNC))
		rm_managed_note_work(); /* a launch that waited for its answer: as rpc.c does for async calls */
	free(heap);
	return r;
}

/* A cooperative launch waits for the driver's answer: a grid too large to be co-resident
 * is refused at the call (CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE), as natively. */
static int cooperative(const CUlaunchAttribute *attrs, unsigned int n)
{
	for (unsigned int i = 0; i < n; i++)
		if (attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE && attrs[i].value.cooperative)
			return 1;
	return 0;
}

RM_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					   unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					   void **kernelParams, void **extra)
{
	Remora__LaunchKernel req = REMORA__LAUNCH_KERNEL__INIT;
	describe_launch(&req, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream);
	return launch(RM_OP_cuLaunchKernel, &req, f, kernelParams, extra);
}

RM_EXPORT CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
					     void **extra)
{
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__LaunchKernel req = REMORA__LAUNCH_KERNEL__INIT;
	describe_launch(&req, f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
			config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream);
	CUresult r = describe_attrs(&req, config->attrs, config->numAttrs);
	uint32_t op = r == CUDA_SUCCESS && cooperative(config->attrs, config->numAttrs) ? RM_OP_rmLaunchKernelExWait
											   : RM_OP_cuLaunchKernelEx;
	return r == CUDA_SUCCESS ? launch(op, &req, f, kernelParams, extra) : r;
}

RM_EXPORT CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
						      unsigned int gridDimZ, unsigned int blockDimX,
						      unsigned int blockDimY, unsigned int blockDimZ,
						      unsigned int sharedMemBytes, CUstream hStream, void **kernelParams)
{
	Remora__LaunchKernel req = REMORA__LAUNCH_KERNEL__INIT;
	describe_launch(&req, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream);
	return launch(RM_OP_cuLaunchCooperativeKernel, &req, f, kernelParams, NULL);
}

/* cuOccupancyMaxActiveClusters and cuOccupancyMaxPotentialClusterSize: a launch configuration in, a count out. */
static CUresult cluster_query(uint32_t op, int *out, CUfunction func, const CUlaunchConfig *config)
{
	if (!out || !config)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__LaunchKernel req = REMORA__LAUNCH_KERNEL__INIT;
	describe_launch(&req, func, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
			config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream);
	CUresult r = describe_attrs(&req, config->attrs, config->numAttrs);
	Remora__OccupancyClustersReply *rep = NULL;
	if (r == CUDA_SUCCESS)
		r = rm_rpc_simple(op, &req.base, &remora__occupancy_clusters_reply__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep)
		*out = rep->clusters;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveClusters(int *numClusters, CUfunction func, const CUlaunchConfig *config)
{
	return cluster_query(RM_OP_cuOccupancyMaxActiveClusters, numClusters, func, config);
}

RM_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int *clusterSize, CUfunction func,
							       const CUlaunchConfig *config)
{
	return cluster_query(RM_OP_cuOccupancyMaxPotentialClusterSize, clusterSize, func, config);
}

/* cuOccupancyMaxPotentialBlockSize with the program's blockSizeToDynamicSMemSize, which only
 * the client can call: NVIDIA's published algorithm (cuda_runtime.h,
 * cudaOccupancyMaxPotentialBlockSizeVariableSMemWithFlags) over the GPU host's occupancy of
 * each candidate block size, every query of it cached (kernel_attributes). */
static CUresult block_size_by_callback(int *minGridSize, int *blockSize, CUfunction func,
				       CUoccupancyB2DSize smemOf, int limit, unsigned int flags)
{
	CUdevice dev;
	int per_sm = 0, warp = 0, dev_max = 0, sms = 0, func_max = 0;
	CUresult r = cuCtxGetDevice(&dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&per_sm, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&warp, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&dev_max, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, dev);
	if (r == CUDA_SUCCESS)
		r = cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev);
	if (r == CUDA_SUCCESS)
		r = cuFuncGetAttribute(&func_max, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, func);
	if (r != CUDA_SUCCESS)
		return r;
	if (warp <= 0 || dev_max / warp > 4096) /* a bound on the queries below */
		return rm_rpc_bad_reply("cuOccupancyMaxPotentialBlockSize: blocks of %d threads, warps of %d", dev_max, warp);
	if (limit == 0 || dev_max < limit)
		limit = dev_max;
	if (func_max < limit)
		limit = func_max;
	int best_size = 0, best_blocks = 0, best = 0;
	for (int aligned = (limit + warp - 1) / warp * warp; aligned > 0; aligned -= warp) {
		int size = limit < aligned ? limit : aligned, blocks = 0;
		r = cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, func, size, smemOf(size), flags);
		if (r != CUDA_SUCCESS)
			return r;
		if ((long long)size * blocks > best) {
			best_size = size;
			best_blocks = blocks;
			best = size * blocks;
		}
		if (best == per_sm)
			break;
	}
	*minGridSize = best_blocks * sms;
	*blockSize = best_size;
	return CUDA_SUCCESS;
}

static CUresult potential_block_size(uint32_t op, int *minGridSize, int *blockSize, CUfunction func,
				     CUoccupancyB2DSize smemOf, size_t dynamicSMemSize, int blockSizeLimit,
				     unsigned int flags)
{
	if (!minGridSize || !blockSize)
		return CUDA_ERROR_INVALID_VALUE;
	if (smemOf)
		return block_size_by_callback(minGridSize, blockSize, func, smemOf, blockSizeLimit, flags);
	Remora__OccupancyBlockSize req = REMORA__OCCUPANCY_BLOCK_SIZE__INIT;
	req.func = (uint64_t)(uintptr_t)func;
	req.dynamic_smem = dynamicSMemSize;
	req.block_size_limit = blockSizeLimit;
	req.flags = flags;
	Remora__OccupancyBlockSizeReply *rep = NULL;
	CUresult r = rm_rpc_simple(op, &req.base, &remora__occupancy_block_size_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		*minGridSize = rep->min_grid_size;
		*blockSize = rep->block_size;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int *minGridSize, int *blockSize, CUfunction func,
							     CUoccupancyB2DSize blockSizeToDynamicSMemSize,
							     size_t dynamicSMemSize, int blockSizeLimit)
{
	return potential_block_size(RM_OP_cuOccupancyMaxPotentialBlockSize, minGridSize, blockSize, func,
				    blockSizeToDynamicSMemSize, dynamicSMemSize, blockSizeLimit, 0);
}

RM_EXPORT CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(int *minGridSize, int *blockSize,
								      CUfunction func,
								      CUoccupancyB2DSize blockSizeToDynamicSMemSize,
								      size_t dynamicSMemSize, int blockSizeLimit,
								      unsigned int flags)
{
	return potential_block_size(RM_OP_cuOccupancyMaxPotentialBlockSizeWithFlags, minGridSize, blockSize, func,
				    blockSizeToDynamicSMemSize, dynamicSMemSize, blockSizeLimit, flags);
}

/* Function names are kept for the program's lifetime, as the driver keeps them. */
struct name_entry {
	CUfunction func;
	char *name;
	struct name_entry *next;
};

static struct name_entry *names;

RM_EXPORT CUresult CUDAAPI cuFuncGetName(const char **name, CUfunction hfunc)
{
	if (!name || !hfunc)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&names_lock);
	for (struct name_entry *e = names; e; e = e->next)
		if (e->func == hfunc) {
			*name = e->name;
			pthread_mutex_unlock(&names_lock);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&names_lock);
	Remora__FuncGetName req = REMORA__FUNC_GET_NAME__INIT;
	req.func = (uint64_t)(uintptr_t)hfunc;
	Remora__FuncGetNameReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuFuncGetName, &req.base, &remora__func_get_name_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep) {
		struct name_entry *e = malloc(sizeof(*e));
		char *copy = strdup(rep->name);
		if (!e || !copy) {
			free(e);
			free(copy);
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			e->func = hfunc;
			e->name = copy;
			pthread_mutex_lock(&names_lock);
			e->next = names;
			names = e;
			pthread_mutex_unlock(&names_lock);
			*name = copy;
		}
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

void rm_launch_reset(void)
{
	pthread_mutex_lock(&names_lock);
	while (names) {
		struct name_entry *e = names;
		names = e->next;
		free(e->name);
		free(e);
	}
	pthread_mutex_unlock(&names_lock);
}
