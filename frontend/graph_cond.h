/* Graphs owned by nodes, on the client (graph_cond.c says how). */
#ifndef REMORA_GRAPH_COND_H
#define REMORA_GRAPH_COND_H

#include <cuda.h>
#include <stdint.h>

/* cuGraphAddNode(_v2) of a conditional node: c->phGraph_out set to the node's body graphs. */
CUresult rm_graph_add_conditional(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
				  CUDA_CONDITIONAL_NODE_PARAMS *c);
/* The graph that holds graph g through conditional nodes, at any depth (g itself when it is no node's):
 * what a launch of its executable graphs reaches, for the staging of host copies. */
uint64_t rm_graph_cond_root(uint64_t g);
/* Graph g destroyed: the graphs its nodes owned (at any depth) are gone too. */
void rm_graph_cond_forget(uint64_t g);

#endif
