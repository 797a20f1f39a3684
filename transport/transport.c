/* The transports there are, and what every transport shares. */
#include "transport.h"

#include <string.h>

int rm_transport_profiling;
__thread struct rm_transport_tally *rm_transport_thread_tally;

static const struct rm_transport *const transports[] = {
	&rm_transport_tcp,
};

const struct rm_transport *rm_transport_for(const char *url, const char **addr)
{
	const char *sep = strstr(url, "://");
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
