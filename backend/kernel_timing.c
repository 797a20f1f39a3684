/* Kernel time per client (kernel_timing.h). */
#include "kernel_timing.h"

#include <pthread.h>
#include <stdlib.h>

#include "driver_table.h"
#include "registry.h"
#include "session.h"
#include "stream_pool.h"

#define RING 64

enum { SLOT_FREE, SLOT_RECORDING, SLOT_PENDING };

struct rm_kernel_timers {
	pthread_mutex_t lock; /* guards the slots' states and next */
	struct {
		CUevent start, end; /* made at the slot's first use */
		int state;
	} slot[RING];
	int next;
};

static int enabled = 1;

void rm_kernel_timing_enable(int on) { enabled = on; }

static void add_time(struct rm_session *s, CUevent start, CUevent end)
{
	float ms = 0;
	if (rm_drv.cuEventElapsedTime(&ms, start, end) == CUDA_SUCCESS && ms > 0)
		rm_usage_add(&rm_registry()->clients[s->slot].usage.gpu_ns, (uint64_t)((double)ms * 1e6));
}

/* Reads slot i if its end has passed (lock held): 1 when the slot is free afterwards. */
static int reap_locked(struct rm_session *s, struct rm_kernel_timers *t, int i)
{
	if (t->slot[i].state != SLOT_PENDING)
		return t->slot[i].state == SLOT_FREE;
	CUresult r = rm_drv.cuEventQuery(t->slot[i].end);
	if (r == CUDA_ERROR_NOT_READY)
		return 0;
	if (r == CUDA_SUCCESS)
		add_time(s, t->slot[i].start, t->slot[i].end);
	t->slot[i].state = SLOT_FREE;
	return 1;
}

static struct rm_kernel_timers *timers_of(struct rm_session *s, struct rm_session_ctx *c)
{
	pthread_mutex_lock(&s->sh->lock);
	if (!c->timers && (c->timers = calloc(1, sizeof(*c->timers))))
		pthread_mutex_init(&c->timers->lock, NULL);
	struct rm_kernel_timers *t = c->timers;
	pthread_mutex_unlock(&s->sh->lock);
	return t;
}

int rm_kernel_timing_before(struct rm_session *s, CUstream st)
{
	struct rm_kernel_timers *t;
	/* A timed record after the kernel in a hardware queue other clients' streams share
	 * would hold up their work queued behind it until the kernel ends (stream_pool.h):
	 * such a launch goes untimed. */
	if (!enabled || !s->cur || !rm_drv.cuEventElapsedTime || rm_stream_pool_queue_shared(st) ||
	    !(t = timers_of(s, s->cur)))
		return -1;
	pthread_mutex_lock(&t->lock);
	int i = t->next;
	int free_slot = reap_locked(s, t, i);
	if (free_slot) {
		t->slot[i].state = SLOT_RECORDING;
		t->next = (i + 1) % RING;
	}
	pthread_mutex_unlock(&t->lock);
	if (!free_slot)
		return -1;
	if ((!t->slot[i].start && rm_drv.cuEventCreate(&t->slot[i].start, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ||
	    (!t->slot[i].end && rm_drv.cuEventCreate(&t->slot[i].end, CU_EVENT_DEFAULT) != CUDA_SUCCESS) ||
	    rm_drv.cuEventRecord(t->slot[i].start, st) != CUDA_SUCCESS) {
		pthread_mutex_lock(&t->lock);
		t->slot[i].state = SLOT_FREE;
		pthread_mutex_unlock(&t->lock);
		return -1;
	}
	return i;
}

void rm_kernel_timing_after(struct rm_session *s, int i, CUstream st, CUresult launch)
{
	if (i < 0 || i >= RING)
		return;
	struct rm_kernel_timers *t = s->cur->timers;
	int pending = launch == CUDA_SUCCESS && rm_drv.cuEventRecord(t->slot[i].end, st) == CUDA_SUCCESS;
	pthread_mutex_lock(&t->lock);
	t->slot[i].state = pending ? SLOT_PENDING : SLOT_FREE;
	pthread_mutex_unlock(&t->lock);
}

void rm_kernel_timing_collect(struct rm_session *s)
{
	for (int k = 0; k < RM_SESSION_MAX_CTX; k++) {
		pthread_mutex_lock(&s->sh->lock);
		struct rm_kernel_timers *t = k < s->sh->nctx ? s->sh->ctxs[k].timers : NULL;
		int more = k < s->sh->nctx;
		pthread_mutex_unlock(&s->sh->lock);
		if (!more)
			break;
		if (!t)
			continue;
		pthread_mutex_lock(&t->lock);
		for (int i = 0; i < RING; i++)
			reap_locked(s, t, i);
		pthread_mutex_unlock(&t->lock);
	}
}

void rm_kernel_timing_release(struct rm_session *s, struct rm_session_ctx *c)
{
	struct rm_kernel_timers *t = c->timers;
	if (!t)
		return;
	for (int i = 0; i < RING; i++) {
		reap_locked(s, t, i);
		if (t->slot[i].start)
			rm_drv.cuEventDestroy_v2(t->slot[i].start);
		if (t->slot[i].end)
			rm_drv.cuEventDestroy_v2(t->slot[i].end);
	}
	pthread_mutex_destroy(&t->lock);
	free(t);
	c->timers = NULL;
}
