/* CUDA IPC in a worker (docs/architecture.md, "CUDA IPC"): the objects its clients exported,
 * each with a token (ipc_token.h), and which sessions hold each. The clients of one tenant
 * share the worker, so an importer holds the exporter's very allocation, event or physical
 * allocation: the driver's object is freed once no session holds it. Used concurrently by
 * every session's threads (one lock). */
#ifndef REMORA_IPC_H
#define REMORA_IPC_H

#include <cuda.h>
#include <stdint.h>

#include "ipc_token.h"

struct rm_channel;

/* What a token opens. */
struct rm_ipc_object {
	uint64_t value; /* the base address, the CUevent, the CUmemGenericAllocationHandle */
	uint64_t size;  /* memory: its length */
	int device;     /* the host GPU it is on; -1: any */
	CUcontext ctx;  /* an event: the shared context it was made in (its streams record it) */
	uint64_t pool;  /* memory: the exportable pool it was allocated from (cuMemPoolExportPointer), else 0 */
};

/* Exports s's object (kind, value), which s holds, or finds its export if made already:
 * its token in out. CUDA_ERROR_OUT_OF_MEMORY, or CUDA_SUCCESS. */
CUresult rm_ipc_export(struct rm_channel *s, enum rm_ipc_kind kind, const struct rm_ipc_object *obj,
		       uint8_t out[RM_IPC_TOKEN_SIZE]);
/* Opens the token of len bytes a client sent, as an object of kind, for s: the object in
 * *obj, *again set where s held it already (one more reference). Refused with a line saying
 * why: CUDA_ERROR_INVALID_HANDLE (not a token of this worker's, another tenant's, one whose
 * object is gone), CUDA_ERROR_INVALID_CONTEXT (memory or an event opened by the session
 * that exported it, as natively in the exporting process). */
CUresult rm_ipc_open(struct rm_channel *s, enum rm_ipc_kind kind, const void *token, size_t len,
		     struct rm_ipc_object *obj, int *again);
/* Records event ev of the client's (CU_EVENT_INTERPROCESS) on stream st. An importer's stream
 * of another context than the event's records a proxy event of st's context, made at its
 * first such record, and a helper stream of the event's context waits for the proxy and
 * records the event: every holder's waits and queries of the event see the record. Any
 * other record is the driver's (the exporter's own, or a stream of the event's context). */
CUresult rm_ipc_event_record(struct rm_channel *s, CUevent ev, CUstream st, unsigned int flags);
/* Whether s holds (kind, value) as another session's export: an imported pool, which makes
 * no allocations. */
int rm_ipc_imported(struct rm_channel *s, enum rm_ipc_kind kind, uint64_t value);
/* Frees, for the importer, an allocation of an imported pool (cuMemFree_v2, cuMemFreeAsync on
 * stream st, NULL for cuMemFree): no longer its own, the driver's free the last holder's.
 * CUDA_ERROR_NOT_FOUND where dptr is no such allocation of s's. */
CUresult rm_ipc_free_imported(struct rm_channel *s, CUdeviceptr dptr, CUstream st);
/* Gives up the peer access an opened allocation held (its handle's parent; 0: none). */
void rm_ipc_peer_unhold(uint64_t hold);
/* Gives back one of s's references to (kind, value): how many it still has (0: none left,
 * its hold stays until rm_ipc_leave), or -1 where (kind, value) is not exported. */
int rm_ipc_unref(struct rm_channel *s, enum rm_ipc_kind kind, uint64_t value);

enum rm_ipc_left {
	RM_IPC_NOT_SHARED, /* never exported: the caller frees it as before */
	RM_IPC_OTHERS_HOLD, /* other sessions hold it: the caller forgets it, the driver's object stays */
	RM_IPC_LAST,       /* s was the last holder: the export is gone, and the caller frees it */
};
/* s lets go of (kind, value), whatever references it had. */
enum rm_ipc_left rm_ipc_leave(struct rm_channel *s, enum rm_ipc_kind kind, uint64_t value);

/* How many exports s made or holds (live migration refuses a client that shares memory or
 * events with others: migrate.h). */
int rm_ipc_session_shares(struct rm_channel *s);

#endif
