/* Waiting for a stream by a word the GPU writes (stream_wait.h). */
#include "stream_wait.h"

#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "driver_table.h"
#include "kernel_timing.h"
#include "log.h"
#include "session.h"
#include "stream_pool.h"
#include "transport.h"

#define WAIT_GPUS 64          /* as gpus.c: device ordinals below this */
#define WORD_STRIDE 64        /* bytes between words: one cache line each */
#define PAGE_BYTES 4096
#define WORDS_PER_PAGE (PAGE_BYTES / WORD_STRIDE)
#define SPIN_US_DEFAULT 60
#define SPIN_MIN_CPUS 4
#define LOOKS_PER_CLOCK 16    /* word looks (a PAUSE each) between clock reads */

/* A word of a mapped page: the GPU writes value there once the work before it has run. */
struct rm_wait_word {
	uint32_t *host;
	CUdeviceptr device;
	uint32_t value;               /* the last value asked for */
	struct rm_wait_word *next;    /* in its GPU's free list */
};

struct word_page {
	void *host;
	struct rm_wait_word words[WORDS_PER_PAGE];
	struct word_page *next;
};

static struct {
	struct word_page *pages;
	struct rm_wait_word *free;
	int failed;                   /* a page could not be made: the driver's wait from now on */
} gpus[WAIT_GPUS];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t spin_ns;

void rm_stream_wait_configure(int spin_us)
{
	cpu_set_t set;
	if (spin_us < 0)
		spin_us = !sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) >= SPIN_MIN_CPUS ? SPIN_US_DEFAULT
													: 0;
	spin_ns = (uint64_t)spin_us * 1000u;
}

/* A page of words for dev in its context (current), onto its free list (lock held). */
static int add_page_locked(int dev)
{
	struct word_page *p = calloc(1, sizeof(*p));
	CUdeviceptr base = 0;
	CUresult r = CUDA_ERROR_OUT_OF_MEMORY;
	if (p && rm_drv.cuMemHostAlloc && rm_drv.cuMemHostGetDevicePointer_v2 &&
	    (r = rm_drv_cuMemHostAlloc(&p->host, PAGE_BYTES, CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP)) ==
		    CUDA_SUCCESS &&
	    (r = rm_drv_cuMemHostGetDevicePointer_v2(&base, p->host, 0)) != CUDA_SUCCESS)
		rm_drv_cuMemFreeHost(p->host);
	if (r != CUDA_SUCCESS) {
		rm_log(RM_LOG_WARN, "GPU %d: no page-locked words for stream waits (error %d); the driver's waits are used",
		       dev, r);
		free(p);
		return -1;
	}
	for (int i = 0; i < WORDS_PER_PAGE; i++) {
		struct rm_wait_word *w = &p->words[i];
		w->host = (uint32_t *)((uint8_t *)p->host + (size_t)i * WORD_STRIDE);
		w->device = base + (CUdeviceptr)i * WORD_STRIDE;
		__atomic_store_n(w->host, 0, __ATOMIC_RELAXED);
		w->next = gpus[dev].free;
		gpus[dev].free = w;
	}
	p->next = gpus[dev].pages;
	gpus[dev].pages = p;
	return 0;
}

/* Session s's word for its current context, taken at its first use; NULL: none. */
static struct rm_wait_word *word_of(struct rm_channel *s)
{
	int k = (int)(s->cur - s->sh->ctxs), dev = s->cur->dev;
	if (s->wait_words[k])
		return s->wait_words[k];
	if (dev < 0 || dev >= WAIT_GPUS)
		return NULL;
	pthread_mutex_lock(&lock);
	struct rm_wait_word *w = NULL;
	if (!gpus[dev].failed && !gpus[dev].free && add_page_locked(dev))
		gpus[dev].failed = 1;
	if ((w = gpus[dev].free))
		gpus[dev].free = w->next;
	pthread_mutex_unlock(&lock);
	s->wait_words[k] = w;
	return w;
}

static void count(unsigned long long *c)
{
	__atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

struct word_look {
	const uint32_t *host;
	uint32_t value;
};

static int look(void *arg)
{
	const struct word_look *k = arg;
	return __atomic_load_n(k->host, __ATOMIC_ACQUIRE) == k->value;
}

/* Watches w for value v for up to spin_ns (spin.h); 1 once seen. */
static int watch(const struct rm_wait_word *w, uint32_t v)
{
	struct word_look k = {w->host, v};
	return rm_spin(spin_ns, LOOKS_PER_CLOCK, 0, look, &k);
}

static CUresult driver_wait(struct rm_channel *s, CUstream st)
{
	if (s)
		count(&s->sh->waits_driver);
	return rm_drv_cuStreamSynchronize(st);
}

static CUresult wait_by_word(struct rm_channel *s, CUstream st)
{
	if (!spin_ns || !s || !s->cur || !rm_drv.cuStreamWriteValue32_v2 || !rm_drv.cuStreamQuery ||
	    __atomic_load_n(&s->sh->nchannels, __ATOMIC_ACQUIRE) > 0 ||
	    (__atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) > 0 && rm_capture_active(st)))
		return driver_wait(s, st);
	CUresult r = rm_drv_cuStreamQuery(st);
	if (r != CUDA_ERROR_NOT_READY) { /* done, or the error the driver's wait would give */
		count(&s->sh->waits_idle);
		return r;
	}
	/* A write behind unfinished work would hold up the other stream's work queued after
	 * it in their hardware queue (stream_pool.h). */
	struct rm_wait_word *w = rm_stream_pool_contended(st) ? NULL : word_of(s);
	if (!w)
		return driver_wait(s, st);
	uint32_t v = ++w->value;
	if (rm_drv_cuStreamWriteValue32_v2(st, w->device, v, CU_STREAM_WRITE_VALUE_DEFAULT) != CUDA_SUCCESS)
		return driver_wait(s, st);
	if (watch(w, v)) {
		count(&s->sh->waits_word);
		return CUDA_SUCCESS;
	}
	return driver_wait(s, st); /* it waits for the write too: nothing of it is left on st */
}

CUresult rm_stream_wait(struct rm_channel *s, CUstream st)
{
	CUresult r = wait_by_word(s, st);
	if (r == CUDA_SUCCESS && s)
		rm_kernel_timing_synced(s, st);
	return r;
}

void rm_stream_wait_release(struct rm_channel *s)
{
	pthread_mutex_lock(&lock);
	for (int k = 0; k < RM_SESSION_MAX_CTX; k++) {
		struct rm_wait_word *w = s->wait_words[k];
		int dev = w ? s->sh->ctxs[k].dev : -1;
		s->wait_words[k] = NULL;
		/* One whose write may still come (its stream's wait failed: a fault, after which
		 * the context is reset and its pages forgotten) is not used again. */
		if (!w || __atomic_load_n(w->host, __ATOMIC_ACQUIRE) != w->value)
			continue;
		w->next = gpus[dev].free;
		gpus[dev].free = w;
	}
	pthread_mutex_unlock(&lock);
}

void rm_stream_wait_forget_gpu(int dev, CUcontext ctx)
{
	if (dev < 0 || dev >= WAIT_GPUS)
		return;
	pthread_mutex_lock(&lock);
	struct word_page *p = gpus[dev].pages;
	gpus[dev].pages = NULL;
	gpus[dev].free = NULL;
	gpus[dev].failed = 0;
	pthread_mutex_unlock(&lock);
	if (p && rm_drv_cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS) {
		for (struct word_page *q = p; q; q = q->next)
			rm_drv_cuMemFreeHost(q->host);
		CUcontext popped;
		rm_drv_cuCtxPopCurrent_v2(&popped);
	}
	while (p) {
		struct word_page *next = p->next;
		free(p);
		p = next;
	}
}
