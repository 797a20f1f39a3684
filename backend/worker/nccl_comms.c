/* The GPU host's NCCL in a worker: loading it, the communicators' records, their bounded
 * waits and their cliques (nccl_comms.h). */
#include "nccl_comms.h"

#include <dlfcn.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver_table.h"
#include "handles.h"

static struct rm_nccl_lib lib;
static const struct rm_nccl_lib *loaded;
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* The worker's communicators: list_lock before any record's lock. */
static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rm_nccl_comm *comms;

static char library[512] = "libnccl.so.2";
static int timeout_s = 300;
static int twins_wanted = 1, twins;

static void choose_twins(void);

void rm_nccl_configure(const char *path, int timeout, int want_twins)
{
	if (path && *path)
		snprintf(library, sizeof(library), "%s", path);
	if (timeout > 0)
		timeout_s = timeout;
	twins_wanted = want_twins;
	choose_twins(); /* the worker's environment, set before its threads start */
}

int rm_nccl_twins(void)
{
	return twins;
}

/* Before NCCL is loaded: connections made at init, which twins need (nccl_comms.h). */
static void choose_twins(void)
{
	const char *rc = getenv("NCCL_RUNTIME_CONNECT");
	twins = 0;
	if (!twins_wanted)
		return;
	if (rc && *rc && strcmp(rc, "0")) {
		rm_log(RM_LOG_INFO, "NCCL: NCCL_RUNTIME_CONNECT=%s in remorad's environment: no blocking twins, "
		       "every collective runs on its nonblocking communicator", rc);
		return;
	}
	setenv("NCCL_RUNTIME_CONNECT", "0", 1);
	twins = 1;
}

static void load(void)
{
	const char *path = library;
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		rm_log(RM_LOG_ERROR, "NCCL: cannot load nccl_library %s: %s; NCCL calls fail with ncclSystemError", path,
		       dlerror());
		return;
	}
#define SYM(f) *(void **)&lib.f = dlsym(h, "nccl" #f)
	SYM(GetVersion); SYM(GetUniqueId); SYM(CommInitRankConfig); SYM(CommSplit); SYM(CommFinalize);
	SYM(CommDestroy); SYM(CommAbort); SYM(CommGetAsyncError); SYM(CommCount); SYM(CommCuDevice);
	SYM(CommUserRank); SYM(GetLastError); SYM(AllReduce); SYM(Broadcast); SYM(Reduce); SYM(AllGather);
	SYM(ReduceScatter); SYM(Send); SYM(Recv); SYM(AlltoAll); SYM(Gather); SYM(Scatter); SYM(GroupStart);
	SYM(GroupEnd); SYM(RedOpCreatePreMulSum); SYM(RedOpDestroy);
#undef SYM
	int version = 0;
	if (!lib.GetVersion || !lib.GetUniqueId || !lib.CommInitRankConfig || !lib.CommAbort || !lib.CommDestroy ||
	    !lib.CommGetAsyncError || !lib.GroupStart || !lib.GroupEnd || lib.GetVersion(&version) != ncclSuccess) {
		rm_log(RM_LOG_ERROR, "NCCL: %s is not a usable NCCL (2.14 or later): NCCL calls fail with ncclSystemError",
		       path);
		return;
	}
	if (twins && !lib.CommSplit)
		twins = 0;
	rm_log(RM_LOG_INFO, "NCCL: %s, version %d%s", path, version, twins ? ", collectives on blocking twins" : "");
	loaded = &lib;
}

const struct rm_nccl_lib *rm_nccl(void)
{
	pthread_once(&load_once, load);
	return loaded;
}

int rm_nccl_adopt(struct rm_channel *s, ncclComm_t comm, const uint8_t clique[16], int dev, int nranks, int rank,
		  int nonblocking, struct rm_nccl_comm **out)
{
	struct rm_nccl_comm *c = calloc(1, sizeof(*c));
	if (!c) {
		loaded->CommAbort(comm);
		return -ENOMEM;
	}
	pthread_mutex_init(&c->lock, NULL);
	c->refs = 1;
	c->comm = comm;
	memcpy(c->clique, clique, sizeof(c->clique));
	c->dev = dev;
	c->session = s->sh->id;
	if (rm_drv_cuEventCreate(&c->done, CU_EVENT_DISABLE_TIMING) != CUDA_SUCCESS)
		c->done = NULL;
	c->nranks = nranks;
	c->rank = rank;
	c->nonblocking = nonblocking;
	pthread_mutex_lock(&list_lock);
	c->next = comms;
	comms = c;
	pthread_mutex_unlock(&list_lock);
	rm_session_own(s, RM_H_NCCL_COMM, c, 0);
	*out = c;
	return 0;
}

struct rm_nccl_comm *rm_nccl_find(struct rm_channel *s, uint64_t v, int32_t *why)
{
	void *p = NULL;
	if (!v || rm_session_use(s, RM_H_NCCL_COMM, v, &p) != CUDA_SUCCESS) {
		*why = ncclInvalidArgument;
		return NULL;
	}
	return p;
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t timeout_ns(void)
{
	return (uint64_t)timeout_s * 1000000000u;
}

/* Whether the client went (its connection ended): its waits end at once. */
static int client_gone(struct rm_channel *s)
{
	return __atomic_load_n(&s->left_early, __ATOMIC_ACQUIRE) || __atomic_load_n(&s->sh->closing, __ATOMIC_ACQUIRE);
}

/* Between polls of a nonblocking call: a group's launch settles in tens of µs, which a
 * 0.1 ms sleep (and its timer slack) made a 1 MiB all-reduce's whole cost (0.08 of native
 * on 2 H100s); so yield for the first 100 µs, then sleep 10 µs, 0.1 ms from 1 ms, 2 ms
 * from 10 ms. */
static void pause_a_little(uint64_t waited_ns)
{
	if (waited_ns < 100000u) {
		sched_yield();
		return;
	}
	long ns = waited_ns < 1000000u ? 10000 : waited_ns < 10000000u ? 100000 : 2000000;
	struct timespec ts = {0, ns};
	nanosleep(&ts, NULL);
}

/* Aborts c's twin, then c itself. Under c->lock. */
static void abort_locked(struct rm_nccl_comm *c)
{
	if (c->twin)
		loaded->CommAbort(c->twin);
	c->twin = NULL;
	if (c->comm)
		loaded->CommAbort(c->comm);
	c->comm = NULL;
}

static void say_abandoned(struct rm_channel *s, const char *what, uint64_t limit)
{
	if (client_gone(s))
		rm_session_log(s, RM_LOG_WARN, "NCCL: the client went during %s: communicator aborted", what);
	else
		rm_session_log(s, RM_LOG_WARN, "NCCL: %s did not finish within nccl_timeout (%llu s): communicator aborted",
			       what, (unsigned long long)(limit / 1000000000u));
}

ncclResult_t rm_nccl_settle(struct rm_channel *s, struct rm_nccl_comm *c, ncclResult_t r, const char *what)
{
	uint64_t start = now_ns(), limit = timeout_ns();
	while (r == ncclInProgress) {
		if (!c->comm)
			return ncclRemoteError;
		ncclResult_t e = ncclInProgress;
		if (loaded->CommGetAsyncError(c->comm, &e) != ncclSuccess)
			e = ncclInternalError;
		if (e != ncclInProgress)
			return e;
		uint64_t waited = now_ns() - start;
		if (waited > limit || client_gone(s)) {
			say_abandoned(s, what, limit);
			abort_locked(c);
			c->aborted = 1;
			return ncclSystemError;
		}
		pthread_mutex_unlock(&c->lock); /* a clique's abort may come meanwhile */
		pause_a_little(waited);
		pthread_mutex_lock(&c->lock);
	}
	return r;
}

ncclResult_t rm_nccl_settle_raw(struct rm_channel *s, ncclComm_t comm, ncclResult_t r, const char *what)
{
	uint64_t start = now_ns(), limit = timeout_ns();
	while (r == ncclInProgress) {
		if (loaded->CommGetAsyncError(comm, &r) != ncclSuccess)
			r = ncclInternalError;
		if (r != ncclInProgress)
			break;
		uint64_t waited = now_ns() - start;
		if (waited > limit || client_gone(s)) {
			say_abandoned(s, what, limit);
			r = ncclSystemError;
			break;
		}
		pause_a_little(waited);
	}
	if (r != ncclSuccess)
		loaded->CommAbort(comm);
	return r;
}

void rm_nccl_config_defaults(rm_nccl_config *cfg)
{
	int version = 0;
	memset(cfg, 0, sizeof(*cfg));
	if (loaded)
		loaded->GetVersion(&version);
	cfg->size = sizeof(*cfg);
	cfg->magic = RM_NCCL_CONFIG_MAGIC;
	cfg->version = (unsigned)version;
	cfg->cgaClusterSize = cfg->minCTAs = cfg->maxCTAs = cfg->splitShare = cfg->trafficClass = RM_NCCL_CONFIG_UNDEF;
	cfg->collnetEnable = cfg->CTAPolicy = cfg->shrinkShare = cfg->nvlsCTAs = RM_NCCL_CONFIG_UNDEF;
	cfg->nChannelsPerNetPeer = cfg->nvlinkCentricSched = RM_NCCL_CONFIG_UNDEF;
	cfg->blocking = 0;
}

/* Takes the twin NCCL's split made for c, once c's split settled (r). Under c->lock. */
static void take_twin(struct rm_channel *s, struct rm_nccl_comm *c, ncclResult_t r)
{
	ncclComm_t t = c->twin_made;
	ncclResult_t e = ncclInternalError;
	c->twin_made = NULL;
	if (r == ncclSuccess && t && loaded->CommGetAsyncError(t, &e) == ncclSuccess && e == ncclSuccess) {
		c->twin = t;
		c->twin_state = RM_NCCL_TWIN_MADE;
		rm_session_log(s, RM_LOG_INFO, "NCCL: rank %d: collectives on its blocking twin", c->rank);
		return;
	}
	c->twin_state = RM_NCCL_TWIN_FAILED;
	if (t)
		loaded->CommAbort(t);
	rm_session_log(s, RM_LOG_WARN, "NCCL: rank %d's blocking twin could not be made (%d, then %d): its collectives "
		       "run on its nonblocking communicator", c->rank, (int)r, (int)e);
}

void rm_nccl_make_twins(struct rm_channel *s, struct rm_nccl_comm **cs, int n)
{
	if (!twins || !loaded || n <= 0)
		return;
	rm_nccl_config cfg;
	rm_nccl_config_defaults(&cfg);
	cfg.blocking = 1;
	int asked = 0;
	loaded->GroupStart(); /* every rank of the thread splits at once, as its peers must */
	for (int i = 0; i < n; i++) {
		struct rm_nccl_comm *c = cs[i];
		pthread_mutex_lock(&c->lock);
		if (c->twin_state == RM_NCCL_TWIN_NONE && c->comm && !__atomic_load_n(&c->departed, __ATOMIC_ACQUIRE)) {
			c->twin_made = NULL;
			/* color 0, key 0: every rank, in the parent's order */
			ncclResult_t r = loaded->CommSplit(c->comm, 0, 0, &c->twin_made, &cfg);
			c->twin_state = r == ncclSuccess || r == ncclInProgress ? RM_NCCL_TWIN_ASKED : RM_NCCL_TWIN_FAILED;
			asked += c->twin_state == RM_NCCL_TWIN_ASKED;
		}
		pthread_mutex_unlock(&c->lock);
	}
	ncclResult_t end = loaded->GroupEnd();
	if (!asked)
		return;
	for (int i = 0; i < n; i++) {
		struct rm_nccl_comm *c = cs[i];
		pthread_mutex_lock(&c->lock);
		if (c->twin_state == RM_NCCL_TWIN_ASKED) {
			ncclResult_t r = end == ncclSuccess || end == ncclInProgress ? ncclInProgress : end;
			r = c->comm ? rm_nccl_settle(s, c, r, "making a blocking twin") : ncclRemoteError;
			if (c->comm)
				take_twin(s, c, r);
			else
				c->twin_state = RM_NCCL_TWIN_FAILED; /* aborted: NCCL's abort joined the split */
		}
		pthread_mutex_unlock(&c->lock);
	}
}

/* The calling thread's group: a channel's calls run on its own thread, as NCCL's groups are. */
#define RM_NCCL_GROUP_MAX 64
static __thread int group_depth;
static __thread struct rm_nccl_comm *group_comms[RM_NCCL_GROUP_MAX];
static __thread int group_n;

static __thread ncclResult_t group_error;
static __thread struct rm_nccl_op *held;
static __thread size_t nheld, held_cap;
static __thread int group_init;

/* A channel's thread that ends within a group frees what it held (the key's destructor). */
static pthread_key_t held_key;
static pthread_once_t held_once = PTHREAD_ONCE_INIT;

static void make_held_key(void)
{
	pthread_key_create(&held_key, free);
}

int rm_nccl_group_hold(const struct rm_nccl_op *op)
{
	if (nheld == held_cap) {
		size_t cap = held_cap ? 2 * held_cap : 16;
		struct rm_nccl_op *more = cap <= RM_NCCL_GROUP_OPS ? realloc(held, cap * sizeof(*more)) : NULL;
		if (!more)
			return -1;
		held = more;
		held_cap = cap;
		pthread_once(&held_once, make_held_key);
		pthread_setspecific(held_key, held);
	}
	held[nheld++] = *op;
	return 0;
}

size_t rm_nccl_group_take(struct rm_nccl_op **ops)
{
	size_t n = nheld;
	*ops = held;
	held = NULL;
	nheld = held_cap = 0;
	if (*ops)
		pthread_setspecific(held_key, NULL);
	return n;
}

void rm_nccl_group_mark_init(void)
{
	group_init = 1;
}

int rm_nccl_group_had_init(void)
{
	return group_init;
}

void rm_nccl_group_fail(ncclResult_t r)
{
	if (group_error == ncclSuccess && r != ncclSuccess && r != ncclInProgress)
		group_error = r;
}

ncclResult_t rm_nccl_group_error(void)
{
	ncclResult_t r = group_error;
	group_error = ncclSuccess;
	return r;
}

int rm_nccl_group_depth(int delta)
{
	group_depth += delta;
	if (group_depth < 0)
		group_depth = 0;
	if (group_depth == 1 && delta > 0) { /* a new outermost group */
		group_n = 0;
		group_init = 0;
		struct rm_nccl_op *old;
		rm_nccl_group_take(&old);
		free(old);
	}
	return group_depth;
}

void rm_nccl_group_note(struct rm_nccl_comm *c)
{
	for (int i = 0; i < group_n; i++)
		if (group_comms[i] == c)
			return;
	if (group_n < RM_NCCL_GROUP_MAX)
		group_comms[group_n++] = c;
}

ncclResult_t rm_nccl_group_settle(struct rm_channel *s, ncclResult_t in)
{
	ncclResult_t first = ncclSuccess;
	int pending = 0; /* a nonblocking communicator left in progress */
	for (int i = 0; i < group_n; i++) {
		struct rm_nccl_comm *c = group_comms[i];
		void *p;
		if (rm_session_use(s, RM_H_NCCL_COMM, (uint64_t)(uintptr_t)c, &p) != CUDA_SUCCESS)
			continue; /* destroyed within the group */
		pthread_mutex_lock(&c->lock);
		ncclResult_t r = !c->comm ? ncclRemoteError : c->nonblocking ? ncclSuccess : rm_nccl_settle(s, c, in, "a group");
		pending |= c->comm && c->nonblocking && in == ncclInProgress;
		if (r == ncclSuccess && !c->nonblocking && c->done && c->last_stream)
			rm_drv_cuEventRecord(c->done, c->last_stream);
		pthread_mutex_unlock(&c->lock);
		if (first == ncclSuccess)
			first = r;
	}
	group_n = 0;
	return first == ncclSuccess && pending ? ncclInProgress : first;
}

static int finishes(struct rm_nccl_comm *p);

/* Ends c's communicator: destroy (finalized first, bounded) or abort; its twin, once its last
 * collective is done (bounded), aborted. Under c->lock. */
static void end_locked(struct rm_channel *s, struct rm_nccl_comm *c, int abort)
{
	if (!c->comm)
		return;
	ncclResult_t r = ncclSuccess;
	int departed = __atomic_load_n(&c->departed, __ATOMIC_ACQUIRE);
	if (!abort && !c->finalized && !departed && loaded->CommFinalize)
		r = rm_nccl_settle(s, c, loaded->CommFinalize(c->comm), "ncclCommFinalize");
	if (!c->comm)
		return; /* aborted meanwhile */
	if (c->twin) {
		if (!abort && !departed)
			(void)finishes(c);
		loaded->CommAbort(c->twin);
		c->twin = NULL;
	}
	if (abort || r != ncclSuccess || __atomic_load_n(&c->departed, __ATOMIC_ACQUIRE))
		loaded->CommAbort(c->comm); /* a departed peer's clique cannot finalize */
	else
		loaded->CommDestroy(c->comm);
	c->comm = NULL;
}

/* Drops a reference to c: the last frees it. */
static void unref(struct rm_nccl_comm *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL))
		return;
	pthread_mutex_destroy(&c->lock);
	if (c->done)
		rm_drv_cuEventDestroy_v2(c->done);
	free(c);
}

void rm_nccl_end(struct rm_channel *s, struct rm_nccl_comm *c, int abort)
{
	pthread_mutex_lock(&list_lock);
	for (struct rm_nccl_comm **p = &comms; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	pthread_mutex_unlock(&list_lock);
	pthread_mutex_lock(&c->lock);
	end_locked(s, c, abort);
	pthread_mutex_unlock(&c->lock);
	unref(c);
}

static int same_clique(const struct rm_nccl_comm *a, const struct rm_nccl_comm *b)
{
	return !memcmp(a->clique, b->clique, sizeof(a->clique));
}

/* Whether p's last collective finished within the grace: else its kernels wait for a
 * departed rank. */
static int finishes(struct rm_nccl_comm *p)
{
	uint64_t end = now_ns() + (uint64_t)RM_NCCL_GRACE_S * 1000000000u;
	if (!p->done)
		return 0;
	for (;;) {
		CUresult q = rm_drv_cuEventQuery(p->done);
		if (q != CUDA_ERROR_NOT_READY)
			return q == CUDA_SUCCESS;
		if (now_ns() > end)
			return 0;
		pause_a_little(1u << 30);
	}
}

void rm_nccl_session_gone(struct rm_channel *s)
{
	if (!loaded)
		return;
	/* Under the list's lock: the session's communicators aborted, and the other ranks of
	 * their cliques marked and held (a reference each), to be waited for without it. */
	struct rm_nccl_comm **peers = NULL;
	size_t npeers = 0, cap = 0;
	pthread_mutex_lock(&list_lock);
	for (struct rm_nccl_comm *c = comms; c; c = c->next) {
		if (c->session != s->sh->id)
			continue;
		pthread_mutex_lock(&c->lock);
		abort_locked(c);
		pthread_mutex_unlock(&c->lock);
		for (struct rm_nccl_comm *p = comms; p; p = p->next) {
			if (p->session == s->sh->id || !same_clique(p, c) || __atomic_load_n(&p->departed, __ATOMIC_ACQUIRE))
				continue;
			__atomic_store_n(&p->departed, 1, __ATOMIC_RELEASE);
			if (npeers == cap) {
				struct rm_nccl_comm **more = realloc(peers, (cap = cap ? 2 * cap : 8) * sizeof(*more));
				if (!more)
					continue; /* departed, not waited for: its calls fail all the same */
				peers = more;
			}
			__atomic_add_fetch(&p->refs, 1, __ATOMIC_ACQ_REL);
			peers[npeers++] = p;
		}
	}
	pthread_mutex_unlock(&list_lock);
	for (size_t i = 0; i < npeers; i++) {
		struct rm_nccl_comm *p = peers[i];
		int done = finishes(p);
		pthread_mutex_lock(&p->lock);
		if (p->comm && !done) {
			rm_log(RM_LOG_WARN, "NCCL: session %llu went without destroying its communicator: rank %d of its "
			       "clique (session %llu) is aborted, its last collective unfinished after %d s",
			       (unsigned long long)s->sh->id, p->rank, (unsigned long long)p->session, RM_NCCL_GRACE_S);
			abort_locked(p);
			p->aborted = 1;
		}
		pthread_mutex_unlock(&p->lock);
		unref(p);
	}
	free(peers);
}
