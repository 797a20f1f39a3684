/* Kernel time per client, in spans (kernel_timing.h). */
#include "kernel_timing.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "driver_table.h"
#include "registry.h"
#include "session.h"
#include "stream_pool.h"

#define RING 64

enum { SLOT_FREE, SLOT_OPEN, SLOT_PENDING };

struct rm_kernel_timers {
	pthread_mutex_t lock; /* guards every slot's state, stream and chan */
	struct {
		CUevent start, end; /* made at the slot's first use */
		CUstream stream;    /* an open span's */
		uint64_t open_ns;   /* when it was opened (CLOCK_MONOTONIC) */
		uint64_t closed_ns; /* when its end was recorded */
		int chan;           /* the channel that opened it */
		int state;
		int host_timed;     /* opened with no start event: a synchronize right behind its
				     * launch is to end it (rm_kernel_timing_before_launch) */
	} slot[RING];
	int open;      /* slots in SLOT_OPEN */
	int open_host; /* of which host-timed (no start event): an early close skips them; both
			* change under lock and are read without it (atomic) */
};

static int enabled = 1;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void rm_kernel_timing_enable(int on) { enabled = on; }

static void add_time(struct rm_channel *s, CUevent start, CUevent end)
{
	float ms = 0;
	if (rm_drv_cuEventElapsedTime(&ms, start, end) == CUDA_SUCCESS && ms > 0)
		rm_registry_add_gpu_time(s->sh->slot, s->sh->id, (uint64_t)((double)ms * 1e6));
}

/* Reads slot i if its end has passed (lock held): 1 when the slot is free afterwards. */
static int reap_locked(struct rm_channel *s, struct rm_kernel_timers *t, int i)
{
	if (t->slot[i].state != SLOT_PENDING)
		return t->slot[i].state == SLOT_FREE;
	CUresult r = rm_drv_cuEventQuery(t->slot[i].end);
	if (r == CUDA_ERROR_NOT_READY)
		return 0;
	if (r == CUDA_SUCCESS)
		add_time(s, t->slot[i].start, t->slot[i].end);
	t->slot[i].state = SLOT_FREE;
	__atomic_sub_fetch(&s->sh->pending_spans, 1, __ATOMIC_RELAXED);
	return 1;
}

static struct rm_kernel_timers *timers_of(struct rm_channel *s, struct rm_session_ctx *c)
{
	struct rm_kernel_timers *t = __atomic_load_n(&c->timers, __ATOMIC_ACQUIRE);
	if (t)
		return t;
	pthread_mutex_lock(&s->sh->lock);
	t = c->timers;
	if (!t && (t = calloc(1, sizeof(*t)))) {
		pthread_mutex_init(&t->lock, NULL);
		__atomic_store_n(&c->timers, t, __ATOMIC_RELEASE); /* read without the lock (reap_all) */
	}
	pthread_mutex_unlock(&s->sh->lock);
	return t;
}

/* A free slot (lock held), reaping finished spans when none is; -1 when all run. */
static int free_slot_locked(struct rm_channel *s, struct rm_kernel_timers *t)
{
	for (int i = 0; i < RING; i++)
		if (t->slot[i].state == SLOT_FREE)
			return i;
	for (int i = 0; i < RING; i++)
		if (reap_locked(s, t, i))
			return i;
	return -1;
}

void rm_kernel_timing_before_launch(struct rm_channel *s, CUstream st, const struct rm_frame *launch, uint64_t v)
{
	struct rm_kernel_timers *t;
	if (!enabled || !s->cur || !rm_drv.cuEventElapsedTime || rm_stream_pool_contended(st) ||
	    (__atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 && rm_capture_active(st)) ||
	    !(t = timers_of(s, s->cur)))
		return;
	pthread_mutex_lock(&t->lock);
	int i = -1;
	for (int k = 0; t->open > 0 && k < RING && i < 0; k++)
		if (t->slot[k].state == SLOT_OPEN && t->slot[k].stream == st && t->slot[k].chan == s->chan)
			i = k;
	if (i >= 0 || (i = free_slot_locked(s, t)) < 0) { /* already open, or untimed */
		pthread_mutex_unlock(&t->lock);
		return;
	}
	int sync_follows = rm_session_sync_follows(s, launch, v);
	if (!sync_follows &&
	    ((!t->slot[i].start && rm_drv_cuEventCreate(&t->slot[i].start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ||
	     (!t->slot[i].end && rm_drv_cuEventCreate(&t->slot[i].end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ||
	     rm_drv_cuEventRecord(t->slot[i].start, st) != CUDA_SUCCESS)) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	t->slot[i].state = SLOT_OPEN;
	t->slot[i].host_timed = sync_follows;
	__atomic_add_fetch(&t->open_host, sync_follows, __ATOMIC_RELAXED);
	t->slot[i].stream = st;
	t->slot[i].open_ns = now_ns();
	t->slot[i].chan = s->chan;
	__atomic_add_fetch(&t->open, 1, __ATOMIC_RELAXED);
	__atomic_add_fetch(&s->sh->open_spans, 1, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&t->lock);
}

/* Closes the open spans of chan in context c (chan < 0: every channel's) opened at least
 * min_age_ns ago, on stream only where given. A span with no start event is left open
 * before a waited call (min_age_ns set: the synchronize behind its launch, which ends it)
 * and otherwise (that synchronize failed, or the client went) counted in host time up to
 * now. */
static void close_spans(struct rm_channel *s, struct rm_session_ctx *c, int chan, uint64_t min_age_ns,
			CUstream only)
{
	struct rm_kernel_timers *t = __atomic_load_n(&c->timers, __ATOMIC_ACQUIRE);
	if (!t || !__atomic_load_n(&t->open, __ATOMIC_RELAXED) ||
	    (min_age_ns && __atomic_load_n(&t->open, __ATOMIC_RELAXED) == __atomic_load_n(&t->open_host, __ATOMIC_RELAXED)))
		return; /* none open, or (before a waited call) only those its synchronize ends */
	uint64_t now = min_age_ns ? now_ns() : 0;
	pthread_mutex_lock(&t->lock);
	for (int i = 0; t->open > 0 && i < RING; i++) {
		if (t->slot[i].state != SLOT_OPEN || (chan >= 0 && t->slot[i].chan != chan) ||
		    (only && t->slot[i].stream != only) || now - t->slot[i].open_ns < min_age_ns ||
		    (t->slot[i].host_timed && min_age_ns))
			continue;
		if (t->slot[i].host_timed) {
			rm_registry_add_gpu_time(s->sh->slot, s->sh->id, now_ns() - t->slot[i].open_ns);
			t->slot[i].state = SLOT_FREE;
			__atomic_sub_fetch(&t->open_host, 1, __ATOMIC_RELAXED);
			__atomic_sub_fetch(&t->open, 1, __ATOMIC_RELAXED);
			__atomic_sub_fetch(&s->sh->open_spans, 1, __ATOMIC_RELAXED);
			continue;
		}
		int recorded = rm_drv_cuEventRecord(t->slot[i].end, t->slot[i].stream) == CUDA_SUCCESS;
		t->slot[i].state = recorded ? SLOT_PENDING : SLOT_FREE;
		if (recorded)
			__atomic_add_fetch(&s->sh->pending_spans, 1, __ATOMIC_RELAXED);
		t->slot[i].closed_ns = now ? now : now_ns();
		__atomic_sub_fetch(&t->open, 1, __ATOMIC_RELAXED);
		__atomic_sub_fetch(&s->sh->open_spans, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(&t->lock);
}

void rm_kernel_timing_synced(struct rm_channel *s, CUstream st)
{
	struct rm_kernel_timers *t = s->cur ? __atomic_load_n(&s->cur->timers, __ATOMIC_ACQUIRE) : NULL;
	if (!t || !__atomic_load_n(&t->open, __ATOMIC_RELAXED))
		return;
	uint64_t now = now_ns();
	pthread_mutex_lock(&t->lock);
	for (int i = 0; i < RING; i++) {
		if (t->slot[i].stream != st || t->slot[i].chan != s->chan)
			continue;
		if (t->slot[i].state == SLOT_OPEN) {
			s->synced_gpu_ns += now - t->slot[i].open_ns; /* the registry's lock after the reply */
			t->slot[i].state = SLOT_FREE;
			__atomic_sub_fetch(&t->open_host, t->slot[i].host_timed, __ATOMIC_RELAXED);
			__atomic_sub_fetch(&t->open, 1, __ATOMIC_RELAXED);
			__atomic_sub_fetch(&s->sh->open_spans, 1, __ATOMIC_RELAXED);
		}
	}
	pthread_mutex_unlock(&t->lock);
}

/* Context k of the session, or NULL past the last (contexts are appended, never moved). */
static struct rm_session_ctx *ctx_at(struct rm_channel *s, int k)
{
	return k < __atomic_load_n(&s->sh->nctx, __ATOMIC_ACQUIRE) ? &s->sh->ctxs[k] : NULL;
}

void rm_kernel_timing_close_stream(struct rm_channel *s, CUstream st)
{
	if (s->cur && __atomic_load_n(&s->sh->open_spans, __ATOMIC_RELAXED))
		close_spans(s, s->cur, s->chan, 0, st);
}

void rm_kernel_timing_close_context(struct rm_channel *s, struct rm_session_ctx *c)
{
	if (__atomic_load_n(&s->sh->open_spans, __ATOMIC_RELAXED))
		close_spans(s, c, -1, 0, NULL);
}

int rm_kernel_timing_open(struct rm_channel *s)
{
	return __atomic_load_n(&s->sh->open_spans, __ATOMIC_RELAXED) > 0;
}

/* Called before every read that finds the link empty and around waited calls: with no
 * span open anywhere in the session (most of the time) it returns without a lock. */
void rm_kernel_timing_close(struct rm_channel *s, uint64_t min_age_ns)
{
	struct rm_session_ctx *c;
	if (!__atomic_load_n(&s->sh->open_spans, __ATOMIC_RELAXED))
		return;
	for (int k = 0; (c = ctx_at(s, k)); k++)
		close_spans(s, c, s->chan, min_age_ns, NULL);
}

/* Reads every finished span of the session's contexts whose end was recorded at least
 * min_age_ns ago (younger ones are not asked: their end is rarely reached yet, and each
 * question is a driver call): the number left unread. */
static int reap_all(struct rm_channel *s, uint64_t min_age_ns)
{
	if (!__atomic_load_n(&s->sh->pending_spans, __ATOMIC_RELAXED))
		return 0; /* nothing to read (most synchronizing calls): no lock */
	uint64_t now = min_age_ns ? now_ns() : 0;
	struct rm_session_ctx *c;
	int running = 0;
	for (int k = 0; (c = ctx_at(s, k)); k++) {
		struct rm_kernel_timers *t = __atomic_load_n(&c->timers, __ATOMIC_ACQUIRE); /* set by timers_of */
		if (!t)
			continue;
		pthread_mutex_lock(&t->lock);
		for (int i = 0; i < RING; i++)
			running += (t->slot[i].state == SLOT_PENDING && now - t->slot[i].closed_ns < min_age_ns) ||
				   !reap_locked(s, t, i);
		pthread_mutex_unlock(&t->lock);
	}
	return running;
}

void rm_kernel_timing_post(struct rm_channel *s, int now)
{
	if (!s->synced_gpu_ns)
		return;
	uint64_t t = now_ns();
	if (!now && t - s->synced_posted_ns < RM_SPAN_POST_NS)
		return;
	rm_registry_add_gpu_time(s->sh->slot, s->sh->id, s->synced_gpu_ns);
	s->synced_gpu_ns = 0;
	s->synced_posted_ns = t;
}

void rm_kernel_timing_collect(struct rm_channel *s)
{
	reap_all(s, RM_SPAN_READ_AGE_NS);
}

void rm_kernel_timing_settle(struct rm_channel *s, int wait_ms)
{
	struct rm_session_ctx *c;
	for (int k = 0; (c = ctx_at(s, k)); k++)
		close_spans(s, c, -1, 0, NULL);
	for (int waited_ms = 0; reap_all(s, 0) && waited_ms < wait_ms; waited_ms++)
		nanosleep(&(struct timespec){0, 1000000}, NULL);
}

void rm_kernel_timing_release(struct rm_channel *s, struct rm_session_ctx *c)
{
	struct rm_kernel_timers *t = c->timers;
	if (!t)
		return;
	close_spans(s, c, -1, 0, NULL);
	for (int i = 0; i < RING; i++) {
		if (t->slot[i].state == SLOT_PENDING) /* the session's work is drained: ends come at once */
			rm_drv_cuEventSynchronize(t->slot[i].end);
		reap_locked(s, t, i);
		if (t->slot[i].start)
			rm_drv_cuEventDestroy_v2(t->slot[i].start);
		if (t->slot[i].end)
			rm_drv_cuEventDestroy_v2(t->slot[i].end);
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
	c->timers = NULL;
}
