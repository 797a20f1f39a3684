/* This worker's window of device addresses (memory_window.h): one reservation of the
 * driver's, made at the first allocation; a bitmap of its granules in use, first fit from
 * a cursor. */
#include "memory_window.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "deferred.h"
#include "driver_table.h"
#include "log.h"
#include "migrate.h"

#define WINDOW_FIRST (16ull << 40) /* 0x100000000000: far below where processes map */
#define WINDOW_SIZE (1ull << 40)
#define WINDOW_CHOICES 64
#define WINDOW_TRIES 8            /* windows tried where the driver gives another address */
#define GRANULE RM_GRANULE         /* the bitmap's unit (migrate.h) */
#define NGRANULES (WINDOW_SIZE / GRANULE)

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t window;  /* its first address; 0: not reserved (yet, or it could not be) */
static int tried;
static uint8_t used[NGRANULES / 8];
static uint64_t cursor;

/* Reserves a window at one of the choices, from a random one. Under lock. */
static void reserve_locked(void)
{
	if (tried)
		return;
	tried = 1;
	uint32_t pick = 0;
	if (getrandom(&pick, sizeof(pick), 0) != sizeof(pick))
		pick = (uint32_t)getpid();
	for (int i = 0; i < WINDOW_TRIES; i++) {
		uint64_t want = WINDOW_FIRST + (uint64_t)((pick + (uint32_t)i) % WINDOW_CHOICES) * WINDOW_SIZE;
		CUdeviceptr got = 0;
		if (rm_drv_cuMemAddressReserve(&got, WINDOW_SIZE, RM_MOVED_BLOCK, want, 0) != CUDA_SUCCESS)
			continue;
		if (got == want) {
			window = want;
			rm_log(RM_LOG_INFO, "migratable memory: device addresses from 0x%llx to 0x%llx",
			       (unsigned long long)window, (unsigned long long)(window + WINDOW_SIZE));
			return;
		}
		rm_drv_cuMemAddressFree(got, WINDOW_SIZE);
	}
	rm_log(RM_LOG_ERROR, "migratable memory: the driver gave no window of device addresses at any of %d tried; "
	       "cuMemAlloc fails with out of memory", WINDOW_TRIES);
}

int rm_window_holds(uint64_t base, uint64_t size)
{
	pthread_mutex_lock(&lock);
	uint64_t w = window;
	pthread_mutex_unlock(&lock);
	return w && size && base >= w && base - w <= WINDOW_SIZE && size <= WINDOW_SIZE - (base - w);
}

static int is_used(uint64_t g)
{
	return used[g / 8] >> (g % 8) & 1;
}

static void mark(uint64_t first, uint64_t n, int on)
{
	for (uint64_t g = first; g < first + n && g < NGRANULES; g++)
		used[g / 8] = (uint8_t)(on ? used[g / 8] | 1u << (g % 8) : used[g / 8] & ~(1u << (g % 8)));
}

/* n free granules in a row from an index that is a multiple of step, marked used: the
 * first's index, or NGRANULES. Under lock. */
static uint64_t take(uint64_t n, uint64_t step)
{
	for (uint64_t scanned = 0, g = cursor; scanned < NGRANULES; scanned++, g = (g + 1) % NGRANULES) {
		if (g % step || g + n > NGRANULES || is_used(g))
			continue;
		uint64_t run = 1;
		while (run < n && !is_used(g + run))
			run++;
		if (run == n) {
			mark(g, n, 1);
			cursor = (g + n) % NGRANULES;
			return g;
		}
		scanned += run, g += run; /* past the run too short */
	}
	return NGRANULES;
}

/* Marks [base, base + size)'s granules inside the window on or off. */
static void set(uint64_t base, uint64_t size, int on)
{
	pthread_mutex_lock(&lock);
	if (window && size && base < window + WINDOW_SIZE && base + size > window) {
		uint64_t lo = base > window ? base : window;
		uint64_t hi = base + size < window + WINDOW_SIZE ? base + size : window + WINDOW_SIZE;
		uint64_t first = (lo - window) / GRANULE;
		mark(first, (hi - window + GRANULE - 1) / GRANULE - first, on);
	}
	pthread_mutex_unlock(&lock);
}

uint64_t rm_window_reserve(size_t size, size_t alignment)
{
	if (!size || size > WINDOW_SIZE || alignment > WINDOW_SIZE || (alignment & (alignment - 1)))
		return 0;
	uint64_t span = (size + RM_MOVED_BLOCK - 1) / RM_MOVED_BLOCK * RM_MOVED_BLOCK;
	uint64_t step = (alignment > RM_MOVED_BLOCK ? alignment : RM_MOVED_BLOCK) / GRANULE;
	pthread_mutex_lock(&lock);
	reserve_locked();
	uint64_t g = window ? take(span / GRANULE, step) : NGRANULES;
	pthread_mutex_unlock(&lock);
	return g == NGRANULES ? 0 : window + g * GRANULE;
}

CUresult rm_window_address_free(uint64_t base, uint64_t size)
{
	if (!rm_window_holds(base, size))
		return rm_drv_cuMemAddressFree(base, size);
	rm_window_released(base, (size + RM_MOVED_BLOCK - 1) / RM_MOVED_BLOCK * RM_MOVED_BLOCK);
	return CUDA_SUCCESS;
}

void rm_window_released(uint64_t base, uint64_t size)
{
	set(base, size, 0);
}

void rm_window_taken(uint64_t base, uint64_t size)
{
	set(base, size, 1);
}

/* ---- unmapping off the caller's thread (deferred.h) ---- */

struct unmapped {
	uint64_t base, span;
	CUmemGenericAllocationHandle phys;
};

static pthread_mutex_t unmaps_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t unmaps_done = PTHREAD_COND_INITIALIZER;
static size_t unmaps_pending; /* asked, and their granules not yet the window's again */

/* After the deferred cuMemUnmap: the memory goes back, then its granules. */
static void after_unmap(void *arg)
{
	struct unmapped *u = arg;
	rm_drv_cuMemRelease(u->phys);
	rm_window_released(u->base, u->span);
	free(u);
	pthread_mutex_lock(&unmaps_lock);
	unmaps_pending--;
	pthread_cond_broadcast(&unmaps_done);
	pthread_mutex_unlock(&unmaps_lock);
}

int rm_window_unmap_later(uint64_t base, uint64_t span, CUmemGenericAllocationHandle phys)
{
	struct unmapped *u = malloc(sizeof(*u));
	if (!u)
		return -ENOMEM;
	*u = (struct unmapped){.base = base, .span = span, .phys = phys};
	pthread_mutex_lock(&unmaps_lock);
	unmaps_pending++;
	pthread_mutex_unlock(&unmaps_lock);
	rm_deferred_release_range(NULL, RM_DEFER_UNMAP, base, span, after_unmap, u);
	return 0;
}

int rm_window_wait_unmaps(int timeout_ms)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L)
		until.tv_sec++, until.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&unmaps_lock);
	int waited = unmaps_pending > 0;
	while (unmaps_pending && pthread_cond_timedwait(&unmaps_done, &unmaps_lock, &until) != ETIMEDOUT)
		;
	pthread_mutex_unlock(&unmaps_lock);
	return waited;
}

CUresult rm_window_alloc(struct rm_channel *s, size_t bytes, CUdeviceptr *out)
{
	if (!s->cur)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = s->cur->dev}};
	size_t gran = 0;
	CUresult r = rm_drv_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r != CUDA_SUCCESS)
		return r;
	if (!gran || GRANULE % gran || bytes > WINDOW_SIZE)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t span = (bytes + GRANULE - 1) / GRANULE * GRANULE;
	pthread_mutex_lock(&lock);
	reserve_locked();
	uint64_t g = window ? take(span / GRANULE, 1) : NGRANULES;
	uint64_t base = window + g * GRANULE;
	pthread_mutex_unlock(&lock);
	if (g == NGRANULES)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = rm_migrate_map_owned(s, s->cur->dev, base, span, bytes);
	/* Out of memory while freed memory still waits to be unmapped: once that is done. */
	if (r == CUDA_ERROR_OUT_OF_MEMORY && rm_window_wait_unmaps(RM_WINDOW_UNMAP_WAIT_MS))
		r = rm_migrate_map_owned(s, s->cur->dev, base, span, bytes);
	if (r != CUDA_SUCCESS) {
		rm_window_released(base, span);
		return r;
	}
	*out = base;
	return CUDA_SUCCESS;
}
