/* Legacy texture and surface references: what each is bound to and its sampling settings,
 * kept as set and read back. A module offers the references whose names (below) its image
 * mentions; cuTexRefCreate's live until destroyed. One CPU kernel (kernels.c,
 * legacyTexRead) reads through the last module reference named legacyTex bound to linear
 * memory: one-channel float texels, tex1Dfetch's element reads. */
#include "testdriver.h"

#include <stdlib.h>
#include <string.h>

static const struct { const char *name; bool surface; } module_refs[TD_MODULE_REFS] = {
	{ "legacyTex", false },
	{ "legacySurf", true },
};

static struct td_texref *fetch_ref; /* the last legacyTex bound to linear memory; td_lock */

const char *td_module_ref_name(size_t i, bool *surface)
{
	*surface = module_refs[i].surface;
	return module_refs[i].name;
}

void td_texref_init(struct td_texref *t, bool surface)
{
	*t = (struct td_texref){ .magic = TD_MAGIC_TEXREF, .surface = surface, .format = CU_AD_FORMAT_FLOAT,
				 .channels = 1, .filter = CU_TR_FILTER_MODE_POINT,
				 .mipmap_filter = CU_TR_FILTER_MODE_POINT, .anisotropy = 1 };
}

static struct td_texref *ref_of(const void *h, bool surface)
{
	struct td_texref *t = (struct td_texref *)h;
	return td_initialized() && t && t->magic == TD_MAGIC_TEXREF && t->surface == surface ? t : NULL;
}

#define TEXREF_OR_FAIL(t, h)                                  \
	struct td_texref *t = ref_of(h, false);               \
	if (!t)                                               \
		return CUDA_ERROR_INVALID_HANDLE

CUresult td_legacy_tex_fetch(long long i, float *out)
{
	pthread_mutex_lock(&td_lock);
	struct td_texref *t = fetch_ref;
	bool ok = t && t->magic == TD_MAGIC_TEXREF && t->bound == TD_REF_LINEAR && t->format == CU_AD_FORMAT_FLOAT &&
		  t->channels == 1;
	CUdeviceptr base = ok ? t->dptr : 0;
	size_t bytes = ok ? t->bytes : 0;
	pthread_mutex_unlock(&td_lock);
	if (!ok)
		return CUDA_ERROR_ILLEGAL_ADDRESS;
	if (i < 0 || (size_t)i >= bytes / 4) {
		*out = 0.0f; /* outside the bound range: zero, as the GPU's fetch */
		return CUDA_SUCCESS;
	}
	memcpy(out, (const char *)(uintptr_t)base + (size_t)i * 4, 4);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuModuleGetTexRef(CUtexref *out, CUmodule hmod, const char *name)
{
	return td_module_reference(hmod, name, false, (struct td_texref **)out);
}

TD_EXPORT CUresult cuModuleGetSurfRef(CUsurfref *out, CUmodule hmod, const char *name)
{
	return td_module_reference(hmod, name, true, (struct td_texref **)out);
}

TD_EXPORT CUresult cuTexRefCreate(CUtexref *out)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_texref *t = malloc(sizeof *t);
	if (!t)
		return CUDA_ERROR_OUT_OF_MEMORY;
	td_texref_init(t, false);
	t->created = true;
	*out = (CUtexref)t;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefDestroy(CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!t->created)
		return CUDA_ERROR_INVALID_VALUE; /* a module's: goes with its module */
	t->magic = 0;
	free(t);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetArray(CUtexref h, CUarray a, unsigned int flags)
{
	TEXREF_OR_FAIL(t, h);
	struct td_array *arr = td_array_of(a);
	if (!arr)
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(unsigned)CU_TRSA_OVERRIDE_FORMAT)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	t->bound = TD_REF_ARRAY, t->array = a;
	if (flags & CU_TRSA_OVERRIDE_FORMAT)
		t->format = arr->desc.Format, t->channels = (int)arr->desc.NumChannels;
	if (fetch_ref == t)
		fetch_ref = NULL;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetMipmappedArray(CUtexref h, CUmipmappedArray m, unsigned int flags)
{
	TEXREF_OR_FAIL(t, h);
	if (!m)
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags & ~(unsigned)CU_TRSA_OVERRIDE_FORMAT)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	t->bound = TD_REF_MIPMAP, t->mipmap = m;
	if (fetch_ref == t)
		fetch_ref = NULL;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetAddress_v2(size_t *offset, CUtexref h, CUdeviceptr dptr, size_t bytes)
{
	TEXREF_OR_FAIL(t, h);
	if (!td_device_range_ok((void *)(uintptr_t)dptr, bytes))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	t->bound = TD_REF_LINEAR, t->dptr = dptr, t->bytes = bytes;
	if (!t->created)
		fetch_ref = t;
	pthread_mutex_unlock(&td_lock);
	if (offset)
		*offset = 0; /* allocations are aligned past the texture alignment */
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetAddress2D_v3(CUtexref h, const CUDA_ARRAY_DESCRIPTOR *desc, CUdeviceptr dptr,
					   size_t pitch)
{
	TEXREF_OR_FAIL(t, h);
	if (!desc || !desc->Width || !desc->Height || pitch < desc->Width * 4 * desc->NumChannels ||
	    !td_device_range_ok((void *)(uintptr_t)dptr, pitch * desc->Height))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	t->bound = TD_REF_PITCH2D, t->dptr = dptr, t->pitch = pitch, t->width = desc->Width, t->height = desc->Height;
	t->format = desc->Format, t->channels = (int)desc->NumChannels;
	if (fetch_ref == t)
		fetch_ref = NULL;
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetAddress2D_v2(CUtexref h, const CUDA_ARRAY_DESCRIPTOR *desc, CUdeviceptr dptr,
					   size_t pitch)
{
	return cuTexRefSetAddress2D_v3(h, desc, dptr, pitch);
}

TD_EXPORT CUresult cuTexRefSetFormat(CUtexref h, CUarray_format fmt, int channels)
{
	TEXREF_OR_FAIL(t, h);
	if (channels != 1 && channels != 2 && channels != 4)
		return CUDA_ERROR_INVALID_VALUE;
	t->format = fmt, t->channels = channels;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetAddressMode(CUtexref h, int dim, CUaddress_mode am)
{
	TEXREF_OR_FAIL(t, h);
	if (dim < 0 || dim > 2 || am < CU_TR_ADDRESS_MODE_WRAP || am > CU_TR_ADDRESS_MODE_BORDER)
		return CUDA_ERROR_INVALID_VALUE;
	t->address[dim] = am;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetFilterMode(CUtexref h, CUfilter_mode fm)
{
	TEXREF_OR_FAIL(t, h);
	t->filter = fm;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetMipmapFilterMode(CUtexref h, CUfilter_mode fm)
{
	TEXREF_OR_FAIL(t, h);
	t->mipmap_filter = fm;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetMipmapLevelBias(CUtexref h, float bias)
{
	TEXREF_OR_FAIL(t, h);
	t->bias = bias;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetMipmapLevelClamp(CUtexref h, float lo, float hi)
{
	TEXREF_OR_FAIL(t, h);
	t->min_clamp = lo, t->max_clamp = hi;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetMaxAnisotropy(CUtexref h, unsigned int n)
{
	TEXREF_OR_FAIL(t, h);
	t->anisotropy = n;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetBorderColor(CUtexref h, float *color)
{
	TEXREF_OR_FAIL(t, h);
	if (!color)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(t->border, color, sizeof t->border);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefSetFlags(CUtexref h, unsigned int flags)
{
	TEXREF_OR_FAIL(t, h);
	t->flags = flags;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetAddress_v2(CUdeviceptr *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out || (t->bound != TD_REF_LINEAR && t->bound != TD_REF_PITCH2D))
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->dptr;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetArray(CUarray *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out || t->bound != TD_REF_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->array;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetMipmappedArray(CUmipmappedArray *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out || t->bound != TD_REF_MIPMAP)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->mipmap;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetAddressMode(CUaddress_mode *out, CUtexref h, int dim)
{
	TEXREF_OR_FAIL(t, h);
	if (!out || dim < 0 || dim > 2)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->address[dim];
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetFilterMode(CUfilter_mode *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->filter;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetFormat(CUarray_format *fmt, int *channels, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!fmt)
		return CUDA_ERROR_INVALID_VALUE;
	*fmt = t->format;
	if (channels)
		*channels = t->channels;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetMipmapFilterMode(CUfilter_mode *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->mipmap_filter;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetMipmapLevelBias(float *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->bias;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetMipmapLevelClamp(float *lo, float *hi, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!lo || !hi)
		return CUDA_ERROR_INVALID_VALUE;
	*lo = t->min_clamp, *hi = t->max_clamp;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetMaxAnisotropy(int *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = (int)t->anisotropy;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetBorderColor(float *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(out, t->border, sizeof t->border);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuTexRefGetFlags(unsigned int *out, CUtexref h)
{
	TEXREF_OR_FAIL(t, h);
	if (!out)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->flags;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuSurfRefSetArray(CUsurfref h, CUarray a, unsigned int flags)
{
	struct td_texref *t = ref_of(h, true);
	if (!t)
		return CUDA_ERROR_INVALID_HANDLE;
	struct td_array *arr = td_array_of(a);
	if (!arr)
		return CUDA_ERROR_INVALID_HANDLE;
	if (flags || !(arr->desc.Flags & CUDA_ARRAY3D_SURFACE_LDST))
		return CUDA_ERROR_INVALID_VALUE;
	t->bound = TD_REF_ARRAY, t->array = a;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuSurfRefGetArray(CUarray *out, CUsurfref h)
{
	struct td_texref *t = ref_of(h, true);
	if (!t)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!out || t->bound != TD_REF_ARRAY)
		return CUDA_ERROR_INVALID_VALUE;
	*out = t->array;
	return CUDA_SUCCESS;
}
