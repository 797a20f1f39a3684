/* The test NCCL's collectives, sends and receives, and groups (testnccl.h). */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "testnccl.h"

static __thread int group_depth;
static __thread struct testnccl_op *queued; /* freed when its thread ends (queued_key) */
static __thread size_t nqueued, queued_cap;
static pthread_key_t queued_key;
static pthread_once_t queued_once = PTHREAD_ONCE_INIT;

static void make_queued_key(void)
{
	pthread_key_create(&queued_key, free);
}

#define REDUCE_AS(T)                                                                               \
	do {                                                                                       \
		T *d = dst;                                                                        \
		for (size_t i = 0; i < k; i++) {                                                   \
			T acc = ((const T *)src[0])[i];                                            \
			for (int r = 1; r < n; r++) {                                              \
				T v = ((const T *)src[r])[i];                                      \
				switch (op) {                                                      \
				case rm_ncclSum: case rm_ncclAvg: acc = acc + v; break;            \
				case rm_ncclProd: acc = acc * v; break;                            \
				case rm_ncclMax: acc = v > acc ? v : acc; break;                   \
				case rm_ncclMin: acc = v < acc ? v : acc; break;                   \
				}                                                                  \
			}                                                                          \
			d[i] = op == rm_ncclAvg ? (T)(acc / (T)n) : acc;                           \
		}                                                                                  \
	} while (0)

/* dst[i] = src[0][i] op ... op src[n-1][i], in rank order. */
static ncclResult_t reduce(void *dst, const void *const *src, int n, size_t k, int type, int op)
{
	if (op < rm_ncclSum || op > rm_ncclAvg)
		return ncclInvalidArgument;
	switch (type) {
	case rm_ncclInt8: REDUCE_AS(int8_t); break;
	case rm_ncclUint8: REDUCE_AS(uint8_t); break;
	case rm_ncclInt32: REDUCE_AS(int32_t); break;
	case rm_ncclUint32: REDUCE_AS(uint32_t); break;
	case rm_ncclInt64: REDUCE_AS(int64_t); break;
	case rm_ncclUint64: REDUCE_AS(uint64_t); break;
	case rm_ncclFloat32: REDUCE_AS(float); break;
	case rm_ncclFloat64: REDUCE_AS(double); break;
	default: return ncclInvalidArgument; /* half, bfloat16 and fp8: not in the test NCCL */
	}
	return ncclSuccess;
}

/* Does the collective every rank of slot s called. Under the lock. */
static ncclResult_t perform(struct clique *c, struct slot *s)
{
	const struct testnccl_op *a = s->args;
	int n = c->nranks;
	for (int r = 1; r < n; r++)
		if (a[r].what != a[0].what || a[r].count != a[0].count || a[r].datatype != a[0].datatype ||
		    a[r].redop != a[0].redop || a[r].root != a[0].root)
			return ncclInvalidUsage;
	size_t e = rm_nccl_type_size(a[0].datatype), k = a[0].count, len = k * e;
	int root = a[0].root, multi = a[0].what == RM_NCCL_ALL_GATHER || a[0].what == RM_NCCL_REDUCE_SCATTER ||
				    a[0].what == RM_NCCL_ALL_TO_ALL;
	unsigned char *tmp = malloc((multi ? (size_t)n * (a[0].what == RM_NCCL_ALL_TO_ALL ? n : 1) : 1) * len + 1);
	const void *src[TESTNCCL_MAX_RANKS];
	ncclResult_t r = tmp ? ncclSuccess : ncclSystemError;
	for (int i = 0; i < n; i++)
		src[i] = a[i].sendbuff;
	switch (r == ncclSuccess ? a[0].what : 0) {
	case 0: break;
	case RM_NCCL_ALL_REDUCE:
		if ((r = reduce(tmp, src, n, k, a[0].datatype, a[0].redop)) == ncclSuccess)
			for (int i = 0; i < n; i++)
				memcpy(a[i].recvbuff, tmp, len);
		break;
	case RM_NCCL_BROADCAST:
		memcpy(tmp, a[root].sendbuff, len);
		for (int i = 0; i < n; i++)
			memcpy(a[i].recvbuff, tmp, len);
		break;
	case RM_NCCL_REDUCE:
		if ((r = reduce(tmp, src, n, k, a[0].datatype, a[0].redop)) == ncclSuccess)
			memcpy(a[root].recvbuff, tmp, len);
		break;
	case RM_NCCL_ALL_GATHER:
		for (int i = 0; i < n; i++)
			memcpy(tmp + (size_t)i * len, a[i].sendbuff, len);
		for (int i = 0; i < n; i++)
			memcpy(a[i].recvbuff, tmp, (size_t)n * len);
		break;
	case RM_NCCL_REDUCE_SCATTER:
		if ((r = reduce(tmp, src, n, (size_t)n * k, a[0].datatype, a[0].redop)) == ncclSuccess)
			for (int i = 0; i < n; i++)
				memcpy(a[i].recvbuff, tmp + (size_t)i * len, len);
		break;
	case RM_NCCL_ALL_TO_ALL:
		for (int to = 0; to < n; to++)
			for (int from = 0; from < n; from++)
				memcpy(tmp + ((size_t)to * n + from) * len, (const unsigned char *)a[from].sendbuff + (size_t)to * len, len);
		for (int to = 0; to < n; to++)
			memcpy(a[to].recvbuff, tmp + (size_t)to * n * len, (size_t)n * len);
		break;
	default:
		r = ncclInvalidUsage;
	}
	free(tmp);
	return r;
}

/* Rank o->comm arrives at its next collective's slot; the last to arrive does it. Under the lock. */
static struct slot *arrive(const struct testnccl_op *o, ncclResult_t *why)
{
	struct clique *c = o->comm->clique;
	uint64_t seq = o->comm->seq++;
	struct slot *s = &c->slots[seq % TESTNCCL_SLOTS];
	if (s->used && s->seq != seq) {
		*why = ncclInternalError; /* more collectives in flight than slots */
		return NULL;
	}
	if (!s->used) {
		memset(s, 0, sizeof(*s));
		if (!(s->args = calloc((size_t)c->nranks, sizeof(*s->args)))) {
			*why = ncclSystemError;
			return NULL;
		}
		s->used = 1;
		s->seq = seq;
	}
	s->args[o->comm->rank] = *o;
	if (++s->arrived == c->nranks) {
		s->result = perform(c, s);
		s->done = 1;
		testnccl_wake();
	}
	return s;
}

/* Waits for slot s's collective: its result. Under the lock. */
static ncclResult_t await(struct clique *c, struct slot *s, const struct timespec *end)
{
	while (!s->done && !c->broken)
		if (testnccl_wait(end) == ETIMEDOUT) {
			c->broken = 1; /* a rank never came: the clique is of no more use */
			testnccl_wake();
			return ncclSystemError;
		}
	ncclResult_t r = s->done ? s->result : ncclRemoteError;
	if (s->done && ++s->left == c->nranks) {
		free(s->args);
		memset(s, 0, sizeof(*s));
	}
	return r;
}

static ncclResult_t post(const struct testnccl_op *o)
{
	size_t len = o->count * rm_nccl_type_size(o->datatype);
	struct message *m = malloc(sizeof(*m) + len);
	if (!m)
		return ncclSystemError;
	m->from = o->comm->rank;
	m->to = o->root;
	m->len = len;
	memcpy(m->data, o->sendbuff, len);
	struct message **tail = &o->comm->clique->mail;
	while (*tail)
		tail = &(*tail)->next;
	m->next = NULL;
	*tail = m;
	testnccl_wake();
	return ncclSuccess;
}

static ncclResult_t take(const struct testnccl_op *o, const struct timespec *end)
{
	struct clique *c = o->comm->clique;
	size_t len = o->count * rm_nccl_type_size(o->datatype);
	for (;;) {
		for (struct message **p = &c->mail; *p; p = &(*p)->next) {
			struct message *m = *p;
			if (m->from != o->root || m->to != o->comm->rank)
				continue;
			*p = m->next;
			ncclResult_t r = m->len == len ? ncclSuccess : ncclInvalidUsage;
			if (r == ncclSuccess)
				memcpy(o->recvbuff, m->data, len);
			free(m);
			return r;
		}
		if (c->broken)
			return ncclRemoteError;
		if (testnccl_wait(end) == ETIMEDOUT) {
			c->broken = 1;
			testnccl_wake();
			return ncclSystemError;
		}
	}
}

/* Runs n calls: their streams' work done first (unless they run in stream order), then
 * sends, arrivals, receives and waits. */
static ncclResult_t run(const struct testnccl_op *ops, size_t n, int in_stream)
{
	ncclResult_t r = ncclSuccess, q;
	struct slot **slots = calloc(n ? n : 1, sizeof(*slots));
	if (!slots)
		return ncclSystemError;
	for (size_t i = 0; i < n && !in_stream; i++)
		if (testnccl_sync(ops[i].stream))
			r = ncclUnhandledCudaError;
	struct timespec end;
	testnccl_deadline(&end);
	pthread_mutex_lock(testnccl_lock());
	for (size_t i = 0; i < n && r == ncclSuccess; i++) {
		if (ops[i].comm->clique->broken)
			r = ncclRemoteError;
		else if (ops[i].what == RM_NCCL_SEND)
			r = post(&ops[i]);
		else if (ops[i].what != RM_NCCL_RECV && !(slots[i] = arrive(&ops[i], &q)))
			r = q;
	}
	for (size_t i = 0; i < n && r == ncclSuccess; i++)
		if (ops[i].what == RM_NCCL_RECV)
			r = take(&ops[i], &end);
	for (size_t i = 0; i < n; i++)
		if (slots[i] && (q = await(ops[i].comm->clique, slots[i], &end)) != ncclSuccess && r == ncclSuccess)
			r = q;
	pthread_mutex_unlock(testnccl_lock());
	free(slots);
	return r;
}

/* A blocking communicator's call, in its stream's order (testnccl.c). */
static void CUDA_CB run_in_stream(void *arg)
{
	struct testnccl_op *o = arg;
	pthread_mutex_lock(testnccl_lock());
	int left = o->comm->left;
	pthread_mutex_unlock(testnccl_lock());
	ncclResult_t r = left ? ncclRemoteError : run(o, 1, 1);
	pthread_mutex_lock(testnccl_lock());
	struct ncclComm *m = o->comm;
	if (r != ncclSuccess && !m->async_error)
		m->async_error = r;
	if (!--m->in_streams && m->left) {
		testnccl_clique_unref(m->clique);
		free(m);
	}
	pthread_mutex_unlock(testnccl_lock());
	free(o);
}

static ncclResult_t in_stream(const struct testnccl_op *o)
{
	struct testnccl_op *copy = malloc(sizeof(*copy));
	if (!copy)
		return ncclSystemError;
	*copy = *o;
	pthread_mutex_lock(testnccl_lock());
	o->comm->in_streams++;
	pthread_mutex_unlock(testnccl_lock());
	if (testnccl_host_fn(o->stream, run_in_stream, copy) == 0)
		return ncclSuccess;
	pthread_mutex_lock(testnccl_lock());
	o->comm->in_streams--;
	pthread_mutex_unlock(testnccl_lock());
	free(copy);
	return ncclUnhandledCudaError;
}

ncclResult_t testnccl_submit(const struct testnccl_op *o)
{
	if (!group_depth)
		return o->comm->blocking ? in_stream(o) : run(o, 1, 0);
	if (nqueued == queued_cap) {
		size_t cap = queued_cap ? 2 * queued_cap : 16;
		struct testnccl_op *q = realloc(queued, cap * sizeof(*q));
		if (!q)
			return ncclSystemError;
		queued = q;
		queued_cap = cap;
		pthread_once(&queued_once, make_queued_key);
		pthread_setspecific(queued_key, q);
	}
	queued[nqueued++] = *o;
	return ncclSuccess;
}

ncclResult_t testnccl_group_start(void)
{
	group_depth++;
	return ncclSuccess;
}

ncclResult_t testnccl_group_end(void)
{
	if (!group_depth)
		return ncclInvalidUsage;
	if (--group_depth)
		return ncclSuccess;
	ncclResult_t r = ncclSuccess;
	for (size_t i = 1; i < nqueued; i++) /* as NCCL: no group of blocking and nonblocking communicators */
		if (queued[i].comm->blocking != queued[0].comm->blocking)
			r = ncclInvalidArgument;
	if (r == ncclSuccess && nqueued && queued[0].comm->blocking)
		for (size_t i = 0; i < nqueued && r == ncclSuccess; i++)
			r = in_stream(&queued[i]);
	else if (r == ncclSuccess)
		r = run(queued, nqueued, 0);
	nqueued = 0;
	return r;
}
