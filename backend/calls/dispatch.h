/* How the daemon serves one request: handlers, their input and their reply. */
#ifndef REMORA_DISPATCH_H
#define REMORA_DISPATCH_H

#include <cuda.h>
#include <protobuf-c/protobuf-c.h>

#include "api_ops.h"
#include "daemon_handlers.h"
#include "driver_table.h"
#include "session.h"
#include "wire.h"

struct rm_request {
	struct rm_frame frame;
	uint8_t *msg;          /* frame.msg_len bytes */
	uint64_t bulk_left;    /* bulk bytes not read yet; the server skips what a handler leaves */
	int replied;
	int fatal;             /* set when the connection must close */
	CUresult result;       /* what it was finished with (accounting) */
	void *reply_mem;       /* what the reply points into, freed once it is sent (a typed body's) */
};

/* A handler reads its message (and bulk, if any), calls the driver and
 * finishes the request exactly once: rm_request_finish or rm_request_reply_bulk. */
typedef void (*rm_op_handler)(struct rm_channel *s, struct rm_request *rq);

extern const rm_op_handler rm_op_handlers[RM_OP_LIMIT];
/* The handler of opcode op, a generated call's or a reserved one's (proto/reserved_ops.def),
 * or NULL; and whether op is one the client sends one-way (async, no reply). Generated. */
rm_op_handler rm_op_handler_of(uint32_t op);
int rm_op_one_way(uint32_t op);

/* Unpacks the request's message; on failure marks the request fatal (protocol error). */
ProtobufCMessage *rm_request_unpack(struct rm_request *rq, const ProtobufCMessageDescriptor *desc);

/* Ends a request with result r and reply message rep (NULL for none). For an
 * async request nothing is sent; a failure is kept for the next syncpoint. */
void rm_request_finish(struct rm_channel *s, struct rm_request *rq, CUresult r, const ProtobufCMessage *rep);
/* An async call of op ended with r, made after its request was finished (a launch of a run,
 * launch_replay.h): a failure is kept for the next syncpoint, as rm_request_finish keeps one. */
void rm_request_async_error(struct rm_channel *s, uint32_t op, CUresult r);

/* Sends a successful reply whose bulk (bulk_len bytes) the handler then sends with rm_request_send_bulk. */
int rm_request_reply_bulk(struct rm_channel *s, struct rm_request *rq, uint64_t bulk_len);
int rm_request_send_bulk(struct rm_channel *s, const void *buf, size_t len);

/* Reads (buf NULL: drops) the next len bytes of the request's bulk: the one place its
 * unread bulk goes down. -EPROTO past its end; a failed read marks the request fatal. */
int rm_request_read_bulk(struct rm_channel *s, struct rm_request *rq, void *buf, size_t len);

/* What a body returns for a use of a call Remora does not support (name says which, a
 * string constant): CUDA_ERROR_NOT_SUPPORTED, logged once per name. */
CUresult rm_unsupported_use(const char *name);

#endif
