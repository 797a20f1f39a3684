/* Copies between the client and the GPU, and the copy links they may be striped over:
 * extra connections of one client that carry the bytes of its large copies beside its
 * session's connection, so that a copy is not bound by what one TCP stream moves (one
 * stream copies on one CPU each side: 4.7 GB/s from a 1 GiB buffer on the H200 host;
 * 4 streams 17 GB/s). Chunk k of a striped copy travels on link k % links
 * (common/wire.h); a copy over one link is one chunk. Each link moves its pieces
 * through two pinned staging buffers, the network overlapping the DMA: the session's
 * thread link 0's share, each attached link a thread of its own. */
#ifndef REMORA_COPY_LINKS_H
#define REMORA_COPY_LINKS_H

#include <cuda.h>
#include <stdint.h>
#include <sys/uio.h>

#include "dispatch.h"

/* Makes conn the session's copy link number index (1.., in order), sending the Attach's
 * answer ok on it once the link is sure to be taken; 0, or -errno with nothing sent
 * (-EPROTO: an index out of order, -EDQUOT/-ENOMEM: past the client's or the worker's
 * host memory) but for -EPIPE (ok was not sent whole). The caller keeps conn on failure. */
int rm_copy_link_attach(struct rm_session *s, struct rm_conn *conn, uint32_t index, const struct iovec *ok);
/* Stops and closes the session's copy links. */
void rm_copy_links_close(struct rm_session *s);

struct rm_copy_profile;

/* A host-to-device copy of n bytes over links links (1: the session's connection
 * alone) whose request rq was read: reads every link's share, copying it to dst on
 * stream unless r (the request's checks so far) failed, in which case the bytes are
 * read and dropped; waited: then synchronizes stream (a blocking copy), unless the
 * copy is small (RM_SMALL_HTOD) and from the program's pageable memory: CUDA waits for
 * the stream's earlier work and returns such a copy once its bytes are staged, and so
 * does this, once the driver has taken them (from pageable memory, cuMemcpyHtoDAsync
 * stages them before it returns). Returns the
 * copy's result; sets rq->fatal when the links are out of step (the session must
 * close). Link 0's waits and copies count in prof. */
CUresult rm_copy_in(struct rm_session *s, struct rm_request *rq, CUresult r, CUstream stream, uint64_t dst,
		    uint64_t n, uint32_t links, int waited, int pageable, struct rm_copy_profile *prof);
/* A device-to-host copy: waits for the stream's earlier work (its error is the answer),
 * replies (or answers an error), then sends every link's share. Any failure after the
 * reply began sets rq->fatal. */
void rm_copy_out(struct rm_session *s, struct rm_request *rq, CUstream stream, uint64_t src, uint64_t n,
		 uint32_t links, struct rm_copy_profile *prof);

#endif
