/* Remora IPC tokens (ipc_token.h): encoded by the worker, decoded from a client's bytes. */
#include "ipc_token.h"

#include <string.h>

static const uint8_t magic[4] = {'R', 'M', 'I', 'P'};

static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void rm_ipc_token_encode(const struct rm_ipc_token *t, uint8_t out[RM_IPC_TOKEN_SIZE])
{
	memset(out, 0, RM_IPC_TOKEN_SIZE);
	memcpy(out, magic, sizeof(magic));
	out[4] = RM_IPC_TOKEN_VERSION;
	out[5] = (uint8_t)t->kind;
	put64(out + 8, t->daemon);
	put64(out + 16, t->worker);
	put64(out + 24, t->id);
	memcpy(out + 32, t->secret, sizeof(t->secret));
	put64(out + 48, (uint32_t)t->tenant); /* the 4 bytes above it stay zero */
}

int rm_ipc_token_decode(const void *in, size_t len, struct rm_ipc_token *t, const char **why)
{
	const uint8_t *p = in;
	if (!p || len != RM_IPC_TOKEN_SIZE || memcmp(p, magic, sizeof(magic))) {
		*why = "not a handle a Remora client exported (a native one, or garbage)";
		return -1;
	}
	if (p[4] != RM_IPC_TOKEN_VERSION) {
		*why = "a handle of another version of Remora";
		return -1;
	}
	if (p[5] < RM_IPC_MEMORY || p[5] > RM_IPC_POOL) {
		*why = "a handle of a kind this daemon does not know";
		return -1;
	}
	uint8_t zero = p[6] | p[7];
	for (size_t i = 52; i < RM_IPC_TOKEN_SIZE; i++)
		zero |= p[i];
	if (zero) {
		*why = "a handle whose reserved bytes are not zero";
		return -1;
	}
	memset(t, 0, sizeof(*t));
	t->kind = (enum rm_ipc_kind)p[5];
	t->daemon = get64(p + 8);
	t->worker = get64(p + 16);
	t->id = get64(p + 24);
	memcpy(t->secret, p + 32, sizeof(t->secret));
	t->tenant = (int32_t)(uint32_t)(get64(p + 48) & 0xffffffffu);
	return 0;
}
