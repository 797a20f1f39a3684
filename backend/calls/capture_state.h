/* Stream captures and graphs the client makes, as far as the session's checks need them
 * (capture_state.c, graph_handlers.c). */
#ifndef REMORA_CAPTURE_STATE_H
#define REMORA_CAPTURE_STATE_H

#include <cuda.h>
#include <stddef.h>

struct rm_channel;
struct rm_session_ctx;

/* Whether driver stream st takes part in a stream capture (active or invalidated). */
int rm_capture_active(CUstream st);
/* Ends every capture of the client's streams, destroying what they made (a client that
 * went away mid-capture); the contexts' capture counts drop to 0. */
void rm_capture_end_all(struct rm_channel *s);
/* The graph a capture ended with that no one will use (its stream destroyed, its client
 * gone): destroyed, unless the capture was into a graph the client owns
 * (cuStreamBeginCaptureToGraph), which stays the client's. With the session's lock held
 * (locked), the record of a capture's graph is left to the release that follows. */
void rm_capture_drop_graph(struct rm_channel *s, CUgraph g, int locked);
/* Whether a call to the legacy stream of c must fail because a blocking stream of the
 * client captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT): that capture is invalidated. */
CUresult rm_capture_check_legacy(struct rm_session_ctx *c);

/* Each of n node handles is one the client owns, of graph g (graph_handlers.c). */
CUresult rm_graph_check_nodes(struct rm_channel *s, CUgraph g, const CUgraphNode *nodes, size_t n);
/* A memset node's rows lie in memory the client owns: height rows of width elements,
 * pitch bytes apart, without overflow. */
CUresult rm_graph_check_memset(struct rm_channel *s, const CUDA_MEMSET_NODE_PARAMS *p);

#endif
