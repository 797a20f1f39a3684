/* The launch before CUDA 4: each function keeps its block shape, shared size and parameter
 * buffer (struct td_function), and a launch is cuLaunchKernel with the buffer as `extra`.
 * cuParamSetTexRef takes the default texture unit only and keeps nothing: a module's
 * references are read by name (texrefs.c). */
#include "testdriver.h"

#include <string.h>

static CUresult function_of(CUfunction h, struct td_function **out)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	*out = td_function_from(h);
	return *out ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

TD_EXPORT CUresult cuFuncSetBlockShape(CUfunction h, int x, int y, int z)
{
	struct td_function *f;
	CUresult rc = function_of(h, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (x <= 0 || y <= 0 || z <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	f->legacy_block[0] = (unsigned)x, f->legacy_block[1] = (unsigned)y, f->legacy_block[2] = (unsigned)z;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuFuncSetSharedSize(CUfunction h, unsigned int bytes)
{
	struct td_function *f;
	CUresult rc = function_of(h, &f);
	if (rc == CUDA_SUCCESS)
		f->legacy_shared = bytes;
	return rc;
}

TD_EXPORT CUresult cuParamSetSize(CUfunction h, unsigned int n)
{
	struct td_function *f;
	CUresult rc = function_of(h, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (n > TD_LEGACY_PARAM_BYTES)
		return CUDA_ERROR_INVALID_VALUE;
	f->legacy_size = n;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuParamSetv(CUfunction h, int offset, void *p, unsigned int n)
{
	struct td_function *f;
	CUresult rc = function_of(h, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (offset < 0 || n > TD_LEGACY_PARAM_BYTES || (size_t)offset > TD_LEGACY_PARAM_BYTES - n || (n && !p))
		return CUDA_ERROR_INVALID_VALUE;
	if (n)
		memcpy(f->legacy_params + offset, p, n);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuParamSeti(CUfunction h, int offset, unsigned int v)
{
	return cuParamSetv(h, offset, &v, sizeof(v));
}

TD_EXPORT CUresult cuParamSetf(CUfunction h, int offset, float v)
{
	return cuParamSetv(h, offset, &v, sizeof(v));
}

TD_EXPORT CUresult cuParamSetTexRef(CUfunction h, int texunit, CUtexref ref)
{
	struct td_function *f;
	CUresult rc = function_of(h, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	return texunit == CU_PARAM_TR_DEFAULT && ref ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuLaunchGridAsync(CUfunction h, int w, int hgt, CUstream stream)
{
	struct td_function *f;
	CUresult rc = function_of(h, &f);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (w <= 0 || hgt <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	size_t size = f->legacy_size;
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, f->legacy_params, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
			 CU_LAUNCH_PARAM_END};
	return cuLaunchKernel(h, (unsigned)w, (unsigned)hgt, 1, f->legacy_block[0], f->legacy_block[1],
			      f->legacy_block[2], f->legacy_shared, stream, NULL, size ? extra : NULL);
}

TD_EXPORT CUresult cuLaunchGrid(CUfunction h, int w, int hgt)
{
	return cuLaunchGridAsync(h, w, hgt, CU_STREAM_LEGACY);
}

TD_EXPORT CUresult cuLaunch(CUfunction h)
{
	return cuLaunchGridAsync(h, 1, 1, CU_STREAM_LEGACY);
}
