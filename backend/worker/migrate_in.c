/* The target of a move (migrate.h): the state made again, then the client's attach. */
#include "migrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>

#include "daemon_handlers.h"
#include "dispatch.h"
#include "driver_table.h"
#include "gpus.h"
#include "handle_alias.h"
#include "image_cache.h"
#include "image_charge.h"
#include "log.h"
#include "memory_window.h"
#include "migrate_state.h"
#include "migrate_wire.h"
#include "stream_pool.h"
#include "variable_alias.h"

#define RESUME_WAIT_S 30   /* how long a moved-in session waits for its client */

struct restore {
	struct rm_channel *s;
	struct rm_request *rq;
	struct rm_session_ctx *slots[RM_MIG_MAX_CTX]; /* the source's context slots, in order */
	int nslots;
	uint8_t *chunk;
	uint64_t bytes;
	uint64_t load_us, images; /* loading modules and libraries again, and how many */
	uint64_t preloaded;       /* of them, loaded ahead (RM_OP_MIGRATE_IMAGE) */
};

static uint64_t clock_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static int read_state(void *arg, void *buf, size_t len)
{
	struct restore *x = arg;
	return rm_request_read_bulk(x->s, x->rq, buf, len);
}

static int err_of(CUresult r)
{
	return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM : -EIO;
}

/* Makes the source's context slot i current. */
static int enter(struct restore *x, uint32_t i)
{
	if (i >= (uint32_t)x->nslots)
		return -EPROTO;
	return err_of(rm_session_enter(x->s, x->slots[i]->handle));
}

static int on_ctx(void *arg, uint64_t handle, int ordinal)
{
	struct restore *x = arg;
	CUdevice dev;
	CUcontext ctx;
	if (x->nslots == RM_MIG_MAX_CTX)
		return -EPROTO;
	CUresult r = rm_session_device(x->s, ordinal, &dev);
	if (r == CUDA_SUCCESS)
		r = rm_session_add_ctx(x->s, dev, &ctx);
	if (r != CUDA_SUCCESS)
		return err_of(r);
	struct rm_session_ctx *c = NULL;
	for (int i = 0; !c && rm_session_ctx_at(x->s, i); i++)
		if (x->s->sh->ctxs[i].ctx == ctx && !x->s->sh->ctxs[i].created)
			c = &x->s->sh->ctxs[i];
	if (!c)
		return -ESRCH;
	pthread_mutex_lock(&x->s->sh->lock);
	c->handle = handle; /* the value the client holds for it */
	pthread_mutex_unlock(&x->s->sh->lock);
	x->slots[x->nslots++] = c;
	return 0;
}

/* What of this process's address space overlaps [base, base + size), from /proc/self/maps,
 * as ", by START-END PERMS [NAME]" for the log; empty where nothing does (the driver's GPU
 * address space alone holds it). */
static void range_holder(uint64_t base, uint64_t size, char *buf, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi;
		char perms[8], name[256] = "";
		if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %255s", &lo, &hi, perms, name) < 3)
			continue;
		if (lo < base + size && base < hi) {
			snprintf(buf, len, ", by %llx-%llx %s %s", lo, hi, perms, name[0] ? name : "(anonymous)");
			break;
		}
	}
	if (f)
		fclose(f);
}

/* An address range the client reserved, empty: reserved at the same addresses here, or
 * refused where the driver gives others, and parked when given up (rm_migrate_park_range;
 * the handle's parent field: the bytes reserved; 0 in this worker's window). One at a
 * 32 MiB boundary (a window's: memory_window.h) is reserved in whole 32 MiB blocks. */
static int on_va_range(void *arg, uint64_t base, uint64_t size)
{
	struct restore *x = arg;
	int err = enter(x, 0);
	if (err)
		return err;
	CUresult r = CUDA_SUCCESS;
	uint64_t whole = rm_mig_va_range_whole(base, size);
	if (!whole)
		return -EINVAL;
	uint64_t reserved = 0; /* recorded as the handle's parent */
	if (rm_window_holds(base, whole)) /* this worker's own window: its addresses are reserved */
		rm_window_taken(base, whole);
	else if ((r = rm_migrate_reserve_range(base, whole)) == CUDA_SUCCESS)
		reserved = whole;
	if (r != CUDA_SUCCESS) {
		char holder[160] = "";
		range_holder(base, size, holder, sizeof(holder));
		rm_session_log(x->s, RM_LOG_WARN, "cannot reserve 0x%llx to 0x%llx here for the moving client%s",
			       (unsigned long long)base, (unsigned long long)(base + size), holder);
		return r == CUDA_ERROR_ALREADY_MAPPED || r == CUDA_ERROR_INVALID_VALUE ? -EADDRINUSE : err_of(r);
	}
	rm_session_own_memory(x->s, RM_H_VA_RANGE, base, size, reserved);
	rm_session_log(x->s, RM_LOG_DEBUG, "reserved 0x%llx to 0x%llx for the moving client", (unsigned long long)base,
		       (unsigned long long)(base + size));
	return 0;
}

#define SPAN_RETRIES 10

static int on_span(void *arg, uint64_t base, uint64_t size, uint32_t ctx)
{
	struct restore *x = arg;
	int err = enter(x, ctx);
	if (err)
		return err;
	/* Memory of this worker's window that a client freed, or took away in a move, is
	 * unmapped in the background (memory_window.h): the client coming back waits for that. */
	if (rm_window_holds(base, size))
		rm_window_wait_unmaps(RM_WINDOW_UNMAP_WAIT_MS);
	CUresult r = rm_migrate_map_span(x->s, x->s->cur->dev, base, size);
	/* On an H100 a range this worker had just given back (a client moving straight back
	 * here, 0.2 s after it left) was once refused with nothing of the process there; not
	 * understood: a few tries over half a second before refusing the move. */
	for (int i = 0; r == CUDA_ERROR_ALREADY_MAPPED && i < SPAN_RETRIES; i++) {
		struct timespec pause = {0, 50 * 1000 * 1000};
		nanosleep(&pause, NULL);
		r = rm_migrate_map_span(x->s, x->s->cur->dev, base, size);
	}
	if (r != CUDA_SUCCESS) {
		char holder[160] = "";
		if (r == CUDA_ERROR_ALREADY_MAPPED)
			range_holder(base, size, holder, sizeof(holder));
		rm_session_log(x->s, RM_LOG_WARN, "cannot map 0x%llx to 0x%llx here for the moving client: %s%s",
			       (unsigned long long)base, (unsigned long long)(base + size),
			       r == CUDA_ERROR_ALREADY_MAPPED ? "the addresses are taken" : "the driver refused", holder);
	}
	return r == CUDA_SUCCESS ? 0 : r == CUDA_ERROR_ALREADY_MAPPED ? -EADDRINUSE : r == CUDA_ERROR_OUT_OF_MEMORY ? -ENOMEM
		: -EIO;
}

static int on_memory(void *arg, uint64_t base, uint64_t size, uint32_t ctx)
{
	struct restore *x = arg;
	int err = enter(x, ctx);
	if (err)
		return err;
	CUresult r = rm_migrate_own(x->s, base, size);
	if (r != CUDA_SUCCESS)
		return -EPROTO;
	for (uint64_t done = 0; done < size;) {
		size_t n = rm_mig_piece(base + done, size - done);
		if ((err = read_state(x, x->chunk, n)))
			return err;
		if ((r = rm_drv_cuMemcpyHtoD_v2(base + done, x->chunk, n)) != CUDA_SUCCESS) {
			rm_session_log(x->s, RM_LOG_WARN, "moved memory at 0x%llx not written: CUresult %d",
				       (unsigned long long)(base + done), r);
			return err_of(r);
		}
		done += n;
	}
	x->bytes += size;
	return 0;
}

static int alias(struct restore *x, uint32_t kind, uint64_t client, uint64_t real)
{
	pthread_mutex_lock(&x->s->sh->lock);
	rm_alias_drop_locked(x->s->sh, kind, real); /* a fresh value own gave it (handles.c): the client's is this */
	int err = client == real ? 0 : rm_alias_add_locked(x->s->sh, kind, client, real);
	pthread_mutex_unlock(&x->s->sh->lock);
	return err;
}

/* A module's or library's image loaded again (or taken as preloaded), kept to move on
 * again, and aliased. */
static int load_image(struct restore *x, enum rm_handle_kind kind, uint64_t handle, const uint8_t *image, size_t n)
{
	void *h = NULL;
	uint8_t *kept = NULL;
	CUdevice dev = kind == RM_H_MODULE && x->s->cur ? x->s->cur->dev : -1;
	struct rm_preloaded *p = rm_migrate_take_preloaded(x->s->sh, kind, dev, image, n);
	if (p) {
		h = p->handle, kept = p->image;
		if (p->dev >= 0)
			rm_gpu_release(p->dev); /* the session's context holds it now */
		free(p);
		x->preloaded++;
		CUresult r = rm_image_own_charged(x->s, kind, h, image, n, 0); /* loaded ahead: owned and charged now */
		if (r != CUDA_SUCCESS) {
			free(kept);
			return err_of(r);
		}
	} else {
		if (!rm_image_contained(image, n))
			return -EPROTO;
		CUresult r = rm_image_load_owned(x->s, kind, image, n, &h); /* as a client's own load */
		if (r != CUDA_SUCCESS)
			return err_of(r);
		rm_image_load_here(kind, h); /* as a client's own load does (module_handlers.c) */
		if ((kept = malloc(n + RM_IMAGE_PAD))) /* the decoder's copy has the zeros after it */
			memcpy(kept, image, n + RM_IMAGE_PAD);
	}
	if (kept)
		rm_migrate_keep_image(x->s, kind, (uint64_t)(uintptr_t)h, kept, n);
	x->bytes += n;
	return alias(x, kind, handle, (uint64_t)(uintptr_t)h);
}

static int on_module(void *arg, uint64_t handle, uint32_t ctx, const uint8_t *image, size_t n)
{
	struct restore *x = arg;
	int err = enter(x, ctx);
	uint64_t t = clock_us();
	err = err ? err : load_image(x, RM_H_MODULE, handle, image, n);
	x->load_us += clock_us() - t, x->images++;
	return err;
}

static int on_function(void *arg, uint64_t handle, uint64_t module, int32_t smem, int32_t carveout, const char *name)
{
	struct restore *x = arg;
	CUmodule m;
	CUfunction f;
	CUresult r = rm_session_use(x->s, RM_H_MODULE, module, (void **)&m);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuModuleGetFunction(&f, m, name);
	if (r == CUDA_SUCCESS && smem > 0) /* what the client set on it at the source */
		r = rm_drv_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem);
	if (r == CUDA_SUCCESS && carveout >= 0)
		r = rm_drv_cuFuncSetAttribute(f, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout);
	if (r != CUDA_SUCCESS)
		return err_of(r);
	rm_session_own(x->s, RM_H_FUNCTION, f, (uint64_t)(uintptr_t)m);
	return alias(x, RM_H_FUNCTION, handle, (uint64_t)(uintptr_t)f);
}

static int on_stream(void *arg, uint64_t handle, uint32_t ctx, uint32_t flags, int32_t priority)
{
	struct restore *x = arg;
	CUstream st;
	int err = enter(x, ctx);
	if (err)
		return err;
	CUresult r = rm_body_cuStreamCreateWithPriority(x->s, &st, flags, priority);
	if (r != CUDA_SUCCESS)
		return err_of(r);
	rm_session_own(x->s, RM_H_STREAM, st, 0);
	return alias(x, RM_H_STREAM, handle, (uint64_t)(uintptr_t)st);
}

static int on_event(void *arg, uint64_t handle, uint32_t ctx, uint32_t flags)
{
	struct restore *x = arg;
	CUevent ev;
	int err = enter(x, ctx);
	if (err)
		return err;
	CUresult r = rm_body_cuEventCreate(x->s, &ev, flags); /* owns it */
	if (r != CUDA_SUCCESS)
		return err_of(r);
	return alias(x, RM_H_EVENT, handle, (uint64_t)(uintptr_t)ev);
}

static int on_library(void *arg, uint64_t handle, const uint8_t *image, size_t n)
{
	struct restore *x = arg;
	uint64_t t = clock_us();
	int err = load_image(x, RM_H_LIBRARY, handle, image, n);
	x->load_us += clock_us() - t, x->images++;
	return err;
}

static int on_kernel(void *arg, uint64_t handle, uint64_t library, int32_t smem, int32_t carveout, const char *name)
{
	struct restore *x = arg;
	CUlibrary lib;
	CUkernel k;
	CUresult r = rm_session_use(x->s, RM_H_LIBRARY, library, (void **)&lib);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuLibraryGetKernel(&k, lib, name);
	for (int i = 0; r == CUDA_SUCCESS && i < x->nslots; i++) { /* what the client set, on each device */
		if (smem > 0)
			r = rm_drv_cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem, k,
							x->slots[i]->dev);
		if (r == CUDA_SUCCESS && carveout >= 0)
			r = rm_drv_cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, carveout, k,
							x->slots[i]->dev);
	}
	if (r != CUDA_SUCCESS) {
		rm_session_log(x->s, RM_LOG_WARN, "kernel %s of library %#llx (smem %d, carveout %d): CUresult %d", name,
			       (unsigned long long)library, smem, carveout, r);
		return err_of(r);
	}
	rm_session_own(x->s, RM_H_KERNEL, k, (uint64_t)(uintptr_t)lib);
	return alias(x, RM_H_KERNEL, handle, (uint64_t)(uintptr_t)k);
}

static int on_kernel_function(void *arg, uint64_t handle, uint64_t kernel, uint32_t ctx)
{
	struct restore *x = arg;
	CUkernel k;
	CUfunction f;
	int err = enter(x, ctx);
	if (err)
		return err;
	CUresult r = rm_session_use(x->s, RM_H_KERNEL, kernel, (void **)&k);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuKernelGetFunction(&f, k);
	if (r != CUDA_SUCCESS)
		return err_of(r);
	rm_session_own(x->s, RM_H_FUNCTION, f, (uint64_t)(uintptr_t)k);
	return alias(x, RM_H_FUNCTION, handle, (uint64_t)(uintptr_t)f);
}

/* The client holds a device variable's address, held, which is real here: owned as its
 * memory at held, and aliased where the two differ. A range the client holds already
 * (memory it brought) cannot be the variable too: refused. */
static int hold_variable(struct restore *x, uint64_t held, uint64_t real, uint64_t size, uint64_t parent)
{
	struct rm_channel *s = x->s;
	if (held + size < held || rm_session_owned_run(s, held, 1) || rm_session_owned_run(s, held + size - 1, 1))
		return -EADDRINUSE;
	int err = 0;
	if (held != real) {
		pthread_mutex_lock(&s->sh->lock);
		err = rm_variable_alias_add_locked(s->sh, held, real, size, parent);
		pthread_mutex_unlock(&s->sh->lock);
		rm_session_log(s, err ? RM_LOG_WARN : RM_LOG_INFO, "a device variable the client holds at 0x%llx is at 0x%llx "
			       "here%s", (unsigned long long)held, (unsigned long long)real, err ? ": its range is taken" : "");
	}
	if (!err)
		rm_session_own_memory(s, RM_H_GLOBAL, held, size, parent);
	return err;
}

/* A module's or library's device variable: found by its name in the module made again,
 * of the size it had, its contents written. Where the client took its address (held), the
 * client keeps that address: the variable is its memory there, at this address here
 * (variable_alias.h). */
static int on_global(void *arg, uint64_t image, int library, const char *name, uint64_t held, uint64_t size)
{
	struct restore *x = arg;
	void *h;
	CUdeviceptr p = 0;
	size_t sz = 0;
	int err = enter(x, 0);
	if (err)
		return err;
	CUresult r = rm_session_use(x->s, library ? RM_H_LIBRARY : RM_H_MODULE, image, &h);
	if (r == CUDA_SUCCESS)
		r = library ? rm_drv_cuLibraryGetGlobal(&p, &sz, (CUlibrary)h, name)
			    : rm_drv_cuModuleGetGlobal_v2(&p, &sz, (CUmodule)h, name);
	if (r != CUDA_SUCCESS)
		return err_of(r);
	if (sz != size)
		return -EPROTO;
	for (uint64_t done = 0; done < size;) {
		size_t n = rm_mig_piece(p + done, size - done);
		if ((err = read_state(x, x->chunk, n)))
			return err;
		if ((r = rm_drv_cuMemcpyHtoD_v2(p + done, x->chunk, n)) != CUDA_SUCCESS)
			return err_of(r);
		done += n;
	}
	x->bytes += size;
	return held ? hold_variable(x, held, p, size, (uint64_t)(uintptr_t)h) : 0;
}

void rm_migrate_make_contexts(struct rm_channel *s)
{
	uint64_t began = clock_us();
	for (int i = 0; i < s->sh->ndevices; i++) {
		CUcontext ctx;
		if (rm_gpu_acquire(s->sh->devices[i], &ctx) == CUDA_SUCCESS)
			rm_gpu_release(s->sh->devices[i]);
	}
	rm_session_log(s, RM_LOG_INFO, "a client moving in: its GPUs' contexts ready in %llu us",
		       (unsigned long long)(clock_us() - began));
}

struct rm_preloaded *rm_migrate_take_preloaded(struct rm_session *sh, enum rm_handle_kind kind, CUdevice dev,
					       const uint8_t *image, size_t n)
{
	pthread_mutex_lock(&sh->lock);
	struct rm_preloaded **pp = &sh->preloaded;
	while (*pp && !((*pp)->kind == kind && (*pp)->dev == dev && (*pp)->n == n && !memcmp((*pp)->image, image, n)))
		pp = &(*pp)->next;
	struct rm_preloaded *p = *pp;
	if (p)
		*pp = p->next;
	pthread_mutex_unlock(&sh->lock);
	return p;
}

void rm_migrate_drop_preloaded(struct rm_session *sh)
{
	pthread_mutex_lock(&sh->lock);
	struct rm_preloaded *p = sh->preloaded;
	sh->preloaded = NULL;
	pthread_mutex_unlock(&sh->lock);
	while (p) {
		struct rm_preloaded *next = p->next;
		rm_image_unload(p->kind, p->handle);
		if (p->dev >= 0)
			rm_gpu_release(p->dev);
		free(p->image);
		free(p);
		p = next;
	}
}

/* Loads an image sent ahead into dev's shared context (-1: a library). */
static CUresult preload(struct rm_channel *s, enum rm_handle_kind kind, CUdevice dev, uint8_t *image, size_t n)
{
	CUcontext ctx = NULL;
	CUresult r = dev >= 0 ? rm_gpu_acquire(dev, &ctx) : CUDA_SUCCESS;
	if (r == CUDA_SUCCESS && ctx && (r = rm_drv_cuCtxSetCurrent(ctx)) == CUDA_SUCCESS)
		s->thread_ctx = ctx;
	struct rm_preloaded *p = r == CUDA_SUCCESS ? calloc(1, sizeof(*p)) : NULL;
	int shared;
	if (r == CUDA_SUCCESS && !p)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS && (r = rm_image_load(kind, image, n, &p->handle, &shared)) == CUDA_SUCCESS) {
		rm_image_load_here(kind, p->handle);
		*p = (struct rm_preloaded){.kind = kind, .dev = dev, .image = image, .n = n, .handle = p->handle};
		pthread_mutex_lock(&s->sh->lock);
		p->next = s->sh->preloaded;
		s->sh->preloaded = p;
		pthread_mutex_unlock(&s->sh->lock);
		return CUDA_SUCCESS;
	}
	free(p);
	if (ctx)
		rm_gpu_release(dev);
	return r;
}

/* What a source sends ahead comes on a greeted move's main connection before its state;
 * anywhere else it is refused (answered, and 1). */
static int refused_outside_start(struct rm_channel *s, struct rm_request *rq, const char *what)
{
	pthread_mutex_lock(&s->sh->lock);
	int before_state = s->sh->migrate_in == 1 && s->chan == 0;
	pthread_mutex_unlock(&s->sh->lock);
	if (before_state)
		return 0;
	rm_session_log(s, RM_LOG_WARN, "%s sent ahead outside a move's start; refused", what);
	rm_request_finish(s, rq, CUDA_ERROR_NOT_PERMITTED, NULL);
	return 1;
}

/* RM_OP_MIGRATE_IMAGE (migrate_wire.h's RM_MIG_IMAGE_HEAD before the image): before the
 * state, an image of the moving client's, loaded while the client still runs at the source.
 * Answered with the load's result; the state loads an image that failed here itself. */
void rm_handle_migrate_image(struct rm_channel *s, struct rm_request *rq)
{
	uint64_t bulk = rq->frame.bulk_len, began = clock_us();
	uint8_t head[RM_MIG_IMAGE_HEAD];
	if (refused_outside_start(s, rq, "an image"))
		return;
	if (rq->frame.msg_len || bulk <= sizeof(head) || bulk - sizeof(head) > RM_MAX_IMAGE_LEN) {
		rm_request_finish(s, rq, CUDA_ERROR_INVALID_VALUE, NULL);
		return;
	}
	if (rm_request_read_bulk(s, rq, head, sizeof(head))) {
		rm_request_finish(s, rq, CUDA_ERROR_UNKNOWN, NULL); /* the connection failed */
		return;
	}
	size_t n = (size_t)(bulk - sizeof(head));
	uint32_t kind, ordinal;
	CUdevice dev = -1;
	CUresult r = rm_mig_image_head_read(head, &kind, &ordinal) ? CUDA_ERROR_INVALID_VALUE
		     : kind == RM_MIG_IMAGE_MODULE ? rm_session_device(s, (int)ordinal, &dev)
						    : CUDA_SUCCESS;
	int held = r == CUDA_SUCCESS && !rm_host_account_take(&s->sh->host, n);
	uint8_t *image = held ? calloc(1, n + RM_IMAGE_PAD) : NULL;
	if (r == CUDA_SUCCESS && !image)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS && rm_request_read_bulk(s, rq, image, n))
		r = CUDA_ERROR_UNKNOWN; /* the connection failed */
	else if (r == CUDA_SUCCESS && !rm_image_contained(image, n))
		r = CUDA_ERROR_INVALID_IMAGE;
	if (r == CUDA_SUCCESS &&
	    (r = preload(s, kind == RM_MIG_IMAGE_MODULE ? RM_H_MODULE : RM_H_LIBRARY, dev, image, n)) == CUDA_SUCCESS)
		image = NULL; /* the preloaded record's */
	free(image);
	if (held)
		rm_host_account_give(&s->sh->host, n);
	rm_session_log(s, r == CUDA_SUCCESS ? RM_LOG_DEBUG : RM_LOG_WARN, "an image of %zu bytes sent ahead: %s in %llu us",
		       n, r == CUDA_SUCCESS ? "loaded" : "not loaded (the state loads it)",
		       (unsigned long long)(clock_us() - began));
	rm_request_finish(s, rq, r, NULL);
}

/* RM_OP_MIGRATE_RANGES (migrate_wire.h): before the images, the address ranges the moving
 * client's memory lies in, reserved here first (rm_migrate_hold_range). A range that cannot
 * be is left to the state, which refuses the move if it is still taken then. */
void rm_handle_migrate_ranges(struct rm_channel *s, struct rm_request *rq)
{
	uint64_t bulk = rq->frame.bulk_len;
	if (refused_outside_start(s, rq, "address ranges"))
		return;
	if (rq->frame.msg_len || !bulk || bulk % RM_MIG_RANGE_LEN || bulk / RM_MIG_RANGE_LEN > RM_MIG_MAX_RANGES) {
		rm_request_finish(s, rq, CUDA_ERROR_INVALID_VALUE, NULL);
		return;
	}
	uint8_t *list = malloc((size_t)bulk);
	CUresult r = list ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	if (list && rm_request_read_bulk(s, rq, list, (size_t)bulk))
		r = CUDA_ERROR_UNKNOWN; /* the connection failed */
	size_t count = (size_t)(bulk / RM_MIG_RANGE_LEN), held = 0;
	for (size_t i = 0; r == CUDA_SUCCESS && i < count; i++) {
		uint64_t base, size;
		if (rm_mig_range_read(list + i * RM_MIG_RANGE_LEN, &base, &size))
			r = CUDA_ERROR_INVALID_VALUE;
		else
			held += rm_migrate_hold_range(base, size);
	}
	free(list);
	if (r == CUDA_SUCCESS)
		rm_session_log(s, RM_LOG_INFO, "%zu of %zu address ranges of the moving client reserved ahead", held, count);
	rm_request_finish(s, rq, r, NULL);
}

/* RM_OP_MIGRATE_STATE: only once, as the first request of a session greeted with
 * migrate_in. A state that fails leaves what was made to the session's end (the source
 * then closes the connection). */
void rm_handle_migrate_state(struct rm_channel *s, struct rm_request *rq)
{
	struct restore x = {.s = s, .rq = rq};
	uint64_t began = clock_us();
	char why[256] = "";
	int first;
	pthread_mutex_lock(&s->sh->lock);
	first = s->sh->migrate_in == 1 && s->chan == 0;
	if (first)
		s->sh->migrate_in = 3; /* taking it */
	pthread_mutex_unlock(&s->sh->lock);
	if (!first) {
		rm_session_log(s, RM_LOG_WARN, "a migration state outside a move's first request; refused");
		rm_request_finish(s, rq, CUDA_ERROR_NOT_PERMITTED, NULL);
		return;
	}
	static const struct rm_mig_sink sink = {read_state, on_ctx,    on_span,   on_memory,	on_module, on_function,
						on_stream,  on_event,  on_library, on_kernel, on_kernel_function,
						on_va_range, on_global};
	int err = (x.chunk = malloc(RM_MIG_CHUNK)) ? rm_mig_decode(&sink, &x, rq->frame.bulk_len, why, sizeof(why)) : -ENOMEM;
	free(x.chunk);
	if (!err && rm_session_synchronize_all(s) != CUDA_SUCCESS) /* the copies are done */
		err = -EIO, snprintf(why, sizeof(why), "its memory could not be written");
	rm_session_enter(s, 0);
	rm_migrate_drop_preloaded(s->sh); /* the images the client unloaded meanwhile */
	if (err)
		rm_migrate_drop_unused(s);
	pthread_mutex_lock(&s->sh->lock);
	s->sh->migrate_in = err ? 0 : 2;
	pthread_mutex_unlock(&s->sh->lock);
	if (err) {
		rm_session_log(s, RM_LOG_WARN, "the moving client's state was not made again: %s (%s)", why, strerror(-err));
		rm_request_finish(s, rq, err == -EADDRINUSE ? CUDA_ERROR_ALREADY_MAPPED
					 : err == -ENOMEM || err == -EDQUOT ? CUDA_ERROR_OUT_OF_MEMORY
					 : CUDA_ERROR_INVALID_VALUE, NULL);
		return;
	}
	rm_session_log(s, RM_LOG_INFO, "moving client's state made again: %llu bytes in %llu us, %llu of them loading "
		       "%llu modules and libraries (%llu loaded ahead); waiting for it to attach",
		       (unsigned long long)x.bytes, (unsigned long long)(clock_us() - began),
		       (unsigned long long)x.load_us, (unsigned long long)x.images, (unsigned long long)x.preloaded);
	rm_request_finish(s, rq, CUDA_SUCCESS, NULL);
}

int rm_migrate_resume(struct rm_channel *s, struct rm_conn *conn, const struct iovec *ok)
{
	struct rm_session *sh = s->sh;
	pthread_mutex_lock(&sh->lock);
	int err = sh->migrate_in != 2 || sh->resume_conn ? -EBUSY : 0;
	if (!err)
		sh->migrate_in = 4; /* the client attaches */
	pthread_mutex_unlock(&sh->lock);
	if (!err && rm_conn_sendv(conn, ok, 1))
		err = -EPIPE;
	pthread_mutex_lock(&sh->lock);
	if (sh->migrate_in == 4) {
		sh->migrate_in = err ? 2 : 5;
		if (!err)
			sh->resume_conn = conn;
	}
	pthread_cond_broadcast(&sh->resumed);
	pthread_mutex_unlock(&sh->lock);
	return err;
}

int rm_migrate_wait_resume(struct rm_channel *s)
{
	struct rm_session *sh = s->sh;
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += RESUME_WAIT_S;
	pthread_mutex_lock(&sh->lock);
	while ((sh->migrate_in == 2 || sh->migrate_in == 4) && !sh->resume_conn &&
	       pthread_cond_timedwait(&sh->resumed, &sh->lock, &until) == 0)
		;
	struct rm_conn *conn = sh->resume_conn;
	int waited = sh->migrate_in == 2 || sh->migrate_in == 4 || sh->migrate_in == 5;
	sh->resume_conn = NULL;
	sh->migrate_in = 0;
	pthread_mutex_unlock(&sh->lock);
	if (!conn) {
		if (waited)
			rm_session_log(s, RM_LOG_WARN, "the moved client did not attach within %d s; its state goes",
				       RESUME_WAIT_S);
		return 0;
	}
	pthread_mutex_lock(&s->send_lock);
	rm_link_close(&s->link);
	int err = rm_link_init(&s->link, conn);
	snprintf(s->peer, sizeof(s->peer), "%s", rm_conn_peer(conn));
	pthread_mutex_unlock(&s->send_lock);
	if (err) {
		rm_conn_close(conn);
		return 0;
	}
	rm_session_log(s, RM_LOG_INFO, "the moved client attached from %s; serving it here", s->peer);
	return 1;
}
