/* Host memory a worker holds for its clients (images being received, staging buffers, the
 * channels themselves), counted twice: against the client's own account, so that no client
 * takes more than client_host_memory_limit, and against one bound per worker, so that all
 * of them together take no more than worker_host_memory_limit. A take that would pass
 * either is refused to the client making it; what others hold is never taken back. */
#ifndef REMORA_HOST_MEMORY_H
#define REMORA_HOST_MEMORY_H

#include <stdint.h>

/* One client's host memory (a session and all its channels and copy links). */
struct rm_host_account {
	uint64_t held;  /* atomic */
	uint64_t limit; /* 0: none but the worker's */
	uint64_t owner; /* the session's id, for log lines */
};

/* The worker's bound in bytes; 0: none. Set once, before any session starts. */
void rm_host_memory_set_limit(uint64_t bytes);
/* Takes bytes from the worker's bound: 0, or -ENOMEM (and nothing taken) when it would pass it. */
int rm_host_memory_take(uint64_t bytes);
/* Gives back bytes taken before. */
void rm_host_memory_give(uint64_t bytes);
/* Bytes taken now. */
uint64_t rm_host_memory_held(void);

/* Takes bytes from a's limit and then the worker's: 0, -EDQUOT (the client's own limit) or
 * -ENOMEM (the worker's), nothing taken on failure. a may be NULL: the worker's alone. */
int rm_host_account_take(struct rm_host_account *a, uint64_t bytes);
/* As rm_host_account_take, for what a client cannot be served without (its main
 * connection's buffers): past the client's own limit only (-EDQUOT); the worker's bound
 * counts it but never refuses it, so that clients holding that bound cannot keep a
 * newcomer out. */
int rm_host_account_take_essential(struct rm_host_account *a, uint64_t bytes);
/* Gives back to both bytes rm_host_account_take or _essential took. */
void rm_host_account_give(struct rm_host_account *a, uint64_t bytes);
/* Bytes a holds now. */
static inline uint64_t rm_host_account_held(const struct rm_host_account *a)
{
	return a ? __atomic_load_n(&a->held, __ATOMIC_RELAXED) : 0;
}

#endif
