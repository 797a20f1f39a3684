/* Host functions (cuLaunchHostFunc, cuStreamAddCallback) run in the client process, in
 * stream order (docs/protocol.md, "Host functions"). The daemon puts a host function of
 * its own on the client's stream; when the driver runs it, it sends RM_OP_HOST_CALL to the
 * session's callback channel and waits until the client answers RM_OP_HOST_DONE, so that
 * the stream's later work waits for the program's function.
 *
 * A hub per session holds the callback channel and the waiting calls. It is reference
 * counted: a call the driver has not run yet keeps it, and may run after the session is
 * gone. A graph's host node (cuGraphAddHostNode, or cuLaunchHostFunc captured) is a call
 * the hub keeps, sent as RM_OP_HOST_NODE_CALL at every launch, until the hub goes: the
 * session closes the hub, waits for its streams and destroys its graphs, then releases it.
 * No wait lasts for ever: a closed callback channel (the client went) ends every
 * wait at once, and a call unanswered for peer_timeout is given up, with a line. */
#ifndef REMORA_HOST_FUNCTIONS_H
#define REMORA_HOST_FUNCTIONS_H

#include <cuda.h>
#include <stdint.h>

#define RM_MAX_HOST_NODES 65536 /* host node ids a session keeps (distinct functions and data) */

struct rm_channel;
struct rm_hostfn_hub;

/* A hub for session s (its identity for log lines), waiting at most timeout_s for an
 * answer; NULL when out of memory (host functions are then refused). */
struct rm_hostfn_hub *rm_hostfn_hub_new(const struct rm_channel *s, int timeout_s);
/* The session is going: every wait ends, no call is sent from now on. */
void rm_hostfn_hub_close(struct rm_hostfn_hub *hub);
/* The session is gone, its graphs destroyed and streams idle: closes the hub and drops
 * the session's reference (the kept calls go with the hub). */
void rm_hostfn_hub_release(struct rm_hostfn_hub *hub);

/* The driver's function and argument for a host node running the client's host function
 * id at every launch (the same record for every node of that id). CUDA_ERROR_NOT_SUPPORTED
 * without a callback channel; CUDA_ERROR_OUT_OF_MEMORY past RM_MAX_HOST_NODES ids. */
CUresult rm_hostfn_node(struct rm_hostfn_hub *hub, uint64_t id, CUDA_HOST_NODE_PARAMS *out);

/* The driver's function and argument for a user object's destructor: the client's host
 * function id, called once (RM_OP_HOST_CALL) when the driver runs it. forget gives the
 * record back when the user object was not made. */
CUresult rm_hostfn_once(struct rm_hostfn_hub *hub, uint64_t id, CUhostFn *fn, void **data);
void rm_hostfn_forget(void *data);

/* The client's id of the host function that a host node's driver parameters p run
 * (rm_hostfn_node's), or 0 when they are none of the hub's. */
uint64_t rm_hostfn_node_id(struct rm_hostfn_hub *hub, const CUDA_HOST_NODE_PARAMS *p);

/* Channel ch asks to be its session's callback channel (RM_OP_HOST_LISTEN): answers it and
 * from then on keeps it covered by heartbeats. 0, or -errno when the frame must close ch
 * (-EBUSY: the session has one already; -EPIPE: the answer could not be sent). */
int rm_hostfn_listen(struct rm_channel *ch);
/* The client answered RM_OP_HOST_DONE for call id on callback channel ch. */
void rm_hostfn_done(struct rm_channel *ch, uint64_t id);
/* Callback channel ch is closing: waits end, later calls are not sent. */
void rm_hostfn_channel_gone(struct rm_channel *ch);

#endif
