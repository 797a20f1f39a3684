/* The client's libnccl.so.2: NCCL's API with NCCL's ABI, forwarded to the worker's NCCL
 * through the client library's connection (nccl_bridge.h; docs/architecture.md, "NCCL").
 * Every name of nccl.h is exported, each also as its pnccl twin; a function not forwarded
 * returns ncclInvalidUsage and logs its name once. Arguments the worker could not check
 * better are checked here first (null pointers, a config's magic). */
#include <cuda.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "api_ops.h"
#include "log.h"
#include "nccl_bridge.h"

#define NCCL_API(ret, name, ...)                                                        \
	__attribute__((visibility("default"))) ret p##name(__VA_ARGS__) __attribute__((alias(#name))); \
	__attribute__((visibility("default"))) ret name(__VA_ARGS__)

typedef void *cudaStream_t;

static const struct rm_nccl_bridge *bridge;
static pthread_once_t bridge_once = PTHREAD_ONCE_INIT;
static __thread char last_error[RM_NCCL_MAX_TEXT]; /* the client's own, said since the last ncclGetLastError */
static __thread char shown_error[RM_NCCL_MAX_TEXT]; /* what ncclGetLastError returned last */
static __thread int group_depth; /* the calling thread's ncclGroupStart nesting */

/* Communicators whose collectives ran on the worker's blocking twin (nccl_comms.h): their
 * collectives never wait in the worker for a peer, so they are sent without waiting, and so
 * is the end of a group of only such collectives; an error comes back as the
 * communicator's async error (ncclCommGetAsyncError). An open-addressed set of handles. */
#define FAST_SLOTS 1024
static uint64_t fast_comms[FAST_SLOTS];
static pthread_mutex_t fast_lock = PTHREAD_MUTEX_INITIALIZER;

static size_t fast_slot(uint64_t v)
{
	return (size_t)((v * 0x9e3779b97f4a7c15ull) >> 54) & (FAST_SLOTS - 1);
}

static int is_fast(uint64_t v)
{
	for (size_t i = fast_slot(v), n = 0; n < FAST_SLOTS; i = (i + 1) & (FAST_SLOTS - 1), n++) {
		uint64_t x = __atomic_load_n(&fast_comms[i], __ATOMIC_ACQUIRE);
		if (x == v)
			return 1;
		if (!x)
			return 0;
	}
	return 0;
}

/* Marks v fast, or no longer (its handle may name another communicator later): a removed
 * slot keeps a tombstone (UINT64_MAX) so that later ones stay found. */
static void set_fast(uint64_t v, int fast)
{
	pthread_mutex_lock(&fast_lock);
	size_t free_slot = FAST_SLOTS;
	for (size_t i = fast_slot(v), n = 0; n < FAST_SLOTS; i = (i + 1) & (FAST_SLOTS - 1), n++) {
		uint64_t x = fast_comms[i];
		if (x == v && fast)
			break; /* already */
		if (x == v)
			__atomic_store_n(&fast_comms[i], UINT64_MAX, __ATOMIC_RELEASE);
		if (x == UINT64_MAX && free_slot == FAST_SLOTS)
			free_slot = i;
		if (!x) {
			if (fast)
				__atomic_store_n(&fast_comms[free_slot < FAST_SLOTS ? free_slot : i], v, __ATOMIC_RELEASE);
			break;
		}
	}
	pthread_mutex_unlock(&fast_lock);
}

/* The calling thread's outermost group: its communicators, and whether every call in it was
 * a collective that runs on a twin (rm_nccl_on_twin), of a fast communicator (then its end
 * is sent async). */
#define GROUP_COMMS 64
static __thread uint64_t group_comms[GROUP_COMMS];
static __thread int group_ncomms, group_fast, group_calls;
static __thread uint64_t group_streams[2]; /* an async end is ordered against these */
static __thread int group_nstreams;

/* A key of the calling thread's own, which no stream or event has: its group's start is
 * ordered against nothing of other threads (NCCL's groups are per thread). */
static uint64_t thread_key(void)
{
	static uint64_t made;
	static __thread uint64_t key;
	if (!key)
		key = (0xfe12ull << 48) | __atomic_add_fetch(&made, 1, __ATOMIC_RELAXED);
	return key;
}

static void group_call(uint64_t comm, uint64_t stream, int fast)
{
	int known = 0, seen = 0;
	group_calls++;
	group_fast &= fast;
	for (int i = 0; i < group_nstreams; i++)
		seen |= group_streams[i] == stream;
	if (!seen && group_nstreams < 2)
		group_streams[group_nstreams++] = stream;
	else if (!seen)
		group_fast = 0; /* an async end is ordered against two streams at most */
	for (int i = 0; i < group_ncomms; i++)
		known |= group_comms[i] == comm;
	if (!known && group_ncomms < GROUP_COMMS)
		group_comms[group_ncomms++] = comm;
	else if (!known)
		group_fast = 0; /* more than it can mark fast afterwards */
}

static void log_once_init(void)
{
	rm_log_init("remora-nccl", RM_LOG_ERROR);
}

static void log_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, log_once_init);
}

static void find_bridge(void)
{
	static const CUuuid id = {RM_NCCL_BRIDGE_ID};
	const void *table = NULL;
	log_init();
	if (cuGetExportTable(&table, &id) != CUDA_SUCCESS || !table ||
	    ((const struct rm_nccl_bridge *)table)->size < sizeof(struct rm_nccl_bridge)) {
		rm_log(RM_LOG_ERROR, "NCCL: the libcuda.so.1 loaded is not Remora's client library: NCCL calls fail");
		return;
	}
	bridge = table;
}

static ncclResult_t say(ncclResult_t r, const char *what)
{
	snprintf(last_error, sizeof(last_error), "%s", what);
	return r;
}

/* Forwards op: NCCL's result, or ncclSystemError when the call could not be made. */
static ncclResult_t fwd(uint32_t op, const struct rm_nccl_args *a, struct rm_nccl_answer *out)
{
	pthread_once(&bridge_once, find_bridge);
	if (!bridge)
		return say(ncclSystemError, "Remora: the loaded libcuda.so.1 is not Remora's client library");
	if (group_depth > 0 && op != RM_OP_rmNcclCollective && op != RM_OP_rmNcclGroupStart && op != RM_OP_rmNcclGroupEnd)
		group_fast = 0; /* an init, a split, a destroy...: the group's end waits */
	CUresult r = bridge->call(op, a, out);
	if (r != CUDA_SUCCESS) {
		const char *s = NULL;
		cuGetErrorString(r, &s);
		snprintf(last_error, sizeof(last_error), "Remora: the NCCL call failed: %s", s ? s : "unknown error");
		return r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_VALUE ? ncclInvalidArgument
		       : r == CUDA_ERROR_INVALID_CONTEXT || r == CUDA_ERROR_NOT_INITIALIZED ? ncclInvalidUsage
											 : ncclSystemError;
	}
	return out->result;
}

static ncclResult_t unsupported(const char *name)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static const char *said[32];
	static int nsaid;
	int known = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < nsaid; i++)
		known |= said[i] == name;
	if (!known && nsaid < 32)
		said[nsaid++] = name;
	pthread_mutex_unlock(&lock);
	if (!known) {
		log_init();
		rm_log(RM_LOG_WARN, "NCCL: %s is not supported through Remora", name);
	}
	snprintf(last_error, sizeof(last_error), "%s is not supported through Remora", name);
	return ncclInvalidUsage;
}

static uint64_t comm_of(ncclComm_t c)
{
	return (uint64_t)(uintptr_t)c;
}

/* A thread without a current context uses its device 0's primary context, as cudart would. */
static ncclResult_t need_context(void)
{
	CUcontext ctx = NULL;
	if (cuCtxGetCurrent(&ctx) == CUDA_SUCCESS && ctx)
		return ncclSuccess;
	CUdevice dev;
	if (cuInit(0) != CUDA_SUCCESS || cuDeviceGet(&dev, 0) != CUDA_SUCCESS ||
	    cuDevicePrimaryCtxRetain(&ctx, dev) != CUDA_SUCCESS || cuCtxSetCurrent(ctx) != CUDA_SUCCESS)
		return say(ncclUnhandledCudaError, "no CUDA context could be made current");
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetVersion, int *version)
{
	if (!version)
		return ncclInvalidArgument;
	struct rm_nccl_args a = {0};
	struct rm_nccl_answer out;
	ncclResult_t r = fwd(RM_OP_rmNcclGetVersion, &a, &out);
	if (r == ncclSuccess)
		*version = (int)out.value;
	return r;
}

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId)
{
	if (!uniqueId)
		return ncclInvalidArgument;
	struct rm_nccl_args a = {0};
	struct rm_nccl_answer out;
	ncclResult_t r = fwd(RM_OP_rmNcclGetUniqueId, &a, &out);
	if (r == ncclSuccess)
		*uniqueId = out.unique_id;
	return r;
}

static ncclResult_t check_config(const rm_nccl_config *config)
{
	if (config && (config->magic != RM_NCCL_CONFIG_MAGIC || !RM_NCCL_CONFIG_HAS(config->size, blocking)))
		return say(ncclInvalidArgument, "the config was not initialised with NCCL_CONFIG_INITIALIZER");
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
	 rm_nccl_config *config)
{
	if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	ncclResult_t r = check_config(config);
	if (r == ncclSuccess)
		r = need_context();
	if (r != ncclSuccess)
		return r;
	struct rm_nccl_args a = {.nranks = nranks, .rank = rank, .unique_id = &commId, .config = config};
	struct rm_nccl_answer out;
	*comm = NULL;
	r = fwd(RM_OP_rmNcclCommInitRank, &a, &out);
	if (r == ncclSuccess || r == ncclInProgress) /* in progress: a nonblocking one, polled by the program */
		*comm = (ncclComm_t)(uintptr_t)out.comms[0];
	return r;
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
	return ncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank, int nId,
	 ncclUniqueId *commIds, rm_nccl_config *config)
{
	if (nId == 1 && commIds) /* one id: ncclCommInitRankConfig's case */
		return ncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
	return unsupported("ncclCommInitRankScalable with several ids");
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comm, int ndev, const int *devlist)
{
	if (!comm || ndev < 1)
		return ncclInvalidArgument;
	if (ndev > RM_NCCL_MAX_DEVICES)
		return unsupported("ncclCommInitAll of more than 64 devices");
	int32_t devs[RM_NCCL_MAX_DEVICES];
	for (int i = 0; i < ndev; i++)
		devs[i] = devlist ? devlist[i] : i;
	ncclResult_t r = need_context();
	if (r != ncclSuccess)
		return r;
	struct rm_nccl_args a = {.devlist = devs, .ndev = ndev};
	struct rm_nccl_answer out;
	r = fwd(RM_OP_rmNcclCommInitAll, &a, &out);
	for (int i = 0; i < ndev; i++)
		comm[i] = r == ncclSuccess ? (ncclComm_t)(uintptr_t)out.comms[i] : NULL;
	return r;
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
	 rm_nccl_config *config)
{
	if (!comm || !newcomm)
		return ncclInvalidArgument;
	ncclResult_t r = check_config(config);
	if (r != ncclSuccess)
		return r;
	struct rm_nccl_args a = {.comm = comm_of(comm), .color = color, .key = key, .config = config};
	struct rm_nccl_answer out;
	r = fwd(RM_OP_rmNcclCommSplit, &a, &out);
	*newcomm = (r == ncclSuccess || r == ncclInProgress) && out.ncomms ? (ncclComm_t)(uintptr_t)out.comms[0] : NULL;
	return r;
}

static ncclResult_t on_comm(uint32_t op, ncclComm_t comm, int what, int64_t *value)
{
	if (!comm)
		return ncclInvalidArgument;
	struct rm_nccl_args a = {.comm = comm_of(comm), .what = what};
	struct rm_nccl_answer out;
	ncclResult_t r = fwd(op, &a, &out);
	if (r == ncclSuccess && value)
		*value = out.value;
	return r;
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm)
{
	return on_comm(RM_OP_rmNcclCommFinalize, comm, 0, NULL);
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm)
{
	if (comm)
		set_fast(comm_of(comm), 0); /* its handle may name another communicator later */
	return comm ? on_comm(RM_OP_rmNcclCommDestroy, comm, 0, NULL) : ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm)
{
	if (comm)
		set_fast(comm_of(comm), 0);
	return comm ? on_comm(RM_OP_rmNcclCommAbort, comm, 0, NULL) : ncclSuccess;
}

static ncclResult_t query_int(ncclComm_t comm, int what, int *out)
{
	int64_t v = 0;
	if (!out)
		return ncclInvalidArgument;
	ncclResult_t r = on_comm(RM_OP_rmNcclCommQuery, comm, what, &v);
	if (r == ncclSuccess)
		*out = (int)v;
	return r;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
{
	return query_int(comm, RM_NCCL_COUNT, count);
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device)
{
	return query_int(comm, RM_NCCL_CU_DEVICE, device);
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank)
{
	return query_int(comm, RM_NCCL_USER_RANK, rank);
}

NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError)
{
	int v = 0;
	if (!asyncError)
		return ncclInvalidArgument;
	ncclResult_t r = query_int(comm, RM_NCCL_ASYNC_ERROR, &v);
	if (r == ncclSuccess)
		*asyncError = v >= 0 && v < ncclNumResults ? (ncclResult_t)v : ncclInternalError;
	return r;
}

NCCL_API(const char *, ncclGetErrorString, ncclResult_t result)
{
	switch (result) {
	case ncclSuccess: return "no error";
	case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
	case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
	case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
	case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
	case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
	case ncclRemoteError: return "remote process exited or there was a network error";
	case ncclInProgress: return "NCCL operation in progress";
	default: return "unknown result code";
	}
}

NCCL_API(const char *, ncclGetLastError, ncclComm_t comm)
{
	struct rm_nccl_args a = {.comm = comm_of(comm)};
	struct rm_nccl_answer out;
	if (last_error[0]) { /* the client's own, said since */
		snprintf(shown_error, sizeof(shown_error), "%s", last_error);
		last_error[0] = 0;
	} else if (fwd(RM_OP_rmNcclGetLastError, &a, &out) == ncclSuccess) {
		snprintf(shown_error, sizeof(shown_error), "%s", out.text);
	} else {
		snprintf(shown_error, sizeof(shown_error), "%s", last_error);
		last_error[0] = 0;
	}
	return shown_error;
}

static ncclResult_t coll(int what, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
			 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
	if (!comm)
		return ncclInvalidArgument;
	if (!rm_nccl_type_size(datatype))
		return say(ncclInvalidArgument, "an unknown datatype");
	/* Inside a group, async: the group's calls cost one round trip, at its end, which says
	 * their first error. Outside one, a call waits for its answer unless its communicator is
	 * fast: another thread's calls fenced after an async call could wait in the worker for
	 * that very thread's rank (several ranks of one process), where a twin's never wait. */
	uint64_t v = comm_of(comm);
	int fast = rm_nccl_on_twin(what) && is_fast(v);
	struct rm_nccl_args a = {.comm = v, .sendbuff = (uint64_t)(uintptr_t)sendbuff,
				 .recvbuff = (uint64_t)(uintptr_t)recvbuff, .count = count,
				 .stream = (uint64_t)(uintptr_t)stream, .datatype = datatype, .op = op, .root = root,
				 .what = what, .async = group_depth > 0 || fast, .ordered = 1,
				 .order = {(uint64_t)(uintptr_t)stream, 0}};
	struct rm_nccl_answer out;
	if (group_depth > 0)
		group_call(v, a.stream, fast);
	ncclResult_t r = fwd(RM_OP_rmNcclCollective, &a, &out);
	if (!a.async && r == ncclSuccess && out.value)
		set_fast(v, 1);
	return r;
}

NCCL_API(ncclResult_t, ncclAllReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
	 ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_ALL_REDUCE, sendbuff, recvbuff, count, datatype, op, 0, comm, stream);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
	 int root, ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_BROADCAST, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclBcast, void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
	 cudaStream_t stream)
{
	return coll(RM_NCCL_BROADCAST, buff, buff, count, datatype, 0, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
	 ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclAllGather, const void *sendbuff, void *recvbuff, size_t sendcount,
	 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_ALL_GATHER, sendbuff, recvbuff, sendcount, datatype, 0, 0, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void *sendbuff, void *recvbuff, size_t recvcount,
	 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_REDUCE_SCATTER, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
	 ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_ALL_TO_ALL, sendbuff, recvbuff, count, datatype, 0, 0, comm, stream);
}

NCCL_API(ncclResult_t, ncclGather, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
	 int root, ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_GATHER, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclScatter, const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
	 int root, ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_SCATTER, sendbuff, recvbuff, count, datatype, 0, root, comm, stream);
}

NCCL_API(ncclResult_t, ncclSend, const void *sendbuff, size_t count, ncclDataType_t datatype, int peer,
	 ncclComm_t comm, cudaStream_t stream)
{
	return coll(RM_NCCL_SEND, sendbuff, NULL, count, datatype, 0, peer, comm, stream);
}

NCCL_API(ncclResult_t, ncclRecv, void *recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
	 cudaStream_t stream)
{
	return coll(RM_NCCL_RECV, NULL, recvbuff, count, datatype, 0, peer, comm, stream);
}

NCCL_API(ncclResult_t, ncclGroupStart, void)
{
	/* its error, if any, is the group end's */
	struct rm_nccl_args a = {.async = 1, .ordered = 1, .order = {RM_NCCL_ORDER_NO_STREAM, thread_key()}};
	struct rm_nccl_answer out;
	ncclResult_t r = fwd(RM_OP_rmNcclGroupStart, &a, &out);
	if (r == ncclSuccess && group_depth++ == 0) {
		group_ncomms = group_calls = group_nstreams = 0;
		group_fast = 1;
	}
	return r;
}

NCCL_API(ncclResult_t, ncclGroupEnd, void)
{
	struct rm_nccl_args a = {0};
	struct rm_nccl_answer out;
	int outermost = group_depth == 1;
	if (group_depth > 0)
		group_depth--;
	a.async = outermost && group_fast && group_calls > 0;
	a.ordered = a.async; /* against the streams its calls go on */
	a.order[0] = group_streams[0];
	a.order[1] = group_nstreams > 1 ? group_streams[1] : 0;
	ncclResult_t r = fwd(RM_OP_rmNcclGroupEnd, &a, &out);
	if (outermost && !a.async && r == ncclSuccess && out.value)
		for (int i = 0; i < group_ncomms; i++)
			set_fast(group_comms[i], 1);
	return r;
}

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar, ncclDataType_t datatype,
	 int residence, ncclComm_t comm)
{
	size_t e = rm_nccl_type_size(datatype);
	if (!op || !scalar || !comm || !e || (residence != 0 && residence != 1))
		return ncclInvalidArgument;
	struct rm_nccl_args a = {.comm = comm_of(comm), .datatype = datatype, .residence = residence};
	if (residence == 1) { /* ncclScalarHostImmediate: the value, read now */
		a.scalar = scalar;
		a.scalar_len = e;
	} else {
		a.sendbuff = (uint64_t)(uintptr_t)scalar;
	}
	struct rm_nccl_answer out;
	ncclResult_t r = fwd(RM_OP_rmNcclRedOpCreatePreMulSum, &a, &out);
	if (r == ncclSuccess)
		*op = (ncclRedOp_t)out.value;
	return r;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm)
{
	if (!comm)
		return ncclInvalidArgument;
	struct rm_nccl_args a = {.comm = comm_of(comm), .op = op};
	struct rm_nccl_answer out;
	return fwd(RM_OP_rmNcclRedOpDestroy, &a, &out);
}

/* NCCL's allocator: device memory of the client's, which every collective may use. */
NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
{
	CUdeviceptr p = 0;
	if (!ptr)
		return ncclInvalidArgument;
	if (size == 0) {
		*ptr = NULL;
		return ncclSuccess;
	}
	ncclResult_t r = need_context();
	if (r != ncclSuccess)
		return r;
	if (cuMemAlloc(&p, size) != CUDA_SUCCESS)
		return say(ncclUnhandledCudaError, "cuMemAlloc failed");
	*ptr = (void *)(uintptr_t)p;
	return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void *ptr)
{
	if (ptr && cuMemFree((CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
		return say(ncclUnhandledCudaError, "cuMemFree failed");
	return ncclSuccess;
}

/* Not forwarded: buffer registration and windows (an optimisation NCCL does without),
 * revoking and shrinking, the group simulation. */
NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size, void **handle)
{
	(void)comm, (void)buff, (void)size, (void)handle;
	return unsupported("ncclCommRegister");
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle)
{
	(void)comm, (void)handle;
	return unsupported("ncclCommDeregister");
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size, void **win, int winFlags)
{
	(void)comm, (void)buff, (void)size, (void)win, (void)winFlags;
	return unsupported("ncclCommWindowRegister");
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, void *win)
{
	(void)comm, (void)win;
	return unsupported("ncclCommWindowDeregister");
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags)
{
	(void)comm, (void)revokeFlags;
	return unsupported("ncclCommRevoke");
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
	 ncclComm_t *newcomm, rm_nccl_config *config, int shrinkFlags)
{
	(void)comm, (void)excludeRanksList, (void)excludeRanksCount, (void)newcomm, (void)config, (void)shrinkFlags;
	return unsupported("ncclCommShrink");
}

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, void *simInfo)
{
	(void)simInfo;
	return unsupported("ncclGroupSimulateEnd");
}

/* Deprecated, and without effect here: NCCL's debug output is the worker's. */
NCCL_API(void, ncclResetDebugInit, void)
{
}

/* NCCL's device API (nccl_device/core.h, NCCL 2.28): communicators whose kernels reach the
 * peers' memory themselves, which a remote client's kernels cannot: refused. PyTorch links
 * against these names, so they exist. Teams are (nRanks, rank, stride) arithmetic on the
 * communicator: the world team is its ranks; the team of ranks whose memory this rank
 * reaches by load and store (LSA) is itself alone, and so a rail's team is the world. */
struct rm_nccl_team {
	int nRanks, rank, stride;
};

NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, const void *requirements, void *devComm)
{
	(void)comm, (void)requirements, (void)devComm;
	return unsupported("ncclDevCommCreate");
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, const void *devComm)
{
	(void)comm, (void)devComm;
	return unsupported("ncclDevCommDestroy");
}

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, struct rm_nccl_team team, int nBarriers,
	 void *outHandle, void *outRequirement)
{
	(void)comm, (void)team, (void)nBarriers, (void)outHandle, (void)outRequirement;
	return unsupported("ncclGinBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, struct rm_nccl_team team, int nBarriers, void *outHandle,
	 void *outRequirement)
{
	(void)team, (void)nBarriers, (void)outHandle, (void)outRequirement;
	return unsupported("ncclLsaBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots, void *outHandle, void *outRequirement)
{
	(void)nBlocks, (void)nSlots, (void)outHandle, (void)outRequirement;
	return unsupported("ncclLLA2ACreateRequirement");
}

/* The slots of a device-side all-to-all's buffer: none, as no device communicator is made. */
NCCL_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize)
{
	(void)maxElts, (void)maxEltSize;
	unsupported("ncclLLA2ACalcSlots");
	return 0;
}

NCCL_API(struct rm_nccl_team, ncclTeamWorld, ncclComm_t comm)
{
	struct rm_nccl_team t = {.nRanks = 1, .rank = 0, .stride = 1};
	int n = 0, r = 0;
	if (ncclCommCount(comm, &n) == ncclSuccess && ncclCommUserRank(comm, &r) == ncclSuccess)
		t.nRanks = n, t.rank = r;
	return t;
}

NCCL_API(struct rm_nccl_team, ncclTeamLsa, ncclComm_t comm)
{
	(void)comm;
	return (struct rm_nccl_team){.nRanks = 1, .rank = 0, .stride = 1};
}

NCCL_API(struct rm_nccl_team, ncclTeamRail, ncclComm_t comm)
{
	return ncclTeamWorld(comm);
}

NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, struct rm_nccl_team team, int rank)
{
	int me = 0;
	ncclCommUserRank(comm, &me);
	return me + (rank - team.rank) * team.stride;
}

NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, struct rm_nccl_team team, int rank)
{
	int me = 0;
	ncclCommUserRank(comm, &me);
	return ncclTeamRankToWorld(comm, team, rank) == me ? 0 : -1;
}
