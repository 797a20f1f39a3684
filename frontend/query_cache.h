/* query_cache.h - answers to queries whose result stays fixed, kept in the client.
 *
 * A call annotated `cached` in proto/api.spec asks the daemon once per distinct request (its
 * packed message is the key) and gets later answers here, with no round trip: device
 * attributes, a kernel's or function's attributes, a primary context's state. A call that can
 * change such an answer is annotated `forgets=NAME,...`, and its stub forgets every answer of
 * those calls once it has been sent. Only successful answers are kept. Answers are kept per
 * current context: a kernel's function, for one, is the context's.
 *
 * With narrows=H, a call forgets, of each call with a handle parameter H, only the answers
 * whose request names the same handle (a kernel's attribute set forgets that kernel's).
 *
 * A call annotated `sets=P` sets the value P for the target its other parameters name (a
 * kernel's attribute, say). The client keeps, per target and context, the request that last
 * set it successfully; setting the same value again succeeds here, unsent, and forgets
 * nothing. A target forgotten (its module unloaded) is sent again.
 *
 * What the client makes of answers and reads at every call, a kernel's checked parameter
 * layout (launch.c), is kept here too, as an object under an op and a 64-bit key (not the
 * context: the key names it alone), and forgotten with the op's answers. Objects are read
 * under a shared lock, taken by rm_query_cache_hold or _keep, given back by _release. */
#ifndef REMORA_QUERY_CACHE_H
#define REMORA_QUERY_CACHE_H

#include <protobuf-c/protobuf-c.h>
#include <stdint.h>

#include <cuda.h>

/* As rm_rpc_simple, answered from the cache when the same request was answered before. */
CUresult rm_rpc_cached(uint32_t op, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rep_desc,
		       ProtobufCMessage **rep);

/* A setting call: sent, and *sent 1, unless the same request set the target last (then
 * CUDA_SUCCESS and *sent 0). value points at the request's value field, of size bytes. */
CUresult rm_rpc_setting(uint32_t op, ProtobufCMessage *req, void *value, size_t size, int *sent);

/* Forgets every answer or setting kept for op. */
void rm_query_cache_forget(uint32_t op);
/* Forgets the answers and settings kept for op whose request names value in its varint
 * field number field (a handle: proto/api.spec's narrows=); every one of op's where value
 * is 0, which a request does not carry. */
void rm_query_cache_forget_naming(uint32_t op, uint32_t field, uint64_t value);
/* Forgets every answer and setting kept (a connection given up for a new one). */
void rm_query_cache_clear(void);
/* How many times op's answers were forgotten: an object made of answers asked for before
 * it changed is stale. */
uint64_t rm_query_cache_epoch(uint32_t op);

/* The object kept under (op, key) since op's answers were last forgotten, held for reading
 * until rm_query_cache_release; NULL, holding nothing, when there is none. */
const void *rm_query_cache_hold(uint32_t op, uint64_t key);
/* Keeps obj, made of op's answers asked for when rm_query_cache_epoch(op) was epoch, in place
 * of the object kept under (op, key), and returns it held as rm_query_cache_hold does. Once
 * forgotten or replaced it is freed by free_obj; if op's answers were forgotten since epoch,
 * it serves this caller and no later one. NULL, obj freed, when out of memory. */
const void *rm_query_cache_keep(uint32_t op, uint64_t key, uint64_t epoch, void *obj, void (*free_obj)(void *));
/* Ends the hold of rm_query_cache_hold or _keep. */
void rm_query_cache_release(void);

#endif
