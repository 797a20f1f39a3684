/* Fuzz target `metrics`: the request line of a scrape as remorad's metrics responder
 * takes it apart (backend/daemon/metrics.c, rm_metrics_request_status), given what a stranger
 * sent on metrics_listen. The answer is one of the statuses the responder knows, and
 * HEAD is only ever a 200's or a 404's. */
#include <stdint.h>
#include <stdlib.h>

#include "metrics.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int head = -1;
	int status = rm_metrics_request_status((const char *)data, size, &head);
	if (status != 200 && status != 400 && status != 404 && status != 405)
		abort();
	if ((status == 200 || status == 404) && head != 0 && head != 1)
		abort();
	return 0;
}
