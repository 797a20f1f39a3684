/* Failure injection (testdriver.h): REMORA_TESTDRIVER_FAIL names the calls that fail. */
#include "testdriver.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_FAILURES 16

static const char *const point_names[TD_FAIL_POINTS] = {
	[TD_FAIL_MEM_ALLOC_HOST] = "cuMemAllocHost_v2",
	[TD_FAIL_EVENT_CREATE] = "cuEventCreate",
	[TD_FAIL_ADDRESS_HINT] = "cuMemAddressReserve", /* its hint not taken (a range in use) */
};

static struct failure {
	enum td_fail_point point;
	uint64_t call;
	int onward; /* that call and every later one */
} failures[MAX_FAILURES];
static int nfailures;
static uint64_t calls[TD_FAIL_POINTS];
static pthread_once_t parse_once = PTHREAD_ONCE_INIT;

/* A test's mistake, not a driver failure: said once, and the process ends. */
static void refuse(const char *spec, const char *why)
{
	fprintf(stderr, "remora-testdriver: REMORA_TESTDRIVER_FAIL=\"%s\": %s\n", spec, why);
	abort();
}

/* One NAME:N entry of len bytes at e. */
static void parse_entry(const char *spec, const char *e, size_t len)
{
	const char *colon = memchr(e, ':', len);
	if (!colon)
		refuse(spec, "an entry is not NAME:N");
	int point = -1;
	for (int p = 0; p < TD_FAIL_POINTS; p++)
		if (strlen(point_names[p]) == (size_t)(colon - e) && !memcmp(e, point_names[p], (size_t)(colon - e)))
			point = p;
	if (point < 0)
		refuse(spec, "a function that cannot be made to fail (cuMemAllocHost_v2, cuEventCreate, cuMemAddressReserve)");
	uint64_t n = 0;
	const char *d = colon + 1, *end = e + len;
	int onward = end > d && end[-1] == '+'; /* NAME:N+: that call and every later one */
	end -= onward;
	if (d == end)
		refuse(spec, "an entry without its call number");
	for (; d < end; d++) {
		if (*d < '0' || *d > '9' || n > (UINT64_MAX - 9) / 10)
			refuse(spec, "a call number that is not a positive number");
		n = n * 10 + (uint64_t)(*d - '0');
	}
	if (n == 0)
		refuse(spec, "calls are counted from 1");
	if (nfailures == MAX_FAILURES)
		refuse(spec, "more than 16 entries");
	failures[nfailures++] = (struct failure){.point = (enum td_fail_point)point, .call = n, .onward = onward};
}

static void parse(void)
{
	const char *spec = getenv("REMORA_TESTDRIVER_FAIL");
	if (!spec || !*spec)
		return;
	for (const char *e = spec;;) {
		const char *comma = strchr(e, ',');
		size_t len = comma ? (size_t)(comma - e) : strlen(e);
		parse_entry(spec, e, len);
		if (!comma)
			break;
		e = comma + 1;
	}
}

void td_fail_configure(void) { pthread_once(&parse_once, parse); }

bool td_fail_now(enum td_fail_point point)
{
	td_fail_configure();
	if (!nfailures)
		return false;
	uint64_t call = __atomic_add_fetch(&calls[point], 1, __ATOMIC_RELAXED);
	for (int i = 0; i < nfailures; i++)
		if (failures[i].point == point && (failures[i].onward ? call >= failures[i].call : failures[i].call == call)) {
			fprintf(stderr, "remora-testdriver: %s call %llu fails (REMORA_TESTDRIVER_FAIL)\n",
			        point_names[point], (unsigned long long)call);
			return true;
		}
	return false;
}

void td_crash_if_asked(const char *name)
{
	const char *crash = getenv("REMORA_TESTDRIVER_CRASH");
	if (crash && !strcmp(crash, name)) {
		fprintf(stderr, "remora-testdriver: %s crashes (REMORA_TESTDRIVER_CRASH)\n", name);
		raise(SIGSEGV);
	}
}

/* Sleeps for the milliseconds the environment variable name gives (none: not at all). */
static void delay_from(const char *name)
{
	const char *v = getenv(name);
	long ms = v ? strtol(v, NULL, 10) : 0;
	if (ms <= 0)
		return;
	struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts))
		;
}

void td_context_delay(void) { delay_from("REMORA_TESTDRIVER_CONTEXT_MS"); }

void td_timed_record_delay(const struct td_event *e)
{
	if (!(e->flags & CU_EVENT_DISABLE_TIMING))
		delay_from("REMORA_TESTDRIVER_TIMED_RECORD_MS");
}

static uintptr_t freed_va; /* the range last given back, while REMORA_TESTDRIVER_REUSE_FREED_VA is set */
static pthread_mutex_t freed_va_lock = PTHREAD_MUTEX_INITIALIZER;

static int reuse_freed_va = -1; /* the setting, read at the first free */

void td_freed_va_record(uintptr_t base)
{
	int on = __atomic_load_n(&reuse_freed_va, __ATOMIC_RELAXED);
	if (on < 0) {
		const char *v = getenv("REMORA_TESTDRIVER_REUSE_FREED_VA");
		__atomic_store_n(&reuse_freed_va, on = v && !strcmp(v, "1"), __ATOMIC_RELAXED);
	}
	if (!on)
		return;
	pthread_mutex_lock(&freed_va_lock);
	freed_va = base;
	pthread_mutex_unlock(&freed_va_lock);
}

uintptr_t td_freed_va_take(void)
{
	pthread_mutex_lock(&freed_va_lock);
	uintptr_t base = freed_va;
	freed_va = 0;
	pthread_mutex_unlock(&freed_va_lock);
	return base;
}
