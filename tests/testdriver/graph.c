/* Stream capture and CUDA graphs.
 *
 * Capture: a stream taking part in a capture points at it (td_stream.capture)
 * and holds the nodes its next op depends on (deps).  td_enqueue hands an op
 * to such a stream to td_capture_take, which makes it a node of the capture's
 * graph instead of running it.  An event recorded on a capturing stream keeps
 * that stream's deps; a stream that waits for it joins the capture (or, if it
 * already takes part, adds them to its deps), so that work forked onto other
 * streams and joined back through events is one graph, as in CUDA.  Ending the
 * capture on another stream than its origin, or with a stream whose last work
 * the origin never waited for, fails as CUDA does.  A synchronize or query of a
 * capturing stream, or a context synchronize while one captures, invalidates
 * the capture (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED); work given to a stream
 * of an invalidated capture gets CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, and so
 * does its end.  Capture modes are accepted and not enforced.
 *
 * Graphs hold nodes (empty, kernel, memset, memcpy, host, event record and
 * wait, child graph), each with its dependencies.  Instantiating copies the
 * graph and orders its nodes topologically; a launch enqueues a copy of each
 * node's op to the stream in that order, one valid serialisation of the graph:
 * an event node records or waits on the stream there, a child graph's nodes
 * go in its own order.  Node handles
 * of a graph name the same node (by index) of its instantiations, for the
 * exec node setters and cuGraphExecUpdate.
 *
 * A conditional node holds its handle and its body graphs (a graph flagged as a body,
 * which cuGraphDestroy refuses: it goes with its node). Its handle is a td_cond, whose
 * address is the handle's value, kept for the life of the process. A launch puts a
 * TD_OP_COND op in the node's place and, first, a store of the default value into each
 * handle of the graph created with CU_GRAPH_COND_ASSIGN_DEFAULT; the op, run by the
 * stream's worker, reads the handle then and runs the body graphs it picks (IF: the
 * first if nonzero, else the second if any; WHILE: the body while nonzero; SWITCH: body
 * n for value n) at once, their nodes in topological order.
 *
 * All of it is guarded by one lock, glock; no stream lock is taken under it.
 */
#include "testdriver.h"

#include <stdlib.h>
#include <string.h>

#define CAPTURE_ENDED 3 /* beside CUstreamCaptureStatus: the capture is over */

#define TD_NODE_ATTRS 32 /* kernel node attribute ids modelled: 0..31 */

struct td_gnode {
	uint32_t magic;
	struct td_graph *graph;
	CUgraphNodeType type;
	struct td_op op;          /* kernel, copy, memset, host: what a launch enqueues */
	CUevent event;            /* an event node's */
	struct td_graph *child;   /* a child graph node's own copy of the child */
	CUDA_MEM_ALLOC_NODE_PARAMS alloc; /* a memory node's (a free node's: dptr) */
	struct td_gnode **deps;
	size_t ndeps;
	size_t index;             /* its place in graph->nodes */
	struct td_cond *cond;     /* a conditional node's handle, type and body graphs */
	CUgraphConditionalNodeType ctype;
	struct td_graph **bodies;
	unsigned nbodies;
	bool disabled;            /* an executable graph's node turned off (cuGraphNodeSetEnabled) */
	CUkernelNodeAttrValue attrs[TD_NODE_ATTRS]; /* a kernel node's attributes set, by id */
	uint32_t attrs_set;       /* bit id: attrs[id] set */
	void *params[TD_MAX_KERNEL_PARAMS]; /* cuGraphKernelNodeGetParams_v2's answer: into op's args */
};

struct td_graph {
	uint32_t magic;
	struct td_gnode **nodes;
	size_t n, cap;
	bool body;                /* a conditional node's: goes with it */
	struct td_uref *urefs;    /* the user objects it holds references to */
	size_t nurefs;
};

/* A user object: its destructor runs, outside glock, when its last reference goes. */
struct td_uobj {
	uint32_t magic;
	unsigned refs;
	void *ptr;
	CUhostFn destroy;
	struct td_uobj *next_dead;
};

struct td_uref {
	struct td_uobj *obj;
	unsigned n;
};

struct td_cond {
	uint32_t magic;
	unsigned value;           /* atomic: kernels set it */
	unsigned dflt;
	unsigned flags;
	const struct td_graph *graph; /* the graph it was created for (compared only) */
	struct td_cond *next;
};

struct td_capture {
	uint64_t id;
	struct td_graph *graph;
	struct td_stream *origin;
	int status;               /* CUstreamCaptureStatus, or CAPTURE_ENDED */
	CUstreamCaptureMode mode;
	bool to_graph;            /* cuStreamBeginCaptureToGraph: the graph is the caller's */
	struct td_capture *next_ended; /* on ended_captures, once ended */
};

struct td_exec {
	uint32_t magic;
	struct td_graph *source;  /* the graph instantiated (its node handles name ours) */
	struct td_graph *graph;   /* a private copy */
	size_t *order;            /* topological order of graph's nodes */
	unsigned long long flags; /* as instantiated */
};

static pthread_mutex_t glock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t capture_ids;
/* Ended captures, kept for the life of the process (events may still name one): listed,
 * so that they stay reachable rather than leaked. Under glock. */
static struct td_capture *ended_captures;
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
static struct td_cond *conds; /* every conditional handle made, under glock */
static struct td_uobj *dead_uobjs; /* user objects whose destructor is due, under glock */

/* Drops n references of o; caller holds glock. */
static void uobj_release_locked(struct td_uobj *o, unsigned n)
{
	o->refs -= n;
	if (!o->refs) {
		o->magic = 0;
		o->next_dead = dead_uobjs;
		dead_uobjs = o;
	}
}

/* Runs the destructors due; called without glock. */
static void reap_uobjs(void)
{
	pthread_mutex_lock(&glock);
	struct td_uobj *o = dead_uobjs;
	dead_uobjs = NULL;
	pthread_mutex_unlock(&glock);
	while (o) {
		struct td_uobj *next = o->next_dead;
		o->destroy(o->ptr);
		free(o);
		o = next;
	}
}

static struct td_graph *graph_from(CUgraph h)
{
	struct td_graph *g = (struct td_graph *)h;
	return g && g->magic == TD_MAGIC_GRAPH ? g : NULL;
}

static struct td_gnode *node_from(CUgraphNode h)
{
	struct td_gnode *n = (struct td_gnode *)h;
	return n && n->magic == TD_MAGIC_NODE ? n : NULL;
}

static struct td_exec *exec_from(CUgraphExec h)
{
	struct td_exec *e = (struct td_exec *)h;
	return e && e->magic == TD_MAGIC_EXEC ? e : NULL;
}

static struct td_graph *graph_new(void)
{
	struct td_graph *g = calloc(1, sizeof *g);
	if (g)
		g->magic = TD_MAGIC_GRAPH;
	return g;
}

static void graph_free(struct td_graph *g)
{
	if (!g)
		return;
	for (size_t i = 0; i < g->n; i++) {
		graph_free(g->nodes[i]->child);
		for (unsigned b = 0; b < g->nodes[i]->nbodies; b++)
			graph_free(g->nodes[i]->bodies[b]);
		free(g->nodes[i]->bodies);
		g->nodes[i]->magic = 0;
		free(g->nodes[i]->deps);
		free(g->nodes[i]);
	}
	free(g->nodes);
	for (size_t i = 0; i < g->nurefs; i++)
		uobj_release_locked(g->urefs[i].obj, g->urefs[i].n);
	free(g->urefs);
	g->magic = 0;
	free(g);
}

/* Caller holds glock; deps are nodes of g (checked by the caller). */
static struct td_gnode *graph_add(struct td_graph *g, CUgraphNodeType type, const struct td_op *op,
				  struct td_gnode *const *deps, size_t ndeps)
{
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 16;
		struct td_gnode **nodes = realloc(g->nodes, cap * sizeof *nodes);
		if (!nodes)
			return NULL;
		g->nodes = nodes;
		g->cap = cap;
	}
	struct td_gnode *n = calloc(1, sizeof *n);
	if (!n || (ndeps && !(n->deps = malloc(ndeps * sizeof *deps)))) {
		free(n);
		return NULL;
	}
	n->magic = TD_MAGIC_NODE;
	n->graph = g;
	n->type = type;
	if (op)
		n->op = *op;
	n->op.next = NULL;
	n->op.stream = NULL;
	if (ndeps)
		memcpy(n->deps, deps, ndeps * sizeof *deps);
	n->ndeps = ndeps;
	n->index = g->n;
	g->nodes[g->n++] = n;
	return n;
}

/* Gives node n of a graph the event and the copy of a child graph that node from has;
 * -1 when out of memory.  Caller holds glock. */
static struct td_graph *graph_clone(const struct td_graph *g);
static int copy_extras(struct td_gnode *n, const struct td_gnode *from)
{
	n->event = from->event;
	n->alloc = from->alloc;
	n->child = NULL;
	n->cond = from->cond;
	memcpy(n->attrs, from->attrs, sizeof n->attrs);
	n->attrs_set = from->attrs_set;
	n->ctype = from->ctype;
	n->bodies = NULL;
	n->nbodies = 0;
	if (from->nbodies && !(n->bodies = calloc(from->nbodies, sizeof *n->bodies)))
		return -1;
	for (; n->nbodies < from->nbodies; n->nbodies++) {
		if (!(n->bodies[n->nbodies] = graph_clone(from->bodies[n->nbodies])))
			return -1;
		n->bodies[n->nbodies]->body = true;
	}
	return from->child && !(n->child = graph_clone(from->child)) ? -1 : 0;
}

/* A copy of g with the same node indices; caller holds glock.  The nodes first, then
 * their dependencies: cuGraphAddDependencies may make a node depend on a later one. */
static struct td_graph *graph_clone(const struct td_graph *g)
{
	struct td_graph *c = graph_new();
	if (c && g->nurefs && !(c->urefs = malloc(g->nurefs * sizeof *c->urefs))) {
		free(c);
		c = NULL;
	}
	for (size_t i = 0; c && i < g->nurefs; i++) { /* the copy holds references of its own */
		c->urefs[c->nurefs++] = g->urefs[i];
		g->urefs[i].obj->refs += g->urefs[i].n;
	}
	for (size_t i = 0; c && i < g->n; i++) {
		const struct td_gnode *n = g->nodes[i];
		struct td_gnode *copy = graph_add(c, n->type, &n->op, NULL, 0);
		if (copy && copy_extras(copy, n) == 0 && (!n->ndeps || (copy->deps = malloc(n->ndeps * sizeof *n->deps))))
			continue;
		graph_free(c);
		c = NULL;
	}
	for (size_t i = 0; c && i < g->n; i++) {
		struct td_gnode *copy = c->nodes[i];
		copy->ndeps = g->nodes[i]->ndeps;
		for (size_t d = 0; d < copy->ndeps; d++)
			copy->deps[d] = c->nodes[g->nodes[i]->deps[d]->index];
	}
	return c;
}

static CUgraphNodeType type_of_op(const struct td_op *op)
{
	switch (op->kind) {
	case TD_OP_KERNEL: return CU_GRAPH_NODE_TYPE_KERNEL;
	case TD_OP_COPY: return CU_GRAPH_NODE_TYPE_MEMCPY;
	case TD_OP_SET: return CU_GRAPH_NODE_TYPE_MEMSET;
	case TD_OP_HOST: return CU_GRAPH_NODE_TYPE_HOST;
	default: return CU_GRAPH_NODE_TYPE_EMPTY;
	}
}

static int set_deps(struct td_stream *s, struct td_gnode *const *deps, size_t n)
{
	struct td_gnode **copy = n ? malloc(n * sizeof *copy) : NULL;
	if (n && !copy)
		return -1;
	if (n)
		memcpy(copy, deps, n * sizeof *copy);
	free(s->deps);
	s->deps = copy;
	s->ndeps = n;
	return 0;
}

static void leave_capture(struct td_stream *s)
{
	free(s->deps);
	s->deps = NULL;
	s->ndeps = 0;
	__atomic_store_n(&s->capture, NULL, __ATOMIC_RELEASE);
}

/* ---- hooks of stream.c ---- */

bool td_capture_take(struct td_stream *s, struct td_op *op)
{
	pthread_mutex_lock(&glock);
	struct td_capture *c = s->capture;
	if (!c) {
		pthread_mutex_unlock(&glock);
		return false;
	}
	if (c->status == CU_STREAM_CAPTURE_STATUS_ACTIVE) {
		struct td_gnode *n = graph_add(c->graph, type_of_op(op), op, s->deps, s->ndeps);
		if (!n || set_deps(s, &n, 1) != 0)
			c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	}
	pthread_mutex_unlock(&glock);
	free(op);
	return true;
}

CUresult td_capture_usable(struct td_stream *s)
{
	pthread_mutex_lock(&glock);
	bool invalid = s->capture && s->capture->status != CU_STREAM_CAPTURE_STATUS_ACTIVE;
	pthread_mutex_unlock(&glock);
	return invalid ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

CUresult td_capture_forbid(struct td_stream *s)
{
	pthread_mutex_lock(&glock);
	bool capturing = s->capture != NULL;
	if (capturing)
		s->capture->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
	pthread_mutex_unlock(&glock);
	return capturing ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult td_capture_forbid_context(struct td_context *ctx)
{
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&td_lock);
	pthread_mutex_lock(&glock);
	for (struct td_stream *s = ctx->streams; s; s = s->next_in_context)
		if (s->capture) {
			s->capture->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
			rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
		}
	pthread_mutex_unlock(&glock);
	pthread_mutex_unlock(&td_lock);
	return rc;
}

void td_capture_event_clear(struct td_event *e)
{
	pthread_mutex_lock(&glock);
	free(e->cap_nodes);
	e->cap_nodes = NULL;
	e->ncap_nodes = 0;
	e->capture = NULL;
	pthread_mutex_unlock(&glock);
}

int td_capture_record(struct td_event *e, struct td_stream *s)
{
	pthread_mutex_lock(&glock);
	int rc = -1;
	if (s->capture) {
		struct td_gnode **nodes = s->ndeps ? malloc(s->ndeps * sizeof *nodes) : NULL;
		if (s->ndeps && !nodes) {
			s->capture->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
		} else {
			if (s->ndeps)
				memcpy(nodes, s->deps, s->ndeps * sizeof *nodes);
			free(e->cap_nodes);
			e->cap_nodes = nodes;
			e->ncap_nodes = s->ndeps;
			e->capture = s->capture;
		}
		rc = 0;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

int td_capture_wait(struct td_stream *s, struct td_event *e, CUresult *rc)
{
	pthread_mutex_lock(&glock);
	struct td_capture *c = e->capture && e->capture->status != CAPTURE_ENDED ? e->capture : NULL;
	int taken = 0;
	*rc = CUDA_SUCCESS;
	if (!c && s->capture) {
		/* An event from outside the capture: CUDA refuses to mix the two. */
		s->capture->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
		*rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
		taken = 1;
	} else if (c && !s->capture) { /* s joins the capture */
		if (s->legacy || set_deps(s, e->cap_nodes, e->ncap_nodes) != 0) {
			c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
			*rc = s->legacy ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			__atomic_store_n(&s->capture, c, __ATOMIC_RELEASE);
		}
		taken = 1;
	} else if (c && s->capture != c) {
		c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
		s->capture->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
		*rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
		taken = 1;
	} else if (c) { /* both in the capture: the union of the two */
		struct td_gnode **u = malloc((s->ndeps + e->ncap_nodes + 1) * sizeof *u);
		size_t n = 0;
		if (!u) {
			c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
			*rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			for (size_t i = 0; i < s->ndeps; i++)
				u[n++] = s->deps[i];
			for (size_t i = 0; i < e->ncap_nodes; i++) {
				size_t k = 0;
				while (k < n && u[k] != e->cap_nodes[i])
					k++;
				if (k == n)
					u[n++] = e->cap_nodes[i];
			}
			free(s->deps);
			s->deps = u;
			s->ndeps = n;
		}
		taken = 1;
	}
	pthread_mutex_unlock(&glock);
	return taken ? 0 : -1;
}

/* ---- capture entry points ---- */

TD_EXPORT CUresult cuStreamBeginCapture_v2(CUstream handle, CUstreamCaptureMode mode)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	if (s->legacy)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	struct td_capture *c = calloc(1, sizeof *c);
	struct td_graph *g = graph_new();
	if (!c || !g) {
		free(c);
		free(g);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&glock);
	if (s->capture) {
		pthread_mutex_unlock(&glock);
		free(c);
		free(g);
		return CUDA_ERROR_ILLEGAL_STATE;
	}
	c->id = ++capture_ids;
	c->graph = g;
	c->origin = s;
	c->mode = mode;
	c->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
	s->deps = NULL;
	s->ndeps = 0;
	__atomic_store_n(&s->capture, c, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&glock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamBeginCapture(CUstream handle)
{
	return cuStreamBeginCapture_v2(handle, CU_STREAM_CAPTURE_MODE_GLOBAL);
}

/* Marks n and its ancestors; caller holds glock. */
static void mark_ancestors(const struct td_gnode *n, bool *seen)
{
	if (seen[n->index])
		return;
	seen[n->index] = true;
	for (size_t i = 0; i < n->ndeps; i++)
		mark_ancestors(n->deps[i], seen);
}

TD_EXPORT CUresult cuStreamEndCapture(CUstream handle, CUgraph *ph)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	CUgraph unused;
	if (!ph)
		ph = &unused; /* cudaStreamEndCapture of a capture into a graph */
	pthread_mutex_lock(&td_lock);
	pthread_mutex_lock(&glock);
	struct td_capture *c = s->capture;
	if (!c || c->origin != s) {
		if (c) /* the capture is invalidated, as the driver does (the origin's end says so) */
			c->status = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
		pthread_mutex_unlock(&glock);
		pthread_mutex_unlock(&td_lock);
		return c ? CUDA_ERROR_STREAM_CAPTURE_UNMATCHED : CUDA_ERROR_ILLEGAL_STATE;
	}
	/* Every stream forked into the capture must have been joined back into s. */
	bool *seen = calloc(c->graph->n + 1, sizeof *seen);
	rc = seen ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; seen && i < s->ndeps; i++)
		mark_ancestors(s->deps[i], seen);
	for (struct td_stream *t = s->ctx->streams; t; t = t->next_in_context) {
		if (t->capture != c || t == s)
			continue;
		for (size_t i = 0; seen && i < t->ndeps; i++)
			if (!seen[t->deps[i]->index])
				rc = CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
		leave_capture(t);
	}
	free(seen);
	leave_capture(s);
	if (rc == CUDA_SUCCESS && c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
	c->status = CAPTURE_ENDED; /* events may still name it: kept, without its graph */
	c->next_ended = ended_captures;
	ended_captures = c;
	if (rc == CUDA_SUCCESS)
		*ph = (CUgraph)c->graph;
	else if (!c->to_graph)
		graph_free(c->graph), *ph = NULL;
	else
		*ph = NULL;
	c->graph = NULL;
	pthread_mutex_unlock(&glock);
	pthread_mutex_unlock(&td_lock);
	return rc;
}

static CUresult capture_info(CUstream handle, CUstreamCaptureStatus *status, cuuint64_t *id, CUgraph *graph,
			     const CUgraphNode **deps, size_t *ndeps)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_capture *c = s->capture;
	*status = c ? (CUstreamCaptureStatus)c->status : CU_STREAM_CAPTURE_STATUS_NONE;
	if (id && c)
		*id = c->id;
	if (graph)
		*graph = c ? (CUgraph)c->graph : NULL;
	if (deps)
		*deps = c ? (const CUgraphNode *)s->deps : NULL;
	if (ndeps)
		*ndeps = c ? s->ndeps : 0;
	pthread_mutex_unlock(&glock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuStreamIsCapturing(CUstream handle, CUstreamCaptureStatus *status)
{
	return capture_info(handle, status, NULL, NULL, NULL, NULL);
}

TD_EXPORT CUresult cuStreamGetCaptureInfo(CUstream handle, CUstreamCaptureStatus *status, cuuint64_t *id)
{
	return capture_info(handle, status, id, NULL, NULL, NULL);
}

TD_EXPORT CUresult cuStreamGetCaptureInfo_v2(CUstream handle, CUstreamCaptureStatus *status, cuuint64_t *id,
					     CUgraph *graph, const CUgraphNode **deps, size_t *ndeps)
{
	return capture_info(handle, status, id, graph, deps, ndeps);
}

TD_EXPORT CUresult cuStreamGetCaptureInfo_v3(CUstream handle, CUstreamCaptureStatus *status, cuuint64_t *id,
					     CUgraph *graph, const CUgraphNode **deps,
					     const CUgraphEdgeData **edges, size_t *ndeps)
{
	if (edges)
		*edges = NULL; /* all edges are default ones */
	return capture_info(handle, status, id, graph, deps, ndeps);
}

TD_EXPORT CUresult cuStreamUpdateCaptureDependencies_v2(CUstream handle, CUgraphNode *deps,
							const CUgraphEdgeData *edges, size_t n, unsigned int flags)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	static const CUgraphEdgeData plain;
	for (size_t i = 0; edges && i < n; i++)
		if (memcmp(&edges[i], &plain, sizeof plain))
			return CUDA_ERROR_NOT_SUPPORTED; /* only default edges are modelled */
	if ((n && !deps) || flags > CU_STREAM_SET_CAPTURE_DEPENDENCIES)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_capture *c = s->capture;
	if (!c || c->status != CU_STREAM_CAPTURE_STATUS_ACTIVE)
		rc = c ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_ERROR_ILLEGAL_STATE;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++)
		if (!node_from(deps[i]) || node_from(deps[i])->graph != c->graph)
			rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		struct td_gnode **u = malloc((s->ndeps + n + 1) * sizeof *u);
		size_t k = 0;
		if (!u) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			if (flags == CU_STREAM_ADD_CAPTURE_DEPENDENCIES)
				for (size_t i = 0; i < s->ndeps; i++)
					u[k++] = s->deps[i];
			for (size_t i = 0; i < n; i++)
				u[k++] = (struct td_gnode *)deps[i];
			free(s->deps);
			s->deps = u;
			s->ndeps = k;
		}
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuStreamUpdateCaptureDependencies(CUstream handle, CUgraphNode *deps, size_t n,
						     unsigned int flags)
{
	return cuStreamUpdateCaptureDependencies_v2(handle, deps, NULL, n, flags);
}

TD_EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
	if (!mode || (unsigned)*mode > CU_STREAM_CAPTURE_MODE_RELAXED)
		return CUDA_ERROR_INVALID_VALUE;
	CUstreamCaptureMode old = thread_mode;
	thread_mode = *mode;
	*mode = old;
	return CUDA_SUCCESS;
}

/* ---- graphs ---- */

TD_EXPORT CUresult cuGraphCreate(CUgraph *ph, unsigned int flags)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_graph *g = graph_new();
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ph = (CUgraph)g;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuGraphDestroy(CUgraph h)
{
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	if (g && g->body)
		g = NULL; /* a body graph goes with its node */
	graph_free(g);
	pthread_mutex_unlock(&glock);
	reap_uobjs();
	return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuGraphClone(CUgraph *ph, CUgraph h)
{
	if (!ph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	struct td_graph *c = g ? graph_clone(g) : NULL;
	pthread_mutex_unlock(&glock);
	if (!g)
		return CUDA_ERROR_INVALID_VALUE;
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*ph = (CUgraph)c;
	return CUDA_SUCCESS;
}

/* Adds a node after checking its graph and dependencies; an event node's event, a child
 * graph node's graph (copied) in extras. */
static CUresult add_node(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps, CUgraphNodeType type,
			 const struct td_op *op, const struct td_gnode *extras)
{
	if (!ph || (ndeps && !deps))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	CUresult rc = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < ndeps; i++) {
		struct td_gnode *d = node_from(deps[i]);
		if (!d || d->graph != g)
			rc = CUDA_ERROR_INVALID_VALUE;
		for (size_t k = 0; rc == CUDA_SUCCESS && k < i; k++)
			if (deps[k] == deps[i])
				rc = CUDA_ERROR_INVALID_VALUE; /* a dependency given twice */
	}
	struct td_gnode *n = NULL;
	if (rc == CUDA_SUCCESS && !(n = graph_add(g, type, op, (struct td_gnode *const *)deps, ndeps)))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS && extras && copy_extras(n, extras) != 0) {
		g->nodes[--g->n] = NULL; /* the node just added, last */
		free(n->deps);
		free(n);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&glock);
	if (rc == CUDA_SUCCESS)
		*ph = (CUgraphNode)n;
	return rc;
}

TD_EXPORT CUresult cuGraphAddEmptyNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps)
{
	return add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_EMPTY, NULL, NULL);
}

TD_EXPORT CUresult cuGraphAddKernelNode_v2(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					   const CUDA_KERNEL_NODE_PARAMS *params)
{
	struct td_op op;
	if (!params)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = td_kernel_node_op(params, &op);
	return rc == CUDA_SUCCESS ? add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_KERNEL, &op, NULL) : rc;
}

static CUresult memset_op(const CUDA_MEMSET_NODE_PARAMS *p, struct td_op *op)
{
	if (!p || (p->elementSize != 1 && p->elementSize != 2 && p->elementSize != 4) || !p->width || !p->height)
		return CUDA_ERROR_INVALID_VALUE;
	size_t row = p->width * p->elementSize;
	if (p->height > 1 && p->pitch != row)
		return CUDA_ERROR_NOT_SUPPORTED; /* the model sets contiguous memory only */
	if (p->dst % p->elementSize || !td_device_range_ok((void *)(uintptr_t)p->dst, row * p->height))
		return CUDA_ERROR_INVALID_VALUE;
	memset(op, 0, sizeof *op);
	op->kind = TD_OP_SET;
	op->u.set.dst = (void *)(uintptr_t)p->dst;
	op->u.set.value = p->value;
	op->u.set.width = p->elementSize;
	op->u.set.count = p->width * p->height;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuGraphAddMemsetNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					const CUDA_MEMSET_NODE_PARAMS *params, CUcontext ctx)
{
	(void)ctx;
	struct td_op op;
	CUresult rc = memset_op(params, &op);
	return rc == CUDA_SUCCESS ? add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMSET, &op, NULL) : rc;
}

TD_EXPORT CUresult cuGraphAddDependencies_v2(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
					     const CUgraphEdgeData *edges, size_t n)
{
	if ((n && (!from || !to)) || edges)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	CUresult rc = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
		struct td_gnode *a = node_from(from[i]), *b = node_from(to[i]);
		if (!a || !b || a->graph != g || b->graph != g || a == b)
			rc = CUDA_ERROR_INVALID_VALUE;
	}
	for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
		struct td_gnode *a = (struct td_gnode *)from[i], *b = (struct td_gnode *)to[i];
		struct td_gnode **deps = realloc(b->deps, (b->ndeps + 1) * sizeof *deps);
		if (!deps) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		b->deps = deps;
		b->deps[b->ndeps++] = a;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphAddDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
	return cuGraphAddDependencies_v2(h, from, to, NULL, n);
}

TD_EXPORT CUresult cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	if (g && nodes) {
		for (size_t i = 0; i < *count; i++)
			nodes[i] = i < g->n ? (CUgraphNode)g->nodes[i] : NULL;
	}
	if (g)
		*count = g->n;
	pthread_mutex_unlock(&glock);
	return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* A clone's nodes are in the original's order (graph_clone). */
TD_EXPORT CUresult cuGraphNodeFindInClone(CUgraphNode *ph, CUgraphNode h, CUgraph clone)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	struct td_graph *c = graph_from(clone);
	CUresult rc = ph && n && c && n->graph != c && n->index < c->n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*ph = (CUgraphNode)c->nodes[n->index];
	pthread_mutex_unlock(&glock);
	return rc;
}

/* ---- memory nodes: the model allocates a node's memory when the node is added, and
 * keeps it (a free node frees nothing); the graph memory attributes count those bytes.
 * A launch makes its allocations live; cuMemFree or cuMemFreeAsync of a live one makes it
 * not live (the backing stays), and of one not live fails, as CUDA's would ---- */

static uint64_t graph_mem_used, graph_mem_high; /* under glock */
static struct graph_alloc {
	CUdeviceptr dptr;
	bool live;
} *graph_allocs;
static size_t ngraph_allocs; /* under glock */

int td_graph_mem_release(CUdeviceptr dptr)
{
	int found = 0;
	pthread_mutex_lock(&glock);
	for (size_t i = 0; i < ngraph_allocs && !found; i++)
		if (graph_allocs[i].dptr == dptr) {
			found = graph_allocs[i].live ? 1 : -1;
			graph_allocs[i].live = false;
		}
	pthread_mutex_unlock(&glock);
	return found;
}

/* Makes the allocations of g's memory nodes live (a launch); caller holds glock. */
static void graph_mem_launched(const struct td_graph *g)
{
	for (size_t n = 0; n < g->n; n++)
		for (size_t i = 0; g->nodes[n]->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC && i < ngraph_allocs; i++)
			if (graph_allocs[i].dptr == g->nodes[n]->alloc.dptr)
				graph_allocs[i].live = true;
}

TD_EXPORT CUresult cuGraphAddMemAllocNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					  CUDA_MEM_ALLOC_NODE_PARAMS *p)
{
	if (!p || !p->bytesize || p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
	    p->poolProps.location.id != 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_gnode extras = {.alloc = *p};
	CUresult rc = cuMemAlloc_v2(&extras.alloc.dptr, p->bytesize);
	extras.alloc.accessDescs = NULL;
	extras.alloc.accessDescCount = 0;
	if (rc == CUDA_SUCCESS)
		rc = add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_MEM_ALLOC, NULL, &extras);
	if (rc != CUDA_SUCCESS) {
		if (extras.alloc.dptr)
			cuMemFree_v2(extras.alloc.dptr);
		return rc;
	}
	p->dptr = extras.alloc.dptr;
	pthread_mutex_lock(&glock);
	struct graph_alloc *grown = realloc(graph_allocs, (ngraph_allocs + 1) * sizeof *grown);
	if (grown) {
		graph_allocs = grown;
		graph_allocs[ngraph_allocs++] = (struct graph_alloc){p->dptr, true};
	}
	graph_mem_used += p->bytesize;
	if (graph_mem_used > graph_mem_high)
		graph_mem_high = graph_mem_used;
	pthread_mutex_unlock(&glock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuGraphAddMemFreeNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					 CUdeviceptr dptr)
{
	if (!td_device_range_ok((void *)(uintptr_t)dptr, 1))
		return CUDA_ERROR_INVALID_VALUE;
	struct td_gnode extras = {.alloc = {.dptr = dptr}};
	return add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_MEM_FREE, NULL, &extras);
}

TD_EXPORT CUresult cuGraphMemAllocNodeGetParams(CUgraphNode h, CUDA_MEM_ALLOC_NODE_PARAMS *out)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && out && n->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*out = n->alloc;
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphMemFreeNodeGetParams(CUgraphNode h, CUdeviceptr *out)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && out && n->type == CU_GRAPH_NODE_TYPE_MEM_FREE ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*out = n->alloc.dptr;
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuDeviceGraphMemTrim(CUdevice dev)
{
	return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

TD_EXPORT CUresult cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!value || (unsigned)attr > CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	int high = attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH || attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH;
	*(cuuint64_t *)value = high ? graph_mem_high : graph_mem_used;
	pthread_mutex_unlock(&glock);
	return CUDA_SUCCESS;
}

/* Only a high watermark, only back to 0 (to what is in use), as CUDA. */
TD_EXPORT CUresult cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr, void *value)
{
	if (dev != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	if (!value || *(cuuint64_t *)value != 0 ||
	    (attr != CU_GRAPH_MEM_ATTR_USED_MEM_HIGH && attr != CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	graph_mem_high = graph_mem_used;
	pthread_mutex_unlock(&glock);
	return CUDA_SUCCESS;
}

/* ---- a graph's structure: roots, dependencies, dependents, edges ---- */

/* Hands out up to *count of the n nodes list gives (CUDA's contract); caller holds glock. */
static void hand_out(struct td_gnode *const *list, size_t n, CUgraphNode *out, CUgraphEdgeData *edges, size_t *count)
{
	for (size_t i = 0; out && i < *count; i++) {
		out[i] = i < n ? (CUgraphNode)list[i] : NULL;
		if (edges)
			memset(&edges[i], 0, sizeof edges[i]);
	}
	*count = n;
}

/* The nodes of g that n depends on (dependents 0) or that depend on it (1). */
static size_t related(struct td_gnode *n, int dependents, struct td_gnode **out)
{
	size_t k = 0;
	if (!dependents) {
		for (size_t i = 0; i < n->ndeps; i++)
			out[k++] = n->deps[i];
		return k;
	}
	for (size_t i = 0; i < n->graph->n; i++)
		for (size_t d = 0; d < n->graph->nodes[i]->ndeps; d++)
			if (n->graph->nodes[i]->deps[d] == n) {
				out[k++] = n->graph->nodes[i];
				break;
			}
	return k;
}

static CUresult node_list(CUgraphNode h, int dependents, CUgraphNode *out, CUgraphEdgeData *edges, size_t *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	struct td_gnode **list = n ? calloc(n->graph->n + 1, sizeof *list) : NULL;
	CUresult rc = !n ? CUDA_ERROR_INVALID_VALUE : !list ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	if (rc == CUDA_SUCCESS)
		hand_out(list, related(n, dependents, list), out, edges, count);
	pthread_mutex_unlock(&glock);
	free(list);
	return rc;
}

TD_EXPORT CUresult cuGraphNodeGetDependencies_v2(CUgraphNode h, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *n)
{
	return node_list(h, 0, deps, edges, n);
}

TD_EXPORT CUresult cuGraphNodeGetDependencies(CUgraphNode h, CUgraphNode *deps, size_t *n)
{
	return node_list(h, 0, deps, NULL, n);
}

TD_EXPORT CUresult cuGraphNodeGetDependentNodes_v2(CUgraphNode h, CUgraphNode *deps, CUgraphEdgeData *edges, size_t *n)
{
	return node_list(h, 1, deps, edges, n);
}

TD_EXPORT CUresult cuGraphNodeGetDependentNodes(CUgraphNode h, CUgraphNode *deps, size_t *n)
{
	return node_list(h, 1, deps, NULL, n);
}

TD_EXPORT CUresult cuGraphGetRootNodes(CUgraph h, CUgraphNode *roots, size_t *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	struct td_gnode **list = g ? calloc(g->n + 1, sizeof *list) : NULL;
	CUresult rc = !g ? CUDA_ERROR_INVALID_VALUE : !list ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
	size_t k = 0;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < g->n; i++)
		if (!g->nodes[i]->ndeps)
			list[k++] = g->nodes[i];
	if (rc == CUDA_SUCCESS)
		hand_out(list, k, roots, NULL, count);
	pthread_mutex_unlock(&glock);
	free(list);
	return rc;
}

/* Edges in node order, each node's dependencies in the order they were added. */
TD_EXPORT CUresult cuGraphGetEdges_v2(CUgraph h, CUgraphNode *from, CUgraphNode *to, CUgraphEdgeData *edges,
				      size_t *count)
{
	if (!count || (!from) != (!to))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	size_t k = 0;
	for (size_t i = 0; g && i < g->n; i++)
		for (size_t d = 0; d < g->nodes[i]->ndeps; d++, k++)
			if (from && k < *count) {
				from[k] = (CUgraphNode)g->nodes[i]->deps[d];
				to[k] = (CUgraphNode)g->nodes[i];
				if (edges)
					memset(&edges[k], 0, sizeof edges[k]);
			}
	for (size_t i = k; from && i < *count; i++)
		from[i] = to[i] = NULL;
	if (g)
		*count = k;
	pthread_mutex_unlock(&glock);
	return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuGraphGetEdges(CUgraph h, CUgraphNode *from, CUgraphNode *to, size_t *count)
{
	return cuGraphGetEdges_v2(h, from, to, NULL, count);
}

TD_EXPORT CUresult cuGraphRemoveDependencies_v2(CUgraph h, const CUgraphNode *from, const CUgraphNode *to,
						const CUgraphEdgeData *edges, size_t n)
{
	if ((n && (!from || !to)) || edges)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	CUresult rc = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < n; i++) {
		struct td_gnode *a = node_from(from[i]), *b = node_from(to[i]);
		size_t d = 0;
		while (a && b && d < b->ndeps && b->deps[d] != a)
			d++;
		if (!a || !b || a->graph != g || b->graph != g || d == b->ndeps)
			rc = CUDA_ERROR_INVALID_VALUE; /* no such edge */
		else
			memmove(&b->deps[d], &b->deps[d + 1], (--b->ndeps - d) * sizeof *b->deps);
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphRemoveDependencies(CUgraph h, const CUgraphNode *from, const CUgraphNode *to, size_t n)
{
	return cuGraphRemoveDependencies_v2(h, from, to, NULL, n);
}

/* The node and every edge to or from it go; the nodes after it move up one. */
TD_EXPORT CUresult cuGraphDestroyNode(CUgraphNode h)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	if (n) {
		struct td_graph *g = n->graph;
		for (size_t i = 0; i < g->n; i++) {
			struct td_gnode *o = g->nodes[i];
			for (size_t d = 0; d < o->ndeps;)
				if (o->deps[d] == n)
					memmove(&o->deps[d], &o->deps[d + 1], (--o->ndeps - d) * sizeof *o->deps);
				else
					d++;
		}
		memmove(&g->nodes[n->index], &g->nodes[n->index + 1], (g->n - n->index - 1) * sizeof *g->nodes);
		g->n--;
		for (size_t i = n->index; i < g->n; i++)
			g->nodes[i]->index = i;
		graph_free(n->child);
		n->magic = 0;
		free(n->deps);
		free(n);
	}
	pthread_mutex_unlock(&glock);
	return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuGraphNodeGetType(CUgraphNode h, CUgraphNodeType *type)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	if (n && type)
		*type = n->type;
	pthread_mutex_unlock(&glock);
	return n && type ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuGraphKernelNodeSetParams_v2(CUgraphNode h, const CUDA_KERNEL_NODE_PARAMS *params)
{
	struct td_op op;
	if (!params)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = td_kernel_node_op(params, &op);
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	if (rc == CUDA_SUCCESS && (!n || n->type != CU_GRAPH_NODE_TYPE_KERNEL))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		n->op = op;
	pthread_mutex_unlock(&glock);
	return rc;
}

/* ---- memcpy, host, event and child graph nodes ---- */

static struct td_gnode *exec_node(struct td_exec *e, CUgraphNode h);

static CUresult copy_op(const CUDA_MEMCPY3D *p, struct td_op *op)
{
	if (!p || !p->WidthInBytes || !p->Height || !p->Depth)
		return CUDA_ERROR_INVALID_VALUE;
	if (p->Height > 1 || p->Depth > 1 || p->srcXInBytes || p->dstXInBytes || p->srcY || p->dstY || p->srcZ ||
	    p->dstZ)
		return CUDA_ERROR_NOT_SUPPORTED; /* the model copies one contiguous range */
	bool src_dev = p->srcMemoryType == CU_MEMORYTYPE_DEVICE || p->srcMemoryType == CU_MEMORYTYPE_UNIFIED;
	bool dst_dev = p->dstMemoryType == CU_MEMORYTYPE_DEVICE || p->dstMemoryType == CU_MEMORYTYPE_UNIFIED;
	const void *src = src_dev ? (const void *)(uintptr_t)p->srcDevice : p->srcHost;
	void *dst = dst_dev ? (void *)(uintptr_t)p->dstDevice : p->dstHost;
	if ((!src_dev && p->srcMemoryType != CU_MEMORYTYPE_HOST) || (!dst_dev && p->dstMemoryType != CU_MEMORYTYPE_HOST))
		return CUDA_ERROR_NOT_SUPPORTED; /* arrays */
	if (!src || !dst || (src_dev && !td_device_range_ok(src, p->WidthInBytes)) ||
	    (dst_dev && !td_device_range_ok(dst, p->WidthInBytes)))
		return CUDA_ERROR_INVALID_VALUE;
	memset(op, 0, sizeof *op);
	op->kind = TD_OP_COPY;
	op->u.copy.dst = dst;
	op->u.copy.src = src;
	op->u.copy.bytes = p->WidthInBytes;
	op->u.copy.src_host = !src_dev;
	op->u.copy.dst_host = !dst_dev;
	return CUDA_SUCCESS;
}

static CUresult host_op(const CUDA_HOST_NODE_PARAMS *p, struct td_op *op)
{
	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	memset(op, 0, sizeof *op);
	op->kind = TD_OP_HOST;
	op->u.host.fn = p->fn;
	op->u.host.data = p->userData;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuGraphAddMemcpyNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					const CUDA_MEMCPY3D *params, CUcontext ctx)
{
	(void)ctx;
	struct td_op op;
	CUresult rc = copy_op(params, &op);
	return rc == CUDA_SUCCESS ? add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_MEMCPY, &op, NULL) : rc;
}

/* The model sets contiguous memory only: one row. */
TD_EXPORT CUresult cuGraphMemsetNodeGetParams(CUgraphNode h, CUDA_MEMSET_NODE_PARAMS *params)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && params && n->type == CU_GRAPH_NODE_TYPE_MEMSET ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		memset(params, 0, sizeof *params);
		params->dst = (CUdeviceptr)(uintptr_t)n->op.u.set.dst;
		params->value = n->op.u.set.value;
		params->elementSize = n->op.u.set.width;
		params->width = n->op.u.set.count;
		params->height = 1;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

/* The model keeps one contiguous range, and which sides are host memory. */
TD_EXPORT CUresult cuGraphMemcpyNodeGetParams(CUgraphNode h, CUDA_MEMCPY3D *params)
{
	if (!params)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && n->type == CU_GRAPH_NODE_TYPE_MEMCPY ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		const struct td_op *op = &n->op;
		memset(params, 0, sizeof *params);
		params->WidthInBytes = params->srcPitch = params->dstPitch = op->u.copy.bytes;
		params->Height = params->Depth = params->srcHeight = params->dstHeight = 1;
		if (!op->u.copy.src_host)
			params->srcMemoryType = CU_MEMORYTYPE_DEVICE, params->srcDevice = (CUdeviceptr)(uintptr_t)op->u.copy.src;
		else
			params->srcMemoryType = CU_MEMORYTYPE_HOST, params->srcHost = op->u.copy.src;
		if (!op->u.copy.dst_host)
			params->dstMemoryType = CU_MEMORYTYPE_DEVICE, params->dstDevice = (CUdeviceptr)(uintptr_t)op->u.copy.dst;
		else
			params->dstMemoryType = CU_MEMORYTYPE_HOST, params->dstHost = op->u.copy.dst;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphAddHostNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
				      const CUDA_HOST_NODE_PARAMS *params)
{
	struct td_op op;
	CUresult rc = host_op(params, &op);
	return rc == CUDA_SUCCESS ? add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_HOST, &op, NULL) : rc;
}

static CUresult add_event_node(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
			       CUgraphNodeType type, CUevent event)
{
	struct td_event *e = (struct td_event *)event;
	if (!e || e->magic != TD_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	struct td_gnode extras = {.event = event};
	return add_node(ph, h, deps, ndeps, type, NULL, &extras);
}

TD_EXPORT CUresult cuGraphAddEventRecordNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					     CUevent event)
{
	return add_event_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event);
}

TD_EXPORT CUresult cuGraphAddEventWaitNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					   CUevent event)
{
	return add_event_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event);
}

TD_EXPORT CUresult cuGraphAddChildGraphNode(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
					    CUgraph child)
{
	pthread_mutex_lock(&glock);
	struct td_graph *c = graph_from(child);
	pthread_mutex_unlock(&glock);
	if (!c || child == h)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_gnode extras = {.child = c};
	return add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_GRAPH, NULL, &extras);
}

/* Sets node n's op or event when it is of type; caller holds glock. */
static CUresult set_node(struct td_gnode *n, CUgraphNodeType type, const struct td_op *op, CUevent event)
{
	if (!n || n->type != type)
		return CUDA_ERROR_INVALID_VALUE;
	if (op)
		n->op = *op;
	else
		n->event = event;
	return CUDA_SUCCESS;
}

/* A graph node's setter (exec NULL) or an executable graph's (exec's node for h). */
static CUresult set_params(CUgraphExec exec, CUgraphNode h, CUgraphNodeType type, CUresult made,
			   const struct td_op *op, CUevent event)
{
	if (made != CUDA_SUCCESS)
		return made;
	if (!op && (!event || ((struct td_event *)event)->magic != TD_MAGIC_EVENT))
		return CUDA_ERROR_INVALID_HANDLE;
	pthread_mutex_lock(&glock);
	struct td_gnode *n = exec ? exec_node(exec_from(exec), h) : node_from(h);
	CUresult rc = set_node(n, type, op, event);
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphMemcpyNodeSetParams(CUgraphNode h, const CUDA_MEMCPY3D *params)
{
	struct td_op op;
	return set_params(NULL, h, CU_GRAPH_NODE_TYPE_MEMCPY, copy_op(params, &op), &op, NULL);
}

TD_EXPORT CUresult cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode h, const CUDA_MEMCPY3D *params,
						  CUcontext ctx)
{
	(void)ctx;
	struct td_op op;
	return set_params(e, h, CU_GRAPH_NODE_TYPE_MEMCPY, copy_op(params, &op), &op, NULL);
}

TD_EXPORT CUresult cuGraphMemsetNodeSetParams(CUgraphNode h, const CUDA_MEMSET_NODE_PARAMS *params)
{
	struct td_op op;
	return set_params(NULL, h, CU_GRAPH_NODE_TYPE_MEMSET, memset_op(params, &op), &op, NULL);
}

TD_EXPORT CUresult cuGraphHostNodeSetParams(CUgraphNode h, const CUDA_HOST_NODE_PARAMS *params)
{
	struct td_op op;
	return set_params(NULL, h, CU_GRAPH_NODE_TYPE_HOST, host_op(params, &op), &op, NULL);
}

TD_EXPORT CUresult cuGraphExecHostNodeSetParams(CUgraphExec e, CUgraphNode h, const CUDA_HOST_NODE_PARAMS *params)
{
	struct td_op op;
	return set_params(e, h, CU_GRAPH_NODE_TYPE_HOST, host_op(params, &op), &op, NULL);
}

TD_EXPORT CUresult cuGraphEventRecordNodeSetEvent(CUgraphNode h, CUevent event)
{
	return set_params(NULL, h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, CUDA_SUCCESS, NULL, event);
}

TD_EXPORT CUresult cuGraphEventWaitNodeSetEvent(CUgraphNode h, CUevent event)
{
	return set_params(NULL, h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, CUDA_SUCCESS, NULL, event);
}

TD_EXPORT CUresult cuGraphExecEventRecordNodeSetEvent(CUgraphExec e, CUgraphNode h, CUevent event)
{
	return set_params(e, h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, CUDA_SUCCESS, NULL, event);
}

TD_EXPORT CUresult cuGraphExecEventWaitNodeSetEvent(CUgraphExec e, CUgraphNode h, CUevent event)
{
	return set_params(e, h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, CUDA_SUCCESS, NULL, event);
}

/* The exec's child graph node takes a copy of child, which must have its topology (as
 * cuGraphExecUpdate asks): checked here by node count and types only. */
TD_EXPORT CUresult cuGraphExecChildGraphNodeSetParams(CUgraphExec e, CUgraphNode h, CUgraph child)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = exec_node(exec_from(e), h);
	struct td_graph *c = graph_from(child), *copy = NULL;
	CUresult rc = n && c && n->type == CU_GRAPH_NODE_TYPE_GRAPH && c->n == n->child->n ? CUDA_SUCCESS
											: CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < c->n; i++)
		if (c->nodes[i]->type != n->child->nodes[i]->type)
			rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && !(copy = graph_clone(c)))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS) {
		graph_free(n->child);
		n->child = copy;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

/* ---- executable graphs ---- */

/* Kahn's order of g's nodes into order; -1 for a cycle.  Caller holds glock. */
static int topological(const struct td_graph *g, size_t *order)
{
	size_t *pending = calloc(g->n + 1, sizeof *pending), done = 0;
	if (!pending)
		return -1;
	for (size_t i = 0; i < g->n; i++)
		pending[i] = g->nodes[i]->ndeps;
	bool *placed = calloc(g->n + 1, sizeof *placed);
	while (placed && done < g->n) {
		size_t before = done;
		for (size_t i = 0; i < g->n; i++) {
			if (placed[i] || pending[i])
				continue;
			placed[i] = true;
			order[done++] = i;
			for (size_t k = 0; k < g->n; k++)
				for (size_t d = 0; d < g->nodes[k]->ndeps; d++)
					if (g->nodes[k]->deps[d]->index == i)
						pending[k]--;
		}
		if (done == before)
			break;
	}
	int ok = placed && done == g->n;
	free(placed);
	free(pending);
	return ok ? 0 : -1;
}

static CUresult instantiate(CUgraphExec *pe, CUgraph h, unsigned long long flags)
{
	const unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
					 CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
					 CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
	if (!pe || (flags & ~known))
		return CUDA_ERROR_INVALID_VALUE;
	struct td_exec *e = calloc(1, sizeof *e);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	CUresult rc = g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && (!(e->graph = graph_clone(g)) || !(e->order = malloc((g->n + 1) * sizeof(size_t)))))
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS && topological(e->graph, e->order) != 0)
		rc = CUDA_ERROR_INVALID_VALUE; /* a cycle */
	e->source = g;
	e->flags = flags;
	pthread_mutex_unlock(&glock);
	if (rc != CUDA_SUCCESS) {
		graph_free(e->graph);
		free(e->order);
		free(e);
		return rc;
	}
	e->magic = TD_MAGIC_EXEC;
	*pe = (CUgraphExec)e;
	return CUDA_SUCCESS;
}

/* As the driver (580, measured): the upload flag needs the stream only WithParams gives. */
TD_EXPORT CUresult cuGraphInstantiateWithFlags(CUgraphExec *pe, CUgraph h, unsigned long long flags)
{
	if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD)
		return CUDA_ERROR_INVALID_VALUE;
	return instantiate(pe, h, flags);
}

TD_EXPORT CUresult cuGraphInstantiateWithParams(CUgraphExec *pe, CUgraph h, CUDA_GRAPH_INSTANTIATE_PARAMS *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = instantiate(pe, h, p->flags);
	p->hErrNode_out = NULL;
	p->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
	return rc;
}

TD_EXPORT CUresult cuGraphExecDestroy(CUgraphExec h)
{
	pthread_mutex_lock(&glock);
	struct td_exec *e = exec_from(h);
	if (e) {
		e->magic = 0;
		graph_free(e->graph);
		free(e->order);
		free(e);
	}
	pthread_mutex_unlock(&glock);
	reap_uobjs();
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuGraphUpload(CUgraphExec h, CUstream stream)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&glock);
	rc = exec_from(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&glock);
	return rc;
}

/* What a launch does for one node, in order: enqueue op, or record or wait on event. */
struct step {
	struct td_op *op;
	CUgraphNodeType type;
	CUevent event;
};

struct steps {
	struct step *v;
	size_t n, cap;
};

/* Appends g's nodes in order (a child graph's own nodes in their topological order)
 * to out; caller holds glock.  CUDA_ERROR_OUT_OF_MEMORY, or CUDA_ERROR_INVALID_VALUE
 * for a child graph with a cycle. */
static CUresult collect(const struct td_graph *g, const size_t *order, struct steps *out)
{
	CUresult rc = CUDA_SUCCESS;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < g->n; i++) {
		const struct td_gnode *node = g->nodes[order[i]];
		if (node->type == CU_GRAPH_NODE_TYPE_EMPTY || node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
		    node->type == CU_GRAPH_NODE_TYPE_MEM_FREE || node->disabled)
			continue; /* the model's graph memory is allocated with its node */
		if (node->type == CU_GRAPH_NODE_TYPE_GRAPH) {
			size_t *sub = malloc((node->child->n + 1) * sizeof *sub);
			rc = !sub ? CUDA_ERROR_OUT_OF_MEMORY
				  : topological(node->child, sub) != 0 ? CUDA_ERROR_INVALID_VALUE
								       : collect(node->child, sub, out);
			free(sub);
			continue;
		}
		if (out->n == out->cap) {
			size_t cap = out->cap ? out->cap * 2 : 16;
			struct step *v = realloc(out->v, cap * sizeof *v);
			if (!v) {
				rc = CUDA_ERROR_OUT_OF_MEMORY;
				break;
			}
			out->v = v;
			out->cap = cap;
		}
		struct step *st = &out->v[out->n++];
		*st = (struct step){.type = node->type, .event = node->event};
		if (node->type != CU_GRAPH_NODE_TYPE_EVENT_RECORD && node->type != CU_GRAPH_NODE_TYPE_WAIT_EVENT) {
			if ((st->op = malloc(sizeof *st->op)))
				*st->op = node->op;
			else
				rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
		if (st->op && node->type == CU_GRAPH_NODE_TYPE_CONDITIONAL) {
			memset(st->op, 0, sizeof *st->op);
			st->op->kind = TD_OP_COND;
			st->op->u.cond.node = node;
		}
	}
	return rc;
}

/* Enqueues the exec graph's ops in topological order: launches, copies, sets and host
 * functions run as they would on the stream one after another, event nodes record and
 * wait there. */
TD_EXPORT CUresult cuGraphLaunch(CUgraphExec h, CUstream stream)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (s->capture)
		return CUDA_ERROR_NOT_SUPPORTED; /* a graph launched into a capture: not modelled */
	struct steps steps = {0};
	pthread_mutex_lock(&glock);
	struct td_exec *e = exec_from(h);
	rc = e ? collect(e->graph, e->order, &steps) : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		graph_mem_launched(e->graph);
	/* Handles assigned their default at each launch: stores before the graph's work,
	 * enqueued once glock is released. */
	struct td_op *resets = NULL;
	for (struct td_cond *c = conds; rc == CUDA_SUCCESS && c; c = c->next) {
		struct td_op *op;
		if (c->graph != e->source || !(c->flags & CU_GRAPH_COND_ASSIGN_DEFAULT))
			continue;
		if (!(op = td_op_new(TD_OP_WRITE32))) {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		op->u.write32.dst = &c->value;
		op->u.write32.value = c->dflt;
		op->next = resets;
		resets = op;
	}
	pthread_mutex_unlock(&glock);
	while (resets) {
		struct td_op *op = resets;
		resets = op->next;
		if (rc == CUDA_SUCCESS)
			td_enqueue(s, op);
		else
			free(op);
	}
	for (size_t i = 0; i < steps.n; i++) {
		struct step *st = &steps.v[i];
		if (rc != CUDA_SUCCESS)
			free(st->op);
		else if (st->op)
			td_enqueue(s, st->op);
		else if (st->type == CU_GRAPH_NODE_TYPE_EVENT_RECORD)
			rc = cuEventRecordWithFlags(st->event, stream, 0);
		else
			rc = cuStreamWaitEvent(stream, st->event, 0);
	}
	free(steps.v);
	return rc;
}

/* The exec's node for node handle h of the graph it was made from; caller holds glock. */
static struct td_gnode *exec_node(struct td_exec *e, CUgraphNode h)
{
	struct td_gnode *n = node_from(h);
	return e && n && n->graph == e->source && n->index < e->graph->n ? e->graph->nodes[n->index] : NULL;
}

TD_EXPORT CUresult cuGraphExecKernelNodeSetParams_v2(CUgraphExec h, CUgraphNode node,
						     const CUDA_KERNEL_NODE_PARAMS *params)
{
	struct td_op op;
	if (!params)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = td_kernel_node_op(params, &op);
	pthread_mutex_lock(&glock);
	struct td_gnode *n = exec_node(exec_from(h), node);
	if (rc == CUDA_SUCCESS && (!n || n->type != CU_GRAPH_NODE_TYPE_KERNEL))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		n->op = op;
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphExecMemsetNodeSetParams(CUgraphExec h, CUgraphNode node,
						  const CUDA_MEMSET_NODE_PARAMS *params, CUcontext ctx)
{
	(void)ctx;
	struct td_op op;
	CUresult rc = memset_op(params, &op);
	pthread_mutex_lock(&glock);
	struct td_gnode *n = exec_node(exec_from(h), node);
	if (rc == CUDA_SUCCESS && (!n || n->type != CU_GRAPH_NODE_TYPE_MEMSET))
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		n->op = op;
	pthread_mutex_unlock(&glock);
	return rc;
}

/* Takes g's parameters into the exec when g has its topology: the same nodes, of the
 * same types, with the same dependencies. */
TD_EXPORT CUresult cuGraphExecUpdate_v2(CUgraphExec h, CUgraph hg, CUgraphExecUpdateResultInfo *info)
{
	if (!info)
		return CUDA_ERROR_INVALID_VALUE;
	memset(info, 0, sizeof *info);
	pthread_mutex_lock(&glock);
	struct td_exec *e = exec_from(h);
	struct td_graph *g = graph_from(hg);
	CUresult rc = e && g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	CUgraphExecUpdateResult why = CU_GRAPH_EXEC_UPDATE_SUCCESS;
	if (rc == CUDA_SUCCESS && g->n != e->graph->n)
		why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
	for (size_t i = 0; rc == CUDA_SUCCESS && why == CU_GRAPH_EXEC_UPDATE_SUCCESS && i < g->n; i++) {
		const struct td_gnode *a = g->nodes[i], *b = e->graph->nodes[i];
		if (a->type != b->type)
			why = CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED;
		else if (a->ndeps != b->ndeps)
			why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
		for (size_t d = 0; why == CU_GRAPH_EXEC_UPDATE_SUCCESS && d < a->ndeps; d++)
			if (a->deps[d]->index != b->deps[d]->index)
				why = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
		if (why != CU_GRAPH_EXEC_UPDATE_SUCCESS)
			info->errorNode = (CUgraphNode)a;
	}
	for (size_t i = 0; rc == CUDA_SUCCESS && why == CU_GRAPH_EXEC_UPDATE_SUCCESS && i < g->n; i++) {
		struct td_gnode *to = e->graph->nodes[i];
		struct td_graph *child = to->child;
		to->op = g->nodes[i]->op;
		if (copy_extras(to, g->nodes[i]) != 0) {
			to->child = child;
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		} else {
			graph_free(child);
		}
	}
	if (rc == CUDA_SUCCESS && why != CU_GRAPH_EXEC_UPDATE_SUCCESS)
		rc = CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
	info->result = why;
	pthread_mutex_unlock(&glock);
	return rc;
}

/* ---- conditional nodes ---- */

static struct td_cond *cond_from(uint64_t handle)
{
	for (struct td_cond *c = conds; c; c = c->next)
		if ((uint64_t)(uintptr_t)c == handle)
			return c;
	return NULL;
}

TD_EXPORT CUresult cuGraphConditionalHandleCreate(CUgraphConditionalHandle *out, CUgraph h, CUcontext ctx,
						  unsigned int dflt, unsigned int flags)
{
	(void)ctx;
	if (!out || flags > CU_GRAPH_COND_ASSIGN_DEFAULT)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_cond *c = calloc(1, sizeof *c);
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	if (g) {
		*c = (struct td_cond){.magic = TD_MAGIC_COND, .value = dflt, .dflt = dflt, .flags = flags, .graph = g,
				      .next = conds};
		conds = c;
	}
	pthread_mutex_unlock(&glock);
	if (!g) {
		free(c);
		return CUDA_ERROR_INVALID_VALUE;
	}
	*out = (CUgraphConditionalHandle)(uintptr_t)c;
	return CUDA_SUCCESS;
}

/* cuGraphAddNode(_v2) of a conditional node (graph_generic.c): size new body graphs. */
CUresult td_graph_add_conditional(CUgraphNode *ph, CUgraph h, const CUgraphNode *deps, size_t ndeps,
				  CUDA_CONDITIONAL_NODE_PARAMS *p)
{
	unsigned most = p->type == CU_GRAPH_COND_TYPE_IF ? 2 : p->type == CU_GRAPH_COND_TYPE_WHILE ? 1
			: p->type == CU_GRAPH_COND_TYPE_SWITCH ? 1u << 16 : 0;
	pthread_mutex_lock(&glock);
	struct td_cond *c = cond_from(p->handle);
	pthread_mutex_unlock(&glock);
	if (!c || !p->size || p->size > most)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_graph **bodies = calloc(p->size, sizeof *bodies);
	CUresult rc = bodies ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	for (unsigned i = 0; rc == CUDA_SUCCESS && i < p->size; i++)
		if (!(bodies[i] = graph_new()))
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else
			bodies[i]->body = true;
	if (rc == CUDA_SUCCESS)
		rc = add_node(ph, h, deps, ndeps, CU_GRAPH_NODE_TYPE_CONDITIONAL, NULL, NULL);
	if (rc != CUDA_SUCCESS) {
		for (unsigned i = 0; bodies && i < p->size; i++)
			graph_free(bodies[i]);
		free(bodies);
		return rc;
	}
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(*ph);
	n->cond = c;
	n->ctype = p->type;
	n->bodies = bodies;
	n->nbodies = p->size;
	pthread_mutex_unlock(&glock);
	p->phGraph_out = (CUgraph *)bodies;
	return CUDA_SUCCESS;
}

bool td_graph_set_conditional(uint64_t handle, unsigned value)
{
	pthread_mutex_lock(&glock);
	struct td_cond *c = cond_from(handle);
	pthread_mutex_unlock(&glock);
	if (c)
		__atomic_store_n(&c->value, value, __ATOMIC_RELEASE);
	return c != NULL;
}

/* Runs g's nodes now, in topological order, on the calling stream worker. */
static void run_graph_now(const struct td_graph *g)
{
	size_t *order = malloc((g->n + 1) * sizeof *order);
	if (!order || topological(g, order) != 0) {
		free(order);
		td_fault(CUDA_ERROR_INVALID_VALUE);
		return;
	}
	for (size_t i = 0; i < g->n && td_sticky_error() == CUDA_SUCCESS; i++) {
		const struct td_gnode *n = g->nodes[order[i]];
		struct td_op op = n->op;
		switch (n->type) {
		case CU_GRAPH_NODE_TYPE_KERNEL:
		case CU_GRAPH_NODE_TYPE_MEMCPY:
		case CU_GRAPH_NODE_TYPE_MEMSET:
			td_run_op_now(&op);
			break;
		case CU_GRAPH_NODE_TYPE_CONDITIONAL:
			td_graph_run_conditional(n);
			break;
		case CU_GRAPH_NODE_TYPE_GRAPH:
			run_graph_now(n->child);
			break;
		default: /* empty; other kinds CUDA refuses in a body */
			break;
		}
	}
	free(order);
}

void td_graph_run_conditional(const struct td_gnode *n)
{
	unsigned v = __atomic_load_n(&n->cond->value, __ATOMIC_ACQUIRE);
	switch (n->ctype) {
	case CU_GRAPH_COND_TYPE_IF:
		if (v)
			run_graph_now(n->bodies[0]);
		else if (n->nbodies > 1)
			run_graph_now(n->bodies[1]);
		break;
	case CU_GRAPH_COND_TYPE_WHILE:
		while (v && td_sticky_error() == CUDA_SUCCESS) {
			run_graph_now(n->bodies[0]);
			v = __atomic_load_n(&n->cond->value, __ATOMIC_ACQUIRE);
		}
		break;
	case CU_GRAPH_COND_TYPE_SWITCH:
		if (v < n->nbodies)
			run_graph_now(n->bodies[v]);
		break;
	}
}

/* As cuStreamBeginCapture_v2, into graph h after deps. */
TD_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream handle, CUgraph h, const CUgraphNode *deps,
					       const CUgraphEdgeData *edges, size_t ndeps, CUstreamCaptureMode mode)
{
	struct td_stream *s;
	CUresult rc = td_resolve_stream(handle, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	if ((unsigned)mode > CU_STREAM_CAPTURE_MODE_RELAXED || (ndeps && !deps) || edges)
		return CUDA_ERROR_INVALID_VALUE;
	if (s->legacy)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	struct td_capture *c = calloc(1, sizeof *c);
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(h);
	rc = !g ? CUDA_ERROR_INVALID_VALUE : s->capture ? CUDA_ERROR_ILLEGAL_STATE : CUDA_SUCCESS;
	for (size_t i = 0; rc == CUDA_SUCCESS && i < ndeps; i++)
		if (!node_from(deps[i]) || node_from(deps[i])->graph != g)
			rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && set_deps(s, (struct td_gnode *const *)deps, ndeps) != 0)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS) {
		c->id = ++capture_ids;
		c->graph = g;
		c->origin = s;
		c->mode = mode;
		c->to_graph = true;
		c->status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
		__atomic_store_n(&s->capture, c, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&glock);
	if (rc != CUDA_SUCCESS)
		free(c);
	return rc;
}

/* ---- node getters and settings ---- */

TD_EXPORT CUresult cuGraphNodeSetEnabled(CUgraphExec e, CUgraphNode h, unsigned int on)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = exec_node(exec_from(e), h);
	CUresult rc = n && (n->type == CU_GRAPH_NODE_TYPE_KERNEL || n->type == CU_GRAPH_NODE_TYPE_MEMCPY ||
			    n->type == CU_GRAPH_NODE_TYPE_MEMSET) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		n->disabled = !on;
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphNodeGetEnabled(CUgraphExec e, CUgraphNode h, unsigned int *on)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = exec_node(exec_from(e), h);
	CUresult rc = n && on && (n->type == CU_GRAPH_NODE_TYPE_KERNEL || n->type == CU_GRAPH_NODE_TYPE_MEMCPY ||
				  n->type == CU_GRAPH_NODE_TYPE_MEMSET) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*on = !n->disabled;
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphExecGetFlags(CUgraphExec h, cuuint64_t *flags)
{
	pthread_mutex_lock(&glock);
	struct td_exec *e = exec_from(h);
	if (e && flags)
		*flags = e->flags;
	pthread_mutex_unlock(&glock);
	return e && flags ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult node_event(CUgraphNode h, CUgraphNodeType type, CUevent *out)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && out && n->type == type ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*out = n->event;
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphEventRecordNodeGetEvent(CUgraphNode h, CUevent *out)
{
	return node_event(h, CU_GRAPH_NODE_TYPE_EVENT_RECORD, out);
}

TD_EXPORT CUresult cuGraphEventWaitNodeGetEvent(CUgraphNode h, CUevent *out)
{
	return node_event(h, CU_GRAPH_NODE_TYPE_WAIT_EVENT, out);
}

/* A kernel node's attributes: kept as set, read back (zeros where never set). */
TD_EXPORT CUresult cuGraphKernelNodeSetAttribute(CUgraphNode h, CUkernelNodeAttrID id, const CUkernelNodeAttrValue *v)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && v && n->type == CU_GRAPH_NODE_TYPE_KERNEL && (unsigned)id < TD_NODE_ATTRS
			      ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		n->attrs[id] = *v;
		n->attrs_set |= 1u << id;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphKernelNodeGetAttribute(CUgraphNode h, CUkernelNodeAttrID id, CUkernelNodeAttrValue *v)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && v && n->type == CU_GRAPH_NODE_TYPE_KERNEL && (unsigned)id < TD_NODE_ATTRS
			      ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && (n->attrs_set >> id & 1))
		*v = n->attrs[id];
	else if (rc == CUDA_SUCCESS)
		memset(v, 0, sizeof *v);
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *d = node_from(dst), *from = node_from(src);
	CUresult rc = d && from && d->type == CU_GRAPH_NODE_TYPE_KERNEL && from->type == CU_GRAPH_NODE_TYPE_KERNEL
			      ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		memcpy(d->attrs, from->attrs, sizeof d->attrs);
		d->attrs_set = from->attrs_set;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphHostNodeGetParams(CUgraphNode h, CUDA_HOST_NODE_PARAMS *out)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && out && n->type == CU_GRAPH_NODE_TYPE_HOST ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*out = (CUDA_HOST_NODE_PARAMS){.fn = n->op.u.host.fn, .userData = n->op.u.host.data};
	pthread_mutex_unlock(&glock);
	return rc;
}

/* The node's own copy of the child graph: usable, the node's to free. */
TD_EXPORT CUresult cuGraphChildGraphNodeGetGraph(CUgraphNode h, CUgraph *out)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && out && n->type == CU_GRAPH_NODE_TYPE_GRAPH ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*out = (CUgraph)n->child;
	pthread_mutex_unlock(&glock);
	return rc;
}

/* A kernel node's launch as given; its parameters as pointers into the node's own copy. */
TD_EXPORT CUresult cuGraphKernelNodeGetParams_v2(CUgraphNode h, CUDA_KERNEL_NODE_PARAMS *out)
{
	pthread_mutex_lock(&glock);
	struct td_gnode *n = node_from(h);
	CUresult rc = n && out && n->type == CU_GRAPH_NODE_TYPE_KERNEL ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS) {
		const struct td_kernel *k = n->op.u.launch.kernel;
		const struct td_launch_shape *sh = &n->op.u.launch.shape;
		for (unsigned i = 0; i < k->param_count && i < TD_MAX_KERNEL_PARAMS; i++)
			n->params[i] = n->op.u.launch.args + td_param_offset(k, i);
		memset(out, 0, sizeof *out);
		out->func = (CUfunction)n->op.u.launch.handle;
		out->gridDimX = sh->grid[0], out->gridDimY = sh->grid[1], out->gridDimZ = sh->grid[2];
		out->blockDimX = sh->block[0], out->blockDimY = sh->block[1], out->blockDimZ = sh->block[2];
		out->sharedMemBytes = sh->shared_bytes;
		out->kernelParams = k->param_count ? n->params : NULL;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

/* ---- user objects ---- */

static struct td_uobj *uobj_from(CUuserObject h)
{
	struct td_uobj *o = (struct td_uobj *)h;
	return o && o->magic == TD_MAGIC_UOBJ ? o : NULL;
}

TD_EXPORT CUresult cuUserObjectCreate(CUuserObject *out, void *ptr, CUhostFn destroy, unsigned int refs,
				      unsigned int flags)
{
	if (!out || !destroy || !refs || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_uobj *o = calloc(1, sizeof *o);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*o = (struct td_uobj){.magic = TD_MAGIC_UOBJ, .refs = refs, .ptr = ptr, .destroy = destroy};
	*out = (CUuserObject)o;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuUserObjectRetain(CUuserObject h, unsigned int n)
{
	pthread_mutex_lock(&glock);
	struct td_uobj *o = uobj_from(h);
	if (o && n)
		o->refs += n;
	pthread_mutex_unlock(&glock);
	return o && n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuUserObjectRelease(CUuserObject h, unsigned int n)
{
	pthread_mutex_lock(&glock);
	struct td_uobj *o = uobj_from(h);
	bool ok = o && n && n <= o->refs;
	if (ok)
		uobj_release_locked(o, n);
	pthread_mutex_unlock(&glock);
	reap_uobjs();
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TD_EXPORT CUresult cuGraphRetainUserObject(CUgraph gh, CUuserObject h, unsigned int n, unsigned int flags)
{
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(gh);
	struct td_uobj *o = uobj_from(h);
	CUresult rc = g && o && n && !(flags & ~CU_GRAPH_USER_OBJECT_MOVE) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	size_t i = 0;
	while (rc == CUDA_SUCCESS && i < g->nurefs && g->urefs[i].obj != o)
		i++;
	if (rc == CUDA_SUCCESS && i == g->nurefs) {
		struct td_uref *grown = realloc(g->urefs, (g->nurefs + 1) * sizeof *grown);
		if (!grown)
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		else
			g->urefs = grown, g->urefs[g->nurefs++] = (struct td_uref){.obj = o};
	}
	if (rc == CUDA_SUCCESS) {
		g->urefs[i].n += n;
		if (!(flags & CU_GRAPH_USER_OBJECT_MOVE))
			o->refs += n;
	}
	pthread_mutex_unlock(&glock);
	return rc;
}

TD_EXPORT CUresult cuGraphReleaseUserObject(CUgraph gh, CUuserObject h, unsigned int n)
{
	pthread_mutex_lock(&glock);
	struct td_graph *g = graph_from(gh);
	struct td_uobj *o = uobj_from(h);
	size_t i = 0;
	while (g && o && i < g->nurefs && g->urefs[i].obj != o)
		i++;
	bool ok = g && o && n && i < g->nurefs && g->urefs[i].n >= n;
	if (ok) {
		g->urefs[i].n -= n;
		uobj_release_locked(o, n);
	}
	pthread_mutex_unlock(&glock);
	reap_uobjs();
	return ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
