/* Linking (cuLinkCreate, cuLinkAddData, cuLinkAddFile, cuLinkComplete, cuLinkDestroy): the
 * client gathers the inputs, files read here as the program's, and cuLinkComplete sends
 * them in one call, which the GPU host's driver links (backend/calls/link_handlers.c).
 * Options passed by value travel; the logs and wall time are the client's, written when
 * the link completes, as the driver writes them. Options naming the program's symbols
 * (their addresses, referenced names) are not supported. Per-input options are ignored. */
#include "client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "remora.pb-c.h"

#define MAX_INPUTS 256  /* as the daemon's bound */
#define MAX_OPTIONS 32

struct link_input {
	uint32_t type;
	char *name;
	void *data;
	size_t size;
};

struct link {
	uint32_t magic;
	unsigned nopts;
	uint32_t options[MAX_OPTIONS];
	uint64_t values[MAX_OPTIONS];
	void **caller_values;          /* the program's values array: logs, sizes, wall time written back */
	CUjit_option *caller_options;
	unsigned ncaller;
	struct link_input inputs[MAX_INPUTS];
	unsigned ninputs;
	void *cubin;                   /* cuLinkComplete's, freed with the link */
};
#define LINK_MAGIC 0x4c494e4b /* "LINK" */

static struct link *link_of(CUlinkState state)
{
	struct link *l = (struct link *)state;
	return l && l->magic == LINK_MAGIC ? l : NULL;
}

/* Options that are pointers into the program, kept here; unsupported ones refuse the link. */
static int kept_here(CUjit_option o)
{
	return o == CU_JIT_WALL_TIME || o == CU_JIT_INFO_LOG_BUFFER || o == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES ||
	       o == CU_JIT_ERROR_LOG_BUFFER || o == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES;
}

static int by_value(CUjit_option o)
{
	switch (o) {
	case CU_JIT_MAX_REGISTERS: case CU_JIT_OPTIMIZATION_LEVEL: case CU_JIT_TARGET_FROM_CUCONTEXT:
	case CU_JIT_TARGET: case CU_JIT_FALLBACK_STRATEGY: case CU_JIT_GENERATE_DEBUG_INFO: case CU_JIT_LOG_VERBOSE:
	case CU_JIT_GENERATE_LINE_INFO: case CU_JIT_CACHE_MODE: case CU_JIT_POSITION_INDEPENDENT_CODE:
	case CU_JIT_MIN_CTA_PER_SM: case CU_JIT_MAX_THREADS_PER_BLOCK: case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
		return 1;
	default:
		return 0;
	}
}

RM_EXPORT CUresult CUDAAPI cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
					   CUlinkState *stateOut)
{
	if (!stateOut || (numOptions && (!options || !optionValues)))
		return CUDA_ERROR_INVALID_VALUE;
	struct link *l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	l->magic = LINK_MAGIC;
	l->caller_options = options;
	l->caller_values = optionValues;
	l->ncaller = numOptions;
	for (unsigned i = 0; i < numOptions; i++) {
		if (kept_here(options[i]))
			continue;
		if (!by_value(options[i]) || l->nopts == MAX_OPTIONS) {
			free(l);
			return rm_unsupported("cuLinkCreate with an option naming the program's symbols or more than 32");
		}
		l->options[l->nopts] = options[i];
		l->values[l->nopts++] = (uint64_t)(uintptr_t)optionValues[i];
	}
	*stateOut = (CUlinkState)l;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues,
					CUlinkState *stateOut)
{
	return cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
}

RM_EXPORT CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size,
					    const char *name, unsigned int numOptions, CUjit_option *options,
					    void **optionValues)
{
	(void)numOptions, (void)options, (void)optionValues;
	struct link *l = link_of(state);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!data || !size || size > RM_MAX_IMAGE_LEN || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	if (l->ninputs == MAX_INPUTS)
		return rm_unsupported("cuLinkAddData of more than 256 inputs");
	struct link_input *in = &l->inputs[l->ninputs];
	in->data = malloc(size);
	in->name = strdup(name ? name : "");
	if (!in->data || !in->name) {
		free(in->data);
		free(in->name);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(in->data, data, size);
	in->size = size;
	in->type = type;
	l->ninputs++;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size,
					 const char *name, unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	return cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
}

RM_EXPORT CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path,
					    unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	if (!link_of(state))
		return CUDA_ERROR_INVALID_HANDLE;
	if (!path)
		return CUDA_ERROR_INVALID_VALUE;
	FILE *f = fopen(path, "rb");
	if (!f)
		return CUDA_ERROR_FILE_NOT_FOUND;
	CUresult r = CUDA_ERROR_INVALID_IMAGE;
	char *bytes = NULL;
	long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
	if (n > 0 && (uint64_t)n < RM_MAX_IMAGE_LEN && fseek(f, 0, SEEK_SET) == 0 && (bytes = calloc(1, (size_t)n + 1)) &&
	    fread(bytes, 1, (size_t)n, f) == (size_t)n)
		/* PTX read from a file ends with the NUL the driver reads up to. */
		r = cuLinkAddData_v2(state, type, bytes, (size_t)n + (type == CU_JIT_INPUT_PTX), path, numOptions, options,
				     optionValues);
	free(bytes);
	fclose(f);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path,
					 unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	return cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues);
}

/* The daemon's logs and wall time written where the program's options asked, as the driver
 * writes them: a log into its buffer (cut to its size), the size the driver says it filled
 * (within the buffer) into the size's value. */
static void write_back(struct link *l, const Remora__LinkCompleteReply *rep)
{
	size_t info_cap = 0, err_cap = 0;
	for (unsigned i = 0; i < l->ncaller; i++) {
		if (l->caller_options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			info_cap = (size_t)(uintptr_t)l->caller_values[i];
		if (l->caller_options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			err_cap = (size_t)(uintptr_t)l->caller_values[i];
	}
	/* The sizes filled are the driver's, within the program's buffers. */
	size_t info_len = rep->info_log_size < info_cap ? rep->info_log_size : info_cap;
	size_t err_len = rep->error_log_size < err_cap ? rep->error_log_size : err_cap;
	for (unsigned i = 0; i < l->ncaller; i++) {
		CUjit_option o = l->caller_options[i];
		const char *text = o == CU_JIT_INFO_LOG_BUFFER ? rep->info_log : rep->error_log;
		size_t cap = o == CU_JIT_INFO_LOG_BUFFER ? info_cap : err_cap;
		if ((o == CU_JIT_INFO_LOG_BUFFER || o == CU_JIT_ERROR_LOG_BUFFER) && l->caller_values[i] && cap) {
			size_t len = strnlen(text, cap - 1);
			memcpy(l->caller_values[i], text, len);
			((char *)l->caller_values[i])[len] = 0;
		}
	}
	for (unsigned i = 0; i < l->ncaller; i++) {
		CUjit_option o = l->caller_options[i];
		if (o == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			l->caller_values[i] = (void *)(uintptr_t)info_len;
		else if (o == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			l->caller_values[i] = (void *)(uintptr_t)err_len;
		else if (o == CU_JIT_WALL_TIME) {
			float ms = rep->wall_time;
			l->caller_values[i] = NULL;
			memcpy(&l->caller_values[i], &ms, sizeof(ms)); /* the float in the value, as the driver puts it */
		}
	}
}

RM_EXPORT CUresult CUDAAPI cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	struct link *l = link_of(state);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!cubinOut || !sizeOut || !l->ninputs)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__LinkInput msgs[MAX_INPUTS], *ptrs[MAX_INPUTS];
	struct iovec bulk[MAX_INPUTS];
	for (unsigned i = 0; i < l->ninputs; i++) {
		remora__link_input__init(&msgs[i]);
		msgs[i].type = l->inputs[i].type;
		msgs[i].name = l->inputs[i].name;
		msgs[i].size = l->inputs[i].size;
		ptrs[i] = &msgs[i];
		bulk[i] = (struct iovec){l->inputs[i].data, l->inputs[i].size};
	}
	Remora__LinkComplete req = REMORA__LINK_COMPLETE__INIT;
	req.n_options = req.n_values = l->nopts;
	req.options = l->options;
	req.values = l->values;
	req.n_inputs = l->ninputs;
	req.inputs = ptrs;
	struct rm_rpc_call c = {.op = RM_OP_cuLinkComplete, .req = &req.base, .bulk_out = bulk,
				.nbulk_out = (int)l->ninputs, .rep_desc = &remora__link_complete_reply__descriptor};
	CUresult r = rm_rpc(&c);
	Remora__LinkCompleteReply *rep = (Remora__LinkCompleteReply *)c.rep;
	if (rep)
		write_back(l, rep);
	if (r == CUDA_SUCCESS && rep) {
		void *cubin = malloc(rep->cubin.len ? rep->cubin.len : 1);
		if (!cubin) {
			r = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			memcpy(cubin, rep->cubin.data, rep->cubin.len);
			free(l->cubin);
			l->cubin = cubin;
			*cubinOut = cubin;
			*sizeOut = rep->cubin.len;
		}
	}
	rm_rpc_free(c.rep);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuLinkDestroy(CUlinkState state)
{
	struct link *l = link_of(state);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	for (unsigned i = 0; i < l->ninputs; i++) {
		free(l->inputs[i].data);
		free(l->inputs[i].name);
	}
	free(l->cubin);
	l->magic = 0;
	free(l);
	return CUDA_SUCCESS;
}
