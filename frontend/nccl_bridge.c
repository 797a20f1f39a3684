/* The client's libnccl.so.2's way to the daemon (nccl_bridge.h): one call that packs an
 * rmNccl* request, sends it on the calling thread's connection and checks the reply. */
#include "nccl_bridge.h"

#include <stdio.h>
#include <string.h>

#include "client.h"
#include "nccl_reply.h"
#include "remora.pb-c.h"

/* The config's fields the program set, as far as its size reaches. */
static void pack_config(const rm_nccl_config *c, Remora__NcclCall *req)
{
	size_t n = c->size;
	req->has_config = 1;
#define FIELD(f, to) req->to = RM_NCCL_CONFIG_HAS(n, f) ? c->f : RM_NCCL_CONFIG_UNDEF
	FIELD(blocking, blocking);
	FIELD(cgaClusterSize, cga_cluster_size);
	FIELD(minCTAs, min_ctas);
	FIELD(maxCTAs, max_ctas);
	FIELD(splitShare, split_share);
	FIELD(trafficClass, traffic_class);
	FIELD(collnetEnable, collnet_enable);
	FIELD(CTAPolicy, cta_policy);
	FIELD(nvlsCTAs, nvls_ctas);
#undef FIELD
	/* Names: NCCL's logs' and its network's; at most RM_NCCL_MAX_NAME bytes travel. */
	static __thread char net[RM_NCCL_MAX_NAME + 1], comm[RM_NCCL_MAX_NAME + 1];
	snprintf(net, sizeof(net), "%s", RM_NCCL_CONFIG_HAS(n, netName) && c->netName ? c->netName : "");
	snprintf(comm, sizeof(comm), "%s", RM_NCCL_CONFIG_HAS(n, commName) && c->commName ? c->commName : "");
	req->net_name = net;
	req->comm_name = comm;
}

_Static_assert(RM_NCCL_ORDER_NO_STREAM == RM_ORDER_NO_STREAM, "the bridge's order keys are the client's");

static CUresult take_reply(uint32_t op, const struct rm_nccl_args *a, const Remora__NcclReply *rep,
			   struct rm_nccl_answer *out)
{
	char why[128];
	if (rm_nccl_reply_take(op, a->ndev, rep, out, why, sizeof(why)))
		return rm_rpc_bad_reply("NCCL: %s", why);
	return CUDA_SUCCESS;
}

static CUresult call(uint32_t op, const struct rm_nccl_args *a, struct rm_nccl_answer *out)
{
	if (!a || !out || op < RM_OP_rmNcclGetVersion || op > RM_OP_rmNcclRedOpDestroy)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_connect_once();
	if (r != CUDA_SUCCESS)
		return r;
	Remora__NcclCall req = REMORA__NCCL_CALL__INIT;
	req.comm = a->comm;
	req.sendbuff = a->sendbuff;
	req.recvbuff = a->recvbuff;
	req.count = a->count;
	req.stream = a->stream;
	req.datatype = a->datatype;
	req.op = a->op;
	req.root = a->root;
	req.what = a->what;
	req.nranks = a->nranks;
	req.rank = a->rank;
	req.color = a->color;
	req.key = a->key;
	req.residence = a->residence;
	if (a->unique_id) {
		req.unique_id.data = (uint8_t *)a->unique_id->internal;
		req.unique_id.len = NCCL_UNIQUE_ID_BYTES;
	}
	if (a->ndev > 0) {
		req.devlist = (int32_t *)a->devlist;
		req.n_devlist = (size_t)a->ndev;
	}
	if (a->config)
		pack_config(a->config, &req);
	if (a->scalar_len) {
		req.scalar.data = (uint8_t *)a->scalar;
		req.scalar.len = a->scalar_len;
	}
	Remora__NcclReply *rep = NULL;
	memset(out, 0, sizeof(*out));
	if (a->async) {
		struct rm_rpc_call c = {.op = op, .req = &req.base, .async = 1, .ordered = a->ordered,
					.order = {a->order[0], a->order[1]}};
		return rm_rpc(&c);
	}
	r = rm_rpc_simple(op, &req.base, &remora__nccl_reply__descriptor, (ProtobufCMessage **)&rep);
	if (r == CUDA_SUCCESS)
		r = rep ? take_reply(op, a, rep, out) : rm_rpc_bad_reply("NCCL: no reply");
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

const struct rm_nccl_bridge rm_nccl_bridge_table = {
	.size = sizeof(struct rm_nccl_bridge),
	.call = call,
};
