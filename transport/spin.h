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

/* CPU pressure: whether the host's CPUs are oversubscribed, so that a spin would take a CPU
 * another thread is waiting for. Linux's pressure stall information (/proc/pressure/cpu,
 * its "some" line: time during which some runnable thread waited for a CPU) is sampled
 * at most every RM_SPIN_PRESSURE_WINDOW_NS; the host is busy once that share of a window
 * exceeds REMORA_SPIN_PRESSURE percent (default 10; 0: spin whatever the pressure) and
 * stays busy until a window's share falls below a third of it. While busy, rm_spin looks
 * once and returns: the waiter sleeps at once. Sixteen ResNet-50 clients on a 16-CPU host
 * with their sixteen workers waited 22% of their time for a CPU, and the workers' spinning
 * cost a fifth of the throughput (docs/hotpath.md). Where the file is absent (no PSI),
 * the host is never taken as busy. */
#define RM_SPIN_PRESSURE_WINDOW_NS 50000000ull

struct rm_cpu_pressure {
	uint64_t at_ns;	  /* the last sample's time (0: none yet) */
	uint64_t some_us; /* its cumulative stall ("total=") */
	int busy;
};

/* The stall total of the "some" line of a /proc/pressure/cpu text: 0, or -1 if absent. */
int rm_cpu_pressure_parse(const char *text, uint64_t *some_us);

/* A new sample (now_ns, its stall total) against the previous; percent as
 * REMORA_SPIN_PRESSURE. The new busy verdict (unchanged on the first sample, on a window
 * shorter than a millisecond, or on a total that went backwards). */
int rm_cpu_pressure_update(struct rm_cpu_pressure *p, uint64_t now_ns, uint64_t some_us, unsigned percent);

/* Whether this host's CPUs are busy now (above), sampled by whichever caller finds the
 * window over. */
int rm_spin_host_busy(void);

/* This process's waits so far that spun, and that looked once because the host was busy. */
void rm_spin_counts(unsigned long long *spun, unsigned long long *gated);

/* One pause of the CPU between two looks at memory another CPU writes. */
static inline void rm_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}

/* Looks (look(arg)) until it answers nonzero or spin_ns have passed (once only while
 * rm_spin_host_busy): the CPU paused between
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
