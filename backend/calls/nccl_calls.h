/* What the NCCL calls' bodies share (nccl_handlers.c, nccl_collectives.c). */
#ifndef REMORA_NCCL_CALLS_H
#define REMORA_NCCL_CALLS_H

#include "nccl_comms.h"
#include "remora.pb-c.h"

/* The host's NCCL, or NULL with rep's result ncclSystemError (it cannot be loaded). */
const struct rm_nccl_lib *rm_nccl_need(Remora__NcclReply *rep);
/* The host's NCCL in *L and the client's communicator req names; NULL, with rep's result
 * saying why, where either is missing. */
struct rm_nccl_comm *rm_nccl_call_comm(struct rm_channel *s, const Remora__NcclCall *req, Remora__NcclReply *rep,
				       const struct rm_nccl_lib **L);
/* A split communicator's size and rank, once NCCL knows them (its split done). Under c->lock. */
void rm_nccl_learn_ranks(const struct rm_nccl_lib *L, struct rm_nccl_comm *c);

/* Issues o on comm (NCCL's call for o->what): NCCL's result. */
ncclResult_t rm_nccl_issue(const struct rm_nccl_lib *L, const struct rm_nccl_op *o, ncclComm_t comm);

#endif
