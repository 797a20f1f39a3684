/* Graphs owned by nodes, on the client: a conditional node's body graphs (the driver's;
 * the daemon's records say they are the client's, owned by the node). CUDA hands them out
 * as phGraph_out, an array valid for the node's life: here one of the client's, freed
 * with the node's graph. Each body's enclosing graph is kept, so that a host copy added
 * to it is staged for the graph whose executable graphs launch it (graph_host.c). A child
 * graph node's graph (cuGraphChildGraphNodeGetGraph) is not followed: a host copy added
 * to it is staged for it alone. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>

#include "graph_cond.h"
#include "remora.pb-c.h"

struct owned {
	uint64_t outer;   /* the graph whose node owns them */
	CUgraph *graphs;  /* a conditional node's bodies: CUDA's phGraph_out */
	uint32_t n;
	struct owned *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct owned *owned; /* under lock */

static CUresult record(uint64_t outer, CUgraph *graphs, uint32_t n)
{
	struct owned *o = malloc(sizeof(*o));
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*o = (struct owned){.outer = outer, .graphs = graphs, .n = n};
	pthread_mutex_lock(&lock);
	o->next = owned;
	owned = o;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

CUresult rm_graph_add_conditional(CUgraphNode *ph, CUgraph g, const CUgraphNode *deps, size_t n,
				  CUDA_CONDITIONAL_NODE_PARAMS *c)
{
	if (!ph || (n && !deps) || n > RM_MAX_GRAPH_DEPS || !c->size)
		return CUDA_ERROR_INVALID_VALUE;
	if (c->size > RM_MAX_COND_BODIES)
		return rm_unsupported("a conditional node of more than RM_MAX_COND_BODIES bodies");
	Remora__GraphConditionalNode req = REMORA__GRAPH_CONDITIONAL_NODE__INIT;
	req.graph = (uint64_t)(uintptr_t)g;
	req.n_deps = n;
	req.deps = n ? calloc(n, sizeof(*req.deps)) : NULL;
	CUgraph *bodies = calloc(c->size, sizeof(*bodies));
	if ((n && !req.deps) || !bodies) {
		free(req.deps);
		free(bodies);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	for (size_t i = 0; i < n; i++)
		req.deps[i] = (uint64_t)(uintptr_t)deps[i];
	req.handle = c->handle;
	req.type = c->type;
	req.size = c->size;
	req.ctx = (uint64_t)(uintptr_t)c->ctx;
	Remora__GraphConditionalNodeReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphAddNode_v2, &req.base, &remora__graph_conditional_node_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && (!rep || rep->n_bodies != c->size))
		r = rm_rpc_bad_reply("cuGraphAddNode_v2: %zu body graphs for a node of %u", rep ? rep->n_bodies : 0,
				     c->size);
	for (uint32_t i = 0; r == CUDA_SUCCESS && i < c->size; i++)
		bodies[i] = (CUgraph)(uintptr_t)rep->bodies[i];
	if (r == CUDA_SUCCESS)
		r = record(req.graph, bodies, c->size);
	if (r == CUDA_SUCCESS) {
		*ph = (CUgraphNode)(uintptr_t)rep->node;
		c->phGraph_out = bodies;
	} else {
		free(bodies);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	free(req.deps);
	return r;
}

/* The graph whose node owns g, or 0. Caller holds lock. */
static uint64_t outer_of(uint64_t g)
{
	for (struct owned *o = owned; o; o = o->next)
		for (uint32_t i = 0; i < o->n; i++)
			if ((uint64_t)(uintptr_t)o->graphs[i] == g)
				return o->outer;
	return 0;
}

uint64_t rm_graph_cond_root(uint64_t g)
{
	pthread_mutex_lock(&lock);
	for (uint64_t up = owned ? outer_of(g) : 0, depth = 0; up && depth < 64; up = outer_of(g), depth++)
		g = up;
	pthread_mutex_unlock(&lock);
	return g;
}

void rm_graph_cond_forget(uint64_t g)
{
	pthread_mutex_lock(&lock);
	struct owned *gone = NULL;
	/* The records of g's nodes, then of their graphs' nodes, until none is left. */
	for (int found = 1; found;) {
		found = 0;
		for (struct owned **p = &owned; *p;) {
			struct owned *o = *p;
			int dead = o->outer == g;
			for (struct owned *d = gone; d && !dead; d = d->next)
				for (uint32_t i = 0; i < d->n && !dead; i++)
					dead = o->outer == (uint64_t)(uintptr_t)d->graphs[i];
			if (!dead) {
				p = &o->next;
				continue;
			}
			*p = o->next;
			o->next = gone;
			gone = o;
			found = 1;
		}
	}
	pthread_mutex_unlock(&lock);
	while (gone) {
		struct owned *next = gone->next;
		free(gone->graphs);
		free(gone);
		gone = next;
	}
}
