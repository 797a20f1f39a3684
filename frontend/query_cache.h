/* query_cache.h - answers to queries whose result stays fixed, kept in the client.
 *
 * A call annotated `cached` in proto/api.spec asks the daemon once per distinct request (its
 * packed message is the key) and gets later answers here, with no round trip: device
 * attributes, a kernel's or function's attributes, a primary context's state. A call that can
 * change such an answer is annotated `forgets=NAME,...`, and its stub forgets every answer of
 * those calls once it has been sent. Only successful answers are kept. */
#ifndef REMORA_QUERY_CACHE_H
#define REMORA_QUERY_CACHE_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#include <cuda.h>

/* As rm_rpc_simple, answered from the cache when the same request was answered before. */
CUresult rm_rpc_cached(uint32_t op, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rep_desc,
		       ProtobufCMessage **rep);

/* Forgets every answer kept for op. */
void rm_query_cache_forget(uint32_t op);

#endif
