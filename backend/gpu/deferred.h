/* Releases that would wait for every client's work, made off the caller's thread.
 *
 * Some driver calls wait until the whole context is idle before they release an
 * object (cuModuleUnload, cuLibraryUnload, cuMemFree of managed memory or of another
 * context's, cuArrayDestroy, cuMipmappedArrayDestroy, cuMemFreeHost, cuMemHostUnregister, cuMemUnmap).
 * In the shared context that is every client's work: one client's unload would wait
 * for another's long kernel. So the caller waits for its own work that may use the
 * object (the client's streams, rm_session_synchronize) and hands the release to
 * this module's thread, which makes the driver call in the object's context; the
 * driver then waits there, holding up no client. While nothing is queued there and no
 * stream of the context has work (rm_stream_pool_idle), the call is made at once, as it
 * waits for nothing: the object is gone when the client's call returns, as natively
 * (a kernel launched between the check and the call is waited for). An array destroy and a free
 * of managed memory also hold up every other thread's driver calls while they wait, so the
 * thread makes them only once the context is idle (or after 30 s; at once in a faulted worker,
 * whose contexts answer everything with the fault, fault.h). Only the client's own objects,
 * already forgotten by its session, come here: no other client's work uses them.
 */
#ifndef REMORA_DEFERRED_H
#define REMORA_DEFERRED_H

#include <cuda.h>
#include <stdint.h>

enum rm_deferred_op {
	RM_DEFER_MODULE_UNLOAD,
	RM_DEFER_LIBRARY_UNLOAD,
	RM_DEFER_MEM_FREE,
	RM_DEFER_ARRAY_DESTROY,
	RM_DEFER_MIPMAP_DESTROY,
	RM_DEFER_FREE_HOST,
	RM_DEFER_HOST_UNREGISTER,
	RM_DEFER_UNMAP,        /* a range: rm_deferred_release_range */
	RM_DEFER_ADDRESS_FREE, /* a range, after the unmaps of it asked before */
};

/* Releases object (a handle or pointer) with op in ctx (NULL: the calling thread's
 * current context), then calls then(arg) if given. Without memory for the request,
 * or with no thread, the call is made here and now; its result is only logged. */
void rm_deferred_release(CUcontext ctx, enum rm_deferred_op op, uint64_t object, void (*then)(void *), void *arg);

/* As rm_deferred_release, for a range's op: [ptr, ptr + size). */
void rm_deferred_release_range(CUcontext ctx, enum rm_deferred_op op, uint64_t ptr, uint64_t size,
			       void (*then)(void *), void *arg);

/* Returns once every release asked before is done: before a context is reset. */
void rm_deferred_drain(void);

#endif
