/* A test NCCL for the CPU test driver: NCCL's API on the test driver's memory (host memory,
 * so buffers are read and written directly), ranks of one process meeting by unique id.
 * Loaded by remorad (nccl_library) in CI, or directly as libnccl.so.2 by a program.
 *
 * A collective synchronizes its stream (through the driver TESTNCCL_CUDA names, else
 * libcuda.so.1), then its rank arrives at the clique's slot for the collective's sequence
 * number; the last rank to arrive does the whole collective (reductions in rank order)
 * and wakes the others. Inside a group the calls are queued and arrive at ncclGroupEnd,
 * all before any waits, so one thread can drive every rank. Sends are buffered; a receive
 * waits for its message. Every wait ends after TESTNCCL_TIMEOUT seconds (default 30) with
 * ncclSystemError; an aborted rank's clique is broken and its waiters get ncclRemoteError.
 * A communicator made nonblocking (config.blocking = 0) returns from its init at once and
 * answers ncclInProgress from ncclCommGetAsyncError until every rank has joined.
 * A blocking communicator's calls (NCCL's default) run in stream order instead: a host
 * function of the call's stream does it there, as NCCL's kernels wait on the GPU, and the
 * call returns at once; an error becomes the communicator's async error.
 * ncclCommSplit is a meeting of every rank of the communicator: the last to come makes the
 * new cliques (ranks ordered by key, then by their old rank); a nonblocking parent answers
 * ncclInProgress from ncclCommGetAsyncError until then. */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl_abi.h"
#include "testnccl.h"

#define API __attribute__((visibility("default")))

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static struct clique *cliques;
static uint64_t ids_made;

static CUresult (*drv_sync)(CUstream);
static CUresult (*drv_ctx_device)(CUdevice *);
static CUresult (*drv_host_fn)(CUstream, CUhostFn, void *);

static void find_driver(void)
{
	const char *path = getenv("TESTNCCL_CUDA");
	void *h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (h) {
		*(void **)&drv_sync = dlsym(h, "cuStreamSynchronize");
		*(void **)&drv_ctx_device = dlsym(h, "cuCtxGetDevice");
		*(void **)&drv_host_fn = dlsym(h, "cuLaunchHostFunc");
	}
}

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static int timeout_s(void)
{
	const char *t = getenv("TESTNCCL_TIMEOUT");
	int v = t ? atoi(t) : 0;
	return v > 0 ? v : 30;
}

static void deadline(struct timespec *ts)
{
	clock_gettime(CLOCK_REALTIME, ts);
	ts->tv_sec += timeout_s();
}

/* Waits on changed until the deadline: 0, or ETIMEDOUT. Under lock. */
static int wait_until(const struct timespec *end)
{
	return pthread_cond_timedwait(&changed, &lock, end) == ETIMEDOUT ? ETIMEDOUT : 0;
}

API ncclResult_t ncclGetVersion(int *version)
{
	if (!version)
		return ncclInvalidArgument;
	*version = TESTNCCL_VERSION;
	return ncclSuccess;
}

API ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	if (!id)
		return ncclInvalidArgument;
	memset(id, 0, sizeof(*id));
	pthread_mutex_lock(&lock);
	uint64_t n = ++ids_made;
	pthread_mutex_unlock(&lock);
	uint64_t words[3] = {TESTNCCL_ID_MAGIC, (uint64_t)getpid(), n};
	memcpy(id->internal, words, sizeof(words));
	return ncclSuccess;
}

static struct clique *clique_find_locked(const ncclUniqueId *id)
{
	for (struct clique *c = cliques; c; c = c->next)
		if (!memcmp(&c->id, id, sizeof(*id)))
			return c;
	return NULL;
}

static void clique_unref_locked(struct clique *c)
{
	if (--c->refs)
		return;
	for (struct clique **p = &cliques; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	for (int i = 0; i < TESTNCCL_SLOTS; i++)
		free(c->slots[i].args);
	for (struct message *m = c->mail, *n; m; m = n) {
		n = m->next;
		free(m);
	}
	free(c);
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *id, int rank, int blocking)
{
	pthread_once(&driver_once, find_driver);
	if (!out || nranks < 1 || nranks > TESTNCCL_MAX_RANKS || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	struct ncclComm *m = calloc(1, sizeof(*m));
	if (!m)
		return ncclSystemError;
	CUdevice dev = 0;
	if (drv_ctx_device)
		drv_ctx_device(&dev);
	m->dev = dev;
	m->rank = rank;
	m->nranks = nranks;
	m->blocking = blocking;
	pthread_mutex_lock(&lock);
	struct clique *c = clique_find_locked(id);
	if (!c && (c = calloc(1, sizeof(*c)))) {
		c->id = *id;
		c->nranks = nranks;
		c->next = cliques;
		cliques = c;
	}
	ncclResult_t r = ncclSuccess;
	if (!c)
		r = ncclSystemError;
	else if (c->nranks != nranks || c->ranks[rank] || c->broken)
		r = ncclInvalidUsage;
	if (r != ncclSuccess) {
		pthread_mutex_unlock(&lock);
		free(m);
		return r;
	}
	c->refs++;
	c->ranks[rank] = m;
	c->joined++;
	m->clique = c;
	pthread_cond_broadcast(&changed);
	struct timespec end;
	deadline(&end);
	while (blocking && c->joined < c->nranks && !c->broken && r == ncclSuccess)
		if (wait_until(&end))
			r = ncclSystemError;
	if (c->broken)
		r = ncclRemoteError;
	if (r != ncclSuccess) {
		c->ranks[rank] = NULL;
		c->joined--;
		clique_unref_locked(c);
		pthread_mutex_unlock(&lock);
		free(m);
		return r;
	}
	pthread_mutex_unlock(&lock);
	*out = m;
	return blocking ? ncclSuccess : ncclInProgress;
}

API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank, rm_nccl_config *config)
{
	int blocking = !config || !RM_NCCL_CONFIG_HAS(config->size, blocking) || config->blocking != 0;
	if (config && config->magic != RM_NCCL_CONFIG_MAGIC)
		return ncclInvalidArgument;
	return init_rank(comm, nranks, &id, rank, blocking);
}

API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	return init_rank(comm, nranks, &id, rank, 1);
}

API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
	(void)devlist; /* the test driver's contexts are the caller's to make current */
	ncclUniqueId id;
	ncclResult_t r = ncclGetUniqueId(&id);
	for (int i = 0; i < ndev && r == ncclSuccess; i++) {
		r = init_rank(&comms[i], ndev, &id, i, 0); /* every rank joins before any waits */
		if (r == ncclInProgress) {
			comms[i]->blocking = 1; /* as NCCL's are */
			r = ncclSuccess;
		}
	}
	return r;
}

API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *e)
{
	if (!comm || !e)
		return ncclInvalidArgument;
	pthread_mutex_lock(&lock);
	struct clique *c = comm->clique;
	*e = c->broken ? ncclRemoteError : comm->async_error ? comm->async_error
		: c->joined < c->nranks || comm->splitting ? ncclInProgress : ncclSuccess;
	pthread_mutex_unlock(&lock);
	return ncclSuccess;
}

API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
	if (!comm || !count)
		return ncclInvalidArgument;
	*count = comm->nranks;
	return ncclSuccess;
}

API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
	if (!comm || !device)
		return ncclInvalidArgument;
	*device = comm->dev;
	return ncclSuccess;
}

API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
	if (!comm || !rank)
		return ncclInvalidArgument;
	*rank = comm->rank;
	return ncclSuccess;
}

API ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
	return comm ? ncclSuccess : ncclInvalidArgument;
}

static ncclResult_t leave(ncclComm_t comm, int abort)
{
	if (!comm)
		return ncclInvalidArgument;
	pthread_mutex_lock(&lock);
	struct clique *c = comm->clique;
	if (abort)
		c->broken = 1;
	c->ranks[comm->rank] = NULL;
	pthread_cond_broadcast(&changed);
	comm->left = 1;
	if (!comm->in_streams) { /* else the last of its calls in stream order frees it */
		clique_unref_locked(c);
		free(comm);
	}
	pthread_mutex_unlock(&lock);
	return ncclSuccess;
}

API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
	return leave(comm, 0);
}

API ncclResult_t ncclCommAbort(ncclComm_t comm)
{
	return leave(comm, 1);
}

API const char *ncclGetErrorString(ncclResult_t r)
{
	return r == ncclSuccess ? "no error" : "test NCCL error";
}

API const char *ncclGetLastError(ncclComm_t comm)
{
	(void)comm;
	return "";
}

API ncclResult_t ncclGroupStart(void)
{
	return testnccl_group_start();
}

API ncclResult_t ncclGroupEnd(void)
{
	return testnccl_group_end();
}

static ncclResult_t op(int what, const void *sendbuff, void *recvbuff, size_t count, int datatype, int redop,
		       int root, ncclComm_t comm, CUstream stream)
{
	if (!comm || !rm_nccl_type_size(datatype) || (root < 0 || root >= comm->nranks))
		return ncclInvalidArgument;
	struct testnccl_op o = {what, sendbuff, recvbuff, count, datatype, redop, root, comm, stream};
	return testnccl_submit(&o);
}

API ncclResult_t ncclAllReduce(const void *s, void *r, size_t n, int t, int redop, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_ALL_REDUCE, s, r, n, t, redop, 0, c, st);
}

API ncclResult_t ncclBroadcast(const void *s, void *r, size_t n, int t, int root, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_BROADCAST, s, r, n, t, 0, root, c, st);
}

API ncclResult_t ncclBcast(void *b, size_t n, int t, int root, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_BROADCAST, b, b, n, t, 0, root, c, st);
}

API ncclResult_t ncclReduce(const void *s, void *r, size_t n, int t, int redop, int root, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_REDUCE, s, r, n, t, redop, root, c, st);
}

API ncclResult_t ncclAllGather(const void *s, void *r, size_t n, int t, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_ALL_GATHER, s, r, n, t, 0, 0, c, st);
}

API ncclResult_t ncclReduceScatter(const void *s, void *r, size_t n, int t, int redop, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_REDUCE_SCATTER, s, r, n, t, redop, 0, c, st);
}

API ncclResult_t ncclAlltoAll(const void *s, void *r, size_t n, int t, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_ALL_TO_ALL, s, r, n, t, 0, 0, c, st);
}

API ncclResult_t ncclSend(const void *s, size_t n, int t, int peer, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_SEND, s, NULL, n, t, 0, peer, c, st);
}

API ncclResult_t ncclRecv(void *r, size_t n, int t, int peer, ncclComm_t c, CUstream st)
{
	return op(RM_NCCL_RECV, NULL, r, n, t, 0, peer, c, st);
}

/* The last rank of a split came: each color's new clique, its communicators given out. */
static void split_locked(struct clique *p)
{
	int n = p->nranks;
	for (int i = 0; i < n; i++) {
		struct split_part *a = &p->split[i];
		if (!a->arrived || a->color < 0 || (a->out && *a->out))
			continue;
		int members[TESTNCCL_MAX_RANKS], k = 0;
		for (int j = 0; j < n; j++) /* this color's ranks, by key then old rank */
			if (p->split[j].arrived && p->split[j].color == a->color) {
				int at = k++;
				while (at > 0 && p->split[members[at - 1]].key > p->split[j].key) {
					members[at] = members[at - 1];
					at--;
				}
				members[at] = j;
			}
		struct clique *c = calloc(1, sizeof(*c));
		if (!c)
			continue;
		uint64_t words[4] = {TESTNCCL_ID_MAGIC ^ 1, 0, p->splits, (uint64_t)(uint32_t)a->color};
		memcpy(&words[1], p->id.internal + 8, 8);
		memcpy(c->id.internal, words, sizeof(words));
		c->nranks = k;
		c->next = cliques;
		cliques = c;
		for (int r = 0; r < k; r++) {
			struct split_part *m = &p->split[members[r]];
			struct ncclComm *x = calloc(1, sizeof(*x));
			if (!x)
				continue;
			x->clique = c;
			x->rank = r;
			x->nranks = k;
			x->blocking = m->blocking;
			x->dev = p->ranks[members[r]] ? p->ranks[members[r]]->dev : 0;
			c->ranks[r] = x;
			c->joined++;
			c->refs++;
			*m->out = x;
		}
	}
	for (int i = 0; i < n; i++) {
		if (p->ranks[i])
			p->ranks[i]->splitting = 0;
		memset(&p->split[i], 0, sizeof(p->split[i]));
	}
	p->split_arrived = 0;
	p->splits++;
}

API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *out, rm_nccl_config *cfg)
{
	if (!comm || !out || (cfg && cfg->magic != RM_NCCL_CONFIG_MAGIC))
		return ncclInvalidArgument;
	int blocking = !cfg || !RM_NCCL_CONFIG_HAS(cfg->size, blocking) || cfg->blocking != 0;
	*out = NULL;
	pthread_mutex_lock(&lock);
	struct clique *p = comm->clique;
	struct split_part *a = &p->split[comm->rank];
	if (p->broken || a->arrived) {
		pthread_mutex_unlock(&lock);
		return p->broken ? ncclRemoteError : ncclInvalidUsage;
	}
	*a = (struct split_part){1, color, key, blocking, out};
	comm->splitting = 1;
	if (++p->split_arrived == p->nranks)
		split_locked(p);
	pthread_cond_broadcast(&changed);
	ncclResult_t r = ncclSuccess;
	struct timespec end;
	deadline(&end);
	/* The split waits as its parent does (NCCL); the child's blocking setting is its own. */
	while (comm->blocking && comm->splitting && !p->broken && r == ncclSuccess)
		if (wait_until(&end))
			r = ncclSystemError;
	if (p->broken)
		r = ncclRemoteError;
	pthread_mutex_unlock(&lock);
	return r != ncclSuccess ? r : comm->blocking ? ncclSuccess : ncclInProgress;
}

API ncclResult_t ncclRedOpCreatePreMulSum(int *o, void *s, int t, int res, ncclComm_t c)
{
	(void)o, (void)s, (void)t, (void)res, (void)c;
	return ncclInvalidUsage;
}

API ncclResult_t ncclRedOpDestroy(int o, ncclComm_t c)
{
	(void)o, (void)c;
	return ncclInvalidUsage;
}

/* For testnccl_ops.c: the state's lock, condition and driver. */
void testnccl_clique_unref(struct clique *c)
{
	clique_unref_locked(c);
}

pthread_mutex_t *testnccl_lock(void)
{
	return &lock;
}

int testnccl_wait(const struct timespec *end)
{
	return wait_until(end);
}

void testnccl_wake(void)
{
	pthread_cond_broadcast(&changed);
}

void testnccl_deadline(struct timespec *ts)
{
	deadline(ts);
}

int testnccl_host_fn(CUstream st, CUhostFn fn, void *arg)
{
	pthread_once(&driver_once, find_driver);
	return drv_host_fn && drv_host_fn(st, fn, arg) == CUDA_SUCCESS ? 0 : -1;
}

int testnccl_sync(CUstream st)
{
	pthread_once(&driver_once, find_driver);
	return drv_sync ? (drv_sync(st) == CUDA_SUCCESS ? 0 : -1) : 0;
}
