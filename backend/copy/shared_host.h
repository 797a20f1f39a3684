/* Shared pinned memory (docs/hotpath.md, "Shared pinned memory"): a client on this host
 * whose connection passes descriptors (shm) makes its page-locked allocations from sealed
 * memfds and shares them (RM_OP_HOST_SHARE); the daemon maps each, registers it with the
 * driver and records it in the session, and a copy whose host side lies in one goes
 * between that mapping and the GPU with the driver's own DMA: no bytes on the connection,
 * no staging. A session shares at most shared_pinned_limit bytes and RM_MAX_SHARED_REGIONS
 * regions; a share refused is no error to the program (its client copies as before). */
#ifndef REMORA_SHARED_HOST_H
#define REMORA_SHARED_HOST_H

#include <stdint.h>

#include "dispatch.h"

/* One shared region: the client's allocation at addr (len bytes), mapped here at map. */
struct rm_shared_region {
	uint64_t addr, len;
	void *map;
	size_t map_len;
};

/* RM_OP_HOST_SHARE: takes the descriptor passed before the frame, checks it (a memfd sealed
 * against shrinking, its inode the one named, at least len rounded to pages), maps and
 * registers it within the session's bound. A refusal is answered with its CUresult and
 * one log line saying why. */
void rm_handle_host_share(struct rm_channel *s, struct rm_request *rq);
/* RM_OP_HOST_UNSHARE: forgets the region once the session's streams are drained, then
 * unregisters and unmaps it. */
void rm_handle_host_unshare(struct rm_channel *s, struct rm_request *rq);

/* A copy between device memory dptr and n bytes at offset off of the shared region at
 * region, to_device or from it, on the client's stream (stream: its wire value), with the
 * same stream selection and device range checks as a copy of bytes; wait: synchronous,
 * answered once the copy is done; else answered (when not async) once queued. Finishes rq. */
void rm_shared_copy(struct rm_channel *s, struct rm_request *rq, int to_device, uint64_t dptr, uint64_t region,
		    uint64_t off, uint64_t n, uint64_t stream, int wait);

/* Unregisters and unmaps every region the session still shares (its work drained);
 * returns how many, their bytes in *bytes. */
int rm_shared_host_release_all(struct rm_channel *s, uint64_t *bytes);

#endif
