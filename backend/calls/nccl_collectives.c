/* NCCL's collectives, sends and receives, groups and reductions in the worker
 * (proto/api.spec, "NCCL"; nccl_comms.h): the buffers a collective reads and writes must lie
 * in the client's memory for its count, datatype and ranks; its stream must be the client's.
 * A collective runs on its communicator's blocking twin where it can (nccl_comms.h). */
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

ncclResult_t rm_nccl_issue(const struct rm_nccl_lib *L, const struct rm_nccl_op *o, ncclComm_t comm)
{
	const void *sb = (const void *)(uintptr_t)o->sendbuff;
	void *rb = (void *)(uintptr_t)o->recvbuff;
	size_t k = o->count;
	int t = o->datatype, op = o->op, root = o->root;
	CUstream st = o->stream;
	switch (o->what) {
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

/* Records r, the error of a call the client sent async, as c's async error (the first). */
static void fail_async(struct rm_nccl_comm *c, ncclResult_t r)
{
	if (r != ncclSuccess && r != ncclInProgress)
		__atomic_compare_exchange_n(&c->async_error, &(ncclResult_t){ncclSuccess}, r, 0, __ATOMIC_ACQ_REL,
					    __ATOMIC_ACQUIRE);
}

/* A collective outside a group: on c's twin where it has one (made at its first collective
 * that rm_nccl_on_twin names), else on c, settled unless the client asked for a nonblocking
 * one. *fast: whether it ran on the twin. */
static ncclResult_t run_alone(struct rm_channel *s, const struct rm_nccl_lib *L, struct rm_nccl_comm *c,
			      const struct rm_nccl_op *o, int *fast)
{
	int twinnable = rm_nccl_on_twin(o->what);
	if (twinnable && rm_nccl_twins() && c->twin_state == RM_NCCL_TWIN_NONE)
		rm_nccl_make_twins(s, &c, 1);
	ncclResult_t r = ncclRemoteError;
	pthread_mutex_lock(&c->lock);
	if (c->comm && !__atomic_load_n(&c->departed, __ATOMIC_ACQUIRE)) {
		*fast = twinnable && c->twin;
		r = rm_nccl_issue(L, o, *fast ? c->twin : c->comm);
		if (!*fast && !c->nonblocking)
			r = rm_nccl_settle(s, c, r, "a collective");
		c->last_stream = o->stream;
		if (r == ncclSuccess && c->done)
			rm_drv_cuEventRecord(c->done, o->stream);
	}
	pthread_mutex_unlock(&c->lock);
	return r;
}

/* Sent async by the client inside a group, and outside one on a communicator whose
 * collectives ran on its twin before (frontend/nccl/nccl.c): an error goes to the group, if
 * one is open, else to the communicator's async error; a stream not the client's is such an
 * error too, not a CUresult that a later driver call would report. Inside a group the call
 * is checked and held until the group's end. The reply's value says whether it ran on the
 * twin: the client may send the next ones async. */
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
		struct rm_nccl_op o = {.comm = req->comm, .sendbuff = req->sendbuff, .recvbuff = req->recvbuff,
				       .count = req->count, .stream = st, .what = req->what, .datatype = req->datatype,
				       .op = req->op, .root = req->root};
		int fast = 0;
		if (in_group)
			rep->result = rm_nccl_group_hold(&o) ? ncclSystemError : ncclSuccess;
		else
			rep->result = run_alone(s, L, c, &o, &fast);
		rep->value = fast;
	}
	if (async && in_group)
		rm_nccl_group_fail(rep->result);
	else if (async && c)
		fail_async(c, rep->result);
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclGroupStart(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				  Remora__NcclReply *rep)
{
	(void)s, (void)rq, (void)req;
	if (rm_nccl_need(rep))
		rm_nccl_group_depth(1); /* NCCL's own group is opened at the end, around the held calls */
	else
		rm_nccl_group_fail(rep->result); /* async: said at the group's end */
	return CUDA_SUCCESS;
}

/* The distinct communicators of cs[0..n) (NULLs skipped) into out, in address order (the
 * order their locks are taken in): how many. */
static size_t distinct(struct rm_nccl_comm **cs, size_t n, struct rm_nccl_comm **out)
{
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (!cs[i])
			continue;
		size_t j = 0;
		while (j < k && out[j] < cs[i])
			j++;
		if (j < k && out[j] == cs[i])
			continue;
		memmove(out + j + 1, out + j, (k - j) * sizeof(*out));
		out[j] = cs[i];
		k++;
	}
	return k;
}

static ncclResult_t first_error(ncclResult_t a, ncclResult_t b)
{
	return a == ncclSuccess || a == ncclInProgress ? (b == ncclSuccess ? a : b) : a;
}

/* A group of collectives only, every communicator with a twin: on the twins, in one blocking
 * group on this thread, every lock held (no call of it waits for a peer). */
static ncclResult_t run_on_twins(const struct rm_nccl_lib *L, const struct rm_nccl_op *ops, struct rm_nccl_comm **cs,
				 size_t n, struct rm_nccl_comm **u, size_t k)
{
	ncclResult_t r = ncclSuccess;
	for (size_t j = 0; j < k; j++)
		pthread_mutex_lock(&u[j]->lock);
	L->GroupStart();
	for (size_t i = 0; i < n; i++) {
		struct rm_nccl_comm *c = cs[i];
		if (!c)
			continue;
		ncclResult_t e = !c->twin || __atomic_load_n(&c->departed, __ATOMIC_ACQUIRE) ? ncclRemoteError
											  : rm_nccl_issue(L, &ops[i], c->twin);
		c->last_stream = ops[i].stream;
		r = first_error(r, e);
	}
	r = first_error(r, L->GroupEnd());
	for (size_t j = 0; j < k; j++) {
		if (r == ncclSuccess && u[j]->done && u[j]->last_stream)
			rm_drv_cuEventRecord(u[j]->done, u[j]->last_stream);
		pthread_mutex_unlock(&u[j]->lock);
	}
	return r;
}

/* Any other group: on the communicators themselves, each settled as a call alone would be. */
static ncclResult_t run_on_parents(struct rm_channel *s, const struct rm_nccl_lib *L, const struct rm_nccl_op *ops,
				   struct rm_nccl_comm **cs, size_t n)
{
	ncclResult_t r = ncclSuccess;
	L->GroupStart();
	for (size_t i = 0; i < n; i++) {
		struct rm_nccl_comm *c = cs[i];
		if (!c)
			continue;
		pthread_mutex_lock(&c->lock);
		ncclResult_t e = ncclRemoteError;
		if (c->comm && !__atomic_load_n(&c->departed, __ATOMIC_ACQUIRE)) {
			e = rm_nccl_issue(L, &ops[i], c->comm);
			c->last_stream = ops[i].stream;
			rm_nccl_group_note(c);
		}
		pthread_mutex_unlock(&c->lock);
		r = first_error(r, e);
	}
	ncclResult_t end = L->GroupEnd();
	if (end == ncclSuccess || end == ncclInProgress)
		end = rm_nccl_group_settle(s, end);
	return first_error(r, end);
}

/* The outermost end runs the held calls: the inits and splits of the group settled first,
 * then the twins its collectives need made, then the calls on the twins where every one is a
 * collective of a communicator with a twin, else on the communicators. Sent async by the
 * client only for groups of such collectives (their errors go to their communicators'
 * async errors). The reply's value says whether it ran on the twins. */
CUresult rm_body_rmNcclGroupEnd(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				Remora__NcclReply *rep)
{
	(void)req;
	const struct rm_nccl_lib *L = rm_nccl_need(rep);
	if (!L)
		return CUDA_SUCCESS;
	if (rm_nccl_group_depth(0) == 0) {
		rep->result = ncclInvalidUsage;
		return CUDA_SUCCESS;
	}
	if (rm_nccl_group_depth(-1) > 0)
		return CUDA_SUCCESS; /* an inner end: the outermost runs the calls */
	ncclResult_t r = rm_nccl_group_error(); /* a call of the group the client sent async */
	int had_init = rm_nccl_group_had_init();
	if (had_init)
		r = first_error(r, rm_nccl_group_settle(s, ncclInProgress));
	struct rm_nccl_op *ops;
	size_t n = rm_nccl_group_take(&ops);
	struct rm_nccl_comm **cs = n ? calloc(2 * n, sizeof(*cs)) : NULL, **u = cs ? cs + n : NULL;
	size_t k = 0;
	int on_twins = 0;
	if (n && !cs) {
		r = first_error(r, ncclSystemError);
	} else if (n) {
		int all_twinnable = 1, untwinned = 0;
		for (size_t i = 0; i < n; i++) {
			int32_t why = ncclSuccess;
			cs[i] = rm_nccl_find(s, ops[i].comm, &why); /* destroyed within the group: that call fails */
			r = first_error(r, why);
			all_twinnable &= rm_nccl_on_twin(ops[i].what);
			untwinned |= cs[i] && rm_nccl_on_twin(ops[i].what) && cs[i]->twin_state == RM_NCCL_TWIN_NONE;
		}
		if (rm_nccl_twins() && untwinned) { /* twins for the communicators of its collectives, as every rank makes them */
			struct rm_nccl_comm **t = calloc(n, sizeof(*t));
			size_t nt = 0;
			for (size_t i = 0; t && i < n; i++)
				t[i] = rm_nccl_on_twin(ops[i].what) ? cs[i] : NULL;
			if (t && (nt = distinct(t, n, u)))
				rm_nccl_make_twins(s, u, (int)nt);
			free(t);
		}
		k = distinct(cs, n, u);
		on_twins = all_twinnable && rm_nccl_twins() && !had_init;
		for (size_t j = 0; j < k && on_twins; j++)
			on_twins = u[j]->twin_state == RM_NCCL_TWIN_MADE;
		r = first_error(r, on_twins ? run_on_twins(L, ops, cs, n, u, k) : run_on_parents(s, L, ops, cs, n));
	}
	if ((rq->frame.flags & RM_F_ASYNC) && r != ncclSuccess)
		for (size_t j = 0; j < k; j++)
			fail_async(u[j], r);
	rep->result = r;
	rep->value = on_twins;
	free(cs);
	free(ops);
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
