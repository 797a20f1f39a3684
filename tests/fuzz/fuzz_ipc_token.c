/* Fuzz target `ipc_token` (backend/worker/ipc_token.c), over what a client sends as a CUDA
 * IPC handle or puts in a shared descriptor: any bytes decode or are refused with a reason,
 * and what decodes encodes back to exactly those bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ipc_token.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rm_ipc_token t, again;
	const char *why = NULL;
	/* A copy of exactly size bytes, so that a read past them is seen. */
	uint8_t *in = malloc(size ? size : 1);
	if (!in)
		return 0;
	memcpy(in, data, size);
	if (rm_ipc_token_decode(in, size, &t, &why)) {
		if (!why)
			abort();
		free(in);
		return 0;
	}
	uint8_t out[RM_IPC_TOKEN_SIZE];
	rm_ipc_token_encode(&t, out);
	if (size != RM_IPC_TOKEN_SIZE || memcmp(out, in, size) || rm_ipc_token_decode(out, sizeof(out), &again, &why) ||
	    memcmp(&again, &t, sizeof(t)))
		abort();
	free(in);
	return 0;
}
