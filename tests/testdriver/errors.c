/* cuGetErrorName / cuGetErrorString over the CUresult values of cuda.h
 * (table generated at build time by gen_errors.py). */
#include "testdriver.h"

struct error_text { CUresult code; const char *name; const char *description; };

static const struct error_text errors[] = {
#include "cuda_errors.inc"
};

static const struct error_text *find_error(CUresult code)
{
	for (size_t i = 0; i < sizeof errors / sizeof errors[0]; i++)
		if (errors[i].code == code)
			return &errors[i];
	return NULL;
}

TD_EXPORT CUresult cuGetErrorName(CUresult code, const char **name)
{
	const struct error_text *e = find_error(code);
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	*name = e ? e->name : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuGetErrorString(CUresult code, const char **text)
{
	const struct error_text *e = find_error(code);
	if (!text)
		return CUDA_ERROR_INVALID_VALUE;
	*text = e ? e->description : NULL;
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
