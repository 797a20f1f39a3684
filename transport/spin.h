/* Waiting by looking before sleeping: the one spin loop of the transports (tcp, shm, rdma)
 * and of remorad's stream waits (backend/gpu/stream_wait.c). */
#ifndef REMORA_SPIN_H
#define REMORA_SPIN_H

#include <stdatomic.h>
#include <stdint.h>

/* How long a waiting side spins before it sleeps, from environment variable env (µs, 0 to
 * max_us): by default default_us where this process may run on 4 or more CPUs, else 0 (with
 * fewer, the spinner takes the CPU its peer needs to answer: on a loaded 2-CPU machine a
 * 54 µs round trip over shared memory spinning against 11 µs sleeping). */
uint64_t rm_transport_spin_ns(const char *env, long default_us, long max_us);

/* Whether a spinning wait gives its CPU up (sched_yield) each time it looks at the clock,
 * about once a microsecond: REMORA_SPIN_YIELD, on unless 0. Where waiters outnumber CPUs
 * (16 clients and their 16 session threads on 16 CPUs) a pure spin holds a CPU its peer,
 * woken onto it, needs to answer; yielding halved the 16-client median (hotpath.md). */
int rm_transport_spin_yields(void);

/* One pause of the CPU between two looks at memory another CPU writes. */
static inline void rm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Looks (look(arg)) until it answers nonzero or spin_ns have passed: the CPU paused between
 * two looks, the clock read every looks_per_clock looks, and there, where
 * rm_transport_spin_yields, the CPU given up if yield_gap_ns have passed since it last was
 * (0: at every read; a look that costs a system call or a lock reads the clock at each look
 * and yields about once a microsecond). look's first nonzero answer, or 0 once the time is
 * spent. */
int rm_spin(uint64_t spin_ns, unsigned looks_per_clock, uint64_t yield_gap_ns, int (*look)(void *arg), void *arg);

/* What a waiter that meets the same peer again and again (tcp, shm) spins: whole at first;
 * halved after a spin in vain (a long wait: a kernel, an idle peer), down to an eighth; whole
 * again after a spin that was answered, or a sleep shorter than a whole spin (the peer
 * answers at that pace: a run of 20 µs replies must not stay at an eighth). */
struct rm_spin_budget {
	uint64_t whole;
	_Atomic uint64_t next;
};

static inline void rm_spin_budget_init(struct rm_spin_budget *b, uint64_t whole)
{
	b->whole = whole;
	atomic_store_explicit(&b->next, whole, memory_order_relaxed);
}

static inline uint64_t rm_spin_budget_next(struct rm_spin_budget *b)
{
	return atomic_load_explicit(&b->next, memory_order_relaxed);
}

static inline void rm_spin_budget_answered(struct rm_spin_budget *b)
{
	atomic_store_explicit(&b->next, b->whole, memory_order_relaxed);
}

/* A spin of spun ns that went unanswered. */
static inline void rm_spin_budget_in_vain(struct rm_spin_budget *b, uint64_t spun)
{
	atomic_store_explicit(&b->next, spun / 2 > b->whole / 8 ? spun / 2 : b->whole / 8, memory_order_relaxed);
}

#endif
