/* The GPU host's NCCL in a worker (docs/architecture.md, "NCCL"): the library named by
 * nccl_library, loaded at the first NCCL call; the communicators of the worker's clients,
 * each a record the client holds as a handle (RM_H_NCCL_COMM); and the bounded waits that
 * keep a blocking NCCL call from holding a client's thread forever.
 *
 * Every communicator is made nonblocking (config.blocking = 0) whatever the client asked:
 * an init, a group's end or a collective that must wait for peers returns ncclInProgress.
 * For a client that asked for a blocking communicator the worker polls
 * ncclCommGetAsyncError until it settles or nccl_timeout passes, when it aborts the
 * communicator and answers ncclSystemError: a client whose peer never comes gets an error
 * within nccl_timeout, and its thread is free again. A client that asked for a nonblocking
 * one gets ncclInProgress as NCCL gives it, and polls itself.
 *
 * Blocking twins (nccl_twins): a nonblocking group's end starts a thread of NCCL's for its
 * launch, which costs more than a small all-reduce. So at its first collective that NCCL
 * runs over connections made at init (rm_nccl_on_twin, nccl_abi.h: all-reduce, broadcast,
 * reduce, all-gather, reduce-scatter) a communicator is split, with every rank, into a
 * blocking twin of the same ranks; that split is the nonblocking parent's, so its wait is
 * bounded as above. The worker runs NCCL with NCCL_RUNTIME_CONNECT=0, so a communicator's
 * collective connections are made at its init: a collective on the twin then never waits
 * on the host for a peer, only enqueues its kernels, and runs on the caller's thread.
 * Those collectives outside a group, and groups of them only, run on the twins; sends,
 * receives, all-to-all, gather and scatter (connected at their first use), and groups with
 * them or with inits run on the parents as before (NCCL allows no group of blocking and
 * nonblocking communicators). A twin is aborted, never destroyed
 * (a blocking destroy could wait for a departed peer), once its last collective is done or
 * RM_NCCL_GRACE_S passed.
 *
 * Communicators made from one unique id (or split from one) are a clique. When a client
 * goes without destroying its communicator, the worker aborts it; every other communicator
 * of its clique in this worker can complete no new collective, so their calls answer
 * ncclRemoteError from then on, and one whose last collective has not finished within
 * RM_NCCL_GRACE_S (its kernels may wait on the GPU for the departed rank, which no longer
 * comes) is aborted. */
#ifndef REMORA_WORKER_NCCL_H
#define REMORA_WORKER_NCCL_H

#include <cuda.h>
#include <pthread.h>
#include <stdint.h>

#include "nccl_abi.h"
#include "session.h"

#define RM_NCCL_GRACE_S 10 /* a departed peer's clique: how long its last collective may take */
#define RM_NCCL_GROUP_OPS 65536 /* calls of one group, held until its end */

enum { RM_NCCL_TWIN_NONE, RM_NCCL_TWIN_ASKED, RM_NCCL_TWIN_MADE, RM_NCCL_TWIN_FAILED };

/* The host NCCL's entry points (NULL where the library lacks one). */
struct rm_nccl_lib {
	ncclResult_t (*GetVersion)(int *);
	ncclResult_t (*GetUniqueId)(ncclUniqueId *);
	ncclResult_t (*CommInitRankConfig)(ncclComm_t *, int, ncclUniqueId, int, rm_nccl_config *);
	ncclResult_t (*CommSplit)(ncclComm_t, int, int, ncclComm_t *, rm_nccl_config *);
	ncclResult_t (*CommFinalize)(ncclComm_t);
	ncclResult_t (*CommDestroy)(ncclComm_t);
	ncclResult_t (*CommAbort)(ncclComm_t);
	ncclResult_t (*CommGetAsyncError)(ncclComm_t, ncclResult_t *);
	ncclResult_t (*CommCount)(ncclComm_t, int *);
	ncclResult_t (*CommCuDevice)(ncclComm_t, int *);
	ncclResult_t (*CommUserRank)(ncclComm_t, int *);
	const char *(*GetLastError)(ncclComm_t);
	ncclResult_t (*AllReduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, void *);
	ncclResult_t (*Broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, void *);
	ncclResult_t (*Reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t, void *);
	ncclResult_t (*AllGather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, void *);
	ncclResult_t (*ReduceScatter)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, void *);
	ncclResult_t (*Send)(const void *, size_t, ncclDataType_t, int, ncclComm_t, void *);
	ncclResult_t (*Recv)(void *, size_t, ncclDataType_t, int, ncclComm_t, void *);
	ncclResult_t (*AlltoAll)(const void *, void *, size_t, ncclDataType_t, ncclComm_t, void *);
	ncclResult_t (*Gather)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, void *);
	ncclResult_t (*Scatter)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t, void *);
	ncclResult_t (*GroupStart)(void);
	ncclResult_t (*GroupEnd)(void);
	ncclResult_t (*RedOpCreatePreMulSum)(ncclRedOp_t *, void *, ncclDataType_t, int, ncclComm_t);
	ncclResult_t (*RedOpDestroy)(ncclRedOp_t, ncclComm_t);
};

/* A communicator of a client. lock is held across each call into NCCL with comm, so that
 * a clique's abort (another client's thread) never frees it under a call. */
struct rm_nccl_comm {
	pthread_mutex_t lock;
	ncclComm_t comm;           /* NULL once aborted or destroyed */
	ncclComm_t twin;           /* its blocking twin for collectives; NULL: none (yet) */
	ncclComm_t twin_made;      /* where NCCL's split writes the twin */
	int twin_state;            /* RM_NCCL_TWIN_*: whether a twin was tried */
	uint8_t clique[16];        /* the communicators made together share it */
	int nranks, rank, dev;     /* dev: the host's GPU */
	int aborted;               /* by the departure of a peer, or a wait past nccl_timeout */
	int departed;              /* a peer went: calls answer ncclRemoteError */
	int nonblocking;           /* the client asked for config.blocking = 0: no call waits for it */
	ncclResult_t async_error;  /* the first error of a collective the client sent async */
	int finalized;             /* by the client's ncclCommFinalize: its destroy needs no other */
	CUevent done;              /* recorded after each of its collectives; NULL: none */
	CUstream last_stream;      /* its last collective's, for done at a group's end */
	uint64_t session;          /* the owner's session id */
	int refs;                  /* the owner's, and a departing peer's while it waits (atomic) */
	struct rm_nccl_comm *next; /* the worker's list */
};

/* The worker's settings: nccl_library (dlopened at the first NCCL call), nccl_timeout and
 * nccl_twins, at the worker's start (before its threads). Twins are made only where NCCL
 * makes its connections at init: the worker sets NCCL_RUNTIME_CONNECT=0 unless its
 * environment sets it otherwise (then no twins). */
void rm_nccl_configure(const char *library, int timeout_s, int twins);
/* Whether communicators get blocking twins (after rm_nccl()). */
int rm_nccl_twins(void);
/* The host's NCCL, loaded once (nccl_library); NULL, after one line in the log, when it
 * cannot be. */
const struct rm_nccl_lib *rm_nccl(void);

/* A record for comm (of nranks, this one rank; on host GPU dev; nonblocking as the client
 * asked), made by session s in clique, listed and owned by s: 0 or -ENOMEM (comm aborted
 * then). In the context of dev. */
int rm_nccl_adopt(struct rm_channel *s, ncclComm_t comm, const uint8_t clique[16], int dev, int nranks, int rank,
		  int nonblocking, struct rm_nccl_comm **out);
/* The client's communicator v, checked as its own: NULL (with *why) otherwise. */
struct rm_nccl_comm *rm_nccl_find(struct rm_channel *s, uint64_t v, int32_t *why);

/* Polls c's async error until it is not ncclInProgress or nccl_timeout passes (then aborts
 * c, logging why, and answers ncclSystemError). Called with c->lock held. */
ncclResult_t rm_nccl_settle(struct rm_channel *s, struct rm_nccl_comm *c, ncclResult_t r, const char *what);
/* Polls a communicator not yet recorded likewise (an init, r what its call returned): one
 * that does not end in ncclSuccess is aborted. */
ncclResult_t rm_nccl_settle_raw(struct rm_channel *s, ncclComm_t comm, ncclResult_t r, const char *what);

/* Makes the blocking twins of the n communicators in cs that have none and have not failed
 * one, in one group (their splits bounded as any wait of a parent). A communicator whose
 * twin could not be made is marked RM_NCCL_TWIN_FAILED and keeps running on its parent.
 * Called with no record's lock held. */
void rm_nccl_make_twins(struct rm_channel *s, struct rm_nccl_comm **cs, int n);

/* NCCL's defaults for every field of cfg, nonblocking. */
void rm_nccl_config_defaults(rm_nccl_config *cfg);

/* The calling thread's group (ncclGroupStart nests): the depth, and the communicators its
 * calls named, settled at the outermost ncclGroupEnd. */
int rm_nccl_group_depth(int delta);
void rm_nccl_group_note(struct rm_nccl_comm *c);
/* A call of the group, held until its end (where the communicators decide between twins and
 * parents): what, its buffers, count, types, root and stream as checked, its communicator
 * as the client's handle. 0, or -1 past RM_NCCL_GROUP_OPS or out of memory. */
struct rm_nccl_op {
	uint64_t comm, sendbuff, recvbuff, count;
	CUstream stream;
	int what, datatype, op, root;
};
int rm_nccl_group_hold(const struct rm_nccl_op *op);
/* The held calls, taken (the caller frees them): their number. */
size_t rm_nccl_group_take(struct rm_nccl_op **ops);
/* An init or split was made in the calling thread's group: it runs on the parents. */
void rm_nccl_group_mark_init(void);
int rm_nccl_group_had_init(void);
/* Records r, an error of a call the client sent async inside the calling thread's group
 * (the group's end answers the first); and takes it at the group's end. */
void rm_nccl_group_fail(ncclResult_t r);
ncclResult_t rm_nccl_group_error(void);
/* Settles every blocking communicator noted since the group started: the first error, or
 * ncclInProgress where only nonblocking ones were left in progress (in, GroupEnd's result). */
ncclResult_t rm_nccl_group_settle(struct rm_channel *s, ncclResult_t in);

/* Ends c (the client's destroy, finalize first; or its departure, abort) and frees the
 * record. */
void rm_nccl_end(struct rm_channel *s, struct rm_nccl_comm *c, int abort);
/* The client is going: aborts each of its communicators; every other of their cliques in
 * this worker is marked departed, and aborted if its last collective has not finished
 * within RM_NCCL_GRACE_S, waited for without the worker's list locked (release.c, before
 * the client's streams are drained). */
void rm_nccl_session_gone(struct rm_channel *s);

#endif
