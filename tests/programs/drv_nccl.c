/* NCCL with two ranks on two devices, through the driver API and NCCL's own API (nccl.h):
 *   all        (default) ncclCommInitAll driven by one thread in groups, then two threads
 *              each with its own device (ncclGetUniqueId, ncclCommInitRank): all-reduce
 *              (sum, prod, max, min; int32, float, double, int64), all-gather, broadcast,
 *              reduce, reduce-scatter and send/receive, each checked exactly against the
 *              host's answer; then the communicators' queries and their destruction.
 *   nopeer     rank 0 of two inits alone: NCCL must answer an error within 60 s, not hang
 *              (the test NCCL's bound natively, nccl_timeout through Remora; NVIDIA's NCCL
 *              natively waits for ever).
 *   nopeer-nonblocking  the same with a nonblocking communicator: in progress for 3 s,
 *              as natively, then aborted.
 *   peer-dies  (two processes, so through Remora only) rank 1 joins, then exits without
 *              destroying its communicator: rank 0's next all-reduce must fail within 60 s.
 *   peer-dies-mid  the same, rank 1 leaving a second after rank 0's all-reduce began.
 * Prints PASS and exits 0 only when every check held. Needs two devices: with fewer it
 * says so and exits 0 (SKIP). */
#include <nccl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drv_common.h"

#define N 1024 /* elements per rank */

#define NCHECK(call)                                                                          \
	do {                                                                                  \
		ncclResult_t nr_ = (call);                                                    \
		if (nr_ != ncclSuccess) {                                                     \
			fprintf(stderr, "%s:%d: %s failed: %s (%d)\n", __FILE__, __LINE__, #call, \
				ncclGetErrorString(nr_), (int)nr_);                           \
			exit(1);                                                              \
		}                                                                             \
	} while (0)

struct rank {
	int rank;
	CUcontext ctx;
	CUstream stream;
	ncclComm_t comm;
	ncclUniqueId id;
	CUdeviceptr send, recv;   /* 2 * N elements of 8 bytes each */
};

/* Rank r's element i: small integers, exact in every type and under every reduction. */
static double value(int r, int i)
{
	return (double)((i * 7 + r * 3) % 11 + 1);
}

static void fill(struct rank *k, int type)
{
	static __thread unsigned char host[2 * N * 8];
	for (int i = 0; i < 2 * N; i++) {
		double v = value(k->rank, i);
		if (type == ncclInt32)
			((int32_t *)host)[i] = (int32_t)v;
		else if (type == ncclInt64)
			((int64_t *)host)[i] = (int64_t)v;
		else if (type == ncclFloat)
			((float *)host)[i] = (float)v;
		else
			((double *)host)[i] = v;
	}
	CHECK(cuCtxSetCurrent(k->ctx));
	CHECK(cuMemcpyHtoD(k->send, host, sizeof(host)));
	CHECK(cuMemsetD8(k->recv, 0, sizeof(host)));
}

static double reduced(int op, int i)
{
	double a = value(0, i), b = value(1, i);
	return op == ncclSum ? a + b : op == ncclProd ? a * b : op == ncclMax ? (a > b ? a : b) : (a < b ? a : b);
}

static double read_elem(const unsigned char *host, int type, int i)
{
	return type == ncclInt32 ? ((const int32_t *)host)[i] : type == ncclInt64 ? (double)((const int64_t *)host)[i]
	       : type == ncclFloat ? ((const float *)host)[i] : ((const double *)host)[i];
}

static const char *kind_name[] = {"allreduce", "broadcast", "reduce", "allgather", "reducescatter", "sendrecv"};
enum { ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCESCATTER, SENDRECV, NKINDS };

static ncclResult_t issue(struct rank *k, int kind, int type, int op)
{
	void *s = (void *)(uintptr_t)k->send, *r = (void *)(uintptr_t)k->recv;
	switch (kind) {
	case ALLREDUCE: return ncclAllReduce(s, r, N, type, op, k->comm, k->stream);
	case BROADCAST: return ncclBroadcast(s, r, N, type, 1, k->comm, k->stream);
	case REDUCE: return ncclReduce(s, r, N, type, op, 0, k->comm, k->stream);
	case ALLGATHER: return ncclAllGather(s, r, N, type, k->comm, k->stream);
	case REDUCESCATTER: return ncclReduceScatter(s, r, N, type, op, k->comm, k->stream);
	default: {
		ncclResult_t e = ncclGroupStart();
		if (e == ncclSuccess)
			e = ncclSend(s, N, type, 1 - k->rank, k->comm, k->stream);
		if (e == ncclSuccess)
			e = ncclRecv(r, N, type, 1 - k->rank, k->comm, k->stream);
		ncclResult_t f = ncclGroupEnd();
		return e != ncclSuccess ? e : f;
	}
	}
}

/* What rank k's receive buffer must hold after kind; checks it, returns the mismatches. */
static int check(struct rank *k, int kind, int type, int op)
{
	static __thread unsigned char host[2 * N * 8];
	size_t e = type == ncclInt32 || type == ncclFloat ? 4 : 8;
	int n = kind == ALLGATHER ? 2 * N : N, bad = 0;
	CHECK(cuCtxSetCurrent(k->ctx));
	CHECK(cuStreamSynchronize(k->stream));
	CHECK(cuMemcpyDtoH(host, k->recv, (size_t)n * e));
	if (kind == REDUCE && k->rank != 0)
		return 0;
	for (int i = 0; i < n; i++) {
		double want;
		switch (kind) {
		case ALLREDUCE: case REDUCE: want = reduced(op, i); break;
		case BROADCAST: want = value(1, i); break;
		case ALLGATHER: want = value(i / N, i % N); break;
		case REDUCESCATTER: want = reduced(op, k->rank * N + i); break;
		default: want = value(1 - k->rank, i);
		}
		if (read_elem(host, type, i) != want && bad++ < 3)
			fprintf(stderr, "rank %d %s type %d op %d: element %d is %g, not %g\n", k->rank, kind_name[kind], type,
				op, i, read_elem(host, type, i), want);
	}
	return bad;
}

static const int types[] = {ncclInt32, ncclFloat, ncclDouble, ncclInt64};
static const int ops[] = {ncclSum, ncclProd, ncclMax, ncclMin};

/* One thread drives both ranks, each call of the pair in one group. */
static void single_thread(struct rank *k)
{
	for (int kind = 0; kind < NKINDS; kind++)
		for (int t = 0; t < 4; t++)
			for (int o = 0; o < (kind == ALLREDUCE || kind == REDUCE || kind == REDUCESCATTER ? 4 : 1); o++) {
				for (int r = 0; r < 2; r++)
					fill(&k[r], types[t]);
				if (kind == SENDRECV) {
					/* both ranks' sends and receives in one group */
					NCHECK(ncclGroupStart());
					for (int r = 0; r < 2; r++) {
						void *s = (void *)(uintptr_t)k[r].send, *d = (void *)(uintptr_t)k[r].recv;
						NCHECK(ncclSend(s, N, types[t], 1 - r, k[r].comm, k[r].stream));
						NCHECK(ncclRecv(d, N, types[t], 1 - r, k[r].comm, k[r].stream));
					}
					NCHECK(ncclGroupEnd());
				} else {
					NCHECK(ncclGroupStart());
					for (int r = 0; r < 2; r++)
						NCHECK(issue(&k[r], kind, types[t], ops[o]));
					NCHECK(ncclGroupEnd());
				}
				int bad = check(&k[0], kind, types[t], ops[o]) + check(&k[1], kind, types[t], ops[o]);
				EXPECT(bad == 0, "one thread: %s type %d op %d: %d mismatches", kind_name[kind], types[t], ops[o], bad);
			}
	printf("one thread, ncclCommInitAll: every collective checked\n");
}

static void *rank_thread(void *arg)
{
	struct rank *k = arg;
	CHECK(cuCtxSetCurrent(k->ctx));
	NCHECK(ncclCommInitRank(&k->comm, 2, k->id, k->rank));
	for (int kind = 0; kind < NKINDS; kind++)
		for (int t = 0; t < 4; t++)
			for (int o = 0; o < (kind == ALLREDUCE || kind == REDUCE || kind == REDUCESCATTER ? 4 : 1); o++) {
				fill(k, types[t]);
				NCHECK(issue(k, kind, types[t], ops[o]));
				int bad = check(k, kind, types[t], ops[o]);
				EXPECT(bad == 0, "rank %d: %s type %d op %d: %d mismatches", k->rank, kind_name[kind], types[t],
				       ops[o], bad);
			}
	int count = 0, dev = -1, me = -1;
	ncclResult_t async = ncclInternalError;
	NCHECK(ncclCommCount(k->comm, &count));
	NCHECK(ncclCommCuDevice(k->comm, &dev));
	NCHECK(ncclCommUserRank(k->comm, &me));
	NCHECK(ncclCommGetAsyncError(k->comm, &async));
	EXPECT(count == 2 && dev == k->rank && me == k->rank && async == ncclSuccess,
	       "rank %d: count %d device %d rank %d async %d", k->rank, count, dev, me, (int)async);
	NCHECK(ncclCommFinalize(k->comm));
	NCHECK(ncclCommDestroy(k->comm));
	return NULL;
}

static void setup(struct rank *k, int r)
{
	CUdevice dev;
	memset(k, 0, sizeof(*k));
	k->rank = r;
	CHECK(cuDeviceGet(&dev, r));
	CHECK(cuDevicePrimaryCtxRetain(&k->ctx, dev));
	CHECK(cuCtxSetCurrent(k->ctx));
	CHECK(cuStreamCreate(&k->stream, CU_STREAM_NON_BLOCKING));
	CHECK(cuMemAlloc(&k->send, 2 * N * 8));
	CHECK(cuMemAlloc(&k->recv, 2 * N * 8));
}

static int devices_or_skip(void)
{
	int n = 0;
	CHECK(cuInit(0));
	CHECK(cuDeviceGetCount(&n));
	if (n < 2)
		printf("SKIP: %d device(s), NCCL's test needs 2\n", n);
	return n >= 2;
}

static int run_all(void)
{
	struct rank k[2];
	ncclComm_t comms[2];
	int version = 0, devs[2] = {0, 1};
	NCHECK(ncclGetVersion(&version));
	EXPECT(version >= 21400, "NCCL version %d", version);
	for (int r = 0; r < 2; r++)
		setup(&k[r], r);
	NCHECK(ncclCommInitAll(comms, 2, devs));
	for (int r = 0; r < 2; r++)
		k[r].comm = comms[r];
	single_thread(k);
	for (int r = 0; r < 2; r++)
		NCHECK(ncclCommDestroy(comms[r]));

	pthread_t th[2];
	NCHECK(ncclGetUniqueId(&k[0].id));
	k[1].id = k[0].id;
	for (int r = 0; r < 2; r++)
		if (pthread_create(&th[r], NULL, rank_thread, &k[r])) {
			fprintf(stderr, "pthread_create failed\n");
			return 1;
		}
	for (int r = 0; r < 2; r++)
		pthread_join(th[r], NULL);
	printf("two threads, ncclCommInitRank: every collective checked\n");
	return 0;
}

/* Rank 0 of two inits alone: an error within 60 s. */
static void run_nopeer(void)
{
	struct rank k;
	setup(&k, 0);
	NCHECK(ncclGetUniqueId(&k.id));
	double t0 = drv_now_ms();
	ncclResult_t r = ncclCommInitRank(&k.comm, 2, k.id, 0);
	double took = drv_now_ms() - t0;
	EXPECT(r != ncclSuccess, "an init without its peer succeeded");
	EXPECT(took < 60000, "an init without its peer took %.0f ms", took);
	printf("init without its peer: an error, within the bound\n");
}

/* Rank 0 of two, nonblocking, alone: its init stays in progress until the program aborts it. */
static void run_nopeer_nonblocking(void)
{
	struct rank k;
	ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
	config.blocking = 0;
	setup(&k, 0);
	NCHECK(ncclGetUniqueId(&k.id));
	ncclResult_t r = ncclCommInitRankConfig(&k.comm, 2, k.id, 0, &config), state = r;
	EXPECT(r == ncclInProgress && k.comm, "a nonblocking init without its peer gave %d", (int)r);
	double t0 = drv_now_ms();
	while (k.comm && state == ncclInProgress && drv_now_ms() - t0 < 3000) {
		NCHECK(ncclCommGetAsyncError(k.comm, &state));
		usleep(10000);
	}
	EXPECT(state == ncclInProgress, "a nonblocking init without its peer settled as %d", (int)state);
	if (k.comm)
		NCHECK(ncclCommAbort(k.comm));
	printf("nonblocking init without its peer: in progress until aborted\n");
}

/* Rank 1 (a child process) joins and exits without destroying: rank 0's all-reduce fails,
 * begun after rank 1 went (mid 0) or before (mid 1). */
static void run_peer_dies(int mid)
{
	int fds[2], done[2]; /* rank 0's unique id to rank 1; rank 0's init done, back */
	if (pipe(fds) || pipe(done)) {
		perror("pipe");
		exit(1);
	}
	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		exit(1);
	}
	struct rank k;
	if (child == 0) {
		close(fds[1]);
		ncclUniqueId id;
		if (read(fds[0], &id, sizeof(id)) != (ssize_t)sizeof(id))
			_exit(2);
		CHECK(cuInit(0));
		setup(&k, 1);
		k.id = id;
		NCHECK(ncclCommInitRank(&k.comm, 2, k.id, 1));
		char c; /* goes once both have joined: rank 0's init may end after this one's */
		close(done[1]);
		if (read(done[0], &c, 1) != 1)
			_exit(3);
		if (mid)
			sleep(1);
		_exit(0); /* gone without ncclCommDestroy */
	}
	close(fds[0]);
	CHECK(cuInit(0));
	setup(&k, 0);
	NCHECK(ncclGetUniqueId(&k.id));
	if (write(fds[1], &k.id, sizeof(k.id)) != (ssize_t)sizeof(k.id)) {
		perror("write");
		exit(1);
	}
	NCHECK(ncclCommInitRank(&k.comm, 2, k.id, 0));
	close(done[0]);
	if (write(done[1], "j", 1) != 1) {
		perror("write");
		exit(1);
	}
	int status = 0;
	if (!mid) {
		waitpid(child, &status, 0);
		usleep(500000); /* its session released */
	}
	fill(&k, ncclInt32);
	double t0 = drv_now_ms();
	ncclResult_t r = issue(&k, ALLREDUCE, ncclInt32, ncclSum);
	if (r == ncclSuccess) {
		cuStreamSynchronize(k.stream);
		ncclCommGetAsyncError(k.comm, &r);
	}
	double took = drv_now_ms() - t0;
	if (mid)
		waitpid(child, &status, 0);
	EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0, "rank 1's process ended with status %d", status);
	EXPECT(r != ncclSuccess, "an all-reduce after the peer went succeeded");
	EXPECT(took < 60000, "an all-reduce after the peer went took %.0f ms", took);
	ncclCommAbort(k.comm);
	printf("peer gone: rank 0's all-reduce failed, within the bound\n");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "all";
	if (!strcmp(mode, "peer-dies") || !strcmp(mode, "peer-dies-mid")) {
		run_peer_dies(!strcmp(mode, "peer-dies-mid"));
	} else {
		if (!devices_or_skip())
			return 0;
		if (!strcmp(mode, "nopeer"))
			run_nopeer();
		else if (!strcmp(mode, "nopeer-nonblocking"))
			run_nopeer_nonblocking();
		else if (run_all())
			return 1;
	}
	int st = drv_exit_status();
	printf("%s\n", st ? "FAIL" : "PASS");
	return st;
}
