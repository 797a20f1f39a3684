/* CUDA IPC in a worker (ipc.h): the exports of its clients and their holders, under one lock.
 * Rare calls (an export, an open, a free of something exported): lists searched in full. */
#include "ipc.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "driver_table.h"
#include "registry.h"
#include "session.h"
#include "worker.h"

struct hold {
	uint64_t session;
	uint32_t refs; /* its references not given back (cuIpcOpenMemHandle twice: 2) */
};

/* An importer's way of recording an event from another context (rm_ipc_event_record). */
struct proxy {
	uint64_t session;
	CUcontext ctx;  /* the importer's stream's context, where event lives */
	CUevent event;  /* recorded on the importer's stream */
	CUstream helper; /* in the exported event's context: waits for event, records the export */
};

struct export {
	struct rm_ipc_token token;
	struct rm_ipc_object obj;
	uint64_t exporter; /* the session that exported it */
	struct hold *holds;
	size_t nholds, holds_cap;
	struct proxy *proxies;
	size_t nproxies, proxies_cap;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct export **exports;
static size_t nexports, exports_cap;
static uint64_t next_id = 1, worker_id;

static void random_bytes(void *p, size_t n)
{
	if (getrandom(p, n, 0) != (ssize_t)n) { /* never on Linux for 16 bytes; still, no fixed bytes */
		uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)p;
		for (size_t i = 0; i < n; i++, x = x * 6364136223846793005ull + 1442695040888963407ull)
			((uint8_t *)p)[i] ^= (uint8_t)(x >> 56);
	}
}

/* Under lock. */
static uint64_t this_worker(void)
{
	while (!worker_id)
		random_bytes(&worker_id, sizeof(worker_id));
	return worker_id;
}

static uint64_t this_daemon(void)
{
	struct rm_registry *reg = rm_registry();
	return reg ? reg->daemon_id : 0;
}

static const char *tenant_name(int t)
{
	const struct rm_daemon_config *c = rm_worker_config();
	if (t < 0)
		return "anonymous";
	return c && t < c->ntenants ? c->tenants[t].name : "unknown";
}

static struct export *find(enum rm_ipc_kind kind, uint64_t value)
{
	for (size_t i = 0; i < nexports; i++)
		if (exports[i]->token.kind == kind && exports[i]->obj.value == value)
			return exports[i];
	return NULL;
}

static struct hold *hold_of(struct export *e, uint64_t session)
{
	for (size_t i = 0; i < e->nholds; i++)
		if (e->holds[i].session == session)
			return &e->holds[i];
	return NULL;
}

static int add_hold(struct export *e, uint64_t session)
{
	if (e->nholds == e->holds_cap) {
		size_t cap = e->holds_cap ? 2 * e->holds_cap : 4;
		struct hold *h = realloc(e->holds, cap * sizeof(*h));
		if (!h)
			return -1;
		e->holds = h, e->holds_cap = cap;
	}
	e->holds[e->nholds++] = (struct hold){session, 1};
	return 0;
}

/* The driver's objects of session's proxies (every session's where session is 0) go: their
 * pending work still runs, as a destroyed event's and stream's does. */
static void drop_proxies(struct export *e, uint64_t session)
{
	for (size_t i = 0; i < e->nproxies;) {
		struct proxy *p = &e->proxies[i];
		if (session && p->session != session) {
			i++;
			continue;
		}
		rm_drv_cuStreamDestroy_v2(p->helper);
		rm_drv_cuEventDestroy_v2(p->event);
		*p = e->proxies[--e->nproxies];
	}
}

static void drop(struct export *e)
{
	drop_proxies(e, 0);
	free(e->proxies);
	for (size_t i = 0; i < nexports; i++)
		if (exports[i] == e) {
			exports[i] = exports[--nexports];
			break;
		}
	explicit_bzero(e->token.secret, sizeof(e->token.secret));
	free(e->holds);
	free(e);
}

CUresult rm_ipc_export(struct rm_channel *s, enum rm_ipc_kind kind, const struct rm_ipc_object *obj,
		       uint8_t out[RM_IPC_TOKEN_SIZE])
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	struct export *e = find(kind, obj->value);
	if (!e && nexports == exports_cap) {
		size_t cap = exports_cap ? 2 * exports_cap : 16;
		struct export **grown = realloc(exports, cap * sizeof(*grown));
		if (grown)
			exports = grown, exports_cap = cap;
	}
	if (!e && nexports < exports_cap && (e = calloc(1, sizeof(*e)))) {
		e->token = (struct rm_ipc_token){.kind = kind, .daemon = this_daemon(), .worker = this_worker(),
						 .id = next_id++, .tenant = s->sh->tenant};
		random_bytes(e->token.secret, sizeof(e->token.secret));
		e->obj = *obj;
		e->exporter = s->sh->id;
		if (add_hold(e, s->sh->id)) {
			free(e);
			e = NULL;
		} else {
			exports[nexports++] = e;
		}
	}
	if (e)
		rm_ipc_token_encode(&e->token, out);
	else
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&lock);
	return r;
}

/* Whether two secrets match, in a time that does not say where they differ. */
static int same_secret(const uint8_t *a, const uint8_t *b)
{
	uint8_t d = 0;
	for (size_t i = 0; i < 16; i++)
		d |= a[i] ^ b[i];
	return !d;
}

static int sees_device(struct rm_channel *s, int device)
{
	if (device < 0)
		return 1;
	for (int i = 0; i < s->sh->ndevices; i++)
		if (s->sh->devices[i] == device)
			return 1;
	return 0;
}

static const char *const kind_names[] = {[RM_IPC_MEMORY] = "memory", [RM_IPC_EVENT] = "event",
					 [RM_IPC_PHYSICAL] = "physical allocation", [RM_IPC_POOL] = "memory pool"};

CUresult rm_ipc_open(struct rm_channel *s, enum rm_ipc_kind kind, const void *token, size_t len,
		     struct rm_ipc_object *obj, int *again)
{
	struct rm_ipc_token t;
	const char *why = NULL;
	char line[256];
	CUresult r = CUDA_ERROR_INVALID_HANDLE;
	if (rm_ipc_token_decode(token, len, &t, &why)) {
		rm_session_log(s, RM_LOG_WARN, "refused an IPC %s handle: %s", kind_names[kind], why);
		return r;
	}
	pthread_mutex_lock(&lock);
	struct export *e = NULL;
	for (size_t i = 0; i < nexports && !e; i++)
		if (exports[i]->token.id == t.id)
			e = exports[i];
	struct hold *mine = NULL;
	if (t.daemon != this_daemon()) {
		why = "it was exported through another remorad (or an earlier run of this one): "
		      "CUDA IPC is between clients of one remorad";
	} else if (t.worker != this_worker()) {
		snprintf(line, sizeof(line), "it was exported in another worker of this remorad (its token names tenant %s): "
			 "CUDA IPC is between clients of one worker (one tenant, and with workers_per_tenant above 1 "
			 "one of its workers)", tenant_name(t.tenant));
		why = line;
	} else if (t.kind != kind) {
		snprintf(line, sizeof(line), "it is a handle of %s, not of %s", kind_names[t.kind], kind_names[kind]);
		why = line;
	} else if (!e || e->token.kind != kind) {
		why = "what it names is gone (freed by every client that held it), or never was";
	} else if (!same_secret(e->token.secret, t.secret)) {
		why = "its secret does not match the export's: a forged or damaged handle";
	} else if (e->token.tenant != s->sh->tenant) {
		snprintf(line, sizeof(line), "it was exported by a client of tenant %s, this client is of tenant %s: "
			 "CUDA IPC is between clients of one tenant", tenant_name(e->token.tenant), s->sh->tenant_name);
		why = line;
	} else if (kind != RM_IPC_PHYSICAL && !hold_of(e, e->exporter)) {
		why = "its exporter freed it";
	} else if (kind != RM_IPC_PHYSICAL && e->exporter == s->sh->id) {
		why = "it was opened by the process that exported it, which CUDA refuses too";
		r = CUDA_ERROR_INVALID_CONTEXT;
	} else if (!sees_device(s, e->obj.device)) {
		snprintf(line, sizeof(line), "it is on GPU %d, which this client does not see", e->obj.device);
		why = line;
	} else if ((mine = hold_of(e, s->sh->id)) && mine->refs < UINT32_MAX) {
		mine->refs++;
		*again = 1;
		why = NULL;
	} else if (!mine && !add_hold(e, s->sh->id)) {
		*again = 0;
		why = NULL;
	} else {
		why = "out of memory";
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (!why)
		*obj = e->obj;
	pthread_mutex_unlock(&lock);
	if (why) {
		rm_session_log(s, RM_LOG_WARN, "refused an IPC %s handle: %s", kind_names[kind], why);
		return r;
	}
	return CUDA_SUCCESS;
}

int rm_ipc_unref(struct rm_channel *s, enum rm_ipc_kind kind, uint64_t value)
{
	int left = -1;
	pthread_mutex_lock(&lock);
	struct export *e = nexports ? find(kind, value) : NULL;
	if (e) {
		struct hold *h = hold_of(e, s->sh->id);
		if (h && h->refs)
			h->refs--;
		left = h ? (int)(h->refs > INT32_MAX ? INT32_MAX : h->refs) : 0;
	}
	pthread_mutex_unlock(&lock);
	return left;
}

enum rm_ipc_left rm_ipc_leave(struct rm_channel *s, enum rm_ipc_kind kind, uint64_t value)
{
	enum rm_ipc_left left = RM_IPC_NOT_SHARED;
	pthread_mutex_lock(&lock);
	struct export *e = nexports ? find(kind, value) : NULL;
	if (e) {
		struct hold *h = hold_of(e, s->sh->id);
		if (h)
			*h = e->holds[--e->nholds];
		drop_proxies(e, s->sh->id);
		left = e->nholds ? RM_IPC_OTHERS_HOLD : RM_IPC_LAST;
		if (!e->nholds)
			drop(e);
	}
	pthread_mutex_unlock(&lock);
	return left;
}

/* Makes the proxy of (s, ctx) for e: an event in ctx and a helper stream in the export's
 * context. Under lock. */
static CUresult make_proxy(struct rm_channel *s, struct export *e, CUcontext ctx, struct proxy **out)
{
	if (e->nproxies == e->proxies_cap) {
		size_t cap = e->proxies_cap ? 2 * e->proxies_cap : 2;
		struct proxy *grown = realloc(e->proxies, cap * sizeof(*grown));
		if (!grown)
			return CUDA_ERROR_OUT_OF_MEMORY;
		e->proxies = grown, e->proxies_cap = cap;
	}
	struct proxy p = {.session = s->sh->id, .ctx = ctx};
	CUcontext popped;
	CUresult r = rm_drv_cuCtxPushCurrent_v2(ctx);
	if (r != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuEventCreate(&p.event, CU_EVENT_DISABLE_TIMING);
	rm_drv_cuCtxPopCurrent_v2(&popped);
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = rm_drv_cuCtxPushCurrent_v2(e->obj.ctx)) == CUDA_SUCCESS) {
		r = rm_drv_cuStreamCreate(&p.helper, CU_STREAM_NON_BLOCKING);
		rm_drv_cuCtxPopCurrent_v2(&popped);
	}
	if (r != CUDA_SUCCESS) {
		rm_drv_cuEventDestroy_v2(p.event);
		return r;
	}
	e->proxies[e->nproxies] = p;
	*out = &e->proxies[e->nproxies++];
	return CUDA_SUCCESS;
}

CUresult rm_ipc_event_record(struct rm_channel *s, CUevent ev, CUstream st, unsigned int flags)
{
	CUcontext ctx = NULL;
	pthread_mutex_lock(&lock);
	struct export *e = nexports ? find(RM_IPC_EVENT, (uint64_t)(uintptr_t)ev) : NULL;
	if (!e || e->exporter == s->sh->id || !e->obj.ctx || rm_drv_cuStreamGetCtx(st, &ctx) != CUDA_SUCCESS ||
	    ctx == e->obj.ctx) {
		pthread_mutex_unlock(&lock);
		return flags ? rm_drv_cuEventRecordWithFlags(ev, st, flags) : rm_drv_cuEventRecord(ev, st);
	}
	struct proxy *p = NULL;
	for (size_t i = 0; i < e->nproxies && !p; i++)
		if (e->proxies[i].session == s->sh->id && e->proxies[i].ctx == ctx)
			p = &e->proxies[i];
	CUresult r = p ? CUDA_SUCCESS : make_proxy(s, e, ctx, &p);
	if (r == CUDA_SUCCESS)
		r = flags ? rm_drv_cuEventRecordWithFlags(p->event, st, flags) : rm_drv_cuEventRecord(p->event, st);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuStreamWaitEvent(p->helper, p->event, 0);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuEventRecord(ev, p->helper);
	pthread_mutex_unlock(&lock);
	return r;
}

int rm_ipc_imported(struct rm_channel *s, enum rm_ipc_kind kind, uint64_t value)
{
	pthread_mutex_lock(&lock);
	struct export *e = nexports ? find(kind, value) : NULL;
	int imported = e && e->exporter != s->sh->id && hold_of(e, s->sh->id);
	pthread_mutex_unlock(&lock);
	return imported;
}

int rm_ipc_session_shares(struct rm_channel *s)
{
	int n = 0;
	pthread_mutex_lock(&lock);
	for (size_t i = 0; i < nexports; i++) {
		n += exports[i]->exporter == s->sh->id;
		for (size_t j = 0; j < exports[i]->nholds; j++)
			n += exports[i]->holds[j].session == s->sh->id;
	}
	pthread_mutex_unlock(&lock);
	return n;
}
