/* Graph copies with host memory: memcpy nodes that name host memory, and copies to or from
 * host memory captured on a stream (proto/api.spec, "Graphs").
 *
 * The GPU cannot reach this process's memory, pinned or pageable. Each host range a node
 * names gets a staging buffer, device memory of the client's (cuMemAlloc, charged to the
 * quota), and the node copies to or from that buffer instead. The client keeps, for each
 * staging buffer, the graphs and executable graphs whose nodes name it (its owners: the
 * graph a node was added to or captured into, its clones, graphs it is a child of, the
 * executable graphs instantiated or updated from those). At cuGraphLaunch of an executable
 * graph owning it:
 *  - a host source's bytes go up into its buffer, on the launch's stream before the graph:
 *    the graph reads them as they are at the launch;
 *  - a host destination's bytes go up too, kept as its snapshot, and it is marked pending
 *    before the launch is sent (a host node of the graph may run before cuGraphLaunch
 *    returns here), with an event recorded after the graph. What the graph wrote comes down into the host
 *    range (each byte of the buffer that differs from the snapshot) before a host node of
 *    a graph runs here, which may read it (the graph waits at the node meanwhile), and at
 *    the first synchronizing call that finds the event complete (a synchronize of the
 *    stream, of the context or of a later event, a query answering done), before that
 *    call returns (rm_graph_host_after_sync). What the graph leaves unwritten, or writes
 *    as the host had it at the launch, is not written back: a host node's own later
 *    writes to the range stay, as they do natively.
 * A host side must be one contiguous range (a 1-D copy, or rows and planes without gaps):
 * another is refused (CUDA_ERROR_NOT_SUPPORTED, logged once). Staging buffers are kept for
 * the process's life and shared by every node naming the same range the same way. */
#include "client.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "graph_cond.h"
#include "graph_host.h"

struct stage {
	char *host;
	size_t n;
	int to_host;     /* the graph writes the host range */
	CUcontext ctx;
	CUdeviceptr dev;
	uint64_t *owners; /* graphs and executable graphs, by handle */
	size_t nowners, cap;
	CUevent done;    /* to_host: recorded after each launch */
	CUstream drain;  /* to_host: where it comes down, waiting for no other stream */
	unsigned char *snap; /* to_host: the host range as last sent up or brought down */
	int pending;     /* to_host: a launch wrote it and it has not come down */
	int launching;   /* to_host: launches sent whose event is not recorded yet */
	int busy;        /* drains reading it outside lock: not freed meanwhile */
	struct stage *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct stage *stages; /* under lock; no call to the daemon is made under it */
static int nstages;          /* atomic: nothing to do while 0 */
static int npending;         /* atomic */
static __thread int draining; /* the synchronizing calls made while draining drain nothing */

static int owned_by(const struct stage *st, uint64_t owner)
{
	for (size_t i = 0; i < st->nowners; i++)
		if (st->owners[i] == owner)
			return 1;
	return 0;
}

static int add_owner(struct stage *st, uint64_t owner)
{
	if (owned_by(st, owner))
		return 0;
	if (st->nowners == st->cap) {
		size_t cap = st->cap ? st->cap * 2 : 4;
		uint64_t *grown = realloc(st->owners, cap * sizeof(*grown));
		if (!grown)
			return -1;
		st->owners = grown;
		st->cap = cap;
	}
	st->owners[st->nowners++] = owner;
	return 0;
}

static struct stage *find_stage(const void *host, size_t n, int to_host, CUcontext ctx)
{
	struct stage *st = stages;
	while (st && !(st->host == host && st->n == n && st->to_host == to_host && st->ctx == ctx))
		st = st->next;
	return st;
}

/* A stage's driver objects, made or released outside lock. */
static CUresult stage_make(struct stage *st, size_t n, int to_host)
{
	CUresult r = cuMemAlloc_v2(&st->dev, n);
	if (r == CUDA_SUCCESS && to_host)
		r = cuEventCreate(&st->done, CU_EVENT_DISABLE_TIMING);
	if (r == CUDA_SUCCESS && to_host)
		r = cuStreamCreate(&st->drain, CU_STREAM_NON_BLOCKING);
	if (r == CUDA_SUCCESS && to_host && !(st->snap = malloc(n)))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	return r;
}

static void stage_free(struct stage *st)
{
	if (st->drain)
		cuStreamDestroy_v2(st->drain);
	if (st->done)
		cuEventDestroy_v2(st->done);
	if (st->dev)
		cuMemFree_v2(st->dev);
	free(st->snap);
	free(st->owners);
	free(st);
}

/* The staging buffer of [host, host + n) in the given direction, for owner. A new one is
 * made outside lock (no call to the daemon is made under it: a host node's drain takes it
 * while the graph waits, and a call may wait for the graph); one made meanwhile by another
 * thread wins. */
static CUresult stage_of(void *host, size_t n, int to_host, uint64_t owner, CUdeviceptr *dev)
{
	CUcontext ctx = rm_ctx_current();
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!host || !n)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	struct stage *made = NULL;
	pthread_mutex_lock(&lock);
	struct stage *st = find_stage(host, n, to_host, ctx);
	if (!st) {
		pthread_mutex_unlock(&lock);
		made = calloc(1, sizeof(*made));
		r = made ? stage_make(made, n, to_host) : CUDA_ERROR_OUT_OF_MEMORY;
		if (r != CUDA_SUCCESS) {
			if (made)
				stage_free(made);
			return r;
		}
		pthread_mutex_lock(&lock);
		if (!(st = find_stage(host, n, to_host, ctx))) {
			st = made;
			made = NULL;
			st->host = host;
			st->n = n;
			st->to_host = to_host;
			st->ctx = ctx;
			st->next = stages;
			stages = st;
			__atomic_add_fetch(&nstages, 1, __ATOMIC_ACQ_REL);
		}
	}
	if (add_owner(st, rm_graph_cond_root(owner))) /* a body's: its launches' graph */
		r = CUDA_ERROR_OUT_OF_MEMORY;
	else
		*dev = st->dev;
	pthread_mutex_unlock(&lock);
	if (made)
		stage_free(made);
	return r;
}

CUresult rm_graph_host_inherit(uint64_t from, uint64_t to)
{
	if (!__atomic_load_n(&nstages, __ATOMIC_ACQUIRE) || !from || !to)
		return CUDA_SUCCESS;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	for (struct stage *st = stages; st && r == CUDA_SUCCESS; st = st->next)
		if (owned_by(st, from) && add_owner(st, to))
			r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&lock);
	return r;
}

/* One side of a copy in host memory as one contiguous range: 0 with *start and *n, or -1. */
static int host_range(char *base, size_t x, size_t y, size_t z, size_t pitch, size_t height, const CUDA_MEMCPY3D *p,
		      char **start, size_t *n)
{
	size_t w = p->WidthInBytes, rows = p->Height, planes = p->Depth, off, bytes;
	if (rows == 1 && planes == 1 && !y && !z)
		pitch = w, height = 1;
	if (pitch != w || (planes > 1 && height != rows))
		return -1; /* gaps between rows or planes */
	if (__builtin_mul_overflow(z, height, &off) || __builtin_add_overflow(off, y, &off) ||
	    __builtin_mul_overflow(off, pitch, &off) || __builtin_add_overflow(off, x, &off) ||
	    __builtin_mul_overflow(w, rows, &bytes) || __builtin_mul_overflow(bytes, planes, &bytes))
		return -1;
	*start = base + off;
	*n = bytes;
	return 0;
}

/* A side in host memory: CU_MEMORYTYPE_HOST, or a unified address in this process's pinned
 * memory (the driver would take it as host memory). */
static int is_host(CUmemorytype type, const void *host, CUdeviceptr dev)
{
	if (type == CU_MEMORYTYPE_HOST)
		return host != NULL;
	return type == CU_MEMORYTYPE_UNIFIED && rm_host_alloc_find((const void *)(uintptr_t)dev, NULL, NULL, NULL);
}

static CUresult stage_side(CUmemorytype *type, const void **hostp, CUdeviceptr *dev, size_t *x, size_t *y, size_t *z,
			   size_t *pitch, size_t *height, const CUDA_MEMCPY3D *p, int to_host, uint64_t owner)
{
	char *base = *type == CU_MEMORYTYPE_HOST ? (char *)*hostp : (char *)(uintptr_t)*dev, *start;
	size_t n;
	if (host_range(base, *x, *y, *z, *pitch, *height, p, &start, &n))
		return rm_unsupported("a graph copy with host memory in rows or planes with gaps");
	CUresult r = stage_of(start, n, to_host, owner, dev);
	if (r == CUDA_SUCCESS) {
		*type = CU_MEMORYTYPE_DEVICE;
		*hostp = NULL;
		*x = *y = *z = 0;
		*pitch = p->WidthInBytes;
		*height = p->Height;
	}
	return r;
}

CUresult rm_graph_host_params(const CUDA_MEMCPY3D *in, CUDA_MEMCPY3D *out, uint64_t owner)
{
	*out = *in;
	CUresult r = CUDA_SUCCESS;
	if (is_host(in->srcMemoryType, in->srcHost, in->srcDevice))
		r = stage_side(&out->srcMemoryType, &out->srcHost, &out->srcDevice, &out->srcXInBytes, &out->srcY,
			       &out->srcZ, &out->srcPitch, &out->srcHeight, in, 0, owner);
	if (r == CUDA_SUCCESS && is_host(in->dstMemoryType, in->dstHost, in->dstDevice)) {
		const void *h = in->dstHost;
		r = stage_side(&out->dstMemoryType, &h, &out->dstDevice, &out->dstXInBytes, &out->dstY, &out->dstZ,
			       &out->dstPitch, &out->dstHeight, in, 1, owner);
		out->dstHost = NULL;
	}
	return r;
}

/* Back from staging buffers to the host ranges they stand for (a getter's answer). */
void rm_graph_host_unstage(CUDA_MEMCPY3D *p)
{
	if (!__atomic_load_n(&nstages, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&lock);
	for (struct stage *st = stages; st; st = st->next) {
		if (p->srcMemoryType == CU_MEMORYTYPE_DEVICE && !st->to_host && p->srcDevice == st->dev) {
			p->srcMemoryType = CU_MEMORYTYPE_HOST;
			p->srcHost = st->host;
			p->srcDevice = 0;
		}
		if (p->dstMemoryType == CU_MEMORYTYPE_DEVICE && st->to_host && p->dstDevice == st->dev) {
			p->dstMemoryType = CU_MEMORYTYPE_HOST;
			p->dstHost = st->host;
			p->dstDevice = 0;
		}
	}
	pthread_mutex_unlock(&lock);
}

int rm_graph_host_capture(int to_host, CUdeviceptr dev, void *host, size_t n, CUstream stream, CUresult *r)
{
	CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
	CUgraph graph = NULL;
	if (!stream || !host || !n ||
	    cuStreamGetCaptureInfo_v2(stream, &status, NULL, &graph, NULL, NULL) != CUDA_SUCCESS ||
	    status != CU_STREAM_CAPTURE_STATUS_ACTIVE || !graph)
		return 0; /* not capturing: the copy goes as it would */
	CUdeviceptr staged = 0;
	*r = stage_of(host, n, to_host, (uint64_t)(uintptr_t)graph, &staged);
	if (*r == CUDA_SUCCESS)
		*r = to_host ? cuMemcpyDtoDAsync_v2(staged, dev, n, stream) : cuMemcpyDtoDAsync_v2(dev, staged, n, stream);
	return 1;
}

/* What a launch sends up or records, gathered under lock and done outside it. */
struct launch_step {
	struct stage *st;      /* kept while an owner is launched (a program destroying a graph
				* while launching it is wrong in CUDA too) */
	unsigned char *bytes;  /* a destination's snapshot as sent (NULL: the source's host range) */
};

/* The stages exec owns (destinations only: to_host_only), each a step; *n of them, in a
 * new array (NULL with *n 0 when none, -1 when out of memory). Under lock. */
static int steps_of(uint64_t exec, int to_host_only, struct launch_step **out, size_t *n)
{
	size_t count = 0, i = 0;
	*out = NULL;
	*n = 0;
	for (struct stage *st = stages; st; st = st->next)
		count += owned_by(st, exec) && (st->to_host || !to_host_only);
	if (!count)
		return 0;
	struct launch_step *steps = calloc(count, sizeof(*steps));
	if (!steps)
		return -1;
	for (struct stage *st = stages; st; st = st->next)
		if (owned_by(st, exec) && (st->to_host || !to_host_only))
			steps[i++].st = st;
	*out = steps;
	*n = count;
	return 0;
}

CUresult rm_graph_host_before_launch(CUgraphExec exec, CUstream stream)
{
	if (!__atomic_load_n(&nstages, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	struct launch_step *steps;
	size_t n;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	if (steps_of((uint64_t)(uintptr_t)exec, 0, &steps, &n))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
		struct stage *st = steps[i].st;
		if (!st->to_host)
			continue;
		/* What the graph leaves unwritten stays as the host has it. */
		memcpy(st->snap, st->host, st->n);
		if (!(steps[i].bytes = malloc(st->n)))
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else
			memcpy(steps[i].bytes, st->snap, st->n);
	}
	pthread_mutex_unlock(&lock);
	for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
		r = rm_copy_to_device(steps[i].st->dev, steps[i].bytes ? (const void *)steps[i].bytes : steps[i].st->host,
				      steps[i].st->n, stream, 0);
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++) {
		struct stage *st = steps[i].st;
		if (!st->to_host)
			continue;
		st->launching++;
		if (!st->pending) {
			st->pending = 1;
			__atomic_add_fetch(&npending, 1, __ATOMIC_ACQ_REL);
		}
	}
	pthread_mutex_unlock(&lock);
	for (size_t i = 0; i < n; i++)
		free(steps[i].bytes);
	free(steps);
	return r;
}

CUresult rm_graph_host_after_launch(CUgraphExec exec, CUstream stream, CUresult launched)
{
	if (!__atomic_load_n(&nstages, __ATOMIC_ACQUIRE))
		return launched;
	struct launch_step *steps;
	size_t n;
	pthread_mutex_lock(&lock);
	int err = steps_of((uint64_t)(uintptr_t)exec, 1, &steps, &n);
	pthread_mutex_unlock(&lock);
	CUresult r = launched == CUDA_SUCCESS && err ? CUDA_ERROR_OUT_OF_MEMORY : launched;
	for (size_t i = 0; i < n && r == CUDA_SUCCESS; i++)
		r = cuEventRecord(steps[i].st->done, stream);
	/* Whatever happened, the launch is no longer being sent (else its stages stay held). */
	pthread_mutex_lock(&lock);
	for (struct stage *st = stages; st; st = st->next)
		if (st->to_host && st->launching && owned_by(st, (uint64_t)(uintptr_t)exec))
			st->launching--;
	pthread_mutex_unlock(&lock);
	free(steps);
	return r;
}

/* Reads what the graph wrote of st's range so far into dev (st->n bytes), on the stage's
 * own stream, which waits for no other: a host node's graph is stopped at the node
 * meanwhile. Outside lock (a pending stage is not freed), st's context current. */
static CUresult read_stage(struct stage *st, unsigned char *dev)
{
	CUresult r = cuMemcpyDtoHAsync_v2(dev, st->dev, st->n, st->drain);
	return r == CUDA_SUCCESS ? cuStreamSynchronize(st->drain) : r;
}

/* Each byte read that differs from the snapshot (the host range as sent up at the launch)
 * goes to the host range and the snapshot. Under lock. */
static void bring_down(struct stage *st, const unsigned char *dev)
{
	unsigned char *host = (unsigned char *)st->host;
	for (size_t i = 0; i < st->n; i++)
		if (dev[i] != st->snap[i])
			host[i] = st->snap[i] = dev[i];
}

/* Every pending destination, or (done_only) those whose last launch is complete, which
 * stop being pending. The daemon is called outside lock. */
static CUresult drain_pending(int done_only)
{
	if (!__atomic_load_n(&npending, __ATOMIC_ACQUIRE) || draining)
		return CUDA_SUCCESS;
	draining = 1;
	CUresult r = CUDA_SUCCESS;
	struct stage **pend = NULL;
	size_t n = 0, cap = 0;
	pthread_mutex_lock(&lock);
	for (struct stage *st = stages; st; st = st->next)
		cap += st->pending;
	if (cap && !(pend = calloc(cap, sizeof(*pend))))
		r = CUDA_ERROR_OUT_OF_MEMORY;
	/* A stage whose launch is still being sent has no event of that launch to ask yet. */
	for (struct stage *st = stages; st && pend; st = st->next)
		if (st->pending && !(done_only && st->launching)) {
			st->busy++;
			pend[n++] = st;
		}
	pthread_mutex_unlock(&lock);
	for (size_t i = 0; i < n; i++) {
		struct stage *st = pend[i];
		if (r != CUDA_SUCCESS) {
			pthread_mutex_lock(&lock);
			st->busy--;
			pthread_mutex_unlock(&lock);
			continue;
		}
		CUcontext cur = rm_ctx_current();
		int pushed = cur != st->ctx && cuCtxPushCurrent_v2(st->ctx) == CUDA_SUCCESS;
		CUresult q = done_only ? cuEventQuery(st->done) : CUDA_ERROR_NOT_READY;
		unsigned char *dev = NULL;
		if (q != CUDA_SUCCESS && q != CUDA_ERROR_NOT_READY)
			r = q;
		else if (q == CUDA_SUCCESS || !done_only)
			r = (dev = malloc(st->n)) ? read_stage(st, dev) : CUDA_ERROR_OUT_OF_MEMORY;
		if (pushed)
			cuCtxPopCurrent_v2(&cur);
		pthread_mutex_lock(&lock);
		if (dev && r == CUDA_SUCCESS)
			bring_down(st, dev);
		if (q == CUDA_SUCCESS && r == CUDA_SUCCESS && st->pending) {
			st->pending = 0;
			__atomic_sub_fetch(&npending, 1, __ATOMIC_ACQ_REL);
		}
		st->busy--;
		pthread_mutex_unlock(&lock);
		free(dev);
	}
	free(pend);
	draining = 0;
	return r;
}

int rm_graph_host_pending(void)
{
	return __atomic_load_n(&npending, __ATOMIC_ACQUIRE) != 0;
}

int rm_graph_host_draining(void)
{
	return draining;
}

CUresult rm_graph_host_after_sync(void)
{
	return drain_pending(1);
}

void rm_graph_host_before_host_node(void)
{
	if (drain_pending(0) != CUDA_SUCCESS)
		rm_log(RM_LOG_ERROR, "a graph's copies into host memory could not come down before its host node");
}

/* The graph of each memcpy node added with host memory, for its setter. */
static struct node_graph {
	uint64_t node, graph;
} *node_graphs;
static size_t nnode_graphs, node_graphs_cap;

CUresult rm_graph_host_node(CUgraphNode node, CUgraph graph)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	if (nnode_graphs == node_graphs_cap) {
		size_t cap = node_graphs_cap ? node_graphs_cap * 2 : 16;
		struct node_graph *grown = realloc(node_graphs, cap * sizeof(*grown));
		if (grown)
			node_graphs = grown, node_graphs_cap = cap;
	}
	if (nnode_graphs < node_graphs_cap)
		node_graphs[nnode_graphs++] = (struct node_graph){(uint64_t)(uintptr_t)node, (uint64_t)(uintptr_t)graph};
	else
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&lock);
	return r;
}

uint64_t rm_graph_host_graph_of(CUgraphNode node)
{
	uint64_t g = 0;
	pthread_mutex_lock(&lock);
	for (size_t i = nnode_graphs; i-- > 0 && !g;)
		if (node_graphs[i].node == (uint64_t)(uintptr_t)node)
			g = node_graphs[i].graph;
	pthread_mutex_unlock(&lock);
	return g;
}

int rm_graph_host_names_host(const CUDA_MEMCPY3D *p)
{
	return is_host(p->srcMemoryType, p->srcHost, p->srcDevice) || is_host(p->dstMemoryType, p->dstHost, p->dstDevice);
}

/* A graph or executable graph destroyed: its staging buffers are no longer its (a handle's
 * value may come back for another). A buffer no one uses any more goes, unless a
 * destination still waits to come down. */
void rm_graph_host_forget(uint64_t owner)
{
	if (!__atomic_load_n(&nstages, __ATOMIC_ACQUIRE))
		return;
	struct stage *unused = NULL; /* released outside lock */
	pthread_mutex_lock(&lock);
	for (struct stage **at = &stages; *at;) {
		struct stage *st = *at;
		for (size_t i = 0; i < st->nowners; i++)
			if (st->owners[i] == owner)
				st->owners[i--] = st->owners[--st->nowners];
		if (st->nowners || st->pending || st->launching || st->busy) {
			at = &st->next;
			continue;
		}
		*at = st->next;
		st->next = unused;
		unused = st;
		__atomic_sub_fetch(&nstages, 1, __ATOMIC_ACQ_REL);
	}
	for (size_t i = 0; i < nnode_graphs;)
		if (node_graphs[i].graph == owner)
			node_graphs[i] = node_graphs[--nnode_graphs];
		else
			i++;
	pthread_mutex_unlock(&lock);
	while (unused) {
		struct stage *st = unused;
		unused = st->next;
		stage_free(st);
	}
}
