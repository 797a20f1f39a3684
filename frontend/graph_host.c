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
 *    with an event recorded after the graph. What the graph wrote comes down into the host
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
	struct stage *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct stage *stages; /* under lock; records are never freed */
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

/* The staging buffer of [host, host + n) in the given direction, for owner. */
static CUresult stage_of(void *host, size_t n, int to_host, uint64_t owner, CUdeviceptr *dev)
{
	CUcontext ctx = rm_ctx_current();
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!host || !n)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	struct stage *st = stages;
	while (st && !(st->host == host && st->n == n && st->to_host == to_host && st->ctx == ctx))
		st = st->next;
	if (!st) {
		st = calloc(1, sizeof(*st));
		r = !st ? CUDA_ERROR_OUT_OF_MEMORY : cuMemAlloc_v2(&st->dev, n);
		if (r == CUDA_SUCCESS && to_host)
			r = cuEventCreate(&st->done, CU_EVENT_DISABLE_TIMING);
		if (r == CUDA_SUCCESS && to_host)
			r = cuStreamCreate(&st->drain, CU_STREAM_NON_BLOCKING);
		if (r == CUDA_SUCCESS && to_host && !(st->snap = malloc(n)))
			r = CUDA_ERROR_OUT_OF_MEMORY;
		if (r == CUDA_SUCCESS) {
			st->host = host;
			st->n = n;
			st->to_host = to_host;
			st->ctx = ctx;
			st->next = stages;
			stages = st;
			__atomic_add_fetch(&nstages, 1, __ATOMIC_ACQ_REL);
		} else if (st) {
			if (st->drain)
				cuStreamDestroy_v2(st->drain);
			if (st->done)
				cuEventDestroy_v2(st->done);
			if (st->dev)
				cuMemFree_v2(st->dev);
			free(st);
			st = NULL;
		}
	}
	if (r == CUDA_SUCCESS && add_owner(st, rm_graph_cond_root(owner))) /* a body's: its launches' graph */
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS)
		*dev = st->dev;
	pthread_mutex_unlock(&lock);
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

CUresult rm_graph_host_before_launch(CUgraphExec exec, CUstream stream)
{
	if (!__atomic_load_n(&nstages, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	for (struct stage *st = stages; st && r == CUDA_SUCCESS; st = st->next) {
		if (!owned_by(st, (uint64_t)(uintptr_t)exec))
			continue;
		if (st->to_host) /* what the graph leaves unwritten stays as the host has it */
			memcpy(st->snap, st->host, st->n);
		r = rm_copy_to_device(st->dev, st->to_host ? (const void *)st->snap : st->host, st->n, stream, 0);
	}
	pthread_mutex_unlock(&lock);
	return r;
}

CUresult rm_graph_host_after_launch(CUgraphExec exec, CUstream stream)
{
	if (!__atomic_load_n(&nstages, __ATOMIC_ACQUIRE))
		return CUDA_SUCCESS;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	for (struct stage *st = stages; st && r == CUDA_SUCCESS; st = st->next) {
		if (!st->to_host || !owned_by(st, (uint64_t)(uintptr_t)exec))
			continue;
		r = cuEventRecord(st->done, stream);
		if (r == CUDA_SUCCESS && !st->pending) {
			st->pending = 1;
			__atomic_add_fetch(&npending, 1, __ATOMIC_ACQ_REL);
		}
	}
	pthread_mutex_unlock(&lock);
	return r;
}

/* Brings down what the graph wrote of st's range so far: each byte of the buffer that
 * differs from the snapshot (the host range as sent up at the launch) goes to the host
 * range and the snapshot. On the stage's own stream, which waits for no other: a host
 * node's graph is stopped at the node meanwhile. Caller holds lock, st's context current. */
static CUresult drain(struct stage *st)
{
	unsigned char *dev = malloc(st->n), *host = (unsigned char *)st->host;
	CUresult r = dev ? cuMemcpyDtoHAsync_v2(dev, st->dev, st->n, st->drain) : CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS)
		r = cuStreamSynchronize(st->drain);
	for (size_t i = 0; r == CUDA_SUCCESS && i < st->n; i++)
		if (dev[i] != st->snap[i])
			host[i] = st->snap[i] = dev[i];
	free(dev);
	return r;
}

/* Every pending destination, or (done_only) those whose last launch is complete, which
 * stop being pending. */
static CUresult drain_pending(int done_only)
{
	if (!__atomic_load_n(&npending, __ATOMIC_ACQUIRE) || draining)
		return CUDA_SUCCESS;
	draining = 1;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	for (struct stage *st = stages; st && r == CUDA_SUCCESS; st = st->next) {
		if (!st->pending)
			continue;
		CUcontext cur = rm_ctx_current();
		int pushed = cur != st->ctx && cuCtxPushCurrent_v2(st->ctx) == CUDA_SUCCESS;
		CUresult q = done_only ? cuEventQuery(st->done) : CUDA_ERROR_NOT_READY;
		if (q == CUDA_SUCCESS || q == CUDA_ERROR_NOT_READY)
			r = q == CUDA_SUCCESS || !done_only ? drain(st) : CUDA_SUCCESS;
		else
			r = q;
		if (q == CUDA_SUCCESS && r == CUDA_SUCCESS) {
			st->pending = 0;
			__atomic_sub_fetch(&npending, 1, __ATOMIC_ACQ_REL);
		}
		if (pushed)
			cuCtxPopCurrent_v2(&cur);
	}
	pthread_mutex_unlock(&lock);
	draining = 0;
	return r;
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
	pthread_mutex_lock(&lock);
	for (struct stage **at = &stages; *at;) {
		struct stage *st = *at;
		for (size_t i = 0; i < st->nowners; i++)
			if (st->owners[i] == owner)
				st->owners[i--] = st->owners[--st->nowners];
		if (st->nowners || st->pending) {
			at = &st->next;
			continue;
		}
		*at = st->next;
		cuMemFree_v2(st->dev);
		if (st->done)
			cuEventDestroy_v2(st->done);
		if (st->drain)
			cuStreamDestroy_v2(st->drain);
		free(st->snap);
		free(st->owners);
		free(st);
		__atomic_sub_fetch(&nstages, 1, __ATOMIC_ACQ_REL);
	}
	for (size_t i = 0; i < nnode_graphs;)
		if (node_graphs[i].graph == owner)
			node_graphs[i] = node_graphs[--nnode_graphs];
		else
			i++;
	pthread_mutex_unlock(&lock);
}
