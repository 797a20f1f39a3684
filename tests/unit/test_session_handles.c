/* The session's handle table (backend/worker/handles.c): records found by kind and value with the
 * kinds kept apart, tombstones and their reuse, growth to thousands of handles, children
 * disowned with their parent, and the sorted memory ranges behind rm_session_check_range
 * and rm_session_check_span, at the edges of the address space too; then what
 * rm_session_release_all (release.c) gives back. handles.c, contexts.c, quota.c, release.c
 * and stream_order.c are linked as they are;
 * the parts of the daemon the table never calls are doubles below that abort, and the few
 * it does call record what they were given. */
#include "session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_links.h"
#include "deferred.h"
#include "driver_table.h"
#include "gpus.h"
#include "handle_alias.h"
#include "image_cache.h"
#include "ipc.h"
#include "log.h"
#include "registry.h"
#include "host_functions.h"
#include "stream_pool.h"

#include "expect.h"

/* ---- doubles: what the session's files link against but the table does not use ---- */

static _Noreturn void unused(const char *fn)
{
	fprintf(stderr, "FAIL %s was called: the handle table should not need it\n", fn);
	abort();
}

struct rm_registry *rm_registry(void) { unused(__func__); }
void rm_registry_lock(void) { unused(__func__); }
void rm_registry_unlock(void) { unused(__func__); }
int rm_registry_tenant_slot(int t) { unused(__func__); }
int rm_registry_charge(int slot, uint64_t session_id, uint64_t bytes, uint64_t *client_limit, uint64_t *tenant_limit) { unused(__func__); }
void rm_registry_usage(int slot, uint64_t *client_limit, uint64_t *tenant_limit, uint64_t *client_bytes, uint64_t *tenant_bytes) { unused(__func__); }
CUresult rm_stream_pool_take(CUcontext ctx, int priority, CUstream *out) { unused(__func__); }
CUresult rm_stream_pool_before_submit(CUstream st) { unused(__func__); }
CUresult rm_stream_pool_before_wait(CUstream st, CUevent ev) { unused(__func__); }
void rm_stream_pool_named(CUstream st) { unused(__func__); }
CUresult rm_gpu_acquire(CUdevice dev, CUcontext *out) { unused(__func__); }
void rm_gpu_release(CUdevice dev) { unused(__func__); }
void rm_fault_note(const struct rm_channel *s, CUresult r) { (void)s; (void)r; }
struct rm_kernel_watch *rm_kernel_watch_new(uint32_t limit_ms) { (void)limit_ms; return NULL; }
void rm_kernel_watch_free(struct rm_kernel_watch *w) { (void)w; }
void rm_copy_links_close(struct rm_channel *s) { unused(__func__); }
int rm_shared_host_release_all(struct rm_channel *s, uint64_t *bytes) { unused(__func__); }
void rm_kernel_timing_release(struct rm_channel *s, struct rm_session_ctx *c) { (void)s; (void)c; }
CUresult rm_ctx_events_adopt(struct rm_session_ctx *c, CUstream st) { unused(__func__); }
void rm_ctx_events_release(struct rm_session_ctx *c) { (void)c; }
void rm_kernel_timing_synced(struct rm_channel *s, CUstream st) { unused(__func__); }
CUresult rm_stream_wait(struct rm_channel *s, CUstream st) { unused(__func__); }
CUresult rm_unsupported_by_driver(const char *name) { (void)name; return CUDA_ERROR_NOT_SUPPORTED; } /* as request.c: the double driver lacks nothing the test reaches */
void rm_stream_wait_release(struct rm_channel *s) { (void)s; }
void rm_staging_init(struct rm_staging *st, size_t size, struct rm_host_account *a) { unused(__func__); }
void rm_staging_close(struct rm_staging *st) { unused(__func__); }
struct rm_hostfn_hub *rm_hostfn_hub_new(const struct rm_channel *s, int timeout_s) { unused(__func__); }
void rm_hostfn_hub_release(struct rm_hostfn_hub *hub) { unused(__func__); }
void rm_hostfn_hub_close(struct rm_hostfn_hub *hub) { unused(__func__); }
enum rm_ipc_left rm_ipc_leave(struct rm_channel *s, enum rm_ipc_kind kind, uint64_t value) { (void)s; (void)kind; (void)value; return RM_IPC_NOT_SHARED; } /* nothing exported here */
void rm_ipc_peer_unhold(uint64_t hold) { (void)hold; } /* no IPC memory here */

/* ---- what rm_session_release_all and rm_session_use call: recorded ---- */

enum released { GAVE_EVENT = 1, GAVE_STREAM, GAVE_MODULE, GAVE_LIBRARY, GAVE_MEMORY };

struct gift {
	enum released what;
	uint64_t value;
};

static struct gift gave[64];
static int ngave;
static uint64_t uncharged;
static int kernel_lookups;

static void record(enum released what, uint64_t value)
{
	if (ngave < (int)(sizeof(gave) / sizeof(gave[0])))
		gave[ngave] = (struct gift){what, value};
	ngave++;
}

void rm_stream_pool_give(CUstream st) { record(GAVE_STREAM, (uint64_t)(uintptr_t)st); }
void rm_registry_uncharge(int slot, uint64_t session_id, uint64_t bytes) { uncharged += bytes; }
CUresult rm_image_unload(enum rm_handle_kind kind, void *handle)
{
	record(kind == RM_H_MODULE ? GAVE_MODULE : GAVE_LIBRARY, (uint64_t)(uintptr_t)handle);
	return CUDA_SUCCESS;
}

/* The release thread's calls, made here at once (backend/gpu/deferred.c). */
void rm_deferred_release(CUcontext ctx, enum rm_deferred_op op, uint64_t object, void (*then)(void *), void *arg)
{
	(void)ctx;
	if (op == RM_DEFER_MEM_FREE)
		record(GAVE_MEMORY, object);
	if (then)
		then(arg);
}
void rm_deferred_release_range(CUcontext ctx, enum rm_deferred_op op, uint64_t ptr, uint64_t size,
			       void (*then)(void *), void *arg)
{
	(void)ctx, (void)op, (void)ptr, (void)size;
	if (then)
		then(arg);
}

static CUresult CUDAAPI fake_event_destroy(CUevent ev)
{
	record(GAVE_EVENT, (uint64_t)(uintptr_t)ev);
	return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_mem_free(CUdeviceptr p)
{
	record(GAVE_MEMORY, p);
	return CUDA_SUCCESS;
}
static CUresult CUDAAPI fake_set_current(CUcontext c) { return CUDA_SUCCESS; }
static CUresult CUDAAPI fake_stream_sync(CUstream st) { return CUDA_SUCCESS; }
/* A kernel's function in the current context: here its value plus one. */
static CUresult CUDAAPI fake_kernel_function(CUfunction *f, CUkernel k)
{
	kernel_lookups++;
	*f = (CUfunction)((uintptr_t)k + 1);
	return CUDA_SUCCESS;
}

/* ---- helpers ---- */

static struct rm_channel *session(void)
{
	struct rm_channel *s = calloc(1, sizeof(*s));
	if (!s || !(s->sh = calloc(1, sizeof(*s->sh))))
		abort();
	pthread_mutex_init(&s->sh->lock, NULL);
	s->sh->id = 1;
	snprintf(s->sh->name, sizeof(s->sh->name), "test");
	return s;
}

static void session_free(struct rm_channel *s)
{
	free(s->sh->handles);
	free(s->sh->ranges);
	free(s->sh->streams);
	free(s->sh);
	free(s);
}

/* rm_session_find's copy of the record, or NULL. */
static const struct rm_handle *find(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v)
{
	static struct rm_handle copy;
	return rm_session_find(s, kind, v, &copy) ? &copy : NULL;
}

static const void *ptr(uint64_t v) { return (const void *)(uintptr_t)v; }

static int owns(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v)
{
	const struct rm_handle *h = find(s, kind, v);
	return h && h->kind == (uint32_t)kind && h->value == v;
}

static int usable(struct rm_channel *s, enum rm_handle_kind kind, uint64_t v)
{
	void *out = NULL;
	return rm_session_use(s, kind, v, &out) == CUDA_SUCCESS && out == ptr(v);
}

static int inside(struct rm_channel *s, uint64_t p, uint64_t len)
{
	return rm_session_check_range(s, p, len) == CUDA_SUCCESS;
}

/* The table's invariants: a power-of-two capacity, at most three quarters of it used
 * (live records and tombstones), live records no more than used slots. */
static int table_sound(const struct rm_channel *s)
{
	return s->sh->handles_cap && !(s->sh->handles_cap & (s->sh->handles_cap - 1)) &&
	       s->sh->handles_used * 4 <= s->sh->handles_cap * 3 && s->sh->handles_live <= s->sh->handles_used;
}

static int ranges_sorted(const struct rm_channel *s)
{
	for (size_t i = 1; i < s->sh->nranges; i++)
		if (s->sh->ranges[i - 1].value >= s->sh->ranges[i].value)
			return 0;
	return 1;
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;

static uint64_t next_random(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* ---- tests ---- */

static void empty_session(void)
{
	struct rm_channel *s = session();
	void *out;
	EXPECT(!find(s, RM_H_STREAM, 0x1000));
	EXPECT(rm_session_use(s, RM_H_STREAM, 0x1000, &out) == CUDA_ERROR_INVALID_HANDLE);
	EXPECT(rm_session_use(s, RM_H_CONTEXT, 0x1000, &out) == CUDA_ERROR_INVALID_CONTEXT);
	EXPECT(!inside(s, 0, 0));
	EXPECT(!inside(s, 0x1000, 1));
	EXPECT(rm_session_check_span(s, 0x1000, 0, 4) == CUDA_ERROR_INVALID_VALUE);
	rm_session_disown_value(s, RM_H_MEMORY, 0x1000); /* nothing to forget: no effect */
	EXPECT(s->sh->handles_live == 0 && s->sh->nranges == 0);
	session_free(s);
}

/* One value owned as several kinds is several records; each goes on its own. */
static void kinds_apart(void)
{
	struct rm_channel *s = session();
	const uint64_t v = 0x7f0012345600ull;
	rm_session_own(s, RM_H_STREAM, ptr(v), 0);
	rm_session_own_memory(s, RM_H_EVENT, v, CU_EVENT_DISABLE_TIMING, 0);
	rm_session_own_memory(s, RM_H_MEMORY, v, 4096, 0);
	EXPECT(owns(s, RM_H_STREAM, v) && owns(s, RM_H_EVENT, v) && owns(s, RM_H_MEMORY, v));
	EXPECT(find(s, RM_H_EVENT, v)->size == CU_EVENT_DISABLE_TIMING);
	EXPECT(find(s, RM_H_STREAM, v)->size == 0);
	EXPECT(!owns(s, RM_H_MODULE, v) && !usable(s, RM_H_MODULE, v) && !usable(s, RM_H_FUNCTION, v));
	EXPECT(s->sh->handles_live == 3 && s->sh->mem_bytes == 4096);

	rm_session_disown(s, RM_H_STREAM, ptr(v));
	EXPECT(!owns(s, RM_H_STREAM, v) && !usable(s, RM_H_STREAM, v));
	EXPECT(usable(s, RM_H_EVENT, v) && inside(s, v, 4096));
	rm_session_disown_value(s, RM_H_EVENT, v);
	EXPECT(!owns(s, RM_H_EVENT, v) && owns(s, RM_H_MEMORY, v) && inside(s, v, 4096) && s->sh->mem_bytes == 4096);
	rm_session_disown_value(s, RM_H_MEMORY, v);
	EXPECT(!inside(s, v, 1) && s->sh->mem_bytes == 0 && s->sh->handles_live == 0);

	/* Contexts are the session's own list, not the table. */
	const uint64_t ctx = 0x5550000ull;
	s->sh->ctxs[0].ctx = (CUcontext)(uintptr_t)ctx;
	s->sh->ctxs[0].handle = ctx;
	/* A created context: the client's value of its own, the shared context underneath. */
	const uint64_t created = 0x00c7000000000100ull;
	s->sh->ctxs[1] = (struct rm_session_ctx){.ctx = (CUcontext)(uintptr_t)ctx, .handle = created, .created = 1};
	s->sh->nctx = 2;
	rm_session_own(s, RM_H_STREAM, ptr(ctx + 64), 0);
	EXPECT(usable(s, RM_H_CONTEXT, ctx));
	void *out;
	EXPECT(rm_session_use(s, RM_H_CONTEXT, created, &out) == CUDA_SUCCESS && out == ptr(ctx));
	EXPECT(rm_session_use(s, RM_H_CONTEXT, ctx + 64, &out) == CUDA_ERROR_INVALID_CONTEXT);
	s->sh->ctxs[1].destroyed = 1;
	EXPECT(rm_session_use(s, RM_H_CONTEXT, created, &out) == CUDA_ERROR_CONTEXT_IS_DESTROYED);
	EXPECT(!usable(s, RM_H_STREAM, ctx));

	/* A kernel stands for its function wherever a function is asked for; not the other way. */
	const uint64_t kernel = 0x4000, function = 0x8000;
	rm_session_own(s, RM_H_KERNEL, ptr(kernel), 0);
	rm_session_own(s, RM_H_FUNCTION, ptr(function), 0);
	out = NULL;
	EXPECT(rm_session_use(s, RM_H_FUNCTION, kernel, &out) == CUDA_SUCCESS && out == ptr(kernel + 1));
	EXPECT(kernel_lookups == 1);
	EXPECT(usable(s, RM_H_FUNCTION, function) && kernel_lookups == 1);
	EXPECT(!usable(s, RM_H_KERNEL, function));
	EXPECT(rm_session_use(s, RM_H_FUNCTION, kernel + 1, &out) == CUDA_ERROR_INVALID_HANDLE);
	session_free(s);
}

/* Thousands of handles: the table grows, every record stays found, a disowned one leaves
 * a tombstone that lookups go past and an insertion reuses, and growth drops them. */
static void many_handles(void)
{
	enum { N = 5000 };
	static uint64_t v[N];
	struct rm_channel *s = session();
	/* Pointer-like values (aligned, close together) and random ones. */
	for (int i = 0; i < N; i++)
		v[i] = i % 2 ? 0x7f3a00000000ull + (uint64_t)i * 0x200 : next_random() | 1;
	for (int i = 0; i < N; i++)
		rm_session_own(s, RM_H_STREAM, ptr(v[i]), 0);
	EXPECT(table_sound(s) && s->sh->handles_live == N && s->sh->handles_cap >= N);
	int found = 0, strangers = 0;
	for (int i = 0; i < N; i++) {
		found += owns(s, RM_H_STREAM, v[i]);
		strangers += owns(s, RM_H_EVENT, v[i]) + owns(s, RM_H_STREAM, v[i] + 0x100);
	}
	EXPECT(found == N && strangers == 0);

	size_t cap = s->sh->handles_cap, used = s->sh->handles_used;
	for (int i = 1; i < N; i += 2)
		rm_session_disown(s, RM_H_STREAM, ptr(v[i]));
	found = 0;
	for (int i = 0; i < N; i++)
		found += owns(s, RM_H_STREAM, v[i]) == (i % 2 == 0);
	EXPECT(found == N);
	EXPECT(s->sh->handles_live == N / 2 && s->sh->handles_used == used && s->sh->handles_cap == cap);

	/* The same values again: each takes a tombstone on its way, none a fresh slot. */
	for (int i = 1; i < N; i += 2)
		rm_session_own(s, RM_H_STREAM, ptr(v[i]), 0);
	found = 0;
	for (int i = 0; i < N; i++)
		found += owns(s, RM_H_STREAM, v[i]);
	EXPECT(found == N && s->sh->handles_live == N && s->sh->handles_used == used && s->sh->handles_cap == cap);

	/* Tombstones, then growth: the same values as events, while streams come and go. */
	for (int i = 0; i < N; i += 3)
		rm_session_disown(s, RM_H_STREAM, ptr(v[i]));
	int grew = 0, clean_after_growth = 1;
	for (int i = 0; i < N; i++) {
		size_t before = s->sh->handles_cap;
		rm_session_own_memory(s, RM_H_EVENT, v[i], (uint64_t)i, 0);
		if (s->sh->handles_cap != before) {
			grew++;
			clean_after_growth &= s->sh->handles_used == s->sh->handles_live;
		}
	}
	EXPECT(grew >= 1 && clean_after_growth && table_sound(s));
	found = 0;
	for (int i = 0; i < N; i++) {
		const struct rm_handle *e = find(s, RM_H_EVENT, v[i]);
		found += e && e->size == (uint64_t)i && owns(s, RM_H_STREAM, v[i]) == (i % 3 != 0);
	}
	EXPECT(found == N);
	EXPECT(s->sh->handles_live == N + N - (N + 2) / 3);

	/* Everything goes: nothing is found, and new records still fit. */
	for (int i = 0; i < N; i++) {
		rm_session_disown(s, RM_H_STREAM, ptr(v[i]));
		rm_session_disown_value(s, RM_H_EVENT, v[i]);
	}
	found = 0;
	for (int i = 0; i < N; i++)
		found += owns(s, RM_H_STREAM, v[i]) + owns(s, RM_H_EVENT, v[i]);
	EXPECT(found == 0 && s->sh->handles_live == 0);
	rm_session_own(s, RM_H_MODULE, ptr(v[0]), 0);
	EXPECT(owns(s, RM_H_MODULE, v[0]) && table_sound(s));
	session_free(s);
}

/* Handles created and destroyed one after another (an event per iteration): every
 * lookup stays right while tombstones pile up and are cleared. */
static void churn(void)
{
	struct rm_channel *s = session();
	rm_session_own(s, RM_H_STREAM, ptr(0x10), 0);
	int wrong = 0;
	for (uint64_t i = 1; i <= 100000; i++) {
		uint64_t ev = 0x7f0000000000ull + i * 0x40;
		rm_session_own_memory(s, RM_H_EVENT, ev, 0, 0);
		wrong += !owns(s, RM_H_EVENT, ev) || !owns(s, RM_H_STREAM, 0x10);
		rm_session_disown_value(s, RM_H_EVENT, ev);
		wrong += owns(s, RM_H_EVENT, ev);
	}
	EXPECT(wrong == 0 && s->sh->handles_live == 1 && table_sound(s));
	EXPECT(s->sh->handles_cap <= 256); /* churn clears tombstones rather than growing the table */
	/* One function asked for again and again (cuModuleGetFunction): one record. */
	rm_session_own(s, RM_H_MODULE, ptr(0xa000), 0);
	for (int i = 0; i < 100000; i++)
		rm_session_own(s, RM_H_FUNCTION, ptr(0xa010), 0xa000);
	EXPECT(s->sh->handles_live == 3 && s->sh->handles_cap <= 256 && owns(s, RM_H_FUNCTION, 0xa010));
	rm_session_disown(s, RM_H_MODULE, ptr(0xa000));
	EXPECT(!owns(s, RM_H_FUNCTION, 0xa010) && s->sh->handles_live == 1);
	session_free(s);
}

/* Disowning a module or library forgets what it is the parent of, and only that. */
static void children(void)
{
	struct rm_channel *s = session();
	const uint64_t mod = 0xa000, mod2 = 0xb000, lib = 0xc000, kernel = 0xc100, lib_mod = 0xc200;
	rm_session_own(s, RM_H_MODULE, ptr(mod), 0);
	rm_session_own(s, RM_H_FUNCTION, ptr(0xa010), mod);
	rm_session_own(s, RM_H_FUNCTION, ptr(0xa020), mod);
	rm_session_own_memory(s, RM_H_GLOBAL, 0x100000, 256, mod);
	rm_session_own(s, RM_H_MODULE, ptr(mod2), 0);
	rm_session_own(s, RM_H_FUNCTION, ptr(0xb010), mod2);
	rm_session_own_memory(s, RM_H_GLOBAL, 0x200000, 512, mod2);
	rm_session_own(s, RM_H_LIBRARY, ptr(lib), 0);
	rm_session_own(s, RM_H_KERNEL, ptr(kernel), lib);
	rm_session_own(s, RM_H_FUNCTION, ptr(0xc110), kernel); /* cuKernelGetFunction's */
	rm_session_own(s, RM_H_MODULE, ptr(lib_mod), lib);     /* cuLibraryGetModule's */
	rm_session_own_memory(s, RM_H_MEMORY, 0x300000, 4096, 0);
	EXPECT(s->sh->handles_live == 12 && s->sh->nranges == 3 && s->sh->mem_bytes == 4096); /* globals are not charged */

	rm_session_disown(s, RM_H_MODULE, ptr(mod));
	EXPECT(!owns(s, RM_H_MODULE, mod) && !owns(s, RM_H_FUNCTION, 0xa010) && !owns(s, RM_H_FUNCTION, 0xa020));
	EXPECT(!owns(s, RM_H_GLOBAL, 0x100000) && !inside(s, 0x100000, 1));
	EXPECT(owns(s, RM_H_MODULE, mod2) && owns(s, RM_H_FUNCTION, 0xb010) && inside(s, 0x200000, 512));
	EXPECT(s->sh->handles_live == 8 && s->sh->nranges == 2);

	/* A library takes its kernels, their functions and its modules with it. */
	rm_session_disown(s, RM_H_LIBRARY, ptr(lib));
	EXPECT(!owns(s, RM_H_LIBRARY, lib) && !owns(s, RM_H_KERNEL, kernel) && !owns(s, RM_H_FUNCTION, 0xc110) &&
	       !owns(s, RM_H_MODULE, lib_mod));
	EXPECT(owns(s, RM_H_MODULE, mod2) && inside(s, 0x300000, 4096) && s->sh->handles_live == 4);

	/* Memory and events have no children, whatever parent field others carry. */
	rm_session_own(s, RM_H_FUNCTION, ptr(0xd010), 0x300000);
	rm_session_disown_value(s, RM_H_MEMORY, 0x300000);
	EXPECT(owns(s, RM_H_FUNCTION, 0xd010) && s->sh->mem_bytes == 0);
	session_free(s);
}

/* [ptr, ptr + len) must lie inside one owned range; the edges of a range and of the
 * address space, and lengths multiplied past 2^64. */
static void ranges_at_edges(void)
{
	struct rm_channel *s = session();
	const uint64_t a = 0x10000, b = 0x11000, top = UINT64_MAX - 4095, empty = 0x30000;
	rm_session_own_memory(s, RM_H_MEMORY, b, 0x1000, 0); /* out of order: kept sorted */
	rm_session_own_memory(s, RM_H_MEMORY, top, 4096, 0); /* ends at 2^64 - 1 */
	rm_session_own_memory(s, RM_H_MEMORY, a, 0x1000, 0); /* b starts where a ends */
	rm_session_own_memory(s, RM_H_GLOBAL, empty, 0, 0);  /* a global of no bytes */
	EXPECT(s->sh->nranges == 4 && ranges_sorted(s));

	EXPECT(inside(s, a, 0x1000) && inside(s, a + 1, 0xfff) && inside(s, a + 0xfff, 1));
	EXPECT(!inside(s, a, 0x1001) && !inside(s, a - 1, 1) && !inside(s, a - 1, 2));
	EXPECT(inside(s, b, 0x1000) && !inside(s, a + 0x800, 0x1000)); /* not across two ranges */
	EXPECT(inside(s, a, 0) && inside(s, a + 0x800, 0));
	EXPECT(inside(s, b + 0x1000, 0) && !inside(s, b + 0x1000, 1)); /* empty, at the end */
	EXPECT(!inside(s, 0, 0) && !inside(s, a - 1, 0) && !inside(s, 0x20000, 0) && !inside(s, 0x20000, 1));
	EXPECT(inside(s, empty, 0) && !inside(s, empty, 1) && !inside(s, empty + 1, 0));

	EXPECT(inside(s, top, 4096) && inside(s, UINT64_MAX, 1) && inside(s, UINT64_MAX, 0));
	EXPECT(!inside(s, UINT64_MAX, 2) && !inside(s, top, 4097) && !inside(s, top, UINT64_MAX));
	EXPECT(!inside(s, top + 1, UINT64_MAX) && !inside(s, top - 1, 2) && !inside(s, a, UINT64_MAX));
	EXPECT(!inside(s, UINT64_MAX - 4096, 1) && inside(s, UINT64_MAX - 4095, 1));

	/* count * unit, refused when it passes 2^64 however small it wraps to. */
	EXPECT(rm_session_check_span(s, a, 0x1000 / 4, 4) == CUDA_SUCCESS);
	EXPECT(rm_session_check_span(s, a, 0x1000 / 4 + 1, 4) == CUDA_ERROR_INVALID_VALUE);
	EXPECT(inside(s, a, 2) && rm_session_check_span(s, a, (1ull << 63) + 1, 2) == CUDA_ERROR_INVALID_VALUE);
	EXPECT(inside(s, a, 4) && rm_session_check_span(s, a, (1ull << 62) + 1, 4) == CUDA_ERROR_INVALID_VALUE);
	EXPECT(rm_session_check_span(s, a, 1ull << 61, 8) == CUDA_ERROR_INVALID_VALUE); /* exactly 2^64: 0 */
	EXPECT(rm_session_check_span(s, a, UINT64_MAX, 1) == CUDA_ERROR_INVALID_VALUE);
	EXPECT(rm_session_check_span(s, a, 1, UINT64_MAX) == CUDA_ERROR_INVALID_VALUE);
	EXPECT(rm_session_check_span(s, a, UINT64_MAX, UINT64_MAX) == CUDA_ERROR_INVALID_VALUE);
	EXPECT(rm_session_check_span(s, a, 0, 8) == CUDA_SUCCESS &&
	       rm_session_check_span(s, a, 1024, 0) == CUDA_SUCCESS);
	EXPECT(rm_session_check_span(s, top, 1024, 4) == CUDA_SUCCESS);
	EXPECT(rm_session_check_span(s, top + 4, 1024, 4) == CUDA_ERROR_INVALID_VALUE);
	EXPECT(rm_session_check_span(s, UINT64_MAX, 1, 1) == CUDA_SUCCESS);
	EXPECT(rm_session_check_span(s, 0x20000, 0, 1) == CUDA_ERROR_INVALID_VALUE); /* owned by no one */

	rm_session_disown_value(s, RM_H_MEMORY, top);
	EXPECT(!inside(s, UINT64_MAX, 1) && !inside(s, top, 0) && inside(s, b, 0x1000) && ranges_sorted(s));
	session_free(s);
}

/* Thousands of allocations inserted in random order, with gaps between them. */
static void many_ranges(void)
{
	enum { N = 3000 };
	static uint64_t base[N], size[N];
	static int order[N];
	struct rm_channel *s = session();
	uint64_t at = 0x700000000000ull;
	for (int i = 0; i < N; i++) {
		size[i] = 1 + next_random() % (1 << 20);
		base[i] = at;
		at += size[i] + 1 + next_random() % 4096; /* at least one byte nobody owns after each */
		order[i] = i;
	}
	for (int i = N - 1; i > 0; i--) {
		int j = (int)(next_random() % (uint64_t)(i + 1)), t = order[i];
		order[i] = order[j];
		order[j] = t;
	}
	uint64_t total = 0;
	for (int i = 0; i < N; i++) {
		rm_session_own_memory(s, RM_H_MEMORY, base[order[i]], size[order[i]], 0);
		total += size[order[i]];
	}
	EXPECT(s->sh->nranges == N && ranges_sorted(s) && s->sh->mem_bytes == total);
	int right = 0;
	for (int i = 0; i < N; i++)
		right += inside(s, base[i], size[i]) && inside(s, base[i] + size[i] - 1, 1) &&
		         inside(s, base[i] + size[i], 0) && !inside(s, base[i] - 1, 1) &&
		         !inside(s, base[i], size[i] + 1) && !inside(s, base[i] + size[i], 1);
	EXPECT(right == N);

	/* Half of them freed, in random order. */
	for (int i = 0; i < N; i += 2) {
		rm_session_disown_value(s, RM_H_MEMORY, base[order[i]]);
		total -= size[order[i]];
	}
	right = 0;
	for (int i = 0; i < N; i++) {
		int live = i % 2;
		right += inside(s, base[order[i]], size[order[i]]) == live &&
		         owns(s, RM_H_MEMORY, base[order[i]]) == live;
	}
	EXPECT(right == N && s->sh->nranges == N / 2 && ranges_sorted(s) && s->sh->mem_bytes == total);
	session_free(s);
}

/* What the session releases at its end: each live handle once, in the documented order
 * (events, streams, modules, libraries, memory); a disowned one never, a library's own
 * module with its library; every byte of memory uncharged. */
static void release_all(void)
{
	struct rm_channel *s = session();
	rm_session_own_memory(s, RM_H_MEMORY, 0x900000, 8192, 0);
	rm_session_own(s, RM_H_LIBRARY, ptr(0xc000), 0);
	rm_session_own(s, RM_H_MODULE, ptr(0xc200), 0xc000);
	rm_session_own(s, RM_H_MODULE, ptr(0xa000), 0);
	rm_session_own(s, RM_H_FUNCTION, ptr(0xa010), 0xa000);
	rm_session_own(s, RM_H_STREAM, ptr(0x5000), 0);
	rm_session_own(s, RM_H_STREAM, ptr(0x5100), 0);
	rm_session_own_memory(s, RM_H_EVENT, 0x6000, 0, 0);
	rm_session_own_memory(s, RM_H_EVENT, 0x6100, 0, 0);
	rm_session_own_memory(s, RM_H_MEMORY, 0x800000, 4096, 0);
	rm_session_disown(s, RM_H_STREAM, ptr(0x5100));
	rm_session_disown_value(s, RM_H_EVENT, 0x6100);
	rm_session_disown_value(s, RM_H_MEMORY, 0x800000);
	ngave = 0;
	uncharged = 0;
	size_t freed = rm_session_release_all(s);
	static const struct gift want[] = {{GAVE_EVENT, 0x6000},
	                                   {GAVE_STREAM, 0x5000},
	                                   {GAVE_MODULE, 0xa000},
	                                   {GAVE_LIBRARY, 0xc000},
	                                   {GAVE_MEMORY, 0x900000}};
	EXPECT(ngave == (int)(sizeof(want) / sizeof(want[0])));
	for (int i = 0; i < ngave && i < (int)(sizeof(want) / sizeof(want[0])); i++)
		EXPECT(gave[i].what == want[i].what && gave[i].value == want[i].value);
	EXPECT(freed == 6); /* the five above and the library's module, released with it */
	EXPECT(uncharged == 8192);
	EXPECT(!s->sh->handles && !s->sh->handles_cap && !s->sh->handles_live && !s->sh->nranges && !s->sh->mem_bytes);
	EXPECT(!inside(s, 0x900000, 1) && !find(s, RM_H_MODULE, 0xa000));
	session_free(s);
}

/* A session that moved in holds the source's values, aliased to this worker's handles. A
 * handle the driver gives here with a value the client holds for another one reaches the
 * client as another value, and the old value still names the old handle; a child's parent
 * is the real handle it was given, never taken for a client's value. */
static void moved_values(void)
{
	struct rm_channel *s = session();
	const uint64_t held = 0xc000, behind = 0xd000, kernel = 0xe000;
	pthread_mutex_lock(&s->sh->lock);
	EXPECT(!rm_alias_add_locked(s->sh, RM_H_LIBRARY, held, behind)); /* the client's library, moved */
	pthread_mutex_unlock(&s->sh->lock);
	rm_session_own(s, RM_H_LIBRARY, ptr(behind), 0);
	rm_session_own(s, RM_H_LIBRARY, ptr(held), 0); /* a new one: the driver reused the value */
	uint64_t fresh = rm_session_out_value(s, RM_H_LIBRARY, held);
	EXPECT(fresh != held && (fresh & RM_ALIAS_FRESH));
	EXPECT(rm_session_out_value(s, RM_H_LIBRARY, behind) == held);
	pthread_mutex_lock(&s->sh->lock);
	EXPECT(rm_alias_real_locked(s->sh, RM_H_LIBRARY, held) == behind);
	EXPECT(rm_alias_real_locked(s->sh, RM_H_LIBRARY, fresh) == held);
	pthread_mutex_unlock(&s->sh->lock);
	rm_session_own(s, RM_H_KERNEL, ptr(kernel), held); /* a kernel of the new library */
	const struct rm_handle *k = find(s, RM_H_KERNEL, kernel);
	EXPECT(k && k->parent == held);
	rm_session_disown(s, RM_H_LIBRARY, ptr(held));
	pthread_mutex_lock(&s->sh->lock);
	EXPECT(!rm_alias_is_client_locked(s->sh, RM_H_LIBRARY, fresh));
	EXPECT(rm_alias_real_locked(s->sh, RM_H_LIBRARY, held) == behind);
	pthread_mutex_unlock(&s->sh->lock);
	rm_alias_free(s->sh);
	session_free(s);
}

int main(void)
{
	rm_log_init("test_session_handles", RM_LOG_ERROR); /* REMORA_LOG=warn shows each refusal */
	rm_drv.cuEventDestroy_v2 = fake_event_destroy;
	rm_drv.cuMemFree_v2 = fake_mem_free;
	rm_drv.cuCtxSetCurrent = fake_set_current;
	rm_drv.cuStreamSynchronize = fake_stream_sync;
	rm_drv.cuKernelGetFunction = fake_kernel_function;
	empty_session();
	kinds_apart();
	many_handles();
	churn();
	children();
	ranges_at_edges();
	many_ranges();
	release_all();
	moved_values();
	if (!failures)
		printf("session-handles: ok\n");
	return failures ? 1 : 0;
}
