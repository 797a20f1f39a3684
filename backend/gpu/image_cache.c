/* The worker's shared images: a list of loaded ones keyed by kind, context and
 * bytes. An entry being loaded makes other loaders of the same bytes wait for
 * it rather than load a second copy; different images load independently. */
#include "image_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "deferred.h"
#include "dispatch.h"
#include "driver_table.h"
#include "log.h"

#define MAX_IDLE 64 /* loaded images no client uses, kept for the next one */

struct image {
	struct image *next;
	enum rm_handle_kind kind;
	CUcontext ctx; /* a module's context; NULL for a library */
	uint64_t hash;
	size_t len;
	uint8_t *bytes;
	void *handle;  /* NULL while loading */
	int loading;
	int users;
	uint64_t idle_since; /* tick when users fell to 0 */
};

static struct image *images;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t loaded = PTHREAD_COND_INITIALIZER;
static uint64_t tick;

static uint64_t fnv1a(const uint8_t *p, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ull;
	for (size_t i = 0; i < n; i++)
		h = (h ^ p[i]) * 0x100000001b3ull;
	return h;
}

static CUresult driver_load(enum rm_handle_kind kind, const uint8_t *image, void **out)
{
	if (kind == RM_H_MODULE)
		return rm_drv_cuModuleLoadData((CUmodule *)out, image);
	return rm_drv_cuLibraryLoadData((CUlibrary *)out, image, NULL, NULL, 0, NULL, NULL, 0);
}

/* Unloading waits for the whole context to idle: made on the deferred thread (deferred.h),
 * in ctx (NULL: the caller's current context). */
static CUresult driver_unload(enum rm_handle_kind kind, void *h, CUcontext ctx)
{
	rm_deferred_release(ctx, kind == RM_H_MODULE ? RM_DEFER_MODULE_UNLOAD : RM_DEFER_LIBRARY_UNLOAD,
			    (uint64_t)(uintptr_t)h, NULL, NULL);
	return CUDA_SUCCESS;
}

/* Unloads the longest-idle image once more than MAX_IDLE are idle; called with the lock held. */
static void trim_idle(void)
{
	int idle = 0;
	struct image **oldest = NULL;
	for (struct image **pp = &images; *pp; pp = &(*pp)->next)
		if (!(*pp)->users && !(*pp)->loading) {
			idle++;
			if (!oldest || (*pp)->idle_since < (*oldest)->idle_since)
				oldest = pp;
		}
	if (idle <= MAX_IDLE || !oldest)
		return;
	struct image *im = *oldest;
	*oldest = im->next;
	driver_unload(im->kind, im->handle, im->ctx);
	free(im->bytes);
	free(im);
}

CUresult rm_image_load_unshared(enum rm_handle_kind kind, const uint8_t *image, void **out)
{
	return driver_load(kind, image, out);
}

CUresult rm_image_load(enum rm_handle_kind kind, const uint8_t *image, size_t n, void **out, int *shared)
{
	*shared = 0;
	if (!rm_image_shareable(image, n))
		return driver_load(kind, image, out);
	CUcontext ctx = NULL;
	if (kind == RM_H_MODULE)
		rm_drv_cuCtxGetCurrent(&ctx);
	uint64_t hash = fnv1a(image, n);
	pthread_mutex_lock(&lock);
	struct image *im;
again:
	for (im = images; im; im = im->next)
		if (im->kind == kind && im->ctx == ctx && im->hash == hash && im->len == n && !memcmp(im->bytes, image, n))
			break;
	if (im && im->loading) {
		pthread_cond_wait(&loaded, &lock);
		goto again; /* the entry may have gone if its load failed */
	}
	if (im) {
		im->users++;
		*out = im->handle;
		*shared = 1;
		pthread_mutex_unlock(&lock);
		return CUDA_SUCCESS;
	}
	im = calloc(1, sizeof(*im));
	uint8_t *copy = malloc(n + 1);
	if (!im || !copy) {
		pthread_mutex_unlock(&lock);
		free(im);
		free(copy);
		return driver_load(kind, image, out);
	}
	memcpy(copy, image, n + 1);
	*im = (struct image){.next = images, .kind = kind, .ctx = ctx, .hash = hash, .len = n, .bytes = copy,
			     .loading = 1};
	images = im;
	pthread_mutex_unlock(&lock);

	CUresult r = driver_load(kind, image, out);

	pthread_mutex_lock(&lock);
	im->loading = 0;
	if (r == CUDA_SUCCESS) {
		im->handle = *out;
		im->users = 1;
		*shared = 1;
	} else {
		for (struct image **pp = &images; *pp; pp = &(*pp)->next)
			if (*pp == im) {
				*pp = im->next;
				break;
			}
		free(im->bytes);
		free(im);
	}
	pthread_cond_broadcast(&loaded);
	pthread_mutex_unlock(&lock);
	return r;
}

CUresult rm_image_unload(enum rm_handle_kind kind, void *handle)
{
	pthread_mutex_lock(&lock);
	for (struct image *im = images; im; im = im->next)
		if (im->kind == kind && im->handle == handle && !im->loading) {
			if (im->users > 0 && --im->users == 0) {
				im->idle_since = ++tick;
				trim_idle();
			}
			pthread_mutex_unlock(&lock);
			return CUDA_SUCCESS;
		}
	pthread_mutex_unlock(&lock);
	return driver_unload(kind, handle, NULL);
}

void rm_image_forget_context(CUcontext ctx)
{
	pthread_mutex_lock(&lock);
	for (struct image **pp = &images; *pp;) {
		struct image *im = *pp;
		if (im->kind == RM_H_MODULE && im->ctx == ctx && !im->loading) {
			*pp = im->next;
			free(im->bytes);
			free(im);
		} else {
			pp = &im->next;
		}
	}
	pthread_mutex_unlock(&lock);
}

/* Whether a loaded image is loaded into the loading client's context at once (the
 * worker's module_loading = context; image_cache.h). */
static int load_here_on;

void rm_image_load_here_configure(int on)
{
	load_here_on = on;
}

#define LOAD_HERE_MAX 65536u /* an image's functions loaded at its arrival; beyond, at first use */

void rm_image_load_here(enum rm_handle_kind kind, void *handle)
{
	if (!load_here_on || !rm_drv.cuFuncLoad)
		return;
	unsigned n = 0;
	CUresult r = CUDA_ERROR_NOT_SUPPORTED;
	if (kind == RM_H_MODULE && rm_drv.cuModuleGetFunctionCount && rm_drv.cuModuleEnumerateFunctions)
		r = rm_drv_cuModuleGetFunctionCount(&n, handle);
	else if (kind == RM_H_LIBRARY && rm_drv.cuLibraryGetKernelCount && rm_drv.cuLibraryEnumerateKernels &&
		 rm_drv.cuKernelGetFunction)
		r = rm_drv_cuLibraryGetKernelCount(&n, handle);
	if (r != CUDA_SUCCESS || !n)
		return;
	n = n < LOAD_HERE_MAX ? n : LOAD_HERE_MAX;
	void **h = calloc(n, sizeof(*h));
	if (!h)
		return;
	if (kind == RM_H_MODULE)
		r = rm_drv_cuModuleEnumerateFunctions((CUfunction *)h, n, handle);
	else
		r = rm_drv_cuLibraryEnumerateKernels((CUkernel *)h, n, handle);
	for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
		CUfunction f = h[i];
		if (kind == RM_H_LIBRARY && rm_drv_cuKernelGetFunction(&f, h[i]) != CUDA_SUCCESS)
			continue;
		rm_drv_cuFuncLoad(f);
	}
	free(h);
}
