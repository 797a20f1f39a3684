/* The transports there are, and what every transport shares. */
#include "transport.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rm_transport_profiling;
struct rm_transport_bytes *rm_transport_bytes;
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

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

void rm_transport_pin(void *addr, size_t len)
{
	for (size_t i = 0; i < COUNT(transports); i++)
		if (transports[i]->pin)
			transports[i]->pin(addr, len);
}

void rm_transport_limit_peer_buffers(uint64_t bytes)
{
	for (size_t i = 0; i < COUNT(transports); i++)
		if (transports[i]->limit_peer_buffers)
			transports[i]->limit_peer_buffers(bytes);
}

void rm_transport_unpin(void *addr)
{
	for (size_t i = 0; i < COUNT(transports); i++)
		if (transports[i]->unpin)
			transports[i]->unpin(addr);
}

/* Prefixes of the transports this build lacks: an address with one names no transport
 * here, rather than a TCP host. */
static const char *const absent_prefixes[] = {
#ifndef RM_HAVE_SHM
	"unix:",
#endif
	NULL,
};

const struct rm_transport *rm_transport_for(const char *url, const char **addr)
{
	const char *sep = strstr(url, "://");
	for (size_t i = 0; i < COUNT(transports); i++) {
		const struct rm_transport *tp = transports[i];
		size_t n = strlen(tp->scheme);
		const char *rest = tp->claim ? tp->claim(url)
			: sep && (size_t)(sep - url) == n && !strncmp(url, tp->scheme, n) ? sep + 3 : NULL;
		if (rest) {
			*addr = rest;
			return tp;
		}
	}
	for (size_t i = 0; absent_prefixes[i]; i++)
		if (!strncmp(url, absent_prefixes[i], strlen(absent_prefixes[i])))
			return NULL;
	if (sep)
		return NULL;
	*addr = url; /* host:port, no prefix: the first transport's, tcp */
	return transports[0];
}

#define HOST_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_:%"

int rm_transport_check_host_port(const char *url, const char *addr, int port_zero_ok, char *why, size_t whylen)
{
	const char *colon = strrchr(addr, ':');
	if (!colon) {
		snprintf(why, whylen, "'%s' has no port (HOST:PORT)", url);
		return -EINVAL;
	}
	const char *host = addr;
	size_t hostlen = (size_t)(colon - addr);
	if (hostlen >= 2 && host[0] == '[' && host[hostlen - 1] == ']') {
		host++;
		hostlen -= 2;
	}
	if (strspn(host, HOST_CHARS) < hostlen) {
		snprintf(why, whylen, "'%.*s' in '%s' is not a host name or address", (int)(colon - addr), addr, url);
		return -EINVAL;
	}
	const char *port = colon + 1;
	char *end;
	long n = strtol(port, &end, 10);
	if (!*port || *end || port[0] < '0' || port[0] > '9' || n > 65535 || (n == 0 && !port_zero_ok)) {
		snprintf(why, whylen, "'%s' in '%s' is not a port (%s to 65535)", port, url, port_zero_ok ? "0" : "1");
		return -EINVAL;
	}
	return 0;
}
