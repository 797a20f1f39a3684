/* The part of NCCL's ABI that Remora forwards (the client's libnccl.so.2, frontend/nccl/) and
 * calls in the GPU host's NCCL (backend/worker/nccl.c). Written from NCCL's public API
 * reference: not every build machine has nccl.h. Values NCCL keeps stable; the config is
 * read and written no further than the size it says it has. */
#ifndef REMORA_NCCL_ABI_H
#define REMORA_NCCL_ABI_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

typedef enum {
	ncclSuccess = 0,
	ncclUnhandledCudaError = 1,
	ncclSystemError = 2,
	ncclInternalError = 3,
	ncclInvalidArgument = 4,
	ncclInvalidUsage = 5,
	ncclRemoteError = 6,
	ncclInProgress = 7,
	ncclNumResults = 8
} ncclResult_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
	char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

typedef struct ncclComm *ncclComm_t;
typedef int ncclRedOp_t;    /* an enum of int size: built-ins 0..4, then made ones */
typedef int ncclDataType_t; /* an enum of int size */

enum { rm_ncclSum = 0, rm_ncclProd = 1, rm_ncclMax = 2, rm_ncclMin = 3, rm_ncclAvg = 4, rm_ncclNumOps = 5 };
enum {
	rm_ncclInt8 = 0, rm_ncclUint8 = 1, rm_ncclInt32 = 2, rm_ncclUint32 = 3, rm_ncclInt64 = 4,
	rm_ncclUint64 = 5, rm_ncclFloat16 = 6, rm_ncclFloat32 = 7, rm_ncclFloat64 = 8, rm_ncclBfloat16 = 9,
	rm_ncclFloat8e4m3 = 10, rm_ncclFloat8e5m2 = 11, rm_ncclNumTypes = 12
};

/* Bytes of one element of datatype t; 0 for a type NCCL does not define. */
static inline size_t rm_nccl_type_size(int t)
{
	static const unsigned char sizes[rm_ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
	return t >= 0 && t < rm_ncclNumTypes ? sizes[t] : 0;
}

#define RM_NCCL_CONFIG_MAGIC 0xcafebeefu
#define RM_NCCL_CONFIG_UNDEF INT_MIN

/* ncclConfig_t as of NCCL 2.28; older programs pass a shorter one (its size says). */
typedef struct {
	size_t size;
	unsigned int magic;
	unsigned int version;
	int blocking;
	int cgaClusterSize;
	int minCTAs;
	int maxCTAs;
	const char *netName;
	int splitShare;
	int trafficClass;
	const char *commName;
	int collnetEnable;
	int CTAPolicy;
	int shrinkShare;
	int nvlsCTAs;
	int nChannelsPerNetPeer;
	int nvlinkCentricSched;
} rm_nccl_config;

/* Whether a config of size bytes holds field f. */
#define RM_NCCL_CONFIG_HAS(size, f) ((size) >= offsetof(rm_nccl_config, f) + sizeof(((rm_nccl_config *)0)->f))

/* The collectives of rmNcclCollective (remora.NcclCall.what). */
enum rm_nccl_coll {
	RM_NCCL_ALL_REDUCE = 1,
	RM_NCCL_BROADCAST,
	RM_NCCL_REDUCE,
	RM_NCCL_ALL_GATHER,
	RM_NCCL_REDUCE_SCATTER,
	RM_NCCL_SEND,
	RM_NCCL_RECV,
	RM_NCCL_ALL_TO_ALL,
	RM_NCCL_GATHER,
	RM_NCCL_SCATTER,
};

/* Whether NCCL runs collective what over the connections it makes at a communicator's init
 * (NCCL_RUNTIME_CONNECT=0): the reductions, broadcasts and gathers of every rank; not sends
 * and receives, nor all-to-all, gather and scatter, which NCCL makes of them and connects
 * at their first use. These run on a worker's blocking twins (backend/worker/nccl_comms.h). */
static inline int rm_nccl_on_twin(int what)
{
	return what == RM_NCCL_ALL_REDUCE || what == RM_NCCL_BROADCAST || what == RM_NCCL_REDUCE ||
	       what == RM_NCCL_ALL_GATHER || what == RM_NCCL_REDUCE_SCATTER;
}

/* The queries of rmNcclCommQuery. */
enum rm_nccl_query {
	RM_NCCL_COUNT = 1,
	RM_NCCL_CU_DEVICE,
	RM_NCCL_USER_RANK,
	RM_NCCL_ASYNC_ERROR,
};

#define RM_NCCL_MAX_DEVICES 64 /* ncclCommInitAll's devices, at most */
#define RM_NCCL_MAX_TEXT 1024  /* an error text, at most */
#define RM_NCCL_MAX_NAME 255   /* a config's netName or commName, at most (bytes) */

#endif
