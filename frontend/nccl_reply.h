/* An rmNccl* reply as the client takes it (nccl_reply.c): from a server it does not trust. */
#ifndef REMORA_NCCL_REPLY_H
#define REMORA_NCCL_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "nccl_bridge.h"
#include "remora.pb-c.h"

/* Checks rep against call op's contract (ndev: the devices an ncclCommInitAll named) and
 * fills out: a result NCCL defines (ncclInProgress not for ncclCommInitAll, which is
 * blocking); communicators only on success (or in progress), none null, exactly one for an
 * init of a rank, ndev for ncclCommInitAll, at most one for a split, none otherwise; a unique id only for ncclGetUniqueId, of NCCL_UNIQUE_ID_BYTES; a text shorter
 * than RM_NCCL_MAX_TEXT. 0, or -EPROTO with why. */
int rm_nccl_reply_take(uint32_t op, int ndev, const Remora__NcclReply *rep, struct rm_nccl_answer *out, char *why,
		       size_t whylen);

#endif
