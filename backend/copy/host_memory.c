/* The worker's host-memory bound and its clients' accounts (host_memory.h): atomic counters. */
#include "host_memory.h"

#include <errno.h>

static uint64_t limit;
static uint64_t held;

/* Adds bytes to *counter unless that would pass max (0: no bound): 0 or -1. */
static int take(uint64_t *counter, uint64_t max, uint64_t bytes)
{
	uint64_t now = __atomic_load_n(counter, __ATOMIC_RELAXED);
	do {
		if (max && (bytes > max || now > max - bytes))
			return -1;
	} while (!__atomic_compare_exchange_n(counter, &now, now + bytes, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return 0;
}

void rm_host_memory_set_limit(uint64_t bytes)
{
	limit = bytes;
}

int rm_host_memory_take(uint64_t bytes)
{
	return take(&held, limit, bytes) ? -ENOMEM : 0;
}

void rm_host_memory_give(uint64_t bytes)
{
	__atomic_fetch_sub(&held, bytes, __ATOMIC_RELAXED);
}

uint64_t rm_host_memory_held(void)
{
	return __atomic_load_n(&held, __ATOMIC_RELAXED);
}

int rm_host_account_take(struct rm_host_account *a, uint64_t bytes)
{
	if (a && take(&a->held, a->limit, bytes))
		return -EDQUOT;
	if (rm_host_memory_take(bytes)) {
		if (a)
			__atomic_fetch_sub(&a->held, bytes, __ATOMIC_RELAXED);
		return -ENOMEM;
	}
	return 0;
}

int rm_host_account_take_essential(struct rm_host_account *a, uint64_t bytes)
{
	if (a && take(&a->held, a->limit, bytes))
		return -EDQUOT;
	__atomic_fetch_add(&held, bytes, __ATOMIC_RELAXED);
	return 0;
}

void rm_host_account_give(struct rm_host_account *a, uint64_t bytes)
{
	rm_host_memory_give(bytes);
	if (a)
		__atomic_fetch_sub(&a->held, bytes, __ATOMIC_RELAXED);
}
