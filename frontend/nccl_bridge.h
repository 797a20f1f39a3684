/* How the client's libnccl.so.2 (frontend/nccl/) forwards NCCL's API through the process's
 * one connection, which the client library (libcuda.so.1) owns: a Remora-private export
 * table, got with cuGetExportTable and RM_NCCL_BRIDGE_ID, whose one call sends an rmNccl*
 * request (proto/api.spec, "NCCL") and checks its reply. A libcuda.so.1 that is not
 * Remora's refuses the id, and libnccl.so.2 answers ncclSystemError. */
#ifndef REMORA_NCCL_BRIDGE_H
#define REMORA_NCCL_BRIDGE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl_abi.h"

/* "remora-nccl-brdg" */
#define RM_NCCL_BRIDGE_ID {0x72, 0x65, 0x6d, 0x6f, 0x72, 0x61, 0x2d, 0x6e, 0x63, 0x63, 0x6c, 0x2d, 0x62, 0x72, 0x64, 0x67}

/* A call's parameters: what remora.NcclCall carries (the fields a call does not name stay 0). */
struct rm_nccl_args {
	uint64_t comm, sendbuff, recvbuff, count, stream;
	int32_t datatype, op, root, what, nranks, rank, color, key, residence;
	const ncclUniqueId *unique_id;  /* NULL: none */
	const int32_t *devlist;         /* ndev of them */
	int ndev;
	const rm_nccl_config *config;   /* NULL: none; read no further than its size */
	const void *scalar;             /* scalar_len bytes */
	size_t scalar_len;
	int async;                      /* sent without waiting (a collective, a group's start): its
					 * NCCL error comes back later (docs/architecture.md, "NCCL") */
	int ordered;                    /* async only: order[] names all the call is ordered against
					 * (client.h's rm_rpc_call), so other threads' calls are fenced
					 * after it only for those */
	uint64_t order[2];
};

/* order[0] of a call ordered against order[1] alone (client.h's RM_ORDER_NO_STREAM). */
#define RM_NCCL_ORDER_NO_STREAM UINT64_MAX

/* Its answer, checked against the call's contract. */
struct rm_nccl_answer {
	ncclResult_t result;
	int64_t value;
	ncclUniqueId unique_id;
	uint64_t comms[RM_NCCL_MAX_DEVICES];
	int ncomms;
	char text[RM_NCCL_MAX_TEXT];
};

struct rm_nccl_bridge {
	size_t size; /* sizeof(struct rm_nccl_bridge) */
	/* Sends rmNccl call op (an RM_OP_rmNccl* opcode) and waits for its answer: CUDA_SUCCESS
	 * with out filled, or why the call could not be made (an async call: CUDA_SUCCESS and
	 * ncclSuccess once queued). */
	CUresult (*call)(uint32_t op, const struct rm_nccl_args *a, struct rm_nccl_answer *out);
};

/* The client library's table (nccl_bridge.c). */
extern const struct rm_nccl_bridge rm_nccl_bridge_table;

#endif
