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
/* Keeps stream st of context c, destroyed by the client while it captures, out of the
 * pool until no capture holds it: 1, or 0 when c keeps too many already. */
int rm_capture_retire(struct rm_session_ctx *c, CUstream st);
/* Gives back to the pool c's retired streams that no capture holds any more. */
void rm_capture_settle_retired(struct rm_session_ctx *c);
/* The graph a capture ended with that no one will use (its stream destroyed, its client
 * gone): destroyed, unless the capture was into a graph the client owns
 * (cuStreamBeginCaptureToGraph), which stays the client's. With the session's lock held
 * (locked), the record of a capture's graph is left to the release that follows. */
void rm_capture_drop_graph(struct rm_channel *s, CUgraph g, int locked);
/* Whether a call to the legacy stream of c must fail because a blocking stream of the
 * client captures (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT): that capture is invalidated. */
CUresult rm_capture_check_legacy(struct rm_session_ctx *c);

/* Graph memory (graph_memory.c): dptr, allocated by graph nodes at each launch, becomes the
 * client's, charged (the caller charged it). */
void rm_graph_memory_own(struct rm_channel *s, CUdeviceptr dptr, size_t bytesize);
/* A free outside the graph of graph memory of the client's, on st (NULL: cuMemFree's):
 * the driver's result, or CUDA_ERROR_NOT_FOUND when dptr is no graph memory of the client's. */
CUresult rm_graph_memory_free(struct rm_channel *s, CUdeviceptr dptr, CUstream st);
/* Each of n node handles is one the client owns, of graph g (graph_handlers.c). */
CUresult rm_graph_check_nodes(struct rm_channel *s, CUgraph g, const CUgraphNode *nodes, size_t n);
/* A memset node's rows lie in memory the client owns: height rows of width elements,
 * pitch bytes apart, without overflow. */
CUresult rm_graph_check_memset(struct rm_channel *s, const CUDA_MEMSET_NODE_PARAMS *p);

#endif
