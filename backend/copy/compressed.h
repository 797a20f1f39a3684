/* Copies whose bytes cross compressed (common/zchunk.h), on the session's connection and
 * never striped: the client asks for it only over a slow link (docs/performance.md). */
#ifndef REMORA_COPY_COMPRESSED_H
#define REMORA_COPY_COMPRESSED_H

#include <cuda.h>
#include <stdint.h>

#include "dispatch.h"
#include "zchunk.h"

/* Copies from the device above this go raw (the daemon holds a copy's bytes). */
#define RM_COMPRESSED_OUT_MAX RM_ZCHUNK_MAX_COPY

/* A host-to-device copy of n bytes whose bulk is chunks: each is checked against what the
 * copy still expects and the bulk left, decoded and copied to dst on stream; r: the
 * request's checks so far (failed: the bulk is dropped). A malformed chunk sets rq->fatal
 * (the session closes) and answers CUDA_ERROR_INVALID_VALUE. waited: the copy is blocking. */
CUresult rm_copy_in_compressed(struct rm_channel *s, struct rm_request *rq, CUresult r, CUstream stream,
			       uint64_t dst, uint64_t n, int waited);
/* A device-to-host copy the client takes compressed: waits for the stream's earlier work,
 * copies the bytes out, and replies with them compressed where they shrink (the sample of
 * the first chunk to RM_ZCHUNK_PAYS, the whole below n) fast enough to beat the copy sent
 * plain at plain_bps (the client's measure, bytes/s; 0: unknown, rm_zchunk_pays_at), else
 * raw. 0, or -1 when the copy is too large to hold here (the caller sends it raw). */
int rm_copy_out_compressed(struct rm_channel *s, struct rm_request *rq, CUstream stream, uint64_t src, uint64_t n,
			   double plain_bps);

#endif
