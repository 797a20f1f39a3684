/* Graph copies with host memory through staging buffers (graph_host.c says how). */
#ifndef REMORA_GRAPH_HOST_H
#define REMORA_GRAPH_HOST_H

#include <cuda.h>
#include <stdint.h>

/* A memcpy node's parameters with each host side replaced by its staging buffer, which
 * owner (a graph or an executable graph) then uses. */
CUresult rm_graph_host_params(const CUDA_MEMCPY3D *in, CUDA_MEMCPY3D *out, uint64_t owner);
/* A getter's parameters with each staging buffer replaced by the host range it stands for. */
void rm_graph_host_unstage(CUDA_MEMCPY3D *p);
/* Every staging buffer from's nodes use is to's too (a clone, a parent graph, an
 * executable graph). */
CUresult rm_graph_host_inherit(uint64_t from, uint64_t to);
/* A copy between device memory and host memory on a capturing stream: 1 with *r set, the
 * copy captured through the range's staging buffer; 0 if stream does not capture. */
int rm_graph_host_capture(int to_host, CUdeviceptr dev, void *host, size_t n, CUstream stream, CUresult *r);
/* Around cuGraphLaunch: host sources go up before, and host destinations are marked
 * pending, so that a host node of the graph that runs before the launch call returns
 * brings them down; after the launch was sent (launched: how that went, returned unless
 * it went well) each destination's event is recorded. */
CUresult rm_graph_host_before_launch(CUgraphExec exec, CUstream stream);
CUresult rm_graph_host_after_launch(CUgraphExec exec, CUstream stream, CUresult launched);
/* After a synchronizing call: host destinations whose launch is complete come down. */
CUresult rm_graph_host_after_sync(void);

/* Whether this thread is bringing host destinations down: its own calls leave other
 * memory's coherence alone. */
int rm_graph_host_draining(void);
/* Whether graphs' host destinations wait to be written back at a synchronization. */
int rm_graph_host_pending(void);
/* Before a graph's host node runs: what the graphs under way wrote of their host
 * destinations so far comes down (the node may read it). */
void rm_graph_host_before_host_node(void);
/* A graph or executable graph destroyed: its staging buffers are no longer its. */
void rm_graph_host_forget(uint64_t owner);
/* Memcpy nodes added with host memory, by graph, for their setters (0: not known). */
CUresult rm_graph_host_node(CUgraphNode node, CUgraph graph);
uint64_t rm_graph_host_graph_of(CUgraphNode node);
/* Whether a copy names host memory on either side. */
int rm_graph_host_names_host(const CUDA_MEMCPY3D *p);

#endif
