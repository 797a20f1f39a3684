/* What a client sets on a pool stream, put back when the client gives the stream up.
 *
 * A client stream is a driver stream of the worker's pool (stream_pool.h), which serves
 * other clients after it. The attributes a stream carries (cuStreamSetAttribute,
 * cuStreamCopyAttributes: access policy window, synchronization policy, priority, memory
 * sync domain and its map, NVLink scheduling hint) are saved as the pool had them before
 * the first change, and restored when the stream goes back to the pool, so that none
 * reaches the next client. Each taking of a stream also starts a new generation of it,
 * which makes the ids clients see (cuStreamGetId) unique over the worker's life. */
#ifndef REMORA_STREAM_ATTRS_H
#define REMORA_STREAM_ATTRS_H

#include <cuda.h>
#include <stdint.h>

/* Whether attribute a is one a stream carries and this file restores. */
int rm_stream_attrs_known(CUstreamAttrID a);
/* Before st's attribute a is changed: saves its value, once until st is given back. */
CUresult rm_stream_attrs_save(CUstream st, CUstreamAttrID a);
/* st goes back to the pool: restores what was saved, starts its next generation. */
void rm_stream_attrs_given(CUstream st);
/* The id a client sees for st: the driver's, with st's generation in the top bits. */
CUresult rm_stream_attrs_id(CUstream st, unsigned long long *id);

#endif
