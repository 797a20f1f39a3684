/* A channel's runs of launches, made as graphs where they repeat (launch_replay.h). */
#include "launch_replay.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_ops.h"
#include "dispatch.h"
#include "driver_table.h"
#include "session.h"

#define RUN_MAX RM_REPLAY_CHUNK_MAX /* launches a run holds: a chunk's, at most */
#define ARENA_BYTES (64 << 10) /* their parameters */
#define SLOTS 1024             /* chunks a channel remembers, graphs among them */
#define WINDOW 16              /* slots a chunk may take, from its hash's */

struct queued {
	void *func;
	uint32_t dims[6]; /* grid x y z, block x y z */
	uint32_t smem;
	uint32_t off, len;  /* its parameters in the arena */
	uint32_t nattrs;    /* its attributes, in the arena after the parameters */
	int ex;
	uint64_t hash;
};

/* A chunk's shape remembered: seen once (no exec), held as a graph, or one the driver
 * would not make a graph of (failed). */
struct slot {
	uint64_t hash; /* 0: free */
	CUstream st;
	CUgraphExec exec;
	CUgraph graph;                  /* exec's source: its nodes are what cuGraphExecKernelNodeSetParams names */
	CUgraphNode *nodes;             /* the chunk's launches' nodes, in order */
	CUDA_KERNEL_NODE_PARAMS *kinds; /* each node's function as the driver keeps it (func, kern, ctx) */
	int n;
	uint8_t *content; /* its launches as chunk_content writes them: their parameters are exec's */
	size_t content_len;
	size_t held; /* host memory charged to the session for it */
	uint64_t used;
	int failed;
};

struct rm_launch_replay {
	/* The run: launches on stream st (the client's value v, per_thread flag) of the
	 * context the frames name (ctx). */
	uint64_t ctx, v;
	uint32_t per_thread;
	CUstream st;
	struct queued q[RUN_MAX];
	int n;
	size_t arena_used;
	uint64_t last_seq;
	uint8_t arena[ARENA_BYTES];

	struct slot slots[SLOTS];
	struct rm_host_account *host; /* the session's, charged for the slots' memory */
	uint32_t generation; /* the session's replay_generation its graphs were made under */
	uint64_t tick;
	CUstream capture; /* where chunks are captured, in capture_ctx */
	CUcontext capture_ctx;
	int off; /* chunks did not repeat: no more replay */
	uint64_t queued_launches, replayed_launches, graph_launches, graphs_made, refused, params_set;
	uint64_t cut_short, cut_by[RM_REPLAY_END_LIMIT]; /* chunks made before their end, and why */
};

static int enabled = 1;

void rm_launch_replay_enable(int on)
{
	enabled = on;
}

static uint64_t mix(uint64_t h, uint64_t w)
{
	h ^= w * 0x9e3779b97f4a7c15ull;
	h = (h << 27 | h >> 37) * 0xbf58476d1ce4e5b9ull;
	return h;
}

static uint64_t finish(uint64_t h)
{
	h ^= h >> 31;
	h *= 0x94d049bb133111ebull;
	h ^= h >> 29;
	return h ? h : 1;
}

/* The bytes a launch keeps in the arena: its parameters, then its attributes at the next
 * multiple of 8. */
static size_t attrs_at(const struct queued *l)
{
	return (l->len + 7) & ~(size_t)7;
}

static size_t kept_len(const struct queued *l)
{
	return attrs_at(l) + l->nattrs * sizeof(CUlaunchAttribute);
}

/* A launch's shape: all but its parameters' bytes (their length is in it). A chunk of
 * launches of one shape is one graph, whose kernels' parameters are set to each run's. */
static uint64_t launch_hash(const struct queued *l, const uint8_t *kept)
{
	uint64_t h = mix(0x5eed, (uint64_t)(uintptr_t)l->func);
	for (int i = 0; i < 6; i += 2)
		h = mix(h, (uint64_t)l->dims[i] << 32 | l->dims[i + 1]);
	h = mix(h, (uint64_t)l->smem << 32 | (uint64_t)l->len << 1 | (uint64_t)l->ex);
	h = mix(h, l->nattrs);
	const uint8_t *attrs = kept + attrs_at(l);
	size_t n = l->nattrs * sizeof(CUlaunchAttribute);
	for (size_t i = 0; i + 8 <= n; i += 8) { /* CUlaunchAttribute is a multiple of 8 */
		uint64_t w;
		memcpy(&w, attrs + i, 8);
		h = mix(h, w);
	}
	return finish(h);
}

/* A chunk ends after a launch whose shape hash has these bits clear: 4 launches on average. */
static int ends_chunk(const struct queued *l)
{
	return (l->hash >> 60 & 3) == 0;
}

/* A launch's record in a chunk's content: what it is, then its parameters and attributes. */
struct record {
	void *func;
	uint32_t dims[6];
	uint32_t smem, len, nattrs;
	int32_t ex;
};

static size_t chunk_content_len(const struct queued *c, int n)
{
	size_t len = 0;
	for (int i = 0; i < n; i++)
		len += sizeof(struct record) + kept_len(&c[i]);
	return len;
}

static void record_of(const struct queued *l, struct record *out)
{
	memset(out, 0, sizeof(*out));
	out->func = l->func;
	memcpy(out->dims, l->dims, sizeof(out->dims));
	out->smem = l->smem;
	out->len = l->len;
	out->nattrs = l->nattrs;
	out->ex = l->ex;
}

static void chunk_content(const struct rm_launch_replay *rp, const struct queued *c, int n, uint8_t *out)
{
	for (int i = 0; i < n; i++) {
		struct record r;
		record_of(&c[i], &r);
		memcpy(out, &r, sizeof(r));
		memcpy(out + sizeof(r), rp->arena + c[i].off, kept_len(&c[i]));
		out += sizeof(r) + kept_len(&c[i]);
	}
}

/* Whether the chunk has sl's shape: its launches' records and attributes. */
static int chunk_shape_equal(const struct rm_launch_replay *rp, const struct queued *c, int n, const struct slot *sl)
{
	if (n != sl->n || chunk_content_len(c, n) != sl->content_len)
		return 0;
	const uint8_t *p = sl->content;
	for (int i = 0; i < n; i++) {
		struct record r;
		record_of(&c[i], &r);
		size_t at = attrs_at(&c[i]);
		if (memcmp(p, &r, sizeof(r)) || memcmp(p + sizeof(r) + at, rp->arena + c[i].off + at,
						       c[i].nattrs * sizeof(CUlaunchAttribute)))
			return 0;
		p += sizeof(r) + kept_len(&c[i]);
	}
	return 1;
}

/* Gives sl's graph the chunk's parameters where they differ from those it holds. */
static CUresult set_params(struct rm_launch_replay *rp, struct slot *sl, const struct queued *c, int n)
{
	uint8_t *p = sl->content;
	for (int i = 0; i < n; i++) {
		uint8_t *held = p + sizeof(struct record);
		const uint8_t *now = rp->arena + c[i].off;
		if (memcmp(held, now, c[i].len)) {
			size_t len = c[i].len;
			void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, (void *)now, CU_LAUNCH_PARAM_BUFFER_SIZE, &len,
					 CU_LAUNCH_PARAM_END};
			CUDA_KERNEL_NODE_PARAMS kp = sl->kinds[i];
			kp.kernelParams = NULL;
			kp.extra = extra;
			CUresult r = rm_drv_cuGraphExecKernelNodeSetParams_v2(sl->exec, sl->nodes[i], &kp);
			if (r != CUDA_SUCCESS)
				return r;
			memcpy(held, now, c[i].len);
			rp->params_set++;
		}
		p += sizeof(struct record) + kept_len(&c[i]);
	}
	return CUDA_SUCCESS;
}

static void slot_clear(struct rm_launch_replay *rp, struct slot *sl)
{
	if (sl->held)
		rm_host_account_give(rp->host, sl->held);
	if (sl->exec)
		rm_drv_cuGraphExecDestroy(sl->exec);
	if (sl->graph)
		rm_drv_cuGraphDestroy(sl->graph);
	free(sl->nodes);
	free(sl->kinds);
	free(sl->content);
	memset(sl, 0, sizeof(*sl));
}

static void drop_graphs(struct rm_launch_replay *rp)
{
	for (int i = 0; i < SLOTS; i++)
		if (rp->slots[i].hash)
			slot_clear(rp, &rp->slots[i]);
}

/* The slot of chunk h on st: found (*found 1), or the one it may take (free, else the
 * least recently used of its window, cleared). */
static struct slot *slot_for(struct rm_launch_replay *rp, CUstream st, uint64_t h, int *found)
{
	size_t base = (size_t)(h ^ (uint64_t)(uintptr_t)st * 0x9e3779b97f4a7c15ull) & (SLOTS - 1);
	struct slot *take = NULL;
	for (int i = 0; i < WINDOW; i++) {
		struct slot *sl = &rp->slots[(base + i) & (SLOTS - 1)];
		if (sl->hash == h && sl->st == st) {
			*found = 1;
			return sl;
		}
		if (!take || (take->hash && (!sl->hash || sl->used < take->used)))
			take = sl;
	}
	*found = 0;
	if (take->hash)
		slot_clear(rp, take);
	return take;
}

static CUresult launch_raw(void *func, const uint32_t dims[6], uint32_t smem, int ex, CUstream st, void *params,
			   size_t len, CUlaunchAttribute *attrs, unsigned nattrs)
{
	void *extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, params, CU_LAUNCH_PARAM_BUFFER_SIZE, &len, CU_LAUNCH_PARAM_END};
	if (ex) {
		CUlaunchConfig cfg = {.gridDimX = dims[0], .gridDimY = dims[1], .gridDimZ = dims[2], .blockDimX = dims[3],
				      .blockDimY = dims[4], .blockDimZ = dims[5], .sharedMemBytes = smem, .hStream = st,
				      .attrs = attrs, .numAttrs = nattrs};
		return rm_drv_cuLaunchKernelEx(&cfg, func, NULL, len ? extra : NULL);
	}
	return rm_drv_cuLaunchKernel(func, dims[0], dims[1], dims[2], dims[3], dims[4], dims[5], smem, st, NULL,
				     len ? extra : NULL);
}

static CUresult launch_one(struct rm_launch_replay *rp, const struct queued *l, CUstream st)
{
	return launch_raw(l->func, l->dims, l->smem, l->ex, st, rp->arena + l->off, l->len,
			  (CUlaunchAttribute *)(rp->arena + l->off + attrs_at(l)), l->nattrs);
}

/* Captures the chunk into sl's graph, with each launch's node, and instantiates it, on the
 * channel's capture stream of ctx (the current context). */
static CUresult make_graph(struct rm_launch_replay *rp, CUcontext ctx, const struct queued *c, int n, struct slot *sl)
{
	CUresult r = CUDA_SUCCESS;
	if (rp->capture && rp->capture_ctx != ctx) {
		rm_drv_cuStreamDestroy_v2(rp->capture);
		rp->capture = NULL;
	}
	if (!rp->capture && (r = rm_drv_cuStreamCreate(&rp->capture, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS) {
		rp->capture = NULL;
		return r;
	}
	rp->capture_ctx = ctx;
	sl->nodes = calloc((size_t)n, sizeof(*sl->nodes));
	sl->kinds = calloc((size_t)n, sizeof(*sl->kinds));
	if (!sl->nodes || !sl->kinds)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if ((r = rm_drv_cuStreamBeginCapture_v2(rp->capture, CU_STREAM_CAPTURE_MODE_RELAXED)) != CUDA_SUCCESS)
		return r;
	for (int i = 0; i < n && r == CUDA_SUCCESS; i++) {
		const CUgraphNode *deps = NULL;
		size_t ndeps = 0;
		CUstreamCaptureStatus status;
		r = launch_one(rp, &c[i], rp->capture);
		if (r == CUDA_SUCCESS)
			r = rm_drv_cuStreamGetCaptureInfo_v3(rp->capture, &status, NULL, NULL, &deps, NULL, &ndeps);
		if (r == CUDA_SUCCESS && (ndeps != 1 || !deps))
			r = CUDA_ERROR_NOT_SUPPORTED; /* not one chain: its nodes are not known */
		if (r == CUDA_SUCCESS)
			sl->nodes[i] = deps[0];
	}
	CUresult ended = rm_drv_cuStreamEndCapture(rp->capture, &sl->graph);
	if (r == CUDA_SUCCESS)
		r = ended;
	for (int i = 0; i < n && r == CUDA_SUCCESS; i++)
		r = rm_drv_cuGraphKernelNodeGetParams_v2(sl->nodes[i], &sl->kinds[i]);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuGraphInstantiateWithFlags(&sl->exec, sl->graph, 0);
	if (r == CUDA_SUCCESS)
		sl->n = n;
	return r;
}

static void launch_each(struct rm_channel *s, struct rm_launch_replay *rp, const struct queued *c, int n)
{
	for (int i = 0; i < n; i++) {
		CUresult r = launch_one(rp, &c[i], rp->st);
		if (r != CUDA_SUCCESS)
			rm_request_async_error(s, c[i].ex ? RM_OP_cuLaunchKernelEx : RM_OP_cuLaunchKernel, r);
	}
}

static void give_up_if_useless(struct rm_channel *s, struct rm_launch_replay *rp)
{
	if (rp->graphs_made < RM_REPLAY_GIVE_UP_AFTER || rp->graph_launches >= rp->graphs_made)
		return;
	rp->off = 1;
	drop_graphs(rp);
	rm_session_log(s, RM_LOG_INFO,
	               "channel %d: launch replay off: %llu graphs made, launched %llu times (its launches do "
	               "not repeat)",
	               s->chan, (unsigned long long)rp->graphs_made, (unsigned long long)rp->graph_launches);
}

static void make_chunk(struct rm_channel *s, struct rm_launch_replay *rp, const struct queued *c, int n)
{
	if (rp->off) {
		launch_each(s, rp, c, n);
		return;
	}
	uint64_t h = 0x7e57;
	for (int i = 0; i < n; i++)
		h = mix(h, c[i].hash);
	h = finish(h);
	int found;
	struct slot *sl = slot_for(rp, rp->st, h, &found);
	sl->used = ++rp->tick;
	if (!found) { /* first seen */
		sl->hash = h;
		sl->st = rp->st;
	} else if (!sl->exec && !sl->failed) { /* seen once before: made a graph of */
		size_t len = chunk_content_len(c, n);
		size_t held = len + (size_t)n * (sizeof(*sl->nodes) + sizeof(*sl->kinds));
		CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
		if (!rm_host_account_take(rp->host, held)) {
			sl->held = held;
			if ((sl->content = malloc(len)))
				r = make_graph(rp, s->cur->ctx, c, n, sl);
		}
		if (r == CUDA_SUCCESS) {
			chunk_content(rp, c, n, sl->content);
			sl->content_len = len;
			rp->graphs_made++;
		} else {
			slot_clear(rp, sl);
			sl->hash = h;
			sl->st = rp->st;
			sl->used = rp->tick;
			sl->failed = 1;
			rp->refused++;
		}
	}
	if (sl->exec && chunk_shape_equal(rp, c, n, sl)) {
		if (set_params(rp, sl, c, n) == CUDA_SUCCESS && rm_drv_cuGraphLaunch(sl->exec, rp->st) == CUDA_SUCCESS) {
			rp->graph_launches++;
			rp->replayed_launches += (uint64_t)n;
			give_up_if_useless(s, rp);
			return;
		}
		slot_clear(rp, sl); /* its launches, one by one, tell why */
	}
	launch_each(s, rp, c, n);
	give_up_if_useless(s, rp);
}

/* Makes the pending chunk. */
static void make_pending(struct rm_channel *s, struct rm_launch_replay *rp)
{
	uint32_t gen = __atomic_load_n(&s->sh->replay_generation, __ATOMIC_ACQUIRE);
	if (rp->generation != gen) {
		drop_graphs(rp);
		rp->generation = gen;
	}
	make_chunk(s, rp, rp->q, rp->n);
	rp->n = 0;
	rp->arena_used = 0;
}

int rm_launch_replay_wanted(struct rm_channel *s, const struct rm_frame *f, const CUlaunchAttribute *attrs,
			    unsigned nattrs)
{
	struct rm_session *sh = s->sh;
	if (!enabled || !(f->flags & RM_F_ASYNC) || !s->cur || sh->kernel_watch ||
	    __atomic_load_n(&sh->replay_off, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) ||
	    (s->replay && s->replay->off))
		return 0;
	for (unsigned i = 0; i < nattrs; i++) { /* the message's bytes: not aligned */
		CUlaunchAttributeID id;
		memcpy(&id, (const uint8_t *)attrs + i * sizeof(*attrs) + offsetof(CUlaunchAttribute, id), sizeof(id));
		if (id == CU_LAUNCH_ATTRIBUTE_PRIORITY)
			return 0;
	}
	return 1;
}

int rm_launch_replay_pending(const struct rm_channel *s)
{
	return s->replay && s->replay->n;
}

int rm_launch_replay_continues(const struct rm_channel *s, const struct rm_frame *f)
{
	return (f->op == RM_OP_cuLaunchKernel || f->op == RM_OP_cuLaunchKernelEx) && (f->flags & RM_F_ASYNC) &&
	       f->ctx == s->replay->ctx;
}

void rm_launch_replay_before(struct rm_channel *s, const struct rm_frame *f, uint64_t v)
{
	struct rm_launch_replay *rp = s->replay;
	if (rp && rp->n && (f->ctx != rp->ctx || v != rp->v || (f->flags & RM_F_PER_THREAD) != rp->per_thread))
		rm_launch_replay_flush(s, RM_REPLAY_END_STREAM);
}

CUresult rm_launch_replay_add(struct rm_channel *s, const struct rm_frame *f, uint64_t v, CUstream st, void *func,
			      const CUlaunchConfig *cfg, const void *params, size_t params_len, int ex)
{
	struct rm_launch_replay *rp = s->replay;
	if (!rp && !rm_host_account_take(&s->sh->host, sizeof(*rp))) {
		if ((rp = s->replay = calloc(1, sizeof(*rp))))
			rp->host = &s->sh->host;
		else
			rm_host_account_give(&s->sh->host, sizeof(*rp));
	}
	struct queued l = {.func = func,
			   .dims = {cfg->gridDimX, cfg->gridDimY, cfg->gridDimZ, cfg->blockDimX, cfg->blockDimY,
				    cfg->blockDimZ},
			   .smem = cfg->sharedMemBytes,
			   .len = (uint32_t)params_len,
			   .nattrs = cfg->numAttrs,
			   .ex = ex};
	size_t kept = kept_len(&l);
	if (rp && rp->n && rp->st != st)
		rm_launch_replay_flush(s, RM_REPLAY_END_STREAM);
	else if (rp && rp->n && (rp->n == RUN_MAX || kept > ARENA_BYTES - rp->arena_used))
		rm_launch_replay_flush(s, RM_REPLAY_END_FULL);
	if (!rp || kept > ARENA_BYTES) /* made at once: no memory for a run, or too long for one */
		return launch_raw(func, l.dims, l.smem, ex, st, (void *)params, params_len, cfg->attrs, cfg->numAttrs);
	if (!rp->n) {
		rp->ctx = f->ctx;
		rp->v = v;
		rp->per_thread = f->flags & RM_F_PER_THREAD;
		rp->st = st;
	}
	l.off = (uint32_t)rp->arena_used;
	if (params_len) /* a kernel without parameters comes with none (NULL) */
		memcpy(rp->arena + l.off, params, params_len);
	if (l.nattrs)
		memcpy(rp->arena + l.off + attrs_at(&l), cfg->attrs, l.nattrs * sizeof(CUlaunchAttribute));
	rp->arena_used += (kept + 7) & ~(size_t)7;
	if (rp->arena_used > ARENA_BYTES)
		rp->arena_used = ARENA_BYTES;
	l.hash = launch_hash(&l, rp->arena + l.off);
	rp->q[rp->n++] = l;
	rp->last_seq = f->seq;
	rp->queued_launches++;
	if (ends_chunk(&l) || rp->n == RM_REPLAY_CHUNK_MAX) /* the GPU has it as soon as it is whole */
		make_pending(s, rp);
	return CUDA_SUCCESS;
}

uint64_t rm_launch_replay_make(struct rm_channel *s, uint32_t why)
{
	struct rm_launch_replay *rp = s->replay;
	if (!rp || !rp->n)
		return 0;
	make_pending(s, rp);
	rp->cut_short++;
	rp->cut_by[why < RM_REPLAY_END_LIMIT ? why : RM_REPLAY_END_PROTOCOL]++;
	return rp->last_seq;
}

void rm_launch_replay_flush(struct rm_channel *s, uint32_t why)
{
	uint64_t seq = rm_launch_replay_make(s, why);
	if (seq)
		rm_session_progress(s, seq);
}

void rm_launch_replay_drop_all(struct rm_channel *s)
{
	__atomic_add_fetch(&s->sh->replay_generation, 1, __ATOMIC_ACQ_REL);
}

void rm_launch_replay_stream_attrs_set(struct rm_channel *s)
{
	__atomic_store_n(&s->sh->replay_off, 1, __ATOMIC_RELEASE);
}

static const char *end_name(uint32_t why)
{
	static const char *const names[RM_REPLAY_END_LIMIT - RM_REPLAY_END_BATCH] = {
		[RM_REPLAY_END_BATCH - RM_REPLAY_END_BATCH] = "batch end",
		[RM_REPLAY_END_FULL - RM_REPLAY_END_BATCH] = "full run",
		[RM_REPLAY_END_STREAM - RM_REPLAY_END_BATCH] = "another stream",
		[RM_REPLAY_END_UNREPLAYED - RM_REPLAY_END_BATCH] = "a launch not replayed",
		[RM_REPLAY_END_FENCE - RM_REPLAY_END_BATCH] = "a fence",
		[RM_REPLAY_END_PROTOCOL - RM_REPLAY_END_BATCH] = "a protocol call",
	};
	return why >= RM_REPLAY_END_BATCH ? names[why - RM_REPLAY_END_BATCH] : rm_op_names[why] ? rm_op_names[why] : "?";
}

void rm_launch_replay_free(struct rm_channel *s)
{
	struct rm_launch_replay *rp = s->replay;
	if (!rp)
		return;
	if (rp->queued_launches) {
		char ends[256] = "";
		size_t at = 0;
		for (int k = 0; k < 4; k++) { /* the four commonest reasons a chunk was cut short */
			uint32_t top = 0;
			for (uint32_t w = 1; w < RM_REPLAY_END_LIMIT; w++)
				if (rp->cut_by[w] > rp->cut_by[top])
					top = w;
			if (!rp->cut_by[top])
				break;
			int n = snprintf(ends + at, sizeof(ends) - at, "%s%s %llu", k ? ", " : "", end_name(top),
					 (unsigned long long)rp->cut_by[top]);
			at = n > 0 && (size_t)n < sizeof(ends) - at ? at + (size_t)n : sizeof(ends) - 1;
			rp->cut_by[top] = 0;
		}
		rm_session_log(s, RM_LOG_INFO,
		               "channel %d: launch replay: %llu of %llu launches made as %llu graph launches, %llu "
		               "kernels' parameters set; %llu graphs made, %llu refused; %llu chunks cut short, by %s",
		               s->chan, (unsigned long long)rp->replayed_launches, (unsigned long long)rp->queued_launches,
		               (unsigned long long)rp->graph_launches, (unsigned long long)rp->params_set,
		               (unsigned long long)rp->graphs_made, (unsigned long long)rp->refused,
		               (unsigned long long)rp->cut_short, ends);
	}
	drop_graphs(rp);
	if (rp->capture)
		rm_drv_cuStreamDestroy_v2(rp->capture);
	free(rp);
	s->replay = NULL;
	rm_host_account_give(&s->sh->host, sizeof(*rp));
}
