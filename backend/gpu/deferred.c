/* Releases off the caller's thread (deferred.h): a queue and one thread. */
#include "deferred.h"

#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "driver_table.h"
#include "fault.h"
#include "log.h"
#include "memory_window.h"
#include "migrate.h"
#include "stream_pool.h"

struct release {
	struct release *next;
	CUcontext ctx;
	enum rm_deferred_op op;
	uint64_t object, size;
	void (*then)(void *);
	void *arg;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queued = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static struct release *head, **tail = &head;
static uint64_t asked, finished; /* releases queued and made, ever */
static int started;              /* 1: the thread runs; -1: it could not be started */

static const char *const names[] = {
	[RM_DEFER_MODULE_UNLOAD] = "cuModuleUnload",   [RM_DEFER_LIBRARY_UNLOAD] = "cuLibraryUnload",
	[RM_DEFER_MEM_FREE] = "cuMemFree",             [RM_DEFER_ARRAY_DESTROY] = "cuArrayDestroy",
	[RM_DEFER_MIPMAP_DESTROY] = "cuMipmappedArrayDestroy", [RM_DEFER_FREE_HOST] = "cuMemFreeHost",
	[RM_DEFER_HOST_UNREGISTER] = "cuMemHostUnregister", [RM_DEFER_UNMAP] = "cuMemUnmap",
	[RM_DEFER_ADDRESS_FREE] = "cuMemAddressFree",
};

static CUresult call(enum rm_deferred_op op, uint64_t v, uint64_t size)
{
	void *p = (void *)(uintptr_t)v;
	switch (op) {
	case RM_DEFER_MODULE_UNLOAD: return rm_drv_cuModuleUnload(p);
	case RM_DEFER_LIBRARY_UNLOAD: return rm_drv_cuLibraryUnload(p);
	case RM_DEFER_MEM_FREE: /* the driver's allocation, or the window's mapping (CUDA IPC's last holder) */
		return rm_window_holds(v, 1) && !rm_migrate_free_orphan(v) ? CUDA_SUCCESS : rm_drv_cuMemFree_v2((CUdeviceptr)v);
	case RM_DEFER_ARRAY_DESTROY: return rm_drv_cuArrayDestroy(p);
	case RM_DEFER_MIPMAP_DESTROY: return rm_drv_cuMipmappedArrayDestroy(p);
	case RM_DEFER_FREE_HOST: return rm_drv_cuMemFreeHost(p);
	case RM_DEFER_HOST_UNREGISTER: return rm_drv_cuMemHostUnregister(p);
	case RM_DEFER_UNMAP: return rm_drv_cuMemUnmap((CUdeviceptr)v, size);
	case RM_DEFER_ADDRESS_FREE: return rm_window_address_free(v, size); /* the driver's, or a window's */
	}
	return CUDA_ERROR_INVALID_VALUE;
}

/* The release in its context; the thread's context is left as it was. */
static void run(const struct release *r)
{
	CUcontext prev = NULL;
	int pushed = r->ctx && rm_drv_cuCtxGetCurrent(&prev) == CUDA_SUCCESS && prev != r->ctx &&
		     rm_drv_cuCtxSetCurrent(r->ctx) == CUDA_SUCCESS;
	CUresult res = call(r->op, r->object, r->size);
	if (pushed)
		rm_drv_cuCtxSetCurrent(prev);
	if (res != CUDA_SUCCESS)
		rm_log(RM_LOG_WARN, "%s of %#llx, deferred: error %d", names[r->op], (unsigned long long)r->object,
		       (int)res);
	if (r->then)
		r->then(r->arg);
}

/* The releases whose driver call, while it waits for the context, also holds up the other
 * threads' driver calls (measured on an H100: a cuMemAlloc of the caller's waited for
 * another client's kernel behind a deferred cuArrayDestroy or cuMemFree of managed memory).
 * The thread waits for the context to be idle before making them, outside the driver,
 * at most IDLE_WAIT_MS, after which it makes the call anyway. */
#define IDLE_WAIT_MS 30000

static int holds_driver(enum rm_deferred_op op)
{
	return op == RM_DEFER_ARRAY_DESTROY || op == RM_DEFER_MIPMAP_DESTROY || op == RM_DEFER_MEM_FREE;
}

static void wait_until_idle(CUcontext ctx)
{
	int waited = 0;
	/* A faulted worker's contexts answer every call with the fault (fault.h): their streams
	 * may never read as idle, and there is nothing left to wait for. */
	while (ctx && !rm_stream_pool_idle(ctx) && rm_fault_error() == CUDA_SUCCESS && waited < IDLE_WAIT_MS) {
		usleep(1000);
		waited++;
	}
	if (waited >= IDLE_WAIT_MS)
		rm_log(RM_LOG_INFO, "a deferred release waited %d s for the context to be idle; made now, it holds up "
		       "other clients' driver calls until their work is done", IDLE_WAIT_MS / 1000);
}

static void *releaser(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&lock);
	for (;;) {
		while (!head)
			pthread_cond_wait(&queued, &lock);
		struct release *r = head;
		if (!(head = r->next))
			tail = &head;
		pthread_mutex_unlock(&lock);
		if (holds_driver(r->op))
			wait_until_idle(r->ctx);
		run(r);
		free(r);
		pthread_mutex_lock(&lock);
		finished++;
		pthread_cond_broadcast(&done);
	}
	return NULL;
}

/* Under lock: 1 once the thread runs. */
static int start_locked(void)
{
	pthread_t t;
	if (!started)
		started = pthread_create(&t, NULL, releaser, NULL) == 0 && pthread_detach(t) == 0 ? 1 : -1;
	return started == 1;
}

void rm_deferred_release(CUcontext ctx, enum rm_deferred_op op, uint64_t object, void (*then)(void *), void *arg)
{
	rm_deferred_release_range(ctx, op, object, 0, then, arg);
}

void rm_deferred_release_range(CUcontext ctx, enum rm_deferred_op op, uint64_t object, uint64_t size,
			       void (*then)(void *), void *arg)
{
	if (!ctx)
		rm_drv_cuCtxGetCurrent(&ctx);
	pthread_mutex_lock(&lock);
	int none_queued = asked == finished;
	pthread_mutex_unlock(&lock);
	if (none_queued && ctx && rm_stream_pool_idle(ctx)) { /* it waits for nothing: made now */
		struct release now = {.ctx = ctx, .op = op, .object = object, .size = size, .then = then, .arg = arg};
		run(&now);
		return;
	}
	struct release *r = malloc(sizeof(*r));
	pthread_mutex_lock(&lock);
	int queue = r && start_locked();
	if (queue) {
		*r = (struct release){.ctx = ctx, .op = op, .object = object, .size = size, .then = then, .arg = arg};
		*tail = r;
		tail = &r->next;
		asked++;
		pthread_cond_signal(&queued);
	}
	pthread_mutex_unlock(&lock);
	if (!queue) {
		struct release now = {.ctx = ctx, .op = op, .object = object, .size = size, .then = then, .arg = arg};
		free(r);
		run(&now);
	}
}

void rm_deferred_drain(void)
{
	pthread_mutex_lock(&lock);
	uint64_t want = asked;
	while (finished < want)
		pthread_cond_wait(&done, &lock);
	pthread_mutex_unlock(&lock);
}
