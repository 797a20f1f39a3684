/* cuGetErrorName / cuGetErrorString, answered locally from the generated table. */
#include "client.h"
#include "errors.h"

static const struct rm_error_desc *find(CUresult error)
{
	for (int i = 0; i < rm_nerrors; i++)
		if (rm_errors[i].value == (int)error)
			return &rm_errors[i];
	return NULL;
}

RM_EXPORT CUresult CUDAAPI cuGetErrorName(CUresult error, const char **pStr)
{
	const struct rm_error_desc *d = find(error);
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = d ? d->name : NULL;
	return d ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

RM_EXPORT CUresult CUDAAPI cuGetErrorString(CUresult error, const char **pStr)
{
	const struct rm_error_desc *d = find(error);
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	*pStr = d ? d->text : NULL;
	return d ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
