/* Liveness of a worker's clients (docs/protocol.md): a client's call that runs long is
 * covered by heartbeats to the client, so that the client can tell a busy daemon from a
 * frozen one; a client silent past peer_timeout is taken for gone by its session's reads
 * (rm_conn_set_liveness). */
#ifndef REMORA_LIVENESS_H
#define REMORA_LIVENESS_H

#include "session.h"

/* Brackets the call (of op) the session's thread runs: heartbeats cover it from its start
 * until its reply begins (rm_liveness_reply_begins) or it ends; a call running
 * RM_LONG_CALL_MS or more is logged once, with its op and session. */
#define RM_LONG_CALL_MS 10000
void rm_liveness_call_begin(struct rm_channel *s, uint32_t op);
void rm_liveness_call_end(struct rm_channel *s);
/* Called with s->send_lock held just before a reply is sent: no heartbeat may follow. */
void rm_liveness_reply_begins(struct rm_channel *s);

/* Sends a frame of op with len bytes of msg (a heartbeat, going-away: none; a notice: its
 * text) beside the session's calls, without waiting on anyone: -EBUSY where its thread is
 * sending (or a reply has begun), -EAGAIN where the connection would not take the frame
 * at once; else what the send gave. */
int rm_liveness_send_aside(struct rm_channel *s, uint32_t op, const void *msg, uint32_t len);

/* Starts the worker's heartbeat thread over the sessions that sessions_each visits. */
int rm_liveness_start(void (*sessions_each)(void (*visit)(struct rm_channel *s)));

#endif
