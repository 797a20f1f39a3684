/* Checking transport addresses (address.h). */
#include "address.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/un.h>

#include "transport.h"

#define HOST_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789.-_:%"

int rm_address_check(const char *url, int port_zero_ok, char *why, size_t whylen)
{
	const char *addr;
	const struct rm_transport *tp = rm_transport_for(url, &addr);
	if (!tp) {
		snprintf(why, whylen, "'%s' names no transport of this build (tcp://HOST:PORT or HOST:PORT%s%s%s)", url,
#ifdef RM_HAVE_TLS
			 ", tls://HOST:PORT",
#else
			 "",
#endif
#ifdef RM_HAVE_SHM
			 ", unix:PATH",
#else
			 "; unix:PATH needs a build with -Dshm",
#endif
#ifdef RM_HAVE_RDMA
			 ", rdma://HOST:PORT"
#else
			 "; rdma://HOST:PORT needs a build with -Drdma"
#endif
		);
		return -EINVAL;
	}
	if (!strcmp(tp->scheme, "unix")) { /* a socket path, or @NAME in the abstract namespace */
		size_t n = strlen(addr);
		if (n == 0 || n >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
			snprintf(why, whylen, "'%s': a Unix socket path of 1 to %zu bytes", url,
				 sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
			return -EINVAL;
		}
		return 0;
	}
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
