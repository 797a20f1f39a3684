/* Driver streams on known hardware queues (see stream_pool.h). */
#include "stream_pool.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "driver_table.h"
#include "log.h"
#include "stream_attrs.h"

#define MAX_QUEUES 32
#define MAX_CONTEXTS 64

struct pool_stream {
	CUstream stream;
	CUcontext ctx;
	int queue;
	int priority;
	int in_use;
	uint64_t named_ns;                 /* when its client last named it in a call (atomic) */
	uint64_t submissions;              /* calls given to it since taken (atomic) */
	struct pool_stream *next_on_queue; /* the context's streams of the same queue */
};

struct ctx_pool {
	CUcontext ctx;
	uint64_t created;              /* streams made in the context: the next one's queue */
	int users[MAX_QUEUES];         /* client streams on each queue */
	struct pool_stream *on_queue[MAX_QUEUES];
	struct pool_stream **streams;
	int n, cap;
};

static int nqueues = MAX_QUEUES;
static int wait_shared = 1;
static uint64_t idle_after_ns = 10000000000ull;
static struct ctx_pool pools[MAX_CONTEXTS];
static int npools;
/* Stream -> entry, open addressing; rebuilt whole when a context is forgotten. */
static struct pool_stream **index_tab;
static size_t index_cap, index_used;
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
/* How long this thread's calls were held for a shared queue since it last asked. */
static __thread uint64_t waited_ns;

void rm_stream_pool_configure(int hardware_queues, int wait_when_shared, int idle_after_s)
{
	idle_after_ns = (uint64_t)(idle_after_s < 1 ? 1 : idle_after_s) * 1000000000ull;
	nqueues = hardware_queues < 1 ? 1 : hardware_queues > MAX_QUEUES ? MAX_QUEUES : hardware_queues;
	wait_shared = wait_when_shared;
}

void rm_stream_pool_set_queues(int hardware_queues)
{
	pthread_rwlock_wrlock(&lock);
	nqueues = hardware_queues < 1 ? 1 : hardware_queues > MAX_QUEUES ? MAX_QUEUES : hardware_queues;
	pthread_rwlock_unlock(&lock);
}

static size_t slot_of(CUstream st, size_t cap)
{
	uint64_t h = (uint64_t)(uintptr_t)st * 0x9E3779B97F4A7C15ull;
	return (size_t)(h >> 17) & (cap - 1);
}

static struct pool_stream *lookup(CUstream st)
{
	if (!index_cap)
		return NULL;
	for (size_t i = slot_of(st, index_cap);; i = (i + 1) & (index_cap - 1)) {
		if (!index_tab[i])
			return NULL;
		if (index_tab[i]->stream == st)
			return index_tab[i];
	}
}

static void index_put(struct pool_stream *e)
{
	size_t i = slot_of(e->stream, index_cap);
	while (index_tab[i])
		i = (i + 1) & (index_cap - 1);
	index_tab[i] = e;
	index_used++;
}

/* Rebuilds the index with room for extra more entries; -1 when out of memory. */
static int index_rebuild(size_t extra)
{
	size_t total = extra;
	for (int p = 0; p < npools; p++)
		total += pools[p].n;
	size_t cap = 64;
	while (cap < 2 * total)
		cap *= 2;
	struct pool_stream **tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -1;
	free(index_tab);
	index_tab = tab;
	index_cap = cap;
	index_used = 0;
	for (int p = 0; p < npools; p++)
		for (int i = 0; i < pools[p].n; i++)
			index_put(pools[p].streams[i]);
	return 0;
}

static struct ctx_pool *pool_of(CUcontext ctx)
{
	for (int p = 0; p < npools; p++)
		if (pools[p].ctx == ctx)
			return &pools[p];
	if (npools == MAX_CONTEXTS)
		return NULL;
	pools[npools] = (struct ctx_pool){.ctx = ctx};
	return &pools[npools++];
}

/* Makes one stream of priority per queue, in a row, so that they cover every queue. */
static CUresult add_batch(struct ctx_pool *pool, int priority)
{
	if (pool->n + nqueues > pool->cap) {
		int cap = pool->cap ? pool->cap * 2 : 2 * nqueues;
		while (cap < pool->n + nqueues)
			cap *= 2;
		struct pool_stream **s = realloc(pool->streams, cap * sizeof(*s));
		if (!s)
			return CUDA_ERROR_OUT_OF_MEMORY;
		pool->streams = s;
		pool->cap = cap;
	}
	if (2 * (index_used + nqueues) > index_cap && index_rebuild(nqueues))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int k = 0; k < nqueues; k++) {
		struct pool_stream *e = calloc(1, sizeof(*e));
		if (!e)
			return CUDA_ERROR_OUT_OF_MEMORY;
		CUresult r = rm_drv_cuStreamCreateWithPriority(&e->stream, CU_STREAM_NON_BLOCKING, priority);
		if (r != CUDA_SUCCESS) {
			free(e);
			return r;
		}
		e->ctx = pool->ctx;
		e->priority = priority;
		e->queue = (int)(pool->created++ % (uint64_t)nqueues);
		e->next_on_queue = pool->on_queue[e->queue];
		pool->on_queue[e->queue] = e;
		pool->streams[pool->n++] = e;
		index_put(e);
	}
	return CUDA_SUCCESS;
}

/* A free, idle stream of priority on a queue with the fewest client streams, or NULL. */
static struct pool_stream *pick(struct ctx_pool *pool, int priority)
{
	int fewest = pool->users[0];
	for (int q = 1; q < nqueues; q++)
		if (pool->users[q] < fewest)
			fewest = pool->users[q];
	for (int i = 0; i < pool->n; i++) {
		struct pool_stream *e = pool->streams[i];
		if (!e->in_use && e->priority == priority && pool->users[e->queue] == fewest &&
		    rm_drv_cuStreamQuery(e->stream) == CUDA_SUCCESS)
			return e;
	}
	return NULL;
}

CUresult rm_stream_pool_take(CUcontext ctx, int priority, CUstream *out)
{
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_rwlock_wrlock(&lock);
	struct ctx_pool *pool = pool_of(ctx);
	struct pool_stream *e = pool ? pick(pool, priority) : NULL;
	if (pool && !e && (r = add_batch(pool, priority)) == CUDA_SUCCESS)
		e = pick(pool, priority);
	if (e) {
		e->in_use = 1;
		__atomic_store_n(&e->named_ns, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&e->submissions, 0, __ATOMIC_RELAXED);
		pool->users[e->queue]++;
		*out = e->stream;
		rm_log(RM_LOG_DEBUG, "stream pool: stream %p on queue %d, which now serves %d client streams",
		       (void *)e->stream, e->queue, pool->users[e->queue]);
		r = CUDA_SUCCESS;
	}
	pthread_rwlock_unlock(&lock);
	return r;
}

void rm_stream_pool_give(CUstream st)
{
	rm_stream_attrs_given(st); /* what the client set does not reach the next one */
	pthread_rwlock_wrlock(&lock);
	struct pool_stream *e = lookup(st);
	if (e && e->in_use) {
		e->in_use = 0;
		rm_log(RM_LOG_DEBUG, "stream pool: stream %p on queue %d given back after %llu calls", (void *)st, e->queue,
		       (unsigned long long)__atomic_load_n(&e->submissions, __ATOMIC_RELAXED));
		for (int p = 0; p < npools; p++)
			if (pools[p].ctx == e->ctx)
				pools[p].users[e->queue]--;
	}
	pthread_rwlock_unlock(&lock);
}

static uint64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Whether another client stream on e's queue was named by its client within
 * idle_after_ns (lock held). */
static int queue_contended(const struct pool_stream *e, uint64_t now)
{
	for (int p = 0; p < npools; p++) {
		if (pools[p].ctx != e->ctx)
			continue;
		if (pools[p].users[e->queue] < 2)
			return 0;
		for (const struct pool_stream *o = pools[p].on_queue[e->queue]; o; o = o->next_on_queue) {
			uint64_t named = __atomic_load_n(&o->named_ns, __ATOMIC_RELAXED);
			if (o != e && o->in_use && named && now - named < idle_after_ns)
				return 1;
		}
	}
	return 0;
}

int rm_stream_pool_contended(CUstream st)
{
	uint64_t now = now_ns();
	pthread_rwlock_rdlock(&lock);
	struct pool_stream *e = lookup(st);
	int contended = e && queue_contended(e, now);
	pthread_rwlock_unlock(&lock);
	return contended;
}

void rm_stream_pool_named(CUstream st)
{
	uint64_t now = now_ns();
	pthread_rwlock_rdlock(&lock);
	struct pool_stream *e = lookup(st);
	if (e)
		__atomic_store_n(&e->named_ns, now, __ATOMIC_RELAXED);
	pthread_rwlock_unlock(&lock);
}

/* Names st as given a call; whether that call must wait for st's own work first
 * (queue_sharing = wait and the queue contended). */
static int submitting(CUstream st)
{
	uint64_t now = now_ns();
	pthread_rwlock_rdlock(&lock);
	struct pool_stream *e = lookup(st);
	int wait = 0;
	if (e) {
		__atomic_store_n(&e->named_ns, now, __ATOMIC_RELAXED);
		__atomic_add_fetch(&e->submissions, 1, __ATOMIC_RELAXED);
		wait = wait_shared && queue_contended(e, now);
	}
	pthread_rwlock_unlock(&lock);
	return wait;
}

/* Polls until call stops answering CUDA_ERROR_NOT_READY, sleeping a little longer each
 * time (10 us to 0.5 ms; client threads ask for 1 us timer slack). On the H200
 * (bench/queue_probe) this kept 128 waiting clients at 1.00x; a blocking-sync event
 * recorded to wait on held up the queue (2.7x), spinning threads took the CPUs (1.09x). */
#define POLL(call)                                                                     \
	do {                                                                           \
		long sleep_ns_ = 10000;                                                \
		uint64_t since_ = 0;                                                   \
		while ((r = (call)) == CUDA_ERROR_NOT_READY) {                         \
			if (!since_)                                                   \
				since_ = now_ns();                                     \
			nanosleep(&(struct timespec){0, sleep_ns_}, NULL);             \
			if (sleep_ns_ < 500000)                                        \
				sleep_ns_ *= 2;                                        \
		}                                                                      \
		if (since_)                                                            \
			waited_ns += now_ns() - since_;                                \
	} while (0)

uint64_t rm_stream_pool_take_waited_ns(void)
{
	uint64_t ns = waited_ns;
	waited_ns = 0;
	return ns;
}

CUresult rm_stream_pool_before_submit(CUstream st)
{
	CUresult r = CUDA_SUCCESS;
	if (submitting(st))
		POLL(rm_drv_cuStreamQuery(st));
	return r;
}

CUresult rm_stream_pool_before_wait(CUstream st, CUevent ev)
{
	CUresult r = CUDA_SUCCESS;
	if (submitting(st))
		POLL(rm_drv_cuEventQuery(ev));
	return r;
}

int rm_stream_pool_idle(CUcontext ctx)
{
	int idle = 0;
	pthread_rwlock_rdlock(&lock);
	for (int p = 0; p < npools; p++)
		if (pools[p].ctx == ctx) {
			idle = 1;
			for (int i = 0; idle && i < pools[p].n; i++)
				idle = rm_drv_cuStreamQuery(pools[p].streams[i]->stream) == CUDA_SUCCESS;
		}
	pthread_rwlock_unlock(&lock);
	return idle;
}

void rm_stream_pool_forget_context(CUcontext ctx)
{
	pthread_rwlock_wrlock(&lock);
	for (int p = 0; p < npools; p++) {
		if (pools[p].ctx != ctx)
			continue;
		struct ctx_pool gone = pools[p];
		pools[p] = pools[--npools];
		if (index_rebuild(0)) { /* the old index still names them: keep them */
			rm_log(RM_LOG_ERROR, "stream pool: out of memory forgetting a context's streams");
			pools[npools++] = gone;
			break;
		}
		for (int i = 0; i < gone.n; i++)
			free(gone.streams[i]); /* the driver's streams went with the context's reset */
		free(gone.streams);
		break;
	}
	pthread_rwlock_unlock(&lock);
}
