/* Copies between the client and the GPU: a copy's bytes come or go on the session's
 * connection and, striped, on its copy links (copy_links.h). Each link moves its pieces
 * through two pinned staging buffers, the network overlapping the DMA: the session's
 * thread link 0's share, each attached link a thread of its own. */
#ifndef REMORA_COPY_H
#define REMORA_COPY_H

#include <cuda.h>
#include <stdint.h>

#include "dispatch.h"

struct rm_copy_profile;

/* A host-to-device copy of n bytes over links links (1: the session's connection
 * alone) in stripe chunks of chunk (common/wire.h; checked here) whose request rq was read: reads every link's share, copying it to dst on
 * stream unless r (the request's checks so far) failed, in which case the bytes are
 * read and dropped; waited: then synchronizes stream (a blocking copy), unless the
 * copy is small (RM_SMALL_HTOD) and from the program's pageable memory: CUDA waits for
 * the stream's earlier work and returns such a copy once its bytes are staged, and so
 * does this, once the driver has taken them (from pageable memory, cuMemcpyHtoDAsync
 * stages them before it returns). Returns the copy's result; sets rq->fatal when the links are out of step (the session must
 * close). Link 0's waits and copies count in prof. */
CUresult rm_copy_in(struct rm_channel *s, struct rm_request *rq, CUresult r, CUstream stream, uint64_t dst,
		    uint64_t n, uint32_t links, uint64_t chunk, int waited, int pageable, struct rm_copy_profile *prof);
/* A device-to-host copy: waits for the stream's earlier work (its error is the answer),
 * replies (or answers an error), then sends every link's share. Any failure after the
 * reply began sets rq->fatal. */
void rm_copy_out(struct rm_channel *s, struct rm_request *rq, CUstream stream, uint64_t src, uint64_t n,
		 uint32_t links, uint64_t chunk, struct rm_copy_profile *prof);

#endif
