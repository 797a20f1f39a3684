/* The session's handle table (handles.h): open addressing keyed by (kind, value), with
 * tombstones; and its owned memory, sorted by base, for range checks. Under sh->lock. */
#include "session.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "driver_table.h"
#include "handle_alias.h"
#include "log.h"
#include "variable_alias.h"

#define TOMBSTONE UINT32_MAX

static size_t slot_of(uint32_t kind, uint64_t v, size_t cap)
{
	uint64_t h = (v ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 20) & (cap - 1);
}

static struct rm_handle *find_slot(struct rm_channel *s, uint32_t kind, uint64_t v)
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

int rm_session_find(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out)
{
	pthread_mutex_lock(&s->sh->lock);
	const struct rm_handle *h = find_slot(s, kind, v);
	if (h && out)
		*out = *h;
	pthread_mutex_unlock(&s->sh->lock);
	return h != NULL;
}

int rm_session_each(struct rm_channel *s, enum rm_handle_kind kind, int (*visit)(const struct rm_handle *h, void *arg),
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

int rm_session_find_locked(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out)
{
	const struct rm_handle *h = find_slot(s, kind, v);
	if (h && out)
		*out = *h;
	return h != NULL;
}

static int disown_locked(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out);

int rm_session_take_refs(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t n, int add)
{
	pthread_mutex_lock(&s->sh->lock);
	struct rm_handle *h = find_slot(s, kind, v);
	int ok = h && (add ? h->size + n >= h->size : h->size >= n);
	if (ok)
		h->size = add ? h->size + n : h->size - n;
	if (ok && !add && !h->size)
		disown_locked(s, kind, v, NULL);
	pthread_mutex_unlock(&s->sh->lock);
	return ok;
}

int rm_session_set_size(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t size)
{
	pthread_mutex_lock(&s->sh->lock);
	struct rm_handle *h = kind != RM_H_MEMORY && kind != RM_H_PHYSICAL ? find_slot(s, kind, v) : NULL;
	if (h)
		h->size = size;
	pthread_mutex_unlock(&s->sh->lock);
	return h != NULL;
}

int rm_session_set_parent(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t parent)
{
	pthread_mutex_lock(&s->sh->lock);
	struct rm_handle *h = find_slot(s, kind, v);
	if (h)
		h->parent = parent;
	pthread_mutex_unlock(&s->sh->lock);
	return h != NULL;
}

int rm_session_set_parent_if(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t was, uint64_t parent)
{
	pthread_mutex_lock(&s->sh->lock);
	struct rm_handle *h = find_slot(s, kind, v);
	int set = h && h->parent == was;
	if (set)
		h->parent = parent;
	pthread_mutex_unlock(&s->sh->lock);
	return h != NULL;
}

/* Rebuilds the table without tombstones, at the size that keeps it at most half full
 * (so churn with few live handles does not grow it). */
static int grow(struct rm_channel *s)
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

static void range_insert(struct rm_channel *s, const struct rm_handle *h)
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

static void range_remove(struct rm_channel *s, uint64_t base)
{
	for (size_t i = 0; i < s->sh->nranges; i++)
		if (s->sh->ranges[i].value == base) {
			memmove(&s->sh->ranges[i], &s->sh->ranges[i + 1], (s->sh->nranges - i - 1) * sizeof(*s->sh->ranges));
			s->sh->nranges--;
			return;
		}
}

/* Kinds whose value is a base address and size a length of memory the client may use. */
static int range_kind(enum rm_handle_kind kind)
{
	return kind == RM_H_MEMORY || kind == RM_H_GLOBAL || kind == RM_H_MAPPING || kind == RM_H_GRAPH_MEMORY ||
	       kind == RM_H_IPC_MEMORY || kind == RM_H_MOVED_MEMORY;
}

static void own_locked(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t size, uint64_t parent)
{
	if (find_slot(s, kind, v))
		return; /* asked for again (cuModuleGetFunction of one function): one record */
	if (s->sh->naliases && kind != RM_H_CONTEXT && !range_kind(kind) && rm_alias_is_client_locked(s->sh, kind, v)) {
		/* A session that moved in: the driver gave a handle whose value the client holds for
		 * another one. The client gets another value for it (rm_session_out_value), one no
		 * process's handle has: the high half of the address space is the kernel's. */
		uint64_t fresh = v | RM_ALIAS_FRESH;
		while (rm_alias_is_client_locked(s->sh, kind, fresh))
			fresh += 16;
		if (rm_alias_add_locked(s->sh, kind, fresh, v))
			rm_session_log(s, RM_LOG_ERROR, "out of memory: handle 0x%llx of kind %d, which the client holds for "
				       "another one since it moved, reaches the older one", (unsigned long long)v, kind);
		else
			rm_session_log(s, RM_LOG_DEBUG, "handle 0x%llx of kind %d, a value the client holds for another one "
				       "since it moved, is 0x%llx to it", (unsigned long long)v, kind,
				       (unsigned long long)fresh);
	}
	if ((s->sh->handles_used + 1) * 4 > s->sh->handles_cap * 3 && grow(s)) {
		rm_session_log(s, RM_LOG_ERROR, "out of memory recording a handle");
		return;
	}
	struct rm_handle h = {.value = v, .size = size, .parent = parent, .kind = kind,
			      .ctx = s->cur ? (uint32_t)(s->cur - s->sh->ctxs) + 1 : 0};
	size_t i = slot_of(kind, v, s->sh->handles_cap);
	while (s->sh->handles[i].kind && s->sh->handles[i].kind != TOMBSTONE)
		i = (i + 1) & (s->sh->handles_cap - 1);
	if (!s->sh->handles[i].kind)
		s->sh->handles_used++;
	s->sh->handles[i] = h;
	s->sh->handles_live++;
	if (range_kind(kind))
		range_insert(s, &h);
	if (kind == RM_H_MEMORY || kind == RM_H_PHYSICAL || kind == RM_H_MOVED_MEMORY)
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
		rm_session_log(s, RM_LOG_ERROR, "out of memory recording a stream: a synchronize will not wait for it");
}

void rm_session_own_memory(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, uint64_t size,
			   uint64_t parent)
{
	pthread_mutex_lock(&s->sh->lock);
	own_locked(s, kind, v, size, parent);
	pthread_mutex_unlock(&s->sh->lock);
}

void rm_session_own(struct rm_channel *s, enum rm_handle_kind kind, const void *h, uint64_t parent)
{
	rm_session_own_memory(s, kind, (uint64_t)(uintptr_t)h, 0, parent);
}

int rm_session_own_fresh(struct rm_channel *s, enum rm_handle_kind kind, const void *h)
{
	pthread_mutex_lock(&s->sh->lock);
	int fresh = !find_slot(s, kind, (uint64_t)(uintptr_t)h);
	if (fresh)
		own_locked(s, kind, (uint64_t)(uintptr_t)h, 0, 0);
	pthread_mutex_unlock(&s->sh->lock);
	return fresh;
}

/* Forgets v and its dependents: 1, or 0 when v was not owned. */
static int disown_locked(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out)
{
	struct rm_handle *h = find_slot(s, kind, v);
	if (!h)
		return 0;
	if (out)
		*out = *h;
	if (range_kind(kind))
		range_remove(s, v);
	if (kind == RM_H_MEMORY || kind == RM_H_PHYSICAL || kind == RM_H_MOVED_MEMORY)
		s->sh->mem_bytes -= h->size;
	if (s->sh->naliases)
		rm_alias_drop_locked(s->sh, kind, v);
	if (kind == RM_H_STREAM) {
		rm_stream_order_remove(s, (CUstream)(uintptr_t)v);
		for (size_t i = 0; i < s->sh->nstreams; i++)
			if (s->sh->streams[i] == (CUstream)(uintptr_t)v) {
				s->sh->streams[i] = s->sh->streams[--s->sh->nstreams];
				break;
			}
	}
	int owns_graphs = kind == RM_H_GRAPH_NODE && h->size; /* RM_NODE_OWNS_GRAPHS */
	h->kind = TOMBSTONE;
	s->sh->handles_live--;
	/* Only modules, libraries and kernels have dependents (functions, globals, kernels). */
	if (kind != RM_H_MODULE && kind != RM_H_LIBRARY && kind != RM_H_KERNEL && kind != RM_H_GRAPH &&
	    kind != RM_H_MIPMAPPED_ARRAY && kind != RM_H_ARRAY && !owns_graphs)
		return 1; /* a graph's dependents are its nodes (and conditional handles), a node's the graphs it
			   * owns, a mipmapped array's its levels, an array's its planes */
	for (size_t i = 0; i < s->sh->handles_cap; i++) {
		struct rm_handle *c = &s->sh->handles[i];
		/* A mapping's parent is a physical allocation, a physical one's a flag: never a module. */
		if (c->kind && c->kind != TOMBSTONE && c->kind != RM_H_MAPPING && c->kind != RM_H_PHYSICAL &&
		    c->parent == v)
			disown_locked(s, c->kind, c->value, NULL);
	}
	return 1;
}

int rm_session_take(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, struct rm_handle *out)
{
	pthread_mutex_lock(&s->sh->lock);
	int owned = disown_locked(s, kind, v, out);
	pthread_mutex_unlock(&s->sh->lock);
	return owned;
}

void rm_session_disown_value(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v)
{
	rm_session_take(s, kind, v, NULL);
}

void rm_session_disown(struct rm_channel *s, enum rm_handle_kind kind, const void *h)
{
	rm_session_disown_value(s, kind, (uint64_t)(uintptr_t)h);
}

CUresult rm_session_use(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v, void **out)
{
	if (kind == RM_H_CONTEXT) { /* the client's value of a context: the driver's is the shared one */
		CUresult why = CUDA_ERROR_INVALID_CONTEXT;
		struct rm_session_ctx *c = rm_session_ctx_of(s, v, &why);
		if (c)
			*out = c->ctx;
		s->named = c;
		return c ? CUDA_SUCCESS : why;
	}
	pthread_mutex_lock(&s->sh->lock);
	uint64_t as_kernel = rm_alias_real_locked(s->sh, RM_H_KERNEL, v); /* a session that moved in */
	v = rm_alias_real_locked(s->sh, kind, v);
	int owned = find_slot(s, kind, v) != NULL,
	    kernel = !owned && kind == RM_H_FUNCTION && find_slot(s, RM_H_KERNEL, as_kernel);
	pthread_mutex_unlock(&s->sh->lock);
	if (owned) {
		*out = (void *)(uintptr_t)v;
		return CUDA_SUCCESS;
	}
	/* A CUkernel is accepted wherever a CUfunction is: it stands for its function in the current context. */
	if (kernel)
		return rm_drv_cuKernelGetFunction((CUfunction *)out, (CUkernel)(uintptr_t)as_kernel);
	rm_session_log(s, RM_LOG_WARN, "refused handle 0x%llx of kind %d it does not own", (unsigned long long)v, kind);
	return CUDA_ERROR_INVALID_HANDLE;
}


/* Whether r is a device variable the client brought at another address (variable_alias.h).
 * Under sh->lock. */
static int moved_variable(const struct rm_session *sh, const struct rm_handle *r)
{
	return r->kind == RM_H_GLOBAL && sh->nvariable_aliases && rm_variable_alias_at_locked(sh, r->value);
}

/* The last owned range with base <= ptr, or NULL. Under sh->lock. */
static const struct rm_handle *range_below(struct rm_channel *s, uint64_t ptr)
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

int rm_session_range_of(struct rm_channel *s, uint64_t ptr, struct rm_handle *out)
{
	pthread_mutex_lock(&s->sh->lock);
	const struct rm_handle *r = range_below(s, ptr);
	int found = r && ptr - r->value < r->size;
	if (found && out)
		*out = *r;
	pthread_mutex_unlock(&s->sh->lock);
	return found;
}

uint64_t rm_session_owned_run(struct rm_channel *s, uint64_t ptr, uint64_t len)
{
	uint64_t run = 0;
	pthread_mutex_lock(&s->sh->lock);
	while (run < len) {
		uint64_t at = ptr + run;
		const struct rm_handle *r = at < ptr ? NULL : range_below(s, at);
		if (!r || at - r->value >= r->size || moved_variable(s->sh, r))
			break;
		uint64_t here = r->size - (at - r->value);
		run = here > len - run ? len : run + here;
	}
	pthread_mutex_unlock(&s->sh->lock);
	return run;
}

/* [ptr, ptr + len) inside one owned range; one of a moved variable only where the caller
 * gives the driver its address here (moved_ok), else refused with a line. */
static CUresult check(struct rm_channel *s, uint64_t ptr, uint64_t len, int moved_ok)
{
	pthread_mutex_lock(&s->sh->lock);
	const struct rm_handle *r = range_below(s, ptr);
	int ok = r && ptr - r->value <= r->size && len <= r->size - (ptr - r->value);
	int moved = ok && !moved_ok && moved_variable(s->sh, r);
	pthread_mutex_unlock(&s->sh->lock);
	if (moved) {
		rm_session_log(s, RM_LOG_WARN, "device range 0x%llx+%llu lies in a device variable the client brought when it "
			       "moved, which this call does not take (docs/pool.md)", (unsigned long long)ptr,
			       (unsigned long long)len);
		return CUDA_ERROR_NOT_SUPPORTED;
	}
	if (ok)
		return CUDA_SUCCESS;
	rm_session_log(s, RM_LOG_WARN, "refused device range 0x%llx+%llu it does not own", (unsigned long long)ptr, (unsigned long long)len);
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult rm_session_check_range(struct rm_channel *s, uint64_t ptr, uint64_t len)
{
	return check(s, ptr, len, 0);
}

CUresult rm_session_check_span(struct rm_channel *s, uint64_t ptr, uint64_t count, uint64_t unit)
{
	uint64_t len;
	if (__builtin_mul_overflow(count, unit, &len))
		return CUDA_ERROR_INVALID_VALUE;
	return check(s, ptr, len, 0);
}

CUresult rm_session_check_dptr(struct rm_channel *s, uint64_t ptr, uint64_t count, uint64_t unit)
{
	uint64_t len;
	if (__builtin_mul_overflow(count, unit, &len))
		return CUDA_ERROR_INVALID_VALUE;
	return check(s, ptr, len, 1);
}

CUresult rm_session_check_real(struct rm_channel *s, uint64_t *ptr, uint64_t len)
{
	CUresult r = check(s, *ptr, len, 1);
	if (r == CUDA_SUCCESS)
		*ptr = rm_session_real_dptr(s, *ptr);
	return r;
}
