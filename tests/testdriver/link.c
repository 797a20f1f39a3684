/* Linking: the test driver's linker puts its inputs one after another, which its module
 * loader reads as one image (it finds kernels by name); a single PTX input comes out as
 * that PTX. The logs and wall time are written where the options ask, when the link
 * completes, as NVIDIA's driver writes them. */
#include "testdriver.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TD_MAGIC_LINK 0x4c4e4b53 /* "LNKS" */

struct td_link {
	uint32_t magic;
	unsigned count;
	CUjit_option *options;
	void **values;
	unsigned char *out;
	size_t size;
	unsigned inputs;
};

static struct td_link *link_from(CUlinkState state)
{
	struct td_link *l = (struct td_link *)state;
	return l && l->magic == TD_MAGIC_LINK ? l : NULL;
}

TD_EXPORT CUresult cuLinkCreate_v2(unsigned int numOptions, CUjit_option *options, void **optionValues,
				   CUlinkState *stateOut)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!stateOut || (numOptions && (!options || !optionValues)))
		return CUDA_ERROR_INVALID_VALUE;
	struct td_link *l = calloc(1, sizeof(*l));
	if (!l)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*l = (struct td_link){.magic = TD_MAGIC_LINK, .count = numOptions, .options = options, .values = optionValues};
	*stateOut = (CUlinkState)l;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuLinkCreate(unsigned int numOptions, CUjit_option *options, void **optionValues, CUlinkState *stateOut)
{
	return cuLinkCreate_v2(numOptions, options, optionValues, stateOut);
}

TD_EXPORT CUresult cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
				    unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	(void)name, (void)numOptions, (void)options, (void)optionValues;
	struct td_link *l = link_from(state);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!data || !size || (unsigned)type >= CU_JIT_NUM_INPUT_TYPES)
		return CUDA_ERROR_INVALID_VALUE;
	if (type == CU_JIT_INPUT_PTX && l->size && !l->out[l->size - 1])
		l->size--; /* PTX texts joined: one NUL at the end */
	unsigned char *grown = realloc(l->out, l->size + size + 1);
	if (!grown)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(grown + l->size, data, size);
	l->out = grown;
	l->size += size;
	l->out[l->size] = 0;
	l->inputs++;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuLinkAddData(CUlinkState state, CUjitInputType type, void *data, size_t size, const char *name,
				 unsigned int numOptions, CUjit_option *options, void **optionValues)
{
	return cuLinkAddData_v2(state, type, data, size, name, numOptions, options, optionValues);
}

TD_EXPORT CUresult cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
				    CUjit_option *options, void **optionValues)
{
	if (!link_from(state))
		return CUDA_ERROR_INVALID_HANDLE;
	FILE *f = path ? fopen(path, "rb") : NULL;
	if (!f)
		return path ? CUDA_ERROR_FILE_NOT_FOUND : CUDA_ERROR_INVALID_VALUE;
	CUresult rc = CUDA_ERROR_INVALID_IMAGE;
	char *bytes = NULL;
	long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
	if (n > 0 && n < (1L << 30) && fseek(f, 0, SEEK_SET) == 0 && (bytes = calloc(1, (size_t)n + 1)) &&
	    fread(bytes, 1, (size_t)n, f) == (size_t)n)
		rc = cuLinkAddData_v2(state, type, bytes, (size_t)n + (type == CU_JIT_INPUT_PTX), path, numOptions, options,
				      optionValues);
	free(bytes);
	fclose(f);
	return rc;
}

TD_EXPORT CUresult cuLinkAddFile(CUlinkState state, CUjitInputType type, const char *path, unsigned int numOptions,
				 CUjit_option *options, void **optionValues)
{
	return cuLinkAddFile_v2(state, type, path, numOptions, options, optionValues);
}

TD_EXPORT CUresult cuLinkComplete(CUlinkState state, void **cubinOut, size_t *sizeOut)
{
	struct td_link *l = link_from(state);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!cubinOut || !sizeOut || !l->inputs)
		return CUDA_ERROR_INVALID_VALUE;
	char info[64];
	snprintf(info, sizeof(info), "remora test driver: linked %u input(s)", l->inputs);
	size_t info_cap = 0, err_cap = 0;
	for (unsigned i = 0; i < l->count; i++) {
		if (l->options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			info_cap = (size_t)(uintptr_t)l->values[i];
		if (l->options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			err_cap = (size_t)(uintptr_t)l->values[i];
	}
	size_t info_len = 0, err_len = 0;
	for (unsigned i = 0; i < l->count; i++) {
		if (l->options[i] == CU_JIT_INFO_LOG_BUFFER && l->values[i] && info_cap) {
			snprintf(l->values[i], info_cap, "%s", info);
			info_len = strlen(l->values[i]) + 1;
		}
		if (l->options[i] == CU_JIT_ERROR_LOG_BUFFER && l->values[i] && err_cap) {
			((char *)l->values[i])[0] = 0;
			err_len = 1;
		}
	}
	for (unsigned i = 0; i < l->count; i++) {
		if (l->options[i] == CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES)
			l->values[i] = (void *)(uintptr_t)info_len;
		if (l->options[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES)
			l->values[i] = (void *)(uintptr_t)err_len;
		if (l->options[i] == CU_JIT_WALL_TIME) {
			float ms = 0.0f;
			l->values[i] = NULL;
			memcpy(&l->values[i], &ms, sizeof(ms));
		}
	}
	*cubinOut = l->out;
	*sizeOut = l->size;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuLinkDestroy(CUlinkState state)
{
	struct td_link *l = link_from(state);
	if (!l)
		return CUDA_ERROR_INVALID_HANDLE;
	l->magic = 0;
	free(l->out);
	free(l);
	return CUDA_SUCCESS;
}
