/* The test NCCL's state (testnccl.c): communicators, cliques, their collectives' slots and
 * mailboxes; the collectives themselves are testnccl_ops.c's. */
#ifndef TESTNCCL_H
#define TESTNCCL_H

#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "nccl_abi.h"

#define TESTNCCL_VERSION 22809            /* what ncclGetVersion answers */
#define TESTNCCL_ID_MAGIC 0x4c43434e54534554ull /* "TESTNCCL" */
#define TESTNCCL_MAX_RANKS 16
#define TESTNCCL_SLOTS 64                 /* collectives of a clique in flight at once */

struct clique;

struct ncclComm {
	struct clique *clique;
	int rank, nranks, dev;
	int blocking;                     /* config.blocking */
	int splitting;                    /* its split waits for the clique's other ranks */
	int in_streams;                   /* its calls queued in stream order, not yet done */
	int left;                         /* destroyed or aborted: the last of those frees it */
	ncclResult_t async_error;         /* the first error of a call in stream order */
	uint64_t seq;                     /* its collectives so far */
};

/* A rank's part of a split under way (ncclCommSplit). */
struct split_part {
	int arrived, color, key, blocking;
	ncclComm_t *out;                  /* where its new communicator goes, once every rank came */
};

/* One call: a collective, a send or a receive. */
struct testnccl_op {
	int what;
	const void *sendbuff;
	void *recvbuff;
	size_t count;
	int datatype, redop, root;
	struct ncclComm *comm;
	CUstream stream;
};

/* A collective's meeting: each rank's call, until the last to arrive does it. */
struct slot {
	uint64_t seq;                     /* which collective; valid while used */
	int used, arrived, left, done;
	ncclResult_t result;
	struct testnccl_op *args;         /* [nranks] */
};

struct message {                          /* a buffered send */
	int from, to;
	size_t len;
	struct message *next;
	unsigned char data[];
};

struct clique {
	ncclUniqueId id;
	int nranks, joined, refs, broken;
	struct ncclComm *ranks[TESTNCCL_MAX_RANKS];
	struct slot slots[TESTNCCL_SLOTS];
	struct message *mail;
	struct split_part split[TESTNCCL_MAX_RANKS];
	int split_arrived;
	uint64_t splits;                  /* splits done, which name their cliques */
	struct clique *next;
};

/* testnccl.c */
pthread_mutex_t *testnccl_lock(void);
int testnccl_wait(const struct timespec *end); /* under the lock: 0, or ETIMEDOUT */
void testnccl_wake(void);
void testnccl_deadline(struct timespec *ts);
int testnccl_sync(CUstream st);                /* 0, or -1 when the stream's work failed */
int testnccl_host_fn(CUstream st, CUhostFn fn, void *arg); /* cuLaunchHostFunc: 0, or -1 */
void testnccl_clique_unref(struct clique *c);  /* under the lock */

/* testnccl_ops.c */
ncclResult_t testnccl_submit(const struct testnccl_op *o);
ncclResult_t testnccl_group_start(void);
ncclResult_t testnccl_group_end(void);

#endif
