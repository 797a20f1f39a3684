/* The transports there are, and what every transport shares. */
#include "transport.h"

#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rm_transport_profiling;
__thread struct rm_transport_tally *rm_transport_thread_tally;

static const struct rm_transport *const transports[] = {
	&rm_transport_tcp,
#ifdef RM_HAVE_TLS
	&rm_transport_tls,
#endif
#ifdef RM_HAVE_SHM
	&rm_transport_shm,
#endif
#ifdef RM_HAVE_RDMA
	&rm_transport_rdma,
#endif
};

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

static __thread int why_err;
static __thread char why_text[256];

void rm_transport_set_why(int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why_text, sizeof(why_text), fmt, ap);
	va_end(ap);
	why_err = err;
}

const char *rm_transport_last_why(void)
{
	return why_err ? why_text : "";
}

int rm_transport_split_addr(const char *addr, char *host, size_t hostlen, char *port, size_t portlen)
{
	const char *colon = strrchr(addr, ':');
	if (!colon || !colon[1])
		return -EINVAL;
	const char *h = addr;
	size_t n = (size_t)(colon - addr);
	if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
		h++;
		n -= 2;
	}
	if (n >= hostlen || strlen(colon + 1) >= portlen)
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = 0;
	strcpy(port, colon + 1);
	return 0;
}

const char *rm_transport_why(int err)
{
	return err && err == why_err && why_text[0] ? why_text : strerror(err < 0 ? -err : err);
}

#ifdef RM_HAVE_RDMA
void rm_rdma_pin(void *addr, size_t len);   /* rdma/rdma_regions.c */
void rm_rdma_unpin(void *addr);
#endif

void rm_transport_pin(void *addr, size_t len)
{
#ifdef RM_HAVE_RDMA
	rm_rdma_pin(addr, len);
#else
	(void)addr, (void)len;
#endif
}

void rm_transport_unpin(void *addr)
{
#ifdef RM_HAVE_RDMA
	rm_rdma_unpin(addr);
#else
	(void)addr;
#endif
}

const struct rm_transport *rm_transport_for(const char *url, const char **addr)
{
	const char *sep = strstr(url, "://");
	if (!strncmp(url, "unix:", 5)) { /* unix:PATH as well as unix://PATH */
#ifdef RM_HAVE_SHM
		*addr = url + (sep == url + 4 ? 7 : 5);
		return &rm_transport_shm;
#else
		return NULL;
#endif
	}
	if (!sep) {
		*addr = url;
		return &rm_transport_tcp;
	}
	for (size_t i = 0; i < sizeof(transports) / sizeof(transports[0]); i++) {
		size_t n = strlen(transports[i]->scheme);
		if ((size_t)(sep - url) == n && !strncmp(url, transports[i]->scheme, n)) {
			*addr = sep + 3;
			return transports[i];
		}
	}
	return NULL;
}
