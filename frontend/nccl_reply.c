/* Taking an rmNccl* reply (nccl_reply.h). */
#include "nccl_reply.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api_ops.h"

/* How many communicators a successful reply to op carries: -1 for none or one. */
static int comms_expected(uint32_t op, int ndev)
{
	switch (op) {
	case RM_OP_rmNcclCommInitRank: return 1;
	case RM_OP_rmNcclCommInitAll: return ndev;
	case RM_OP_rmNcclCommSplit: return -1; /* none for NCCL_SPLIT_NOCOLOR */
	default: return 0;
	}
}

int rm_nccl_reply_take(uint32_t op, int ndev, const Remora__NcclReply *rep, struct rm_nccl_answer *out, char *why,
		       size_t whylen)
{
	/* ncclInProgress: a nonblocking communicator's call, still running; an init or split gives
	 * its communicator with it. */
	int want = comms_expected(op, ndev), bad = 1;
	int ok = rep->result == ncclSuccess || (rep->result == ncclInProgress && want != 0);
	size_t nulls = 0;
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < rep->n_comms; i++)
		nulls += !rep->comms[i];
	if (rep->result < 0 || rep->result >= ncclNumResults || (rep->result == ncclInProgress && op == RM_OP_rmNcclCommInitAll))
		snprintf(why, whylen, "a result of %d", rep->result);
	else if (rep->n_comms > RM_NCCL_MAX_DEVICES || (!ok && rep->n_comms) ||
		 (ok && want >= 0 && rep->n_comms != (size_t)want) || (want < 0 && rep->n_comms > 1))
		snprintf(why, whylen, "%zu communicators in a reply", rep->n_comms);
	else if (nulls)
		snprintf(why, whylen, "a null communicator");
	else if (rep->unique_id.len && (rep->unique_id.len != NCCL_UNIQUE_ID_BYTES || op != RM_OP_rmNcclGetUniqueId))
		snprintf(why, whylen, "a unique id of %zu bytes", rep->unique_id.len);
	else if (op == RM_OP_rmNcclGetUniqueId && ok && !rep->unique_id.len)
		snprintf(why, whylen, "no unique id");
	else if (rep->text && strlen(rep->text) >= sizeof(out->text))
		snprintf(why, whylen, "a text of %zu bytes", strlen(rep->text));
	else
		bad = 0;
	if (bad)
		return -EPROTO;
	out->result = (ncclResult_t)rep->result;
	out->value = rep->value;
	if (rep->unique_id.len)
		memcpy(out->unique_id.internal, rep->unique_id.data, NCCL_UNIQUE_ID_BYTES);
	out->ncomms = (int)rep->n_comms;
	if (rep->n_comms)
		memcpy(out->comms, rep->comms, rep->n_comms * sizeof(*rep->comms));
	if (rep->text)
		strcpy(out->text, rep->text);
	return 0;
}
