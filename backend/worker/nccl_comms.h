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

/* The worker's settings: nccl_library (dlopened at the first NCCL call) and nccl_timeout. */
void rm_nccl_configure(const char *library, int timeout_s);
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

/* The calling thread's group (ncclGroupStart nests): the depth, and the communicators its
 * calls named, settled at the outermost ncclGroupEnd. */
int rm_nccl_group_depth(int delta);
void rm_nccl_group_note(struct rm_nccl_comm *c);
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
