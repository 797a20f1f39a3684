/* Kernel launches: arguments are packed at their offsets into one buffer and
 * sent without waiting. Each function's parameter layout is asked of the GPU
 * host once (cuFuncGetParamInfo) and cached. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "remora.pb-c.h"

#define MAX_PARAMS 512
#define LAYOUT_BUCKETS 1024

struct param_layout {
	CUfunction func;
	size_t count;
	size_t size; /* bytes the packed arguments span */
	size_t *offset, *len;
	struct param_layout *next;
};

static pthread_mutex_t layout_lock = PTHREAD_MUTEX_INITIALIZER;
static struct param_layout *layouts[LAYOUT_BUCKETS];

static size_t bucket(CUfunction f)
{
	return ((uintptr_t)f >> 4) % LAYOUT_BUCKETS;
}

static CUresult query_layout(CUfunction f, struct param_layout **out)
{
	size_t offs[MAX_PARAMS], lens[MAX_PARAMS], n = 0, end = 0;
	for (; n < MAX_PARAMS; n++) {
		CUresult r = cuFuncGetParamInfo(f, n, &offs[n], &lens[n]);
		if (r == CUDA_ERROR_INVALID_VALUE)
			break;
		if (r != CUDA_SUCCESS)
			return r;
		if (offs[n] + lens[n] > end)
			end = offs[n] + lens[n];
	}
	struct param_layout *l = calloc(1, sizeof(*l));
	if (!l || !(l->offset = malloc((n + 1) * sizeof(size_t))) || !(l->len = malloc((n + 1) * sizeof(size_t)))) {
		if (l)
			free(l->offset);
		free(l);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(l->offset, offs, n * sizeof(size_t));
	memcpy(l->len, lens, n * sizeof(size_t));
	l->func = f;
	l->count = n;
	l->size = end;
	*out = l;
	return CUDA_SUCCESS;
}

static CUresult layout_of(CUfunction f, const struct param_layout **out)
{
	pthread_mutex_lock(&layout_lock);
	struct param_layout *l = layouts[bucket(f)];
	while (l && l->func != f)
		l = l->next;
	pthread_mutex_unlock(&layout_lock);
	if (l) {
		*out = l;
		return CUDA_SUCCESS;
	}
	CUresult r = query_layout(f, &l);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&layout_lock);
	l->next = layouts[bucket(f)];
	layouts[bucket(f)] = l;
	pthread_mutex_unlock(&layout_lock);
	*out = l;
	return CUDA_SUCCESS;
}

/* Finds the argument buffer the `extra` array points at. */
static CUresult parse_extra(void **extra, const void **buf, size_t *size)
{
	*buf = NULL;
	*size = 0;
	for (size_t i = 0; extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
		if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
			*buf = extra[i + 1];
		else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE)
			*size = *(size_t *)extra[i + 1];
		else
			return CUDA_ERROR_INVALID_VALUE;
	}
	return *buf || !*size ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

RM_EXPORT CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
					   unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
					   unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
					   void **kernelParams, void **extra)
{
	if (!f)
		return CUDA_ERROR_INVALID_HANDLE;
	if (kernelParams && extra)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__LaunchKernel req = REMORA__LAUNCH_KERNEL__INIT;
	req.func = (uint64_t)(uintptr_t)f;
	req.grid_x = gridDimX;
	req.grid_y = gridDimY;
	req.grid_z = gridDimZ;
	req.block_x = blockDimX;
	req.block_y = blockDimY;
	req.block_z = blockDimZ;
	req.shared_mem = sharedMemBytes;
	req.stream = (uint64_t)(uintptr_t)hStream;

	uint8_t packed[4096];
	uint8_t *heap = NULL;
	CUresult r;
	if (extra) {
		const void *buf;
		size_t size;
		if ((r = parse_extra(extra, &buf, &size)) != CUDA_SUCCESS)
			return r;
		req.params.data = (uint8_t *)buf;
		req.params.len = size;
	} else {
		const struct param_layout *l;
		if ((r = layout_of(f, &l)) != CUDA_SUCCESS)
			return r;
		if (l->count && !kernelParams)
			return CUDA_ERROR_INVALID_VALUE;
		uint8_t *dst = l->size <= sizeof(packed) ? packed : (heap = calloc(1, l->size));
		if (!dst)
			return CUDA_ERROR_OUT_OF_MEMORY;
		if (dst == packed)
			memset(packed, 0, l->size);
		for (size_t i = 0; i < l->count; i++)
			memcpy(dst + l->offset[i], kernelParams[i], l->len[i]);
		req.params.data = dst;
		req.params.len = l->size;
	}
	r = rm_rpc_simple(RM_OP_cuLaunchKernel, &req.base, NULL, NULL);
	free(heap);
	return r;
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
	pthread_mutex_lock(&layout_lock);
	for (struct name_entry *e = names; e; e = e->next)
		if (e->func == hfunc) {
			*name = e->name;
			pthread_mutex_unlock(&layout_lock);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&layout_lock);
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
			pthread_mutex_lock(&layout_lock);
			e->next = names;
			names = e;
			pthread_mutex_unlock(&layout_lock);
			*name = copy;
		}
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}
