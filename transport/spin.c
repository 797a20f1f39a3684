/* The spin loop and its settings (spin.h). */
#include "spin.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

#define SPIN_MIN_CPUS 4

uint64_t rm_transport_spin_ns(const char *env, long default_us, long max_us)
{
	const char *v = getenv(env);
	char *end;
	cpu_set_t set;
	long dflt = !sched_getaffinity(0, sizeof(set), &set) && CPU_COUNT(&set) >= SPIN_MIN_CPUS ? default_us : 0;
	long us = v && *v ? strtol(v, &end, 10) : dflt;
	if (v && *v && (*end || us < 0 || us > max_us))
		us = dflt;
	return (uint64_t)us * 1000u;
}

int rm_transport_spin_yields(void)
{
	static int yields = -1;
	int y = __atomic_load_n(&yields, __ATOMIC_RELAXED);
	if (y < 0) {
		const char *v = getenv("REMORA_SPIN_YIELD");
		y = !(v && !strcmp(v, "0"));
		__atomic_store_n(&yields, y, __ATOMIC_RELAXED);
	}
	return y;
}

int rm_spin(uint64_t spin_ns, unsigned looks_per_clock, uint64_t yield_gap_ns, int (*look)(void *arg), void *arg)
{
	uint64_t t0 = rm_transport_now_ns(), yielded = t0;
	int yields = rm_transport_spin_yields();
	for (unsigned looks = 1;; looks++) {
		int r = look(arg);
		if (r)
			return r;
		rm_cpu_relax();
		if (looks % looks_per_clock)
			continue;
		uint64_t now = rm_transport_now_ns();
		if (now - t0 >= spin_ns)
			return 0;
		if (yields && now - yielded >= yield_gap_ns) {
			sched_yield();
			yielded = now;
		}
	}
}
