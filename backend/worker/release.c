/* Releasing what a departing client owns: each kind of proto/handle_kinds.def by its
 * release function, the kinds in their steps (rm_session_release_all). */
#include "session.h"

#include <stdlib.h>

#include "deferred.h"
#include "driver_table.h"
#include "fault.h"
#include "image_cache.h"
#include "image_charge.h"
#include "ipc.h"
#include "migrate.h"
#include "memory_window.h"
#include "nccl_comms.h"
#include "peer_access.h"
#include "stream_pool.h"

typedef void (*release_fn)(struct rm_channel *s, const struct rm_handle *h);

static void *handle_of(const struct rm_handle *h)
{
	return (void *)(uintptr_t)h->value;
}

static void release_graph_exec(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_drv.cuGraphExecDestroy)
		rm_drv_cuGraphExecDestroy(handle_of(h));
}

/* A graph a node owns goes with its parent graph; a capture's, with its capture. */
static void release_graph(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_drv.cuGraphDestroy && !h->parent)
		rm_drv_cuGraphDestroy(handle_of(h));
}

/* The references the client held itself: its graphs' go with them. */
static void release_user_object(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_drv.cuUserObjectRelease && h->size)
		rm_drv_cuUserObjectRelease(handle_of(h), (unsigned int)h->size);
}

/* What another client opened (CUDA IPC, ipc.h) stays for it: the driver's free is the last holder's. */
static void release_event(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_ipc_leave(s, RM_IPC_EVENT, h->value) != RM_IPC_OTHERS_HOLD)
		rm_drv_cuEventDestroy_v2(handle_of(h));
}

static void release_stream(struct rm_channel *s, const struct rm_handle *h)
{
	rm_stream_pool_give(handle_of(h));
}

/* The quota is released with the image (image_charge.h). */
static void release_module(struct rm_channel *s, const struct rm_handle *h)
{
	if (!h->parent) { /* else a library's own */
		rm_image_unload(RM_H_MODULE, handle_of(h));
		rm_image_uncharge(s, h);
	}
}

static void release_library(struct rm_channel *s, const struct rm_handle *h)
{
	rm_image_unload(RM_H_LIBRARY, handle_of(h));
	rm_image_uncharge(s, h);
}

/* Aborted already, before the drain (rm_nccl_session_gone): the record goes. */
static void release_nccl_comm(struct rm_channel *s, const struct rm_handle *h)
{
	rm_nccl_end(s, handle_of(h), 1);
}

/* The quota is released with the memory, not later with the slot. */
static void release_memory(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_ipc_leave(s, RM_IPC_MEMORY, h->value) != RM_IPC_OTHERS_HOLD)
		rm_session_free_drained(s, h->value);
	rm_session_uncharge(s, h->size);
}

/* The exporter's allocation, freed here once neither it nor another importer holds it: then
 * with cuMemFree, which waits for every client's work, as the exporter's may still use it
 * (on the release thread, deferred.h). */
static void release_ipc_memory(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_ipc_leave(s, RM_IPC_MEMORY, h->value) == RM_IPC_LAST)
		rm_deferred_release(NULL, RM_DEFER_MEM_FREE, h->value, NULL, NULL);
	rm_session_uncharge(s, h->size);
	rm_ipc_peer_unhold(h->parent);
}

/* Allocated by a launch and not freed since, or not: the driver refuses the latter. */
static void release_graph_memory(struct rm_channel *s, const struct rm_handle *h)
{
	for (int i = 0; i < s->sh->nctx; i++)
		if (s->sh->ctxs[i].default_stream) {
			rm_drv_cuMemFreeAsync(h->value, s->sh->ctxs[i].default_stream);
			break;
		}
	if (h->parent)
		rm_session_uncharge(s, h->size);
}

/* The driver's unmap, destroys and frees below wait for every client's work in the shared
 * context; the session's own work done (rm_session_release_ctx's callers synchronize), they
 * are made on the worker's release thread (deferred.h), so a cuCtxDestroy waits for the
 * client's work only. */
static void release_mapping(struct rm_channel *s, const struct rm_handle *h)
{
	rm_deferred_release_range(NULL, RM_DEFER_UNMAP, h->value, h->size, NULL, NULL);
}

/* Shared (CUDA IPC), the driver's release is the last holder's, deferred until then. */
static void release_physical(struct rm_channel *s, const struct rm_handle *h)
{
	enum rm_ipc_left left = rm_ipc_leave(s, RM_IPC_PHYSICAL, h->value);
	if ((left == RM_IPC_NOT_SHARED && !h->parent) || left == RM_IPC_LAST) /* parent: released by the client */
		rm_drv_cuMemRelease(h->value);
	rm_session_uncharge_physical(s, h->value, h->size);
}

/* After any unmap of it the client asked for, still pending (deferred.h: in order). */
static void release_va_range(struct rm_channel *s, const struct rm_handle *h)
{
	if (h->parent) { /* moved in: parked (the session's mappings in it are gone by now) */
		rm_migrate_park_range(h->value, h->parent);
		return;
	}
	rm_deferred_release_range(NULL, RM_DEFER_ADDRESS_FREE, h->value, h->size, NULL, NULL);
}

/* Memory the client brought when it moved in, or the window's (migrate.h); window memory
 * another client has open (CUDA IPC) becomes the worker's until it closes it. */
static void release_moved_memory(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_ipc_leave(s, RM_IPC_MEMORY, h->value) == RM_IPC_OTHERS_HOLD && !rm_migrate_orphan_moved(s, h))
		return;
	rm_migrate_release_moved(s, h);
}

/* A pool another client holds (CUDA IPC) stays for it. */
static void release_mempool(struct rm_channel *s, const struct rm_handle *h)
{
	if (rm_ipc_leave(s, RM_IPC_POOL, h->value) != RM_IPC_OTHERS_HOLD)
		rm_drv_cuMemPoolDestroy(handle_of(h));
}

/* Arrays are charged like memory; a mipmapped array's level and an array's plane go with it. */
static void release_array(struct rm_channel *s, const struct rm_handle *h)
{
	if (h->parent)
		return;
	rm_deferred_release(NULL, RM_DEFER_ARRAY_DESTROY, h->value, NULL, NULL);
	rm_session_uncharge(s, h->size);
}

static void release_mipmapped_array(struct rm_channel *s, const struct rm_handle *h)
{
	rm_deferred_release(NULL, RM_DEFER_MIPMAP_DESTROY, h->value, NULL, NULL);
	rm_session_uncharge(s, h->size);
}

/* Texture and surface objects go before what they name. */
static void release_texobject(struct rm_channel *s, const struct rm_handle *h)
{
	rm_drv_cuTexObjectDestroy((CUtexObject)h->value);
}

static void release_surfobject(struct rm_channel *s, const struct rm_handle *h)
{
	rm_drv_cuSurfObjectDestroy((CUsurfObject)h->value);
}

/* A module's reference goes with its module; cuTexRefCreate's is destroyed. */
static void release_texref(struct rm_channel *s, const struct rm_handle *h)
{
	if (!h->parent)
		rm_drv_cuTexRefDestroy(handle_of(h));
}

/* Each kind's step and release function, beside its kind in proto/handle_kinds.def. */
static const struct {
	int step;
	release_fn release;
} releases[] = {
#define RM_HANDLE_KIND(name, ctype, step, release) [name] = {step, release},
#include "handle_kinds.def"
#undef RM_HANDLE_KIND
};

#define NKINDS (sizeof(releases) / sizeof(releases[0]))

static int last_step(void)
{
	int last = 0;
	for (size_t k = 0; k < NKINDS; k++)
		last = releases[k].step > last ? releases[k].step : last;
	return last;
}

size_t rm_session_release_all(struct rm_channel *s)
{
	int last = last_step();
	size_t freed = 0;
	CUcontext prev = s->thread_ctx;
	if (s->sh->nctx)
		rm_drv_cuCtxSetCurrent(s->sh->ctxs[0].ctx);
	rm_capture_end_all(s); /* a capturing stream can be neither waited for nor reused */
	rm_nccl_session_gone(s); /* its NCCL kernels may wait for peers that no longer come */
	rm_session_synchronize_all(s);
	rm_peer_release(s, NULL); /* the worker's shared contexts keep access others hold */
	/* A fault of this client's work that no reply reported leaves the worker's contexts
	 * broken for everyone: a sticky error shows on any stream, and faults the worker. */
	for (int i = 0; i < s->sh->nctx; i++)
		if (s->sh->ctxs[i].default_stream) /* a destroyed context's is given back */
			rm_fault_note(s, rm_drv_cuStreamQuery(s->sh->ctxs[i].default_stream));
	for (int step = 1; step <= last; step++)
		for (size_t i = 0; i < s->sh->handles_cap; i++) {
			const struct rm_handle *h = &s->sh->handles[i];
			if (h->kind < NKINDS && releases[h->kind].step == step) {
				releases[h->kind].release(s, h);
				freed++;
			}
		}
	free(s->sh->handles);
	s->sh->handles = NULL;
	s->sh->handles_cap = s->sh->handles_used = s->sh->handles_live = 0;
	s->sh->nstreams = 0; /* given back above */
	s->sh->nranges = 0;
	s->sh->mem_bytes = 0;
	rm_drv_cuCtxSetCurrent(prev);
	rm_session_log(s, RM_LOG_DEBUG, "gave back %zu allocations and address ranges of the session that moved", freed);
	return freed;
}

/* Collects the values of the session's handles of kind (under its lock). */
static int collect_value(const struct rm_handle *h, void *arg)
{
	struct { uint64_t *v; size_t n, cap; } *x = arg;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 64;
		uint64_t *g = realloc(x->v, cap * sizeof(*g));
		if (!g)
			return 1;
		x->v = g, x->cap = cap;
	}
	x->v[x->n++] = h->value;
	return 0;
}

void rm_va_range_give_back(struct rm_channel *s, const struct rm_handle *h)
{
	if (h->parent || !rm_window_holds(h->value, h->size)) { /* kept for the client's return */
		rm_migrate_park_range(h->value, h->parent ? h->parent : h->size);
		return;
	}
	CUresult r = rm_window_address_free(h->value, h->size);
	if (r != CUDA_SUCCESS)
		rm_session_log(s, RM_LOG_WARN, "its address range 0x%llx + %llu not given back: CUresult %d",
			       (unsigned long long)h->value, (unsigned long long)h->size, r);
}

size_t rm_session_release_memory_now(struct rm_channel *s)
{
	static const enum rm_handle_kind kinds[] = {RM_H_MEMORY, RM_H_MOVED_MEMORY, RM_H_VA_RANGE};
	size_t freed = 0;
	CUcontext prev = s->thread_ctx;
	if (s->sh->nctx)
		rm_drv_cuCtxSetCurrent(s->sh->ctxs[0].ctx);
	for (size_t k = 0; k < sizeof(kinds) / sizeof(*kinds); k++) {
		struct { uint64_t *v; size_t n, cap; } x = {0};
		rm_session_each(s, kinds[k], collect_value, &x); /* out of memory: the rest go at the end */
		for (size_t i = 0; i < x.n; i++) {
			struct rm_handle h;
			if (!rm_session_take(s, kinds[k], x.v[i], &h))
				continue;
			if (kinds[k] == RM_H_MOVED_MEMORY) {
				rm_migrate_release_moved(s, &h);
			} else if (kinds[k] == RM_H_VA_RANGE) { /* empty: a session with mappings does not move */
				rm_va_range_give_back(s, &h);
			} else {
				CUresult r = rm_drv_cuMemFree_v2(h.value);
				if (r != CUDA_SUCCESS)
					rm_session_log(s, RM_LOG_WARN, "its memory at 0x%llx not freed: CUresult %d",
						       (unsigned long long)h.value, r);
				else
					rm_migrate_hold_freed(h.value, h.size);
				rm_session_uncharge(s, h.size);
			}
			freed++;
		}
		free(x.v);
	}
	rm_drv_cuCtxSetCurrent(prev);
	rm_session_log(s, RM_LOG_DEBUG, "gave back %zu allocations and address ranges of the session that moved", freed);
	return freed;
}

/* Whether memory the client made in a context goes with it: cuMemAlloc's, not a pool's (as
 * CUDA says) nor managed memory, whose copy the client keeps coherent (frontend/managed.c). */
static int memory_dies_with_ctx(uint64_t p)
{
	unsigned int managed = 0;
	CUmemoryPool pool = NULL;
	if (rm_drv.cuPointerGetAttribute) {
		rm_drv_cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p);
		rm_drv_cuPointerGetAttribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p);
	}
	return !managed && !pool;
}

/* The kinds CUDA destroys with their context; graphs, libraries, pools and virtual memory
 * are the process's. A library's module goes with its library. */
static int dies_with_ctx(const struct rm_handle *h)
{
	switch (h->kind) {
	case RM_H_GRAPH_EXEC:
	case RM_H_EVENT:
	case RM_H_STREAM:
	case RM_H_MEMORY:
	case RM_H_IPC_MEMORY:
		return 1;
	case RM_H_MODULE:
		return !h->parent;
	default:
		return 0;
	}
}

size_t rm_session_release_ctx(struct rm_channel *s, struct rm_session_ctx *c)
{
	uint32_t tag = (uint32_t)(c - s->sh->ctxs) + 1;
	size_t freed = 0;
	for (int step = 1; step <= last_step(); step++) {
		/* Gathered under the lock, released without it, each taken first so that a
		 * handle another thread gives up meanwhile is released once. */
		pthread_mutex_lock(&s->sh->lock);
		size_t n = 0;
		struct rm_handle *list = malloc((s->sh->handles_live + 1) * sizeof(*list));
		for (size_t i = 0; list && i < s->sh->handles_cap; i++) {
			const struct rm_handle *h = &s->sh->handles[i];
			if (h->kind < NKINDS && releases[h->kind].step == step && h->ctx == tag && dies_with_ctx(h))
				list[n++] = *h;
		}
		pthread_mutex_unlock(&s->sh->lock);
		if (!list)
			rm_session_log(s, RM_LOG_ERROR, "out of memory releasing a context's handles: they stay the session's");
		for (size_t i = 0; i < n; i++) {
			struct rm_handle h;
			if (list[i].kind == RM_H_MEMORY && !memory_dies_with_ctx(list[i].value))
				continue;
			if (rm_session_take(s, list[i].kind, list[i].value, &h)) {
				releases[h.kind].release(s, &h);
				freed++;
			}
		}
		free(list);
	}
	return freed;
}
