/* NCCL's collectives, sends and receives, and reductions in the worker (proto/api.spec,
 * "NCCL"): the buffers a collective reads and writes must lie in the client's memory for
 * its count, datatype and ranks; its stream must be the client's. */
#include <stdint.h>
#include <string.h>

#include "remora.pb-c.h"
#include "daemon_handlers.h"
#include "dispatch.h"
#include "driver_table.h"
#include "handles.h"
#include "nccl_calls.h"
#include "nccl_comms.h"

/* count elements of elem bytes times mul lie in the client's memory from p. */
static int span_ok(struct rm_channel *s, uint64_t p, uint64_t count, uint64_t mul, size_t elem)
{
	if (mul && count > UINT64_MAX / mul)
		return 0;
	return count * mul == 0 || rm_session_check_span(s, p, count * mul, elem) == CUDA_SUCCESS;
}

/* Whether the buffers of collective what lie in the client's memory. */
static ncclResult_t check_buffers(struct rm_channel *s, const Remora__NcclCall *req, const struct rm_nccl_comm *c)
{
	size_t e = rm_nccl_type_size(req->datatype);
	uint64_t n = c->nranks > 0 ? (uint64_t)c->nranks : 1, k = req->count;
	int root = req->root == c->rank;
	int rooted = req->what == RM_NCCL_BROADCAST || req->what == RM_NCCL_REDUCE || req->what == RM_NCCL_GATHER ||
		     req->what == RM_NCCL_SCATTER || req->what == RM_NCCL_SEND || req->what == RM_NCCL_RECV;
	if (!e || (rooted && (req->root < 0 || (c->nranks > 0 && req->root >= c->nranks))))
		return ncclInvalidArgument;
	uint64_t send_mul = 1, recv_mul = 1;
	int send = 1, recv = 1;
	switch (req->what) {
	case RM_NCCL_ALL_REDUCE: break;
	case RM_NCCL_BROADCAST: send = root; break;
	case RM_NCCL_REDUCE: recv = root; break;
	case RM_NCCL_ALL_GATHER: recv_mul = n; break;
	case RM_NCCL_REDUCE_SCATTER: send_mul = n; break;
	case RM_NCCL_SEND: recv = 0; break;
	case RM_NCCL_RECV: send = 0; break;
	case RM_NCCL_ALL_TO_ALL: send_mul = recv_mul = n; break;
	case RM_NCCL_GATHER: recv = root, recv_mul = n; break;
	case RM_NCCL_SCATTER: send = root, send_mul = n; break;
	default: return ncclInvalidArgument;
	}
	if ((send && !span_ok(s, req->sendbuff, k, send_mul, e)) || (recv && !span_ok(s, req->recvbuff, k, recv_mul, e)))
		return ncclInvalidArgument;
	return ncclSuccess;
}

static ncclResult_t issue(const struct rm_nccl_lib *L, const Remora__NcclCall *req, ncclComm_t comm, CUstream st)
{
	const void *sb = (const void *)(uintptr_t)req->sendbuff;
	void *rb = (void *)(uintptr_t)req->recvbuff;
	size_t k = req->count;
	int t = req->datatype, op = req->op, root = req->root;
	switch (req->what) {
	case RM_NCCL_ALL_REDUCE: return L->AllReduce ? L->AllReduce(sb, rb, k, t, op, comm, st) : ncclInvalidUsage;
	case RM_NCCL_BROADCAST: return L->Broadcast ? L->Broadcast(sb, rb, k, t, root, comm, st) : ncclInvalidUsage;
	case RM_NCCL_REDUCE: return L->Reduce ? L->Reduce(sb, rb, k, t, op, root, comm, st) : ncclInvalidUsage;
	case RM_NCCL_ALL_GATHER: return L->AllGather ? L->AllGather(sb, rb, k, t, comm, st) : ncclInvalidUsage;
	case RM_NCCL_REDUCE_SCATTER: return L->ReduceScatter ? L->ReduceScatter(sb, rb, k, t, op, comm, st) : ncclInvalidUsage;
	case RM_NCCL_SEND: return L->Send ? L->Send(sb, k, t, root, comm, st) : ncclInvalidUsage;
	case RM_NCCL_RECV: return L->Recv ? L->Recv(rb, k, t, root, comm, st) : ncclInvalidUsage;
	case RM_NCCL_ALL_TO_ALL: return L->AlltoAll ? L->AlltoAll(sb, rb, k, t, comm, st) : ncclInvalidUsage;
	case RM_NCCL_GATHER: return L->Gather ? L->Gather(sb, rb, k, t, root, comm, st) : ncclInvalidUsage;
	case RM_NCCL_SCATTER: return L->Scatter ? L->Scatter(sb, rb, k, t, root, comm, st) : ncclInvalidUsage;
	}
	return ncclInvalidArgument;
}

/* Sent async by the client (frontend/nccl/nccl.c): an error goes to the group, if one is
 * open, else to the communicator's async error; a stream not the client's is such an error
 * too, not a CUresult that a later driver call would report. */
CUresult rm_body_rmNcclCollective(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				  Remora__NcclReply *rep)
{
	const struct rm_nccl_lib *L;
	struct rm_nccl_comm *c = rm_nccl_call_comm(s, req, rep, &L);
	int in_group = rm_nccl_group_depth(0) > 0, async = rq->frame.flags & RM_F_ASYNC;
	CUstream st = NULL;
	if (c) {
		pthread_mutex_lock(&c->lock);
		rm_nccl_learn_ranks(L, c);
		pthread_mutex_unlock(&c->lock);
		if ((rep->result = check_buffers(s, req, c)) == ncclSuccess &&
		    rm_session_stream_submit(s, req->stream, rq->frame.flags, &st) != CUDA_SUCCESS)
			rep->result = ncclInvalidArgument;
	}
	if (c && rep->result == ncclSuccess) {
		pthread_mutex_lock(&c->lock);
		ncclResult_t r = ncclRemoteError;
		if (c->comm && !__atomic_load_n(&c->departed, __ATOMIC_ACQUIRE)) {
			r = issue(L, req, c->comm, st);
			c->last_stream = st;
			if (in_group)
				rm_nccl_group_note(c);
			else if (!c->nonblocking)
				r = rm_nccl_settle(s, c, r, "a collective");
			if (r == ncclSuccess && !in_group && c->done)
				rm_drv_cuEventRecord(c->done, st);
		}
		pthread_mutex_unlock(&c->lock);
		rep->result = r;
	}
	if (async && in_group)
		rm_nccl_group_fail(rep->result);
	else if (async && c && rep->result != ncclSuccess && rep->result != ncclInProgress)
		__atomic_compare_exchange_n(&c->async_error, &(ncclResult_t){ncclSuccess}, rep->result, 0, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE);
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclRedOpCreatePreMulSum(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
					    Remora__NcclReply *rep)
{
	(void)rq;
	const struct rm_nccl_lib *L;
	struct rm_nccl_comm *c = rm_nccl_call_comm(s, req, rep, &L);
	if (!c)
		return CUDA_SUCCESS;
	size_t e = rm_nccl_type_size(req->datatype);
	uint64_t scalar[1] = {0};
	void *arg = scalar;
	if (!L->RedOpCreatePreMulSum) {
		rep->result = ncclInvalidUsage;
		return CUDA_SUCCESS;
	}
	if (req->residence == 1) { /* ncclScalarHostImmediate: its bytes travel */
		if (!e || req->scalar.len != e) {
			rep->result = ncclInvalidArgument;
			return CUDA_SUCCESS;
		}
		memcpy(scalar, req->scalar.data, e);
	} else if (req->residence == 0) { /* ncclScalarDevice: a device pointer of the client's */
		if (!e || rm_session_check_span(s, req->sendbuff, 1, e) != CUDA_SUCCESS) {
			rep->result = ncclInvalidArgument;
			return CUDA_SUCCESS;
		}
		arg = (void *)(uintptr_t)req->sendbuff;
	} else {
		rep->result = ncclInvalidArgument;
		return CUDA_SUCCESS;
	}
	ncclRedOp_t op = 0;
	pthread_mutex_lock(&c->lock);
	rep->result = c->comm ? L->RedOpCreatePreMulSum(&op, arg, req->datatype, req->residence, c->comm) : ncclRemoteError;
	pthread_mutex_unlock(&c->lock);
	rep->value = op;
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclRedOpDestroy(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				    Remora__NcclReply *rep)
{
	(void)rq;
	const struct rm_nccl_lib *L;
	struct rm_nccl_comm *c = rm_nccl_call_comm(s, req, rep, &L);
	if (!c)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&c->lock);
	rep->result = !L->RedOpDestroy ? ncclInvalidUsage : c->comm ? L->RedOpDestroy(req->op, c->comm) : ncclRemoteError;
	pthread_mutex_unlock(&c->lock);
	return CUDA_SUCCESS;
}
