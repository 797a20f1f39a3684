/* Session state: an open-addressing table of owned handles, a sorted list of
 * owned memory for range checks, and the client's per-context default streams. */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.pb-c.h"
#include "api_ops.h"
#include "call_profile.h"
#include "copy_links.h"
#include "driver_table.h"
#include "fault.h"
#include "gpus.h"
#include "host_functions.h"
#include "image_cache.h"
#include "kernel_timing.h"
#include "kernel_watch.h"
#include "log.h"
#include "registry.h"
#include "server.h"
#include "shared_host.h"
#include "stream_pool.h"
#include "stream_wait.h"

#define STAGING_SIZE (8u << 20)
#define TOMBSTONE UINT32_MAX

struct rm_session *rm_session_new(struct rm_conn *conn, const struct rm_daemon_config *cfg,
				  const struct rm_handoff *h)
{
	struct rm_session *s = calloc(1, sizeof(*s));
	struct rm_session_shared *sh = calloc(1, sizeof(*sh));
	if (!s || !sh || rm_link_init(&s->link, conn)) {
		free(sh);
		free(s);
		return NULL;
	}
	s->sh = sh;
	pthread_mutex_init(&sh->lock, NULL);
	pthread_mutex_init(&sh->copy_lock, NULL);
	pthread_rwlock_init(&sh->shared_lock, NULL);
	sh->shared_limit = cfg->shared_pinned_limit;
	const struct rm_tenant_config *tenant = h->tenant >= 0 && h->tenant < cfg->ntenants ? &cfg->tenants[h->tenant]
										 : &cfg->anonymous;
	int kernel_s = tenant->kernel_time_limit_s ? tenant->kernel_time_limit_s : cfg->kernel_time_limit_s;
	sh->kernel_watch = rm_kernel_watch_new((uint32_t)kernel_s * 1000u);
	sh->host.limit = cfg->client_host_memory_limit;
	pthread_cond_init(&sh->channel_gone, NULL);
	pthread_cond_init(&sh->progress, NULL);
	sh->channels[0] = s;
	s->max_channels = cfg->max_channels;
	pthread_mutex_init(&s->send_lock, NULL);
	s->slot = h->slot;
	memcpy(s->attach_key, h->key, sizeof(s->attach_key)); /* made by the accepting process (attach_keys.h) */
	s->id = rm_registry()->clients[h->slot].session_id;
	sh->host.owner = s->id;
	rm_staging_init(&s->staging, STAGING_SIZE, &sh->host);
	/* Its connection's read buffer and ring (unix:), of the client's choosing. */
	s->ring_bytes = RM_LINK_RBUF + rm_conn_held(conn);
	if (rm_host_account_take_essential(&sh->host, s->ring_bytes)) {
		rm_log(RM_LOG_WARN, "client %s: refused: its connection's buffers of %llu bytes pass its "
		       "client_host_memory_limit", h->name,
		       (unsigned long long)s->ring_bytes);
		s->link.conn = NULL; /* the caller's still */
		rm_link_close(&s->link);
		free(sh);
		free(s);
		return NULL;
	}
	s->tenant = h->tenant;
	snprintf(s->tenant_name, sizeof(s->tenant_name), "%s", h->tenant_name);
	s->ndevices = h->ndevices;
	memcpy(s->devices, h->devices, sizeof(s->devices));
	s->hello_seq = h->hello_seq;
	s->pid = h->pid;
	uint32_t ours = (uint32_t)cfg->peer_timeout_s * 1000 / 6;
	s->heartbeat_ms = h->heartbeat_ms && h->heartbeat_ms < ours ? h->heartbeat_ms : ours;
	if (s->heartbeat_ms < RM_MIN_HEARTBEAT_MS)
		s->heartbeat_ms = RM_MIN_HEARTBEAT_MS;
	snprintf(s->name, sizeof(s->name), "%s", h->name);
	snprintf(s->peer, sizeof(s->peer), "%s", rm_conn_peer(conn));
	sh->hostfn = rm_hostfn_hub_new(s, cfg->peer_timeout_s);
	return s;
}

CUresult rm_session_charge(struct rm_session *s, uint64_t bytes)
{
	uint64_t client_limit, tenant_limit;
	if (!rm_registry_charge(s->slot, s->id, rm_charged_bytes(bytes), &client_limit, &tenant_limit))
		return CUDA_SUCCESS;
	rm_log(RM_LOG_WARN, "session %llu (%s): allocation of %llu bytes (charged %llu) refused: over its quota "
	       "(client %llu, tenant %s %llu bytes; 0 is none)", (unsigned long long)s->id, s->name,
	       (unsigned long long)bytes, (unsigned long long)rm_charged_bytes(bytes), (unsigned long long)client_limit,
	       s->tenant_name, (unsigned long long)tenant_limit);
	return CUDA_ERROR_OUT_OF_MEMORY;
}

void rm_session_uncharge(struct rm_session *s, uint64_t bytes)
{
	rm_registry_uncharge(s->slot, s->id, rm_charged_bytes(bytes));
}

uint64_t rm_session_client_limit(struct rm_session *s)
{
	uint64_t client_limit, tenant_limit, mine, tenant;
	rm_registry_usage(s->slot, &client_limit, &tenant_limit, &mine, &tenant);
	return client_limit;
}

void rm_session_memory_view(struct rm_session *s, size_t *free_b, size_t *total_b)
{
	uint64_t client_limit, tenant_limit, mine, tenant;
	rm_registry_usage(s->slot, &client_limit, &tenant_limit, &mine, &tenant);
	if (client_limit) {
		if (*total_b > client_limit)
			*total_b = client_limit;
		uint64_t left = client_limit > mine ? client_limit - mine : 0;
		if (*free_b > left)
			*free_b = left;
	}
	if (tenant_limit) {
		if (*total_b > tenant_limit)
			*total_b = tenant_limit;
		uint64_t left = tenant_limit > tenant ? tenant_limit - tenant : 0;
		if (*free_b > left)
			*free_b = left;
	}
}

static size_t slot_of(uint32_t kind, uint64_t v, size_t cap)
{
	uint64_t h = (v ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 20) & (cap - 1);
}

static struct rm_handle *find_slot(struct rm_session *s, uint32_t kind, uint64_t v)
{
	if (!s->sh->handles_cap)
		return NULL;
	for (size_t i = slot_of(kind, v, s->sh->handles_cap), n = 0; n < s->sh->handles_cap;
	     i = (i + 1) & (s->sh->handles_cap - 1), n++) {
		struct rm_handle *h = &s->sh->handles[i];
		if (!h->kind)
			return NULL;
		if (h->kind == kind && h->value == v)
			return h;
	}
	return NULL;
}

int rm_session_find(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out)
{
	pthread_mutex_lock(&s->sh->lock);
	const struct rm_handle *h = find_slot(s, kind, v);
	if (h && out)
		*out = *h;
	pthread_mutex_unlock(&s->sh->lock);
	return h != NULL;
}

int rm_session_each(struct rm_session *s, enum rm_handle_kind kind, int (*visit)(const struct rm_handle *h, void *arg),
		    void *arg)
{
	int stop = 0;
	pthread_mutex_lock(&s->sh->lock);
	for (size_t i = 0; i < s->sh->handles_cap && !stop; i++)
		if (s->sh->handles[i].kind == (uint32_t)kind)
			stop = visit(&s->sh->handles[i], arg);
	pthread_mutex_unlock(&s->sh->lock);
	return stop;
}

int rm_session_set_parent(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, uint64_t parent)
{
	pthread_mutex_lock(&s->sh->lock);
	struct rm_handle *h = find_slot(s, kind, v);
	if (h)
		h->parent = parent;
	pthread_mutex_unlock(&s->sh->lock);
	return h != NULL;
}

/* Rebuilds the table without tombstones, at the size that keeps it at most half full
 * (so churn with few live handles does not grow it). */
static int grow(struct rm_session *s)
{
	size_t cap = 64;
	while (cap < (s->sh->handles_live + 1) * 2)
		cap *= 2;
	struct rm_handle *old = s->sh->handles, *t = calloc(cap, sizeof(*t));
	if (!t)
		return -ENOMEM;
	size_t oldcap = s->sh->handles_cap;
	s->sh->handles = t;
	s->sh->handles_cap = cap;
	s->sh->handles_used = 0;
	for (size_t i = 0; i < oldcap; i++)
		if (old[i].kind && old[i].kind != TOMBSTONE) {
			size_t j = slot_of(old[i].kind, old[i].value, cap);
			while (t[j].kind)
				j = (j + 1) & (cap - 1);
			t[j] = old[i];
			s->sh->handles_used++;
		}
	free(old);
	return 0;
}

static void range_insert(struct rm_session *s, const struct rm_handle *h)
{
	if (s->sh->nranges == s->sh->ranges_cap) {
		size_t cap = s->sh->ranges_cap ? s->sh->ranges_cap * 2 : 64;
		struct rm_handle *r = realloc(s->sh->ranges, cap * sizeof(*r));
		if (!r)
			return;
		s->sh->ranges = r;
		s->sh->ranges_cap = cap;
	}
	size_t i = s->sh->nranges;
	while (i > 0 && s->sh->ranges[i - 1].value > h->value) {
		s->sh->ranges[i] = s->sh->ranges[i - 1];
		i--;
	}
	s->sh->ranges[i] = *h;
	s->sh->nranges++;
}

static void range_remove(struct rm_session *s, uint64_t base)
{
	for (size_t i = 0; i < s->sh->nranges; i++)
		if (s->sh->ranges[i].value == base) {
			memmove(&s->sh->ranges[i], &s->sh->ranges[i + 1], (s->sh->nranges - i - 1) * sizeof(*s->sh->ranges));
			s->sh->nranges--;
			return;
		}
}

static void own_locked(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, uint64_t size, uint64_t parent)
{
	if (find_slot(s, kind, v))
		return; /* asked for again (cuModuleGetFunction of one function): one record */
	if ((s->sh->handles_used + 1) * 4 > s->sh->handles_cap * 3 && grow(s)) {
		rm_log(RM_LOG_ERROR, "session %llu: out of memory recording a handle", (unsigned long long)s->id);
		return;
	}
	struct rm_handle h = {.value = v, .size = size, .parent = parent, .kind = kind};
	size_t i = slot_of(kind, v, s->sh->handles_cap);
	while (s->sh->handles[i].kind && s->sh->handles[i].kind != TOMBSTONE)
		i = (i + 1) & (s->sh->handles_cap - 1);
	if (!s->sh->handles[i].kind)
		s->sh->handles_used++;
	s->sh->handles[i] = h;
	s->sh->handles_live++;
	if (kind == RM_H_MEMORY || kind == RM_H_GLOBAL || kind == RM_H_MAPPING)
		range_insert(s, &h);
	if (kind == RM_H_MEMORY || kind == RM_H_PHYSICAL)
		s->sh->mem_bytes += size;
	if (kind == RM_H_STREAM && s->sh->nstreams == s->sh->streams_cap) {
		size_t cap = s->sh->streams_cap ? 2 * s->sh->streams_cap : 16;
		CUstream *grown = realloc(s->sh->streams, cap * sizeof(*grown));
		if (grown)
			s->sh->streams = grown, s->sh->streams_cap = cap;
	}
	if (kind == RM_H_STREAM && s->sh->nstreams < s->sh->streams_cap)
		s->sh->streams[s->sh->nstreams++] = (CUstream)(uintptr_t)v;
	else if (kind == RM_H_STREAM)
		rm_log(RM_LOG_ERROR, "session %llu: out of memory recording a stream: a synchronize will not wait for it",
		       (unsigned long long)s->id);
}

void rm_session_own_memory(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, uint64_t size,
			   uint64_t parent)
{
	pthread_mutex_lock(&s->sh->lock);
	own_locked(s, kind, v, size, parent);
	pthread_mutex_unlock(&s->sh->lock);
}

void rm_session_own(struct rm_session *s, enum rm_handle_kind kind, const void *h, uint64_t parent)
{
	rm_session_own_memory(s, kind, (uint64_t)(uintptr_t)h, 0, parent);
}

/* Forgets v and its dependents: 1, or 0 when v was not owned. */
static int disown_locked(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out)
{
	struct rm_handle *h = find_slot(s, kind, v);
	if (!h)
		return 0;
	if (out)
		*out = *h;
	if (kind == RM_H_MEMORY || kind == RM_H_GLOBAL || kind == RM_H_MAPPING)
		range_remove(s, v);
	if (kind == RM_H_MEMORY || kind == RM_H_PHYSICAL)
		s->sh->mem_bytes -= h->size;
	if (kind == RM_H_STREAM) {
		rm_stream_order_remove(s, (CUstream)(uintptr_t)v);
		for (size_t i = 0; i < s->sh->nstreams; i++)
			if (s->sh->streams[i] == (CUstream)(uintptr_t)v) {
				s->sh->streams[i] = s->sh->streams[--s->sh->nstreams];
				break;
			}
	}
	h->kind = TOMBSTONE;
	s->sh->handles_live--;
	/* Only modules, libraries and kernels have dependents (functions, globals, kernels). */
	if (kind != RM_H_MODULE && kind != RM_H_LIBRARY && kind != RM_H_KERNEL && kind != RM_H_GRAPH)
		return 1; /* a graph's dependents are its nodes */
	for (size_t i = 0; i < s->sh->handles_cap; i++) {
		struct rm_handle *c = &s->sh->handles[i];
		/* A mapping's parent is a physical allocation, a physical one's a flag: never a module. */
		if (c->kind && c->kind != TOMBSTONE && c->kind != RM_H_MAPPING && c->kind != RM_H_PHYSICAL &&
		    c->parent == v)
			disown_locked(s, c->kind, c->value, NULL);
	}
	return 1;
}

int rm_session_take(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out)
{
	pthread_mutex_lock(&s->sh->lock);
	int owned = disown_locked(s, kind, v, out);
	pthread_mutex_unlock(&s->sh->lock);
	return owned;
}

void rm_session_disown_value(struct rm_session *s, enum rm_handle_kind kind, uint64_t v)
{
	rm_session_take(s, kind, v, NULL);
}

void rm_session_disown(struct rm_session *s, enum rm_handle_kind kind, const void *h)
{
	rm_session_disown_value(s, kind, (uint64_t)(uintptr_t)h);
}

/* Context i of the session, or NULL (the list is only appended to). */
static struct rm_session_ctx *ctx_at(struct rm_session *s, int i)
{
	return i < __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE) ? &s->sh->ctxs[i] : NULL;
}

CUresult rm_session_use(struct rm_session *s, enum rm_handle_kind kind, uint64_t v, void **out)
{
	if (kind == RM_H_CONTEXT) {
		struct rm_session_ctx *c;
		for (int i = 0; (c = ctx_at(s, i)); i++)
			if ((uint64_t)(uintptr_t)c->ctx == v) {
				*out = c->ctx;
				return CUDA_SUCCESS;
			}
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	pthread_mutex_lock(&s->sh->lock);
	int owned = find_slot(s, kind, v) != NULL, kernel = !owned && kind == RM_H_FUNCTION && find_slot(s, RM_H_KERNEL, v);
	pthread_mutex_unlock(&s->sh->lock);
	if (owned) {
		*out = (void *)(uintptr_t)v;
		return CUDA_SUCCESS;
	}
	/* A CUkernel is accepted wherever a CUfunction is: it stands for its function in the current context. */
	if (kernel)
		return rm_drv.cuKernelGetFunction((CUfunction *)out, (CUkernel)(uintptr_t)v);
	rm_log(RM_LOG_WARN, "session %llu (%s): refused handle 0x%llx of kind %d it does not own",
	       (unsigned long long)s->id, s->name, (unsigned long long)v, kind);
	return CUDA_ERROR_INVALID_HANDLE;
}

/* The per-thread default stream of channel chan in c: one per client thread with a
 * channel of its own, one for the threads sharing the main connection; blocking like
 * CUDA's per-thread streams. Only the channel's own thread makes it. */
static CUresult per_thread_stream(struct rm_session_ctx *c, int chan, CUstream *out)
{
	pthread_mutex_lock(&c->order_lock);
	CUstream st = c->per_thread[chan];
	pthread_mutex_unlock(&c->order_lock);
	if (!st) {
		CUresult r = rm_stream_pool_take(c->ctx, 0, &st);
		if (r == CUDA_SUCCESS && (r = rm_stream_order_add(c, st)) != CUDA_SUCCESS)
			rm_stream_pool_give(st);
		if (r != CUDA_SUCCESS)
			return r;
		pthread_mutex_lock(&c->order_lock);
		c->per_thread[chan] = st;
		c->nper_thread++;
		pthread_mutex_unlock(&c->order_lock);
	}
	*out = st;
	return CUDA_SUCCESS;
}

/* rm_session_stream without naming the stream to the pool. */
static CUresult resolve_stream(struct rm_session *s, uint64_t v, uint32_t frame_flags, CUstream *out)
{
	CUresult r;
	int per_thread = v == (uint64_t)(uintptr_t)CU_STREAM_PER_THREAD || (v == 0 && (frame_flags & RM_F_PER_THREAD));
	if (per_thread || v == 0 || v == (uint64_t)(uintptr_t)CU_STREAM_LEGACY) {
		if (!s->cur)
			return CUDA_ERROR_INVALID_CONTEXT;
		if (per_thread)
			r = per_thread_stream(s->cur, s->chan, out);
		else
			*out = s->cur->default_stream, r = CUDA_SUCCESS;
	} else {
		r = rm_session_use(s, RM_H_STREAM, v, (void **)out);
	}
	if (r != CUDA_SUCCESS || !s->cur)
		return r;
	/* During a capture nothing of the daemon's own (ordering events, waits for a shared
	 * queue) may go onto a capturing stream: it would be captured, or be an illegal call
	 * that invalidates the capture. And the legacy stream may not be used while one of
	 * the client's blocking streams captures, as in CUDA. */
	if (s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0) {
		if (rm_capture_active(*out))
			return CUDA_SUCCESS;
		if (*out == s->cur->default_stream && (r = rm_capture_check_legacy(s->cur)) != CUDA_SUCCESS)
			return r;
	}
	return rm_stream_order_before(s->cur, *out);
}

CUresult rm_session_stream(struct rm_session *s, uint64_t v, uint32_t frame_flags, CUstream *out)
{
	CUresult r = resolve_stream(s, v, frame_flags, out);
	if (r == CUDA_SUCCESS)
		rm_stream_pool_named(*out);
	return r;
}

/* The submission names the stream (rm_stream_pool_before_submit). */
CUresult rm_session_stream_submit(struct rm_session *s, uint64_t v, uint32_t frame_flags, CUstream *out)
{
	CUresult r = resolve_stream(s, v, frame_flags, out);
	if (r == CUDA_SUCCESS && s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 && rm_capture_active(*out))
		return CUDA_SUCCESS;
	return r == CUDA_SUCCESS ? rm_stream_pool_before_submit(*out) : r;
}

int rm_session_sync_follows(struct rm_session *s, const struct rm_frame *launch, uint64_t v)
{
	struct rm_frame f;
	const uint8_t *msg;
	if (!rm_link_buffered(&s->link) || rm_link_peek_frame(&s->link, &f, &msg) || f.ctx != launch->ctx ||
	    f.bulk_len || (f.flags & (RM_F_REPLY | RM_F_ASYNC)))
		return 0;
	if (f.op == RM_OP_cuCtxSynchronize || (f.op == RM_OP_cuCtxSynchronize_v2 && !f.msg_len))
		return 1; /* the current context's: the client's every stream there */
	if (f.op != RM_OP_cuStreamSynchronize || !msg)
		return 0;
	Remora__CuStreamSynchronizeReq *req = remora__cu_stream_synchronize__req__unpack(NULL, f.msg_len, msg);
	if (!req)
		return 0;
	int same = req->hstream == v && (f.flags & RM_F_PER_THREAD) == (launch->flags & RM_F_PER_THREAD);
	remora__cu_stream_synchronize__req__free_unpacked(req, NULL);
	return same;
}

CUresult rm_session_check_span(struct rm_session *s, uint64_t ptr, uint64_t count, uint64_t unit)
{
	uint64_t len;
	if (__builtin_mul_overflow(count, unit, &len))
		return CUDA_ERROR_INVALID_VALUE;
	return rm_session_check_range(s, ptr, len);
}

/* The last owned range with base <= ptr, or NULL. Under sh->lock. */
static const struct rm_handle *range_below(struct rm_session *s, uint64_t ptr)
{
	size_t lo = 0, hi = s->sh->nranges;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (s->sh->ranges[mid].value <= ptr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo > 0 ? &s->sh->ranges[lo - 1] : NULL;
}

int rm_session_range_of(struct rm_session *s, uint64_t ptr, struct rm_handle *out)
{
	pthread_mutex_lock(&s->sh->lock);
	const struct rm_handle *r = range_below(s, ptr);
	int found = r && ptr - r->value < r->size;
	if (found && out)
		*out = *r;
	pthread_mutex_unlock(&s->sh->lock);
	return found;
}

CUresult rm_session_check_range(struct rm_session *s, uint64_t ptr, uint64_t len)
{
	pthread_mutex_lock(&s->sh->lock);
	const struct rm_handle *r = range_below(s, ptr);
	int ok = r && ptr - r->value <= r->size && len <= r->size - (ptr - r->value);
	pthread_mutex_unlock(&s->sh->lock);
	if (ok)
		return CUDA_SUCCESS;
	rm_log(RM_LOG_WARN, "session %llu (%s): refused device range 0x%llx+%llu it does not own",
	       (unsigned long long)s->id, s->name, (unsigned long long)ptr, (unsigned long long)len);
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult rm_session_device(struct rm_session *s, int ordinal, CUdevice *out)
{
	if (ordinal < 0 || ordinal >= s->ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*out = s->devices[ordinal];
	return CUDA_SUCCESS;
}

CUresult rm_session_device_out(struct rm_session *s, CUdevice dev, CUdevice *out)
{
	for (int i = 0; i < s->ndevices; i++)
		if (s->devices[i] == dev) {
			*out = i;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_DEVICE; /* a GPU the client does not see */
}

static CUresult add_ctx_locked(struct rm_session *s, CUdevice dev, CUcontext *out)
{
	for (int i = 0; i < s->sh->nctx; i++)
		if (s->sh->ctxs[i].dev == dev) {
			*out = s->sh->ctxs[i].ctx;
			return CUDA_SUCCESS;
		}
	if (s->sh->nctx == RM_SESSION_MAX_CTX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUcontext ctx;
	CUresult r = rm_gpu_acquire(dev, &ctx);
	if (r != CUDA_SUCCESS)
		return r;
	CUcontext prev = s->thread_ctx;
	r = rm_drv.cuCtxSetCurrent(ctx);
	CUstream stream = NULL;
	if (r == CUDA_SUCCESS)
		r = rm_stream_pool_take(ctx, 0, &stream);
	rm_drv.cuCtxSetCurrent(prev);
	if (r != CUDA_SUCCESS) {
		rm_gpu_release(dev);
		return r;
	}
	struct rm_session_ctx *c = &s->sh->ctxs[s->sh->nctx];
	*c = (struct rm_session_ctx){.ctx = ctx, .dev = dev, .default_stream = stream};
	pthread_mutex_init(&c->order_lock, NULL);
	__atomic_store_n(&s->sh->nctx, s->sh->nctx + 1, __ATOMIC_RELEASE);
	*out = ctx;
	return CUDA_SUCCESS;
}

/* Held across the context's creation (rm_gpu_acquire), so that two threads' first calls
 * on a device make one. */
CUresult rm_session_add_ctx(struct rm_session *s, CUdevice dev, CUcontext *out)
{
	pthread_mutex_lock(&s->sh->lock);
	CUresult r = add_ctx_locked(s, dev, out);
	pthread_mutex_unlock(&s->sh->lock);
	return r;
}


CUresult rm_session_enter(struct rm_session *s, uint64_t ctx)
{
	struct rm_session_ctx *c = NULL, *k;
	for (int i = 0; ctx && !c && (k = ctx_at(s, i)); i++)
		if ((uint64_t)(uintptr_t)k->ctx == ctx)
			c = k;
	if (ctx && !c)
		return CUDA_ERROR_INVALID_CONTEXT;
	s->cur = c;
	CUcontext want = c ? c->ctx : NULL;
	if (want != s->thread_ctx) {
		CUresult r = rm_drv.cuCtxSetCurrent(want);
		if (r != CUDA_SUCCESS)
			return r;
		s->thread_ctx = want;
	}
	return CUDA_SUCCESS;
}

/* The session's streams in c (NULL: all contexts): its legacy and per-thread streams and
 * those it created, gathered under the locks into a new array (*n of them) so that they
 * are waited for without. A stream another thread destroys meanwhile went back to the
 * pool, not to the driver (stream_pool.h): waiting for it is harmless. NULL: no memory. */
static CUstream *gather_streams(struct rm_session *s, struct rm_session_ctx *only, CUstream *small, size_t nsmall,
				size_t *n)
{
	pthread_mutex_lock(&s->sh->lock);
	size_t cap = s->sh->nstreams + (size_t)s->sh->nctx * (RM_MAX_CHANNELS + 2) + 1;
	CUstream *st = cap <= nsmall ? small : malloc(cap * sizeof(*st));
	*n = 0;
	for (int k = 0; st && k < s->sh->nctx; k++) {
		struct rm_session_ctx *c = &s->sh->ctxs[k];
		if (only && c != only)
			continue;
		st[(*n)++] = c->default_stream;
		pthread_mutex_lock(&c->order_lock);
		for (int i = 0, found = 0; found < c->nper_thread && i <= RM_MAX_CHANNELS; i++)
			if (c->per_thread[i])
				st[(*n)++] = c->per_thread[i], found++;
		pthread_mutex_unlock(&c->order_lock);
	}
	for (size_t i = 0; st && i < s->sh->nstreams; i++)
		st[(*n)++] = s->sh->streams[i];
	pthread_mutex_unlock(&s->sh->lock);
	return st;
}

/* Waits for the streams gather_streams gives, holding no lock. Kernel timing learns of
 * the current context's (rm_kernel_timing_synced). */
static CUresult sync_streams(struct rm_session *s, struct rm_session_ctx *only)
{
	size_t n;
	CUstream small[1024]; /* one context, its channels' streams and 765 more without malloc */
	CUstream *st = gather_streams(s, only, small, sizeof(small) / sizeof(small[0]), &n);
	if (!st)
		return CUDA_ERROR_OUT_OF_MEMORY;
	CUresult first = CUDA_SUCCESS;
	uint64_t part = rm_call_part_begin();
	for (size_t i = 0; i < n; i++) {
		/* In the current context a wait also ends its kernel-time spans (stream_wait.h). */
		CUresult r = only && only == s->cur ? rm_stream_wait(s, st[i]) : rm_drv.cuStreamSynchronize(st[i]);
		if (first == CUDA_SUCCESS)
			first = r;
	}
	rm_call_part_end(RM_PART_DRIVER_SYNC, part);
	if (st != small)
		free(st);
	return first;
}

CUresult rm_session_synchronize(struct rm_session *s)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	return sync_streams(s, s->cur);
}

CUresult rm_session_synchronize_all(struct rm_session *s)
{
	return sync_streams(s, NULL);
}

CUresult rm_session_free_memory(struct rm_session *s, uint64_t ptr)
{
	CUcontext owner = NULL;
	struct rm_session_ctx *c = NULL;
	int managed = 0; /* managed memory: not cuMemFreeAsync's to free (cuMemFree waits) */
	if (rm_drv.cuPointerGetAttribute)
		rm_drv.cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr);
	if (!managed && rm_drv.cuMemFreeAsync && rm_drv.cuPointerGetAttribute &&
	    rm_drv.cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, ptr) == CUDA_SUCCESS)
		for (int i = 0; !c && ctx_at(s, i); i++)
			if (s->sh->ctxs[i].ctx == owner)
				c = &s->sh->ctxs[i];
	if (!c || c != s->cur)
		return rm_drv.cuMemFree_v2(ptr);
	CUresult r = rm_session_synchronize(s);
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuMemFreeAsync(ptr, c->default_stream);
	return r;
}

/* Frees memory whose users are known to be done, without cuMemFree's wait for the
 * whole shared context. */
static void free_drained(struct rm_session *s, uint64_t ptr)
{
	CUresult r = CUDA_ERROR_NOT_SUPPORTED;
	if (rm_drv.cuMemFreeAsync && s->sh->nctx)
		r = rm_drv.cuMemFreeAsync(ptr, s->sh->ctxs[0].default_stream);
	if (r != CUDA_SUCCESS)
		rm_drv.cuMemFree_v2(ptr);
}

/* Releases what the client holds, in an order the driver accepts: work
 * drained first, then events, streams, modules, memory, mappings, physical memory,
 * reservations and, their allocations freed, memory pools. */
size_t rm_session_release_all(struct rm_session *s)
{
	static const uint32_t order[] = {RM_H_GRAPH_EXEC, RM_H_GRAPH,    RM_H_EVENT,    RM_H_STREAM,
					 RM_H_MODULE,     RM_H_LIBRARY,  RM_H_MEMORY,   RM_H_MAPPING,
					 RM_H_PHYSICAL,   RM_H_VA_RANGE, RM_H_MEMPOOL};
	size_t freed = 0;
	CUcontext prev = s->thread_ctx;
	if (s->sh->nctx)
		rm_drv.cuCtxSetCurrent(s->sh->ctxs[0].ctx);
	rm_capture_end_all(s); /* a capturing stream can be neither waited for nor reused */
	sync_streams(s, NULL);
	/* A fault of this client's work that no reply reported leaves the worker's contexts
	 * broken for everyone: a sticky error shows on any stream, and faults the worker. */
	for (int i = 0; i < s->sh->nctx; i++)
		rm_fault_note(s, rm_drv.cuStreamQuery(s->sh->ctxs[i].default_stream));
	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++)
		for (size_t i = 0; i < s->sh->handles_cap; i++) {
			struct rm_handle *h = &s->sh->handles[i];
			if (h->kind != order[k])
				continue;
			void *p = (void *)(uintptr_t)h->value;
			switch (h->kind) {
			case RM_H_GRAPH_EXEC: if (rm_drv.cuGraphExecDestroy) rm_drv.cuGraphExecDestroy(p); break;
			case RM_H_GRAPH: if (rm_drv.cuGraphDestroy) rm_drv.cuGraphDestroy(p); break;
			case RM_H_EVENT: rm_drv.cuEventDestroy_v2(p); break;
			case RM_H_STREAM: rm_stream_pool_give(p); break;
			case RM_H_MODULE: if (!h->parent) rm_image_unload(RM_H_MODULE, p); break; /* else a library's own */
			case RM_H_LIBRARY: rm_image_unload(RM_H_LIBRARY, p); break;
			case RM_H_MEMORY: /* the quota is released with the memory, not later with the slot */
				free_drained(s, h->value);
				rm_session_uncharge(s, h->size);
				break;
			case RM_H_MAPPING: rm_drv.cuMemUnmap(h->value, h->size); break;
			case RM_H_PHYSICAL:
				if (!h->parent) /* not released by the client yet */
					rm_drv.cuMemRelease(h->value);
				rm_session_uncharge(s, h->size);
				break;
			case RM_H_VA_RANGE: rm_drv.cuMemAddressFree(h->value, h->size); break;
			case RM_H_MEMPOOL: rm_drv.cuMemPoolDestroy(p); break;
			}
			freed++;
		}
	free(s->sh->handles);
	s->sh->handles = NULL;
	s->sh->handles_cap = s->sh->handles_used = s->sh->handles_live = 0;
	s->sh->nstreams = 0; /* given back above */
	s->sh->nranges = 0;
	s->sh->mem_bytes = 0;
	rm_drv.cuCtxSetCurrent(prev);
	return freed;
}

void rm_session_destroy(struct rm_session *s)
{
	rm_copy_links_close(s);
	/* Host functions still queued on its streams return at once from now on; the hub's
	 * records for host nodes go once no graph can run them. */
	struct rm_hostfn_hub *hostfn = s->sh->hostfn;
	rm_hostfn_hub_close(hostfn);
	s->sh->hostfn = NULL;
	size_t bytes = s->sh->mem_bytes;
	size_t freed = rm_session_release_all(s);
	rm_hostfn_hub_release(hostfn);
	if (s->sh->nctx)
		rm_drv.cuCtxSetCurrent(s->sh->ctxs[0].ctx);
	rm_kernel_watch_free(s->sh->kernel_watch);
	s->sh->kernel_watch = NULL;
	uint64_t shared_bytes;
	int shared = rm_shared_host_release_all(s, &shared_bytes); /* its work drained above */
	rm_staging_close(&s->staging);
	rm_stream_wait_release(s);
	for (int i = 0; i < s->sh->nctx; i++) {
		rm_drv.cuCtxSetCurrent(s->sh->ctxs[i].ctx);
		rm_kernel_timing_release(s, &s->sh->ctxs[i]);
		rm_stream_order_release(&s->sh->ctxs[i]);
		for (int k = 0; k <= RM_MAX_CHANNELS; k++)
			if (s->sh->ctxs[i].per_thread[k])
				rm_stream_pool_give(s->sh->ctxs[i].per_thread[k]);
		pthread_mutex_destroy(&s->sh->ctxs[i].order_lock);
		rm_stream_pool_give(s->sh->ctxs[i].default_stream);
		rm_gpu_release(s->sh->ctxs[i].dev);
	}
	rm_drv.cuCtxSetCurrent(NULL);
	rm_log(RM_LOG_INFO, "session %llu (%s, %s) closed: released %zu handles, %zu bytes of device memory, "
	       "%d shared pinned regions (%llu bytes); stream waits: %llu idle, %llu by word, %llu by the driver",
	       (unsigned long long)s->id, s->name, s->peer, freed, bytes, shared, (unsigned long long)shared_bytes,
	       s->sh->waits_idle, s->sh->waits_word, s->sh->waits_driver);
	rm_link_close(&s->link);
	rm_host_account_give(&s->sh->host, s->ring_bytes);
	free(s->sh->ranges);
	free(s->sh->streams);
	pthread_cond_destroy(&s->sh->progress);
	pthread_cond_destroy(&s->sh->channel_gone);
	pthread_mutex_destroy(&s->sh->copy_lock);
	pthread_rwlock_destroy(&s->sh->shared_lock);
	pthread_mutex_destroy(&s->sh->lock);
	free(s->sh);
	pthread_mutex_destroy(&s->send_lock);
	free(s);
}

struct rm_session *rm_session_channel_new(struct rm_session *s, struct rm_conn *conn, int chan)
{
	/* The channel itself and its connection's ring are host memory held for the client:
	 * charged as its staging is. */
	size_t held = sizeof(struct rm_session) + RM_LINK_RBUF + rm_conn_held(conn);
	if (rm_host_account_take(&s->sh->host, held)) {
		rm_log(RM_LOG_WARN, "session %llu (%s): channel %d refused: the client or the worker holds its limit "
		       "of host memory (client_host_memory_limit, worker_host_memory_limit)", (unsigned long long)s->id,
		       s->name, chan);
		return NULL;
	}
	struct rm_session *ch = malloc(sizeof(*ch));
	if (!ch) {
		rm_host_account_give(&s->sh->host, held);
		return NULL;
	}
	*ch = *s; /* the identity and the shared state; the rest is the channel's own */
	ch->ring_bytes = held - sizeof(*ch);
	ch->chan = chan;
	ch->done_seq = 0;
	ch->cur = NULL;
	ch->thread_ctx = NULL;
	ch->async_error = CUDA_SUCCESS;
	ch->call_since_ns = ch->heartbeat_ns = 0;
	ch->reply_begun = 0;
	memset(ch->wait_words, 0, sizeof(ch->wait_words)); /* the main channel's (stream_wait.h) */
	if (rm_link_init(&ch->link, conn)) {
		free(ch);
		rm_host_account_give(&s->sh->host, held);
		return NULL;
	}
	snprintf(ch->peer, sizeof(ch->peer), "%s", rm_conn_peer(conn));
	pthread_mutex_init(&ch->send_lock, NULL);
	rm_staging_init(&ch->staging, STAGING_SIZE, &s->sh->host);
	return ch;
}

void rm_session_channel_close(struct rm_session *ch)
{
	struct rm_session_shared *sh = ch->sh;
	/* Its per-thread streams: drained, forgotten and given back. */
	for (int i = 0; i < __atomic_load_n(&sh->nctx, __ATOMIC_ACQUIRE); i++) {
		struct rm_session_ctx *c = &sh->ctxs[i];
		pthread_mutex_lock(&c->order_lock);
		CUstream st = c->per_thread[ch->chan];
		c->per_thread[ch->chan] = NULL;
		c->nper_thread -= st != NULL;
		pthread_mutex_unlock(&c->order_lock);
		if (!st)
			continue;
		rm_drv.cuStreamSynchronize(st);
		rm_stream_order_remove(ch, st);
		rm_stream_pool_give(st);
	}
	rm_staging_close(&ch->staging);
	rm_drv.cuCtxSetCurrent(NULL);
	rm_link_close(&ch->link);
	pthread_mutex_destroy(&ch->send_lock);
	size_t held = sizeof(*ch) + ch->ring_bytes;
	free(ch);
	rm_host_account_give(&sh->host, held);
}

void rm_session_progress(struct rm_session *s, uint64_t seq)
{
	__atomic_store_n(&s->done_seq, seq, __ATOMIC_RELEASE);
	if (!__atomic_load_n(&s->sh->fence_waiters, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&s->sh->lock);
	pthread_cond_broadcast(&s->sh->progress);
	pthread_mutex_unlock(&s->sh->lock);
}

void rm_session_fence(struct rm_session *s, uint32_t chan, uint64_t seq)
{
	struct rm_session_shared *sh = s->sh;
	if (chan > RM_MAX_CHANNELS || chan == (uint32_t)s->chan)
		return;
	pthread_mutex_lock(&sh->lock);
	__atomic_add_fetch(&sh->fence_waiters, 1, __ATOMIC_SEQ_CST);
	for (;;) {
		struct rm_session *other = sh->channels[chan];
		if (!other || sh->closing || __atomic_load_n(&other->done_seq, __ATOMIC_ACQUIRE) >= seq)
			break;
		pthread_cond_wait(&sh->progress, &sh->lock);
	}
	__atomic_sub_fetch(&sh->fence_waiters, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&sh->lock);
}
