/* Fuzz target `nccl_reply`: an rmNccl* reply as the client's NCCL bridge takes it
 * (frontend/nccl_reply.c), from a server it does not trust. Input: the first byte picks
 * the call (its low four bits, from rmNcclGetVersion on) and, in its high bits, the devices
 * an ncclCommInitAll named (0 to 15); the rest is the reply, remora.NcclReply. A reply
 * taken must keep the call's contract (nccl_reply.h). */
#include "../../frontend/nccl_reply.c"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	uint32_t op = RM_OP_rmNcclGetVersion + (data[0] & 15u);
	int ndev = data[0] >> 4;
	Remora__NcclReply *rep = remora__nccl_reply__unpack(NULL, size - 1, data + 1);
	if (!rep)
		return 0;
	struct rm_nccl_answer out;
	char why[128];
	if (rm_nccl_reply_take(op, ndev, rep, &out, why, sizeof(why)) == 0) {
		int made = out.result == ncclSuccess || out.result == ncclInProgress;
		if (out.ncomms < 0 || out.ncomms > RM_NCCL_MAX_DEVICES || (!made && out.ncomms) ||
		    out.result < 0 || out.result >= ncclNumResults || strlen(out.text) >= sizeof(out.text) ||
		    (op == RM_OP_rmNcclCommInitAll && (out.result == ncclInProgress || (made && out.ncomms != ndev))) ||
		    (op == RM_OP_rmNcclCommInitRank && made && out.ncomms != 1) ||
		    (out.ncomms && op != RM_OP_rmNcclCommInitRank && op != RM_OP_rmNcclCommInitAll && op != RM_OP_rmNcclCommSplit))
			abort();
		for (int i = 0; i < out.ncomms; i++)
			if (!out.comms[i])
				abort();
	} else if (!memchr(why, 0, sizeof(why))) {
		abort();
	}
	remora__nccl_reply__free_unpacked(rep, NULL);
	return 0;
}
