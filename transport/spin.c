/* The spin loop and its settings (spin.h). */
#include "spin.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

#define PRESSURE_DEFAULT_PERCENT 10

int rm_cpu_pressure_parse(const char *text, uint64_t *some_us)
{
	for (const char *line = text; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
		if (strncmp(line, "some ", 5))
			continue;
		const char *eol = strchr(line, '\n'), *t = strstr(line, " total=");
		char *end;
		if (!t || (eol && t > eol))
			return -1;
		unsigned long long v = strtoull(t + 7, &end, 10);
		if (end == t + 7)
			return -1;
		*some_us = v;
		return 0;
	}
	return -1;
}

int rm_cpu_pressure_update(struct rm_cpu_pressure *p, uint64_t now_ns, uint64_t some_us, unsigned percent)
{
	if (p->at_ns && now_ns - p->at_ns >= 1000000u && some_us >= p->some_us && percent) {
		/* busy above percent of the window stalled, idle below a third of it */
		uint64_t stalled_ns = (some_us - p->some_us) * 1000u, window_ns = now_ns - p->at_ns;
		if (stalled_ns * 100u > window_ns * percent)
			p->busy = 1;
		else if (stalled_ns * 300u < window_ns * percent)
			p->busy = 0;
	}
	if (!percent)
		p->busy = 0;
	p->at_ns = now_ns;
	p->some_us = some_us;
	return p->busy;
}

static unsigned pressure_percent(void)
{
	const char *v = getenv("REMORA_SPIN_PRESSURE");
	char *end;
	long pct = v && *v ? strtol(v, &end, 10) : PRESSURE_DEFAULT_PERCENT;
	return v && *v && (*end || pct < 0 || pct > 100) ? PRESSURE_DEFAULT_PERCENT : (unsigned)pct;
}

static struct {
	int fd;	      /* /proc/pressure/cpu; -1 before the first sample, -2 where absent */
	int sampling; /* claimed by the caller that samples */
	int busy;     /* the verdict, read by every spin */
	uint64_t next_ns; /* when a caller samples again */
	unsigned percent;
	struct rm_cpu_pressure state; /* the sampler's */
} pressure = {.fd = -1};

/* rm_spin_host_busy at now. */
static int host_busy_at(uint64_t now)
{
	int idle = 0;
	if (now < __atomic_load_n(&pressure.next_ns, __ATOMIC_RELAXED) ||
	    !__atomic_compare_exchange_n(&pressure.sampling, &idle, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
		return __atomic_load_n(&pressure.busy, __ATOMIC_RELAXED);
	if (pressure.fd == -1) {
		pressure.percent = pressure_percent();
		pressure.fd = pressure.percent ? open("/proc/pressure/cpu", O_RDONLY | O_CLOEXEC) : -2;
		if (pressure.fd < 0)
			pressure.fd = -2;
	}
	char text[256];
	ssize_t n = pressure.fd >= 0 ? pread(pressure.fd, text, sizeof(text) - 1, 0) : -1;
	uint64_t some_us;
	if (n > 0) {
		text[n] = 0;
		if (!rm_cpu_pressure_parse(text, &some_us))
			__atomic_store_n(&pressure.busy, rm_cpu_pressure_update(&pressure.state, now, some_us, pressure.percent),
					 __ATOMIC_RELAXED);
	}
	__atomic_store_n(&pressure.next_ns, now + RM_SPIN_PRESSURE_WINDOW_NS, __ATOMIC_RELAXED);
	__atomic_store_n(&pressure.sampling, 0, __ATOMIC_RELEASE);
	return __atomic_load_n(&pressure.busy, __ATOMIC_RELAXED);
}

int rm_spin_host_busy(void)
{
	return host_busy_at(rm_transport_now_ns());
}

static unsigned long long spins_spun, spins_gated;

void rm_spin_counts(unsigned long long *spun, unsigned long long *gated)
{
	*spun = __atomic_load_n(&spins_spun, __ATOMIC_RELAXED);
	*gated = __atomic_load_n(&spins_gated, __ATOMIC_RELAXED);
}

int rm_spin(uint64_t spin_ns, unsigned looks_per_clock, uint64_t yield_gap_ns, int (*look)(void *arg), void *arg)
{
	uint64_t t0 = rm_transport_now_ns(), yielded = t0;
	if (host_busy_at(t0)) {
		__atomic_add_fetch(&spins_gated, 1, __ATOMIC_RELAXED);
		return look(arg);
	}
	__atomic_add_fetch(&spins_spun, 1, __ATOMIC_RELAXED);
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
