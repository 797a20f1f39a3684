/* NCCL's calls in the worker (proto/api.spec, "NCCL"; backend/worker/nccl_comms.h): the
 * communicators' lives, queries and groups (the collectives are nccl_collectives.c's). Each
 * checks what the client names (communicators its own, devices it sees) and calls the
 * host's NCCL, its waits bounded. The frame's CUresult says whether the call was made; the
 * reply's result is NCCL's. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "remora.pb-c.h"
#include "daemon_handlers.h"
#include "dispatch.h"
#include "driver_table.h"
#include "handles.h"
#include "nccl_calls.h"
#include "nccl_comms.h"

#define RM_NCCL_MAX_RANKS (1 << 20)

const struct rm_nccl_lib *rm_nccl_need(Remora__NcclReply *rep)
{
	const struct rm_nccl_lib *L = rm_nccl();
	rep->result = L ? ncclSuccess : ncclSystemError;
	return L;
}

struct rm_nccl_comm *rm_nccl_call_comm(struct rm_channel *s, const Remora__NcclCall *req, Remora__NcclReply *rep,
				       const struct rm_nccl_lib **L)
{
	*L = rm_nccl_need(rep);
	return *L ? rm_nccl_find(s, req->comm, &rep->result) : NULL;
}

/* 16 bytes naming the clique of unique id id (FNV-1a over it, twice). */
static void clique_of(const uint8_t *id, size_t len, uint8_t out[16])
{
	uint64_t h[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
	for (size_t i = 0; i < len; i++) {
		h[0] = (h[0] ^ id[i]) * 0x100000001b3ull;
		h[1] = (h[1] ^ id[len - 1 - i]) * 0x100000001b3ull;
	}
	memcpy(out, h, 16);
}

/* The config NCCL gets: the client's fields, nonblocking always (nccl.h). */
static ncclResult_t config_of(const Remora__NcclCall *req, rm_nccl_config *cfg)
{
	rm_nccl_config_defaults(cfg);
	if (!req->has_config)
		return ncclSuccess;
	if ((req->net_name && strlen(req->net_name) > RM_NCCL_MAX_NAME) ||
	    (req->comm_name && strlen(req->comm_name) > RM_NCCL_MAX_NAME))
		return ncclInvalidArgument;
	cfg->cgaClusterSize = req->cga_cluster_size;
	cfg->minCTAs = req->min_ctas;
	cfg->maxCTAs = req->max_ctas;
	cfg->splitShare = req->split_share;
	cfg->trafficClass = req->traffic_class;
	cfg->collnetEnable = req->collnet_enable;
	cfg->CTAPolicy = req->cta_policy;
	cfg->nvlsCTAs = req->nvls_ctas;
	cfg->netName = req->net_name && *req->net_name ? req->net_name : NULL;
	cfg->commName = req->comm_name && *req->comm_name ? req->comm_name : NULL;
	return ncclSuccess;
}

/* A split communicator's size and rank, once NCCL knows them (its split done). Under c->lock. */
void rm_nccl_learn_ranks(const struct rm_nccl_lib *L, struct rm_nccl_comm *c)
{
	int n = 0, r = -1;
	if (c->nranks > 0 || !c->comm || !L->CommCount || !L->CommUserRank)
		return;
	if (L->CommCount(c->comm, &n) == ncclSuccess && n > 0 && L->CommUserRank(c->comm, &r) == ncclSuccess)
		c->nranks = n, c->rank = r;
}

/* Whether the client asked for a nonblocking communicator (nccl_comms.h). */
static int wants_nonblocking(const Remora__NcclCall *req)
{
	return req->has_config && req->blocking == 0;
}

static void give_comm(struct rm_request *rq, Remora__NcclReply *rep, struct rm_nccl_comm *c)
{
	uint64_t *v = malloc(sizeof(*v));
	if (!v) {
		rep->result = ncclSystemError;
		return;
	}
	*v = (uint64_t)(uintptr_t)c;
	rep->comms = v;
	rep->n_comms = 1;
	rq->reply_mem = v;
}

CUresult rm_body_rmNcclGetVersion(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				  Remora__NcclReply *rep)
{
	(void)s, (void)rq, (void)req;
	const struct rm_nccl_lib *L = rm_nccl_need(rep);
	int v = 0;
	if (L && (rep->result = L->GetVersion(&v)) == ncclSuccess)
		rep->value = v;
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclGetUniqueId(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				   Remora__NcclReply *rep)
{
	(void)s, (void)req;
	const struct rm_nccl_lib *L = rm_nccl_need(rep);
	ncclUniqueId *id = L ? calloc(1, sizeof(*id)) : NULL;
	if (L && !id)
		rep->result = ncclSystemError;
	if (id && (rep->result = L->GetUniqueId(id)) == ncclSuccess) {
		rep->unique_id.data = (uint8_t *)id->internal;
		rep->unique_id.len = sizeof(id->internal);
	}
	rq->reply_mem = id;
	return CUDA_SUCCESS;
}

/* The host GPU of the client's current context (its ordinal 0 when it has none, as
 * cudart's device 0), that context made current. */
static CUresult current_device(struct rm_channel *s, int *dev)
{
	if (s->cur) {
		*dev = s->cur->dev;
		return CUDA_SUCCESS;
	}
	CUdevice d;
	CUcontext ctx;
	CUresult r = rm_session_device(s, 0, &d);
	if (r == CUDA_SUCCESS)
		r = rm_session_add_ctx(s, d, &ctx);
	if (r == CUDA_SUCCESS && (r = rm_drv_cuCtxSetCurrent(ctx)) == CUDA_SUCCESS)
		s->thread_ctx = ctx;
	*dev = d;
	return r;
}

CUresult rm_body_rmNcclCommInitRank(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				    Remora__NcclReply *rep)
{
	const struct rm_nccl_lib *L = rm_nccl_need(rep);
	if (!L)
		return CUDA_SUCCESS;
	if (req->unique_id.len != NCCL_UNIQUE_ID_BYTES || req->nranks < 1 || req->nranks > RM_NCCL_MAX_RANKS ||
	    req->rank < 0 || req->rank >= req->nranks) {
		rep->result = ncclInvalidArgument;
		return CUDA_SUCCESS;
	}
	rm_nccl_config cfg;
	int dev = 0;
	if ((rep->result = config_of(req, &cfg)) != ncclSuccess)
		return CUDA_SUCCESS;
	CUresult cr = current_device(s, &dev);
	if (cr != CUDA_SUCCESS)
		return cr;
	ncclUniqueId id;
	memcpy(id.internal, req->unique_id.data, sizeof(id.internal));
	ncclComm_t comm = NULL;
	ncclResult_t r = L->CommInitRankConfig(&comm, req->nranks, id, req->rank, &cfg);
	int in_group = rm_nccl_group_depth(0) > 0, nonblocking = wants_nonblocking(req);
	struct rm_nccl_comm *c = NULL;
	uint8_t clique[16];
	clique_of(req->unique_id.data, req->unique_id.len, clique);
	int pending = comm && (in_group || nonblocking) && r == ncclInProgress; /* the group's or the client's to wait for */
	if (comm && !pending)
		r = rm_nccl_settle_raw(s, comm, r, "ncclCommInitRank"); /* aborted unless it succeeded */
	else if (!comm && (r == ncclSuccess || r == ncclInProgress))
		r = ncclInternalError;
	if ((r == ncclSuccess || pending) &&
	    rm_nccl_adopt(s, comm, clique, dev, req->nranks, req->rank, nonblocking, &c))
		r = ncclSystemError;
	else if (c && in_group)
		rm_nccl_group_note(c);
	if (in_group)
		rm_nccl_group_mark_init();
	if (c && pending && !nonblocking)
		r = ncclSuccess; /* in a group: settled at its end */
	rep->result = r;
	if (c)
		give_comm(rq, rep, c);
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclCommInitAll(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				   Remora__NcclReply *rep)
{
	const struct rm_nccl_lib *L = rm_nccl_need(rep);
	if (!L)
		return CUDA_SUCCESS;
	size_t n = req->n_devlist;
	if (n < 1 || n > RM_NCCL_MAX_DEVICES) {
		rep->result = ncclInvalidArgument;
		return CUDA_SUCCESS;
	}
	CUdevice devs[RM_NCCL_MAX_DEVICES];
	CUcontext ctxs[RM_NCCL_MAX_DEVICES];
	ncclComm_t comms[RM_NCCL_MAX_DEVICES] = {0};
	for (size_t i = 0; i < n; i++) {
		CUresult cr = rm_session_device(s, req->devlist[i], &devs[i]);
		if (cr == CUDA_SUCCESS)
			cr = rm_session_add_ctx(s, devs[i], &ctxs[i]);
		if (cr != CUDA_SUCCESS) {
			rep->result = ncclInvalidArgument;
			return CUDA_SUCCESS;
		}
	}
	rm_nccl_config cfg;
	ncclUniqueId id;
	uint8_t clique[16];
	ncclResult_t r = config_of(req, &cfg);
	if (r == ncclSuccess)
		r = L->GetUniqueId(&id);
	if (r == ncclSuccess) {
		clique_of((const uint8_t *)id.internal, sizeof(id.internal), clique);
		L->GroupStart();
		for (size_t i = 0; i < n && (r == ncclSuccess || r == ncclInProgress); i++)
			if (rm_drv_cuCtxSetCurrent(ctxs[i]) != CUDA_SUCCESS)
				r = ncclUnhandledCudaError;
			else
				r = L->CommInitRankConfig(&comms[i], (int)n, id, (int)i, &cfg);
		ncclResult_t e = L->GroupEnd();
		if (r == ncclSuccess || r == ncclInProgress)
			r = e;
	}
	/* Each settled (aborted unless it succeeded); on any failure, those that succeeded go too. */
	ncclResult_t init = r;
	for (size_t i = 0; i < n; i++)
		if (comms[i]) {
			ncclResult_t q = rm_nccl_settle_raw(s, comms[i], init == ncclSuccess ? ncclInProgress : init, "ncclCommInitAll");
			if (q != ncclSuccess)
				comms[i] = NULL;
			if (r == ncclSuccess || r == ncclInProgress)
				r = q;
		}
	if (r == ncclInProgress)
		r = ncclInternalError;
	uint64_t *handles = r == ncclSuccess ? calloc(n, sizeof(*handles)) : NULL;
	if (r == ncclSuccess && !handles)
		r = ncclSystemError;
	for (size_t i = 0; i < n; i++) {
		struct rm_nccl_comm *c;
		if (!comms[i])
			continue;
		if (r != ncclSuccess)
			L->CommAbort(comms[i]);
		else if (rm_drv_cuCtxSetCurrent(ctxs[i]) == CUDA_SUCCESS &&
			 !rm_nccl_adopt(s, comms[i], clique, devs[i], (int)n, (int)i, 0, &c))
			handles[i] = (uint64_t)(uintptr_t)c;
		else
			r = ncclSystemError; /* those adopted are the client's, released as its */
	}
	rm_drv_cuCtxSetCurrent(s->thread_ctx);
	rep->result = r;
	if (r == ncclSuccess) {
		rep->comms = handles;
		rep->n_comms = n;
		rq->reply_mem = handles;
	} else {
		free(handles);
	}
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclCommSplit(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				 Remora__NcclReply *rep)
{
	const struct rm_nccl_lib *L = rm_nccl_need(rep);
	struct rm_nccl_comm *p = L ? rm_nccl_find(s, req->comm, &rep->result) : NULL;
	if (!p)
		return CUDA_SUCCESS;
	rm_nccl_config cfg;
	if (!L->CommSplit) {
		rep->result = ncclInvalidUsage;
		return CUDA_SUCCESS;
	}
	if ((rep->result = config_of(req, &cfg)) != ncclSuccess)
		return CUDA_SUCCESS;
	ncclComm_t comm = NULL;
	pthread_mutex_lock(&p->lock);
	ncclResult_t r = p->departed || !p->comm ? ncclRemoteError : L->CommSplit(p->comm, req->color, req->key, &comm, &cfg);
	pthread_mutex_unlock(&p->lock);
	if (rm_nccl_group_depth(0) > 0)
		rm_nccl_group_mark_init();
	int nonblocking = wants_nonblocking(req), pending = comm && nonblocking && r == ncclInProgress;
	if (comm && !pending) {
		r = rm_nccl_settle_raw(s, comm, r, "ncclCommSplit");
		if (r != ncclSuccess)
			comm = NULL; /* aborted */
	} else if (!comm && r == ncclInProgress && !p->nonblocking) { /* no color: the parent's part of the split */
		pthread_mutex_lock(&p->lock);
		r = p->comm ? rm_nccl_settle(s, p, r, "ncclCommSplit") : ncclRemoteError;
		pthread_mutex_unlock(&p->lock);
	}
	struct rm_nccl_comm *c = NULL;
	if ((r == ncclSuccess || pending) && comm) {
		int nranks = 0, rank = -1; /* known once the split is done: asked again then (rmNcclCommQuery) */
		if (!pending && L->CommCount)
			L->CommCount(comm, &nranks);
		if (!pending && L->CommUserRank)
			L->CommUserRank(comm, &rank);
		if (rm_nccl_adopt(s, comm, p->clique, p->dev, nranks, rank, nonblocking, &c))
			r = ncclSystemError;
	}
	rep->result = r;
	if (c)
		give_comm(rq, rep, c);
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclCommFinalize(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				    Remora__NcclReply *rep)
{
	(void)rq;
	const struct rm_nccl_lib *L;
	struct rm_nccl_comm *c = rm_nccl_call_comm(s, req, rep, &L);
	if (!c)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&c->lock);
	if (!c->comm || __atomic_load_n(&c->departed, __ATOMIC_ACQUIRE)) /* a departed peer never finalizes */
		rep->result = c->aborted || c->departed ? ncclRemoteError : ncclSuccess;
	else if (L->CommFinalize)
		rep->result = c->nonblocking ? L->CommFinalize(c->comm)
					     : rm_nccl_settle(s, c, L->CommFinalize(c->comm), "ncclCommFinalize");
	if (rep->result == ncclSuccess || rep->result == ncclInProgress)
		c->finalized = 1;
	pthread_mutex_unlock(&c->lock);
	return CUDA_SUCCESS;
}

static void end_comm(struct rm_channel *s, const Remora__NcclCall *req, Remora__NcclReply *rep, int abort)
{
	const struct rm_nccl_lib *L;
	struct rm_nccl_comm *c = rm_nccl_call_comm(s, req, rep, &L);
	if (!c)
		return;
	rm_session_disown(s, RM_H_NCCL_COMM, c);
	rm_nccl_end(s, c, abort);
}

CUresult rm_body_rmNcclCommDestroy(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				   Remora__NcclReply *rep)
{
	(void)rq;
	end_comm(s, req, rep, 0);
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclCommAbort(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				 Remora__NcclReply *rep)
{
	(void)rq;
	end_comm(s, req, rep, 1);
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclCommQuery(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				 Remora__NcclReply *rep)
{
	(void)rq;
	const struct rm_nccl_lib *L;
	struct rm_nccl_comm *c = rm_nccl_call_comm(s, req, rep, &L);
	if (!c)
		return CUDA_SUCCESS;
	pthread_mutex_lock(&c->lock);
	rm_nccl_learn_ranks(L, c);
	pthread_mutex_unlock(&c->lock);
	switch (req->what) {
	case RM_NCCL_COUNT:
		rep->value = c->nranks;
		break;
	case RM_NCCL_USER_RANK:
		rep->value = c->rank;
		break;
	case RM_NCCL_CU_DEVICE: {
		CUdevice d = 0;
		if (rm_session_device_out(s, c->dev, &d) != CUDA_SUCCESS)
			rep->result = ncclInternalError;
		rep->value = d;
		break;
	}
	case RM_NCCL_ASYNC_ERROR: {
		ncclResult_t e = ncclRemoteError;
		pthread_mutex_lock(&c->lock);
		if (c->comm && !__atomic_load_n(&c->departed, __ATOMIC_ACQUIRE) && L->CommGetAsyncError(c->comm, &e) != ncclSuccess)
			e = ncclInternalError;
		ncclResult_t sent = __atomic_load_n(&c->async_error, __ATOMIC_ACQUIRE); /* an async collective's */
		if (sent != ncclSuccess && (e == ncclSuccess || e == ncclInProgress))
			e = sent;
		pthread_mutex_unlock(&c->lock);
		rep->value = e;
		break;
	}
	default:
		rep->result = ncclInvalidArgument;
	}
	return CUDA_SUCCESS;
}

CUresult rm_body_rmNcclGetLastError(struct rm_channel *s, struct rm_request *rq, const Remora__NcclCall *req,
				    Remora__NcclReply *rep)
{
	const struct rm_nccl_lib *L = rm_nccl_need(rep);
	struct rm_nccl_comm *c = L && req->comm ? rm_nccl_find(s, req->comm, &rep->result) : NULL;
	if (!L || (req->comm && !c) || !L->GetLastError)
		return CUDA_SUCCESS;
	char *text = calloc(1, RM_NCCL_MAX_TEXT);
	if (!text)
		return CUDA_SUCCESS;
	if (c)
		pthread_mutex_lock(&c->lock);
	const char *t = c && !c->comm ? "the communicator was aborted" : L->GetLastError(c ? c->comm : NULL);
	snprintf(text, RM_NCCL_MAX_TEXT, "%s", t ? t : "");
	if (c)
		pthread_mutex_unlock(&c->lock);
	rep->text = text;
	rq->reply_mem = text;
	return CUDA_SUCCESS;
}
