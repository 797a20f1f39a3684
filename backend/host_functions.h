/* Host functions (cuLaunchHostFunc, cuStreamAddCallback) run in the client process, in
 * stream order (docs/protocol.md, "Host functions"). The daemon puts a host function of
 * its own on the client's stream; when the driver runs it, it sends RM_OP_HOST_CALL to the
 * session's callback channel and waits until the client answers RM_OP_HOST_DONE, so that
 * the stream's later work waits for the program's function.
 *
 * A hub per session holds the callback channel and the waiting calls. It is reference
 * counted: a call the driver has not run yet keeps it, and may run after the session is
 * gone. No wait lasts for ever: a closed callback channel (the client went) ends every
 * wait at once, and a call unanswered for peer_timeout is given up, with a line. */
#ifndef REMORA_HOST_FUNCTIONS_H
#define REMORA_HOST_FUNCTIONS_H

#include <stdint.h>

struct rm_session;
struct rm_hostfn_hub;

/* A hub for session s (its identity for log lines), waiting at most timeout_s for an
 * answer; NULL when out of memory (host functions are then refused). */
struct rm_hostfn_hub *rm_hostfn_hub_new(const struct rm_session *s, int timeout_s);
/* The session is gone: every wait ends, no call is sent; drops the session's reference. */
void rm_hostfn_hub_release(struct rm_hostfn_hub *hub);

/* Channel ch asks to be its session's callback channel (RM_OP_HOST_LISTEN): answers it and
 * from then on keeps it covered by heartbeats. 0, or -errno when the frame must close ch
 * (-EBUSY: the session has one already; -EPIPE: the answer could not be sent). */
int rm_hostfn_listen(struct rm_session *ch);
/* The client answered RM_OP_HOST_DONE for call id on callback channel ch. */
void rm_hostfn_done(struct rm_session *ch, uint64_t id);
/* Callback channel ch is closing: waits end, later calls are not sent. */
void rm_hostfn_channel_gone(struct rm_session *ch);

#endif
