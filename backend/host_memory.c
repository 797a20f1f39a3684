/* The worker's host-memory bound (host_memory.h): one atomic counter. */
#include "host_memory.h"

#include <errno.h>

static uint64_t limit;
static uint64_t held;

void rm_host_memory_set_limit(uint64_t bytes)
{
	limit = bytes;
}

int rm_host_memory_take(uint64_t bytes)
{
	uint64_t now = __atomic_load_n(&held, __ATOMIC_RELAXED);
	do {
		if (limit && (bytes > limit || now > limit - bytes))
			return -ENOMEM;
	} while (!__atomic_compare_exchange_n(&held, &now, now + bytes, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return 0;
}

void rm_host_memory_give(uint64_t bytes)
{
	__atomic_fetch_sub(&held, bytes, __ATOMIC_RELAXED);
}

uint64_t rm_host_memory_held(void)
{
	return __atomic_load_n(&held, __ATOMIC_RELAXED);
}
