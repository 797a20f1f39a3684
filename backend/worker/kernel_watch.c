/* Kernels past kernel_time_limit (kernel_watch.h). */
#include "kernel_watch.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "driver_table.h"
#include "log.h"
#include "session.h"

struct launch {
	CUstream stream;
	CUevent done;       /* recorded after the launch */
	uint64_t since_ns;  /* when it can have started at the earliest */
};

struct rm_kernel_watch {
	pthread_mutex_t lock;
	uint32_t limit_ms;
	struct launch ring[RM_KERNEL_WATCH_MAX]; /* oldest at head */
	unsigned head, count;
	CUevent spare[RM_KERNEL_WATCH_MAX]; /* finished launches' events, for reuse */
	unsigned nspare;
	int over; /* a launch has run past the limit (logged once) */
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct rm_kernel_watch *rm_kernel_watch_new(uint32_t limit_ms)
{
	if (!limit_ms)
		return NULL;
	struct rm_kernel_watch *w = calloc(1, sizeof(*w));
	if (!w) {
		rm_log(RM_LOG_WARN, "out of memory: a session is not held to kernel_time_limit");
		return NULL;
	}
	pthread_mutex_init(&w->lock, NULL);
	w->limit_ms = limit_ms;
	return w;
}

void rm_kernel_watch_launched(struct rm_channel *s, CUstream st)
{
	struct rm_kernel_watch *w = s->sh->kernel_watch;
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	int queued = 0; /* behind a launch of its stream still followed */
	for (unsigned i = 0; i < w->count; i++)
		queued |= w->ring[(w->head + i) % RM_KERNEL_WATCH_MAX].stream == st;
	CUevent ev = w->nspare ? w->spare[--w->nspare] : NULL;
	if (w->count < RM_KERNEL_WATCH_MAX &&
	    (ev || rm_drv_cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING) == CUDA_SUCCESS)) {
		if (rm_drv_cuEventRecord(ev, st) == CUDA_SUCCESS) {
			w->ring[(w->head + w->count++) % RM_KERNEL_WATCH_MAX] =
				(struct launch){.stream = st, .done = ev, .since_ns = queued ? 0 : now_ns()};
			ev = NULL;
		}
	}
	if (ev)
		w->spare[w->nspare++] = ev;
	pthread_mutex_unlock(&w->lock);
}

int rm_kernel_watch_over(struct rm_channel *s)
{
	struct rm_kernel_watch *w = s->sh->kernel_watch;
	if (!w || !w->count || s->chan || !s->sh->nctx)
		return w && w->over;
	uint64_t now = now_ns();
	CUstream running[RM_KERNEL_WATCH_MAX]; /* streams whose oldest launch is unfinished */
	unsigned nrunning = 0;
	pthread_mutex_lock(&w->lock);
	rm_drv_cuCtxSetCurrent(s->sh->ctxs[0].ctx);
	struct launch kept[RM_KERNEL_WATCH_MAX];
	unsigned nkept = 0;
	for (unsigned i = 0; i < w->count; i++) {
		struct launch *l = &w->ring[(w->head + i) % RM_KERNEL_WATCH_MAX];
		int behind = 0;
		for (unsigned k = 0; k < nrunning; k++)
			behind |= running[k] == l->stream;
		if (!behind && rm_drv_cuEventQuery(l->done) != CUDA_ERROR_NOT_READY) {
			w->spare[w->nspare++] = l->done; /* finished (or its context broke): the next of
							  * its stream can start now */
			for (unsigned k = i + 1; k < w->count; k++) {
				struct launch *n = &w->ring[(w->head + k) % RM_KERNEL_WATCH_MAX];
				if (n->stream == l->stream && !n->since_ns) {
					n->since_ns = now;
					break;
				}
			}
			continue;
		}
		if (!behind) {
			running[nrunning++] = l->stream;
			if (l->since_ns && now - l->since_ns > (uint64_t)w->limit_ms * 1000000u && !w->over) {
				w->over = 1;
				rm_log(RM_LOG_WARN, "session %llu (%s, pid %u): a kernel has run for more than the tenant's "
				       "kernel_time_limit of %u s", (unsigned long long)s->sh->id, s->sh->name, s->sh->pid,
				       w->limit_ms / 1000);
			}
		}
		kept[nkept++] = *l;
	}
	for (unsigned i = 0; i < nkept; i++)
		w->ring[i] = kept[i];
	w->head = 0;
	w->count = nkept;
	int over = w->over;
	pthread_mutex_unlock(&w->lock);
	return over;
}

void rm_kernel_watch_free(struct rm_kernel_watch *w)
{
	if (!w)
		return;
	for (unsigned i = 0; i < w->count; i++)
		rm_drv_cuEventDestroy_v2(w->ring[(w->head + i) % RM_KERNEL_WATCH_MAX].done);
	for (unsigned i = 0; i < w->nspare; i++)
		rm_drv_cuEventDestroy_v2(w->spare[i]);
	pthread_mutex_destroy(&w->lock);
	free(w);
}
