/* A loaded module's or library's charge (image_charge.h). A cubin can declare gigabytes of
 * __device__ state in a few bytes (a NOBITS section), and each load of an image holds its
 * code again: uncharged, one client could take the GPU's memory past its quota. */
#include "image_charge.h"

#include <stdatomic.h>
#include <stdlib.h>

#include "driver_table.h"
#include "gpus.h"
#include "image_cache.h"
#include "log.h"
#include "session.h"

struct variable {
	CUdeviceptr at;
	size_t bytes;
};

struct variables {
	enum rm_handle_kind kind;
	void *h;
	struct variable *v;
	size_t n, cap;
	int out_of_memory;
};

/* One name of the image's: a variable of the entry the driver loaded, or of another
 * (another GPU's cubin: not found). Names repeat across entries: summed once by address. */
static int add_variable(const char *name, void *arg)
{
	struct variables *x = arg;
	CUdeviceptr at;
	size_t bytes;
	CUresult r = x->kind == RM_H_MODULE ? rm_drv_cuModuleGetGlobal_v2(&at, &bytes, x->h, name)
					    : rm_drv_cuLibraryGetGlobal(&at, &bytes, x->h, name);
	if (r != CUDA_SUCCESS)
		return 0;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 16;
		struct variable *v = realloc(x->v, cap * sizeof(*v));
		if (!v) {
			x->out_of_memory = 1;
			return 1;
		}
		x->v = v, x->cap = cap;
	}
	x->v[x->n++] = (struct variable){at, bytes};
	return 0;
}

static int by_address(const void *a, const void *b)
{
	CUdeviceptr x = ((const struct variable *)a)->at, y = ((const struct variable *)b)->at;
	return x < y ? -1 : x > y;
}

/* The bytes of h's variables in the current context; -1 when the image cannot be read far
 * enough to name them. */
static int64_t variable_bytes(enum rm_handle_kind kind, void *h, const uint8_t *image, size_t n)
{
	struct variables x = {.kind = kind, .h = h};
	int r = rm_image_variables(image, n, add_variable, &x);
	uint64_t total = 0;
	if (r >= 0 && !x.out_of_memory) {
		if (x.n)
			qsort(x.v, x.n, sizeof(*x.v), by_address);
		for (size_t i = 0; i < x.n; i++)
			if (!i || x.v[i].at != x.v[i - 1].at)
				total += x.v[i].bytes;
	}
	free(x.v);
	return r < 0 || x.out_of_memory ? -1 : (int64_t)total;
}

static unsigned compute_capability(CUdevice dev)
{
	int major = 0, minor = 0;
	if (rm_drv_cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) != CUDA_SUCCESS ||
	    rm_drv_cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) != CUDA_SUCCESS)
		return ~0u; /* unknown: any entry may be the one */
	return (unsigned)(major * 10 + minor);
}

CUresult rm_image_charge(struct rm_channel *s, enum rm_handle_kind kind, void *h, const uint8_t *image, size_t n,
			 int shared)
{
	CUdevice dev = 0;
	int pushed = 0;
	if (s->cur) {
		dev = s->cur->dev;
	} else if (rm_session_device(s, 0, &dev) == CUDA_SUCCESS && !shared) {
		/* A library loaded with no context current: its variables as a context of the
		 * client's first GPU holds them. */
		CUcontext ctx;
		if (rm_gpu_acquire(dev, &ctx) == CUDA_SUCCESS) {
			if (rm_drv_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS)
				pushed = 1;
			else
				rm_gpu_release(dev);
		}
	}
	int64_t vars = shared ? 0 : s->cur || pushed ? variable_bytes(kind, h, image, n) : -1;
	if (pushed) {
		CUcontext popped;
		rm_drv_cuCtxPopCurrent_v2(&popped);
		rm_gpu_release(dev);
	}
	if (vars < 0) {
		static atomic_int logged;
		if (!atomic_exchange(&logged, 1))
			rm_session_log(s, RM_LOG_WARN, "the device variables of a %s image of %zu bytes could not be named "
				       "(compressed entries without liblz4 or libzstd, or no GPU to ask): its code is "
				       "charged, its variables are not (logged once)",
				       kind == RM_H_MODULE ? "module's" : "library's", n);
		vars = 0;
	}
	uint64_t code = rm_image_code_bytes(image, n, compute_capability(dev));
	uint64_t bytes = code + (uint64_t)vars < code ? UINT64_MAX : code + (uint64_t)vars;
	CUresult r = rm_session_charge(s, bytes);
	if (r == CUDA_SUCCESS && !rm_session_set_size(s, kind, (uint64_t)(uintptr_t)h, bytes)) {
		rm_session_uncharge(s, bytes); /* not owned: nothing to charge it to */
		r = CUDA_ERROR_INVALID_HANDLE;
	}
	if (r == CUDA_SUCCESS)
		rm_session_log(s, RM_LOG_DEBUG, "%s of %zu bytes charged %llu bytes (code %llu, variables %lld)",
			       kind == RM_H_MODULE ? "module" : "library", n, (unsigned long long)bytes,
			       (unsigned long long)code, (long long)vars);
	return r;
}

CUresult rm_image_own_charged(struct rm_channel *s, enum rm_handle_kind kind, void *h, const uint8_t *image, size_t n,
			      int shared)
{
	rm_session_own(s, kind, h, 0);
	CUresult r = rm_image_charge(s, kind, h, image, n, shared);
	if (r != CUDA_SUCCESS) {
		rm_session_disown(s, kind, h);
		rm_image_unload(kind, h);
	}
	return r;
}

CUresult rm_image_load_owned(struct rm_channel *s, enum rm_handle_kind kind, const uint8_t *image, size_t n, void **h)
{
	int shared;
	CUresult r = rm_image_load(kind, image, n, h, &shared);
	if (r == CUDA_SUCCESS && !rm_session_own_fresh(s, kind, *h)) { /* a shared copy it holds */
		rm_image_unload(kind, *h);
		shared = 0;
		r = rm_image_load_unshared(kind, image, h);
	}
	if (r == CUDA_SUCCESS)
		r = rm_image_own_charged(s, kind, *h, image, n, shared);
	if (r == CUDA_SUCCESS && shared)
		rm_session_log(s, RM_LOG_DEBUG, "%s of %zu bytes shared with other clients",
			       kind == RM_H_MODULE ? "module" : "library", n);
	return r;
}
