/* This worker's window of device addresses (memory_window.h): a bitmap of its 32 MiB blocks
 * in use, first fit from a cursor. */
#include "memory_window.h"

#include <pthread.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "driver_table.h"
#include "log.h"
#include "migrate.h"

#define WINDOW_FIRST (16ull << 40) /* 0x100000000000: far below where processes map */
#define WINDOW_SIZE (1ull << 40)
#define WINDOW_CHOICES 64
#define NBLOCKS (WINDOW_SIZE / RM_MOVED_BLOCK)
#define TRIES 8 /* blocks found taken (by the driver, or the process) before giving up */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static uint64_t window; /* its first address */
static uint8_t used[NBLOCKS / 8];
static uint64_t cursor;

static void choose(void)
{
	uint32_t pick = 0;
	if (getrandom(&pick, sizeof(pick), 0) != sizeof(pick))
		pick = (uint32_t)getpid();
	window = WINDOW_FIRST + (uint64_t)(pick % WINDOW_CHOICES) * WINDOW_SIZE;
}

static void say_window(void)
{
	rm_log(RM_LOG_INFO, "migratable memory: device addresses from 0x%llx to 0x%llx", (unsigned long long)window,
	       (unsigned long long)(window + WINDOW_SIZE));
}

static int is_used(uint64_t b)
{
	return used[b / 8] >> (b % 8) & 1;
}

static void mark(uint64_t first, uint64_t n, int on)
{
	for (uint64_t b = first; b < first + n && b < NBLOCKS; b++)
		used[b / 8] = (uint8_t)(on ? used[b / 8] | 1u << (b % 8) : used[b / 8] & ~(1u << (b % 8)));
}

/* n free blocks in a row, marked used: the first's index, or NBLOCKS. Under lock. */
static uint64_t take_blocks(uint64_t n)
{
	for (uint64_t scanned = 0, b = cursor; scanned < NBLOCKS; scanned++, b = (b + 1) % NBLOCKS) {
		if (b + n > NBLOCKS)
			continue;
		uint64_t run = 0;
		while (run < n && !is_used(b + run))
			run++;
		if (run == n) {
			mark(b, n, 1);
			cursor = (b + n) % NBLOCKS;
			return b;
		}
	}
	return NBLOCKS;
}

/* The blocks of [base, base + size) that lie in the window: first index and count. */
static int blocks_of(uint64_t base, uint64_t size, uint64_t *first, uint64_t *n)
{
	pthread_once(&once, choose);
	if (!size || base < window || base - window >= WINDOW_SIZE)
		return 0;
	uint64_t end = base + size > window + WINDOW_SIZE ? window + WINDOW_SIZE : base + size;
	*first = (base - window) / RM_MOVED_BLOCK;
	*n = (end - window + RM_MOVED_BLOCK - 1) / RM_MOVED_BLOCK - *first;
	return 1;
}

void rm_window_released(uint64_t base, uint64_t size)
{
	uint64_t first, n;
	if (!blocks_of(base, size, &first, &n))
		return;
	pthread_mutex_lock(&lock);
	mark(first, n, 0);
	pthread_mutex_unlock(&lock);
}

void rm_window_taken(uint64_t base, uint64_t size)
{
	uint64_t first, n;
	if (!blocks_of(base, size, &first, &n))
		return;
	pthread_mutex_lock(&lock);
	mark(first, n, 1);
	pthread_mutex_unlock(&lock);
}

CUresult rm_window_alloc(struct rm_channel *s, size_t bytes, CUdeviceptr *out)
{
	static pthread_once_t said = PTHREAD_ONCE_INIT;
	pthread_once(&once, choose);
	pthread_once(&said, say_window);
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
	if (!gran || bytes > WINDOW_SIZE)
		return CUDA_ERROR_OUT_OF_MEMORY;
	uint64_t span = (bytes + gran - 1) / gran * gran;
	uint64_t nblocks = (span + RM_MOVED_BLOCK - 1) / RM_MOVED_BLOCK;
	for (int tries = 0; tries < TRIES; tries++) {
		pthread_mutex_lock(&lock);
		uint64_t b = take_blocks(nblocks);
		pthread_mutex_unlock(&lock);
		if (b == NBLOCKS)
			return CUDA_ERROR_OUT_OF_MEMORY;
		uint64_t base = window + b * RM_MOVED_BLOCK;
		r = rm_migrate_map_owned(s, s->cur->dev, base, span, bytes);
		if (r == CUDA_ERROR_ALREADY_MAPPED) { /* the blocks stay marked: someone else's */
			rm_log(RM_LOG_DEBUG, "migratable memory: 0x%llx is taken in this process; skipped",
			       (unsigned long long)base);
			continue;
		}
		if (r != CUDA_SUCCESS) {
			rm_window_released(base, span);
			return r;
		}
		*out = base;
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_OUT_OF_MEMORY;
}
