/* Peer access between a session's contexts (cuCtxEnablePeerAccess): each client's own, as
 * natively per ordered pair of its contexts, over the worker's shared contexts, whose
 * driver state is enabled once for every client that asked and disabled when none does. */
#ifndef REMORA_PEER_ACCESS_H
#define REMORA_PEER_ACCESS_H

#include <cuda.h>

struct rm_channel;
struct rm_session_ctx;

/* The current context (s->cur) reaching peer's memory: the driver's errors, per client. */
CUresult rm_peer_enable(struct rm_channel *s, struct rm_session_ctx *peer, unsigned int flags);
CUresult rm_peer_disable(struct rm_channel *s, struct rm_session_ctx *peer);
/* Forgets the session's enables from or to c (NULL: all of them), as its destroy or end does. */
void rm_peer_release(struct rm_channel *s, struct rm_session_ctx *c);

/* GPU from's shared context reaching GPU to's memory, held (take) or given up (!take) for
 * another client's allocation opened with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS (ipc_handlers.c),
 * counted with the sessions' enables. */
CUresult rm_peer_hold_gpus(CUdevice from, CUdevice to, int take);

#endif
