/* A Remora IPC token: what a CUipcMemHandle, a CUipcEventHandle or an exported POSIX file
 * descriptor's memfd holds in place of the driver's handle (docs/architecture.md, "CUDA
 * IPC"). 64 bytes, little-endian:
 *   0  magic "RMIP"         4  version (1)        5  kind (enum rm_ipc_kind)   6  zero (2)
 *   8  the remorad's id      16 the worker's id   24 the export's id
 *   32 secret (16 random bytes, so that a token cannot be guessed)
 *   48 the exporter's tenant (int32, -1 anonymous)            52 zero (12)
 * Every token comes from a client: rm_ipc_token_decode checks all of it. */
#ifndef REMORA_IPC_TOKEN_H
#define REMORA_IPC_TOKEN_H

#include <stddef.h>
#include <stdint.h>

#define RM_IPC_TOKEN_SIZE 64
#define RM_IPC_TOKEN_VERSION 1

enum rm_ipc_kind {
	RM_IPC_MEMORY = 1,   /* cuIpcGetMemHandle: a cuMemAlloc allocation */
	RM_IPC_EVENT = 2,    /* cuIpcGetEventHandle: an interprocess event */
	RM_IPC_PHYSICAL = 3, /* cuMemExportToShareableHandle: a cuMemCreate allocation */
	RM_IPC_POOL = 4,     /* cuMemPoolExportToShareableHandle: a memory pool (its allocations: RM_IPC_MEMORY) */
};

struct rm_ipc_token {
	enum rm_ipc_kind kind;
	uint64_t daemon;  /* the remorad that made it (registry.h) */
	uint64_t worker;  /* the worker process, random at its start */
	uint64_t id;      /* the export, in that worker */
	uint8_t secret[16];
	int32_t tenant;
};

void rm_ipc_token_encode(const struct rm_ipc_token *t, uint8_t out[RM_IPC_TOKEN_SIZE]);
/* Decodes len bytes at in: 0, or -1 with *why saying what is wrong (not a token, another
 * version, a kind this daemon does not know, bytes that must be zero are not). */
int rm_ipc_token_decode(const void *in, size_t len, struct rm_ipc_token *t, const char **why);

#endif
