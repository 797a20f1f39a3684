/* Checking transport addresses (address.h). */
#include "address.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport.h"

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
	return tp->check_address(url, addr, port_zero_ok, why, whylen);
}
