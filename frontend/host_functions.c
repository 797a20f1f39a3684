/* Host functions: cuLaunchHostFunc and cuStreamAddCallback run the program's function in
 * this process, in stream order (docs/protocol.md, "Host functions").
 *
 * At the first one, the process opens its callback channel: a channel of the session that
 * no thread's calls use, made the session's callback channel by RM_OP_HOST_LISTEN, and a
 * thread that reads it. The launch travels as an async cuLaunchHostFunc naming the stream
 * and an id; the daemon's stream reaches it and sends RM_OP_HOST_CALL with that id on the
 * callback channel; the thread runs the function (in the order the calls come, one at a
 * time, as CUDA's own host-function thread does) and answers RM_OP_HOST_DONE, and only then
 * does the stream go on. The daemon sends heartbeats on the channel while it is open (it
 * only ever waits there), and the channel's flusher sends the client's.
 *
 * A graph's host node (cuGraphAddHostNode and its setters, or cuLaunchHostFunc on a
 * capturing stream) runs at every launch of the graph: the daemon names it in
 * RM_OP_HOST_NODE_CALL, and its entry is kept for the process's life (one per distinct
 * function and data given to a node; one per captured cuLaunchHostFunc).
 *
 * The ids are this process's: a call naming an id not pending is answered and ignored, so
 * nothing the daemon sends makes this process call an address of the daemon's choosing.
 * A host function that calls CUDA gets CUDA_ERROR_NOT_PERMITTED (rm_rpc): CUDA forbids
 * it, and here the call would wait for the stream that waits for the function. */
#include "client.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "connection.h"
#include "graph_host.h"
#include "api.pb-c.h"
#include "remora.pb-c.h"

#define BUCKETS 256

struct pending {
	uint64_t id;
	CUhostFn fn;             /* cuLaunchHostFunc's, or NULL */
	CUstreamCallback cb;     /* cuStreamAddCallback's, or NULL */
	CUstream stream;         /* the stream a callback is told of */
	void *data;
	int kept;                /* a graph's host node: run at every launch, never taken */
	struct pending *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* the table, the state */
static struct pending *table[BUCKETS];
static uint64_t next_id = 1;
static int state;            /* 0: no callback channel yet; 1: open; -1: none to be had */
static struct rm_client_conn *chan;
static __thread int running; /* this thread is in a program's host function */

int rm_hostfn_running(void) { return running; }

int rm_hostfn_used(void) { return __atomic_load_n(&state, __ATOMIC_ACQUIRE) == 1; }

/* The entry of id, taken out of the table unless it is a host node's or becomes one
 * (as_node: the daemon runs it as a graph's host node); NULL when not pending. */
static struct pending *take(uint64_t id, int as_node)
{
	pthread_mutex_lock(&lock);
	struct pending **p = &table[id % BUCKETS];
	while (*p && (*p)->id != id)
		p = &(*p)->next;
	struct pending *e = *p;
	if (e && as_node)
		e->kept = 1;
	if (e && !e->kept)
		*p = e->next;
	pthread_mutex_unlock(&lock);
	return e;
}

/* Reads calls until the channel ends; runs each and answers it. */
static void *callback_main(void *arg)
{
	struct rm_client_conn *c = arg;
	const char *why = NULL;
	for (;;) {
		struct rm_frame f;
		int err = rm_link_read_frame(&c->link, &f);
		if (err) {
			why = err == -ETIMEDOUT ? "the GPU server was silent" : "connection lost";
			break;
		}
		if (f.op == RM_OP_HEARTBEAT && (f.flags & RM_F_REPLY) && !f.msg_len && !f.bulk_len)
			continue;
		if (f.op == RM_OP_GOING_AWAY) {
			why = "the GPU server is shutting down";
			break;
		}
		int as_node = f.op == RM_OP_HOST_NODE_CALL;
		if ((f.op != RM_OP_HOST_CALL && !as_node) || !(f.flags & RM_F_REPLY) || f.msg_len || f.bulk_len) {
			why = "unexpected frame";
			break;
		}
		struct pending *e = take(f.seq, as_node);
		if (e && as_node)
			rm_graph_host_before_host_node(); /* copies into host memory before it */
		if (e) {
			running = 1;
			if (e->fn)
				e->fn(e->data);
			else
				e->cb(e->stream, CUDA_SUCCESS, e->data);
			running = 0;
			if (!e->kept)
				free(e);
		} else {
			rm_log(RM_LOG_WARN, "the GPU server asked for host function %llu, which is not pending",
			       (unsigned long long)f.seq);
		}
		struct rm_frame done = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HOST_DONE, .flags = RM_F_ASYNC, .seq = f.seq};
		if (rm_client_send_frame(c, &done)) {
			why = "connection lost";
			break;
		}
	}
	/* Pending functions stay unrun: their streams went on (or the session is over). */
	if (!rm_client_closed())
		rm_log(RM_LOG_ERROR, "host functions' channel closed (%s): later host functions fail", why);
	pthread_mutex_lock(&lock);
	state = -1;
	pthread_mutex_unlock(&lock);
	return NULL;
}

/* Opens the callback channel and its thread at the first host function. */
static CUresult ready(void)
{
	pthread_mutex_lock(&lock);
	CUresult r = state == 1 ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
	if (state) {
		pthread_mutex_unlock(&lock);
		return r;
	}
	struct rm_client_conn *c = rm_channel_open_spare();
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HOST_LISTEN, .seq = 1}, rf;
	const char *why = c ? NULL : "no channel could be attached (the daemon's max_channels?)";
	/* Sent under the channel's lock (its flusher may send a heartbeat meanwhile); read
	 * without it, as this channel's link is read only here and by callback_main. */
	if (!why && (rm_client_send_frame(c, &f) || rm_link_read_frame(&c->link, &rf) ||
		     rf.op != RM_OP_HOST_LISTEN || !(rf.flags & RM_F_REPLY) || rf.msg_len || rf.bulk_len))
		why = "the GPU server did not answer";
	else if (!why && rf.result)
		why = "the GPU server refused it";
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	if (!why && pthread_create(&t, &attr, callback_main, c))
		why = "no thread";
	pthread_attr_destroy(&attr);
	if (why) {
		rm_log(RM_LOG_ERROR, "host functions are not available: their channel could not be opened (%s)", why);
		if (c)
			rm_channel_close_spare(c);
		state = -1;
	} else {
		chan = c; /* kept for the process's life */
		state = 1;
		r = CUDA_SUCCESS;
	}
	pthread_mutex_unlock(&lock);
	return r;
}

/* A new entry like init in the table, its id in *id, once the callback channel is open. */
static CUresult add_pending(struct pending init, uint64_t *id)
{
	if (running)
		return CUDA_ERROR_NOT_PERMITTED;
	CUresult r = rm_connect_once();
	if (r == CUDA_SUCCESS)
		r = ready();
	struct pending *e = r == CUDA_SUCCESS ? malloc(sizeof(*e)) : NULL;
	if (r == CUDA_SUCCESS && !e)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r != CUDA_SUCCESS)
		return r;
	*e = init;
	pthread_mutex_lock(&lock);
	*id = e->id = next_id++;
	e->next = table[e->id % BUCKETS];
	table[e->id % BUCKETS] = e;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

static CUresult launch(CUstream stream, CUhostFn fn, CUstreamCallback cb, void *data)
{
	uint64_t id;
	CUresult r = add_pending((struct pending){.fn = fn, .cb = cb, .stream = stream, .data = data}, &id);
	if (r != CUDA_SUCCESS)
		return r;
	Remora__HostFunc req = REMORA__HOST_FUNC__INIT;
	req.stream = (uint64_t)(uintptr_t)stream;
	req.id = id;
	struct rm_rpc_call call = {.op = RM_OP_cuLaunchHostFunc, .req = &req.base, .order = {req.stream, 0}, .ordered = 1};
	if ((r = rm_rpc(&call)) != CUDA_SUCCESS)
		free(take(id, 0)); /* not sent: never called */
	return r;
}

/* The id of host node function fn with data: the kept entry of the pair, made at its first use. */
static CUresult node_id(CUhostFn fn, void *data, uint64_t *id)
{
	if (running)
		return CUDA_ERROR_NOT_PERMITTED;
	CUresult r = rm_connect_once();
	if (r == CUDA_SUCCESS)
		r = ready();
	if (r != CUDA_SUCCESS)
		return r;
	struct pending *e = NULL;
	pthread_mutex_lock(&lock);
	for (size_t b = 0; b < BUCKETS && !e; b++)
		for (e = table[b]; e && !(e->kept && e->fn == fn && e->data == data); e = e->next)
			;
	if (!e && (e = calloc(1, sizeof(*e)))) {
		*e = (struct pending){.id = next_id++, .fn = fn, .data = data, .kept = 1};
		e->next = table[e->id % BUCKETS];
		table[e->id % BUCKETS] = e;
	}
	if (e)
		*id = e->id;
	pthread_mutex_unlock(&lock);
	return e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

/* Host node parameters as they travel: the function's id in place of its address. */
static CUresult node_params(const CUDA_HOST_NODE_PARAMS *p, CUDA_HOST_NODE_PARAMS *wire)
{
	uint64_t id = 0;
	if (!p || !p->fn)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = node_id(p->fn, p->userData, &id);
	*wire = (CUDA_HOST_NODE_PARAMS){.fn = NULL, .userData = (void *)(uintptr_t)id};
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode *phGraphNode, CUgraph hGraph,
					      const CUgraphNode *dependencies, size_t numDependencies,
					      const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CUDA_HOST_NODE_PARAMS wire;
	if (!phGraphNode || (numDependencies && !dependencies) || numDependencies > RM_MAX_GRAPH_DEPS)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = node_params(nodeParams, &wire);
	if (r != CUDA_SUCCESS)
		return r;
	Remora__CuGraphAddHostNodeReq req = REMORA__CU_GRAPH_ADD_HOST_NODE__REQ__INIT;
	req.hgraph = (uint64_t)(uintptr_t)hGraph;
	req.dependencies.data = (uint8_t *)dependencies;
	req.dependencies.len = numDependencies * sizeof(*dependencies);
	req.numdependencies = numDependencies;
	req.nodeparams.data = (uint8_t *)&wire;
	req.nodeparams.len = sizeof(wire);
	Remora__CuGraphAddHostNodeRep *rep = NULL;
	r = rm_rpc_simple(RM_OP_cuGraphAddHostNode, &req.base, &remora__cu_graph_add_host_node__rep__descriptor,
			  (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && rep)
		*phGraphNode = (CUgraphNode)(uintptr_t)rep->phgraphnode;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

RM_EXPORT CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CUDA_HOST_NODE_PARAMS wire;
	CUresult r = node_params(nodeParams, &wire);
	if (r != CUDA_SUCCESS)
		return r;
	Remora__CuGraphHostNodeSetParamsReq req = REMORA__CU_GRAPH_HOST_NODE_SET_PARAMS__REQ__INIT;
	req.hnode = (uint64_t)(uintptr_t)hNode;
	req.nodeparams.data = (uint8_t *)&wire;
	req.nodeparams.len = sizeof(wire);
	return rm_rpc_simple(RM_OP_cuGraphHostNodeSetParams, &req.base, NULL, NULL);
}

RM_EXPORT CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec hGraphExec, CUgraphNode hNode,
							const CUDA_HOST_NODE_PARAMS *nodeParams)
{
	CUDA_HOST_NODE_PARAMS wire;
	CUresult r = node_params(nodeParams, &wire);
	if (r != CUDA_SUCCESS)
		return r;
	Remora__CuGraphExecHostNodeSetParamsReq req = REMORA__CU_GRAPH_EXEC_HOST_NODE_SET_PARAMS__REQ__INIT;
	req.hgraphexec = (uint64_t)(uintptr_t)hGraphExec;
	req.hnode = (uint64_t)(uintptr_t)hNode;
	req.nodeparams.data = (uint8_t *)&wire;
	req.nodeparams.len = sizeof(wire);
	return rm_rpc_simple(RM_OP_cuGraphExecHostNodeSetParams, &req.base, NULL, NULL);
}

RM_EXPORT CUresult CUDAAPI cuLaunchHostFunc(CUstream hStream, CUhostFn fn, void *userData)
{
	if (!fn)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(hStream, fn, NULL, userData);
}

/* Told CUDA_SUCCESS as status: an error of the stream's earlier work is reported at the
 * next synchronizing call instead. */
RM_EXPORT CUresult CUDAAPI cuStreamAddCallback(CUstream hStream, CUstreamCallback callback, void *userData,
					       unsigned int flags)
{
	if (!callback || flags)
		return CUDA_ERROR_INVALID_VALUE;
	return launch(hStream, NULL, callback, userData);
}

/* The driver's node runs the id this process gave its function and data: answered from
 * this process's entry of that id. */
RM_EXPORT CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS *nodeParams)
{
	if (!nodeParams)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__CuGraphHostNodeGetParamsReq req = REMORA__CU_GRAPH_HOST_NODE_GET_PARAMS__REQ__INIT;
	req.hnode = (uint64_t)(uintptr_t)hNode;
	Remora__CuGraphHostNodeGetParamsRep *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_cuGraphHostNodeGetParams, &req.base,
				   &remora__cu_graph_host_node_get_params__rep__descriptor, (ProtobufCMessage **)&rep);
	CUDA_HOST_NODE_PARAMS wire;
	if (r == CUDA_SUCCESS && (!rep || rep->nodeparams.len != sizeof(wire)))
		r = rm_rpc_bad_reply("cuGraphHostNodeGetParams: a reply of %zu bytes", rep ? rep->nodeparams.len : 0);
	if (r == CUDA_SUCCESS) {
		memcpy(&wire, rep->nodeparams.data, sizeof(wire));
		uint64_t id = (uint64_t)(uintptr_t)wire.userData;
		pthread_mutex_lock(&lock);
		struct pending *e = table[id % BUCKETS];
		while (e && e->id != id)
			e = e->next;
		int found = e && e->fn;
		if (found)
			*nodeParams = (CUDA_HOST_NODE_PARAMS){.fn = e->fn, .userData = e->data};
		pthread_mutex_unlock(&lock);
		if (!found)
			r = rm_rpc_bad_reply("cuGraphHostNodeGetParams: host function %llu is not this process's",
					     (unsigned long long)id);
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* The destructor is a host function called once, when the GPU host's driver drops the
 * last reference: its entry waits in the table until then. */
RM_EXPORT CUresult CUDAAPI cuUserObjectCreate(CUuserObject *object_out, void *ptr, CUhostFn destroy,
					      unsigned int initialRefcount, unsigned int flags)
{
	if (!object_out || !destroy || !initialRefcount || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)
		return CUDA_ERROR_INVALID_VALUE;
	uint64_t id;
	CUresult r = add_pending((struct pending){.fn = destroy, .data = ptr}, &id);
	if (r != CUDA_SUCCESS)
		return r;
	Remora__UserObjectCreate req = REMORA__USER_OBJECT_CREATE__INIT;
	req.id = id;
	req.refcount = initialRefcount;
	req.flags = flags;
	Remora__UserObjectCreateReply *rep = NULL;
	r = rm_rpc_simple(RM_OP_cuUserObjectCreate, &req.base, &remora__user_object_create_reply__descriptor,
			  (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS && !rep)
		r = rm_rpc_bad_reply("cuUserObjectCreate: no reply");
	if (r == CUDA_SUCCESS)
		*object_out = (CUuserObject)(uintptr_t)rep->object;
	else
		free(take(id, 0)); /* no object: never called */
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}
