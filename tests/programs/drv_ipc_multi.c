/* drv_ipc_multi IMAGE: NVIDIA's simpleIPC sample's sequence through the driver API (issue 39).
 *
 * The parent makes, on each device (up to 4), an allocation and an interprocess event, and
 * enables peer access between the devices; it starts one child per device, passing the
 * handles through shared memory (a memfd, its descriptor inherited). Child k, on device k,
 * opens every allocation and event; at step i it makes its stream wait for the event of
 * buffer (i + k) mod n, runs a slow kernel then one filling that buffer with its tag, and
 * records the event on its stream (the event's device and the stream's differ where n > 1);
 * the children meet at a barrier after each step. So each buffer's last writer is fixed by
 * the events alone: a wait that missed another process's record would let an earlier, slower
 * kernel land last. Each child then checks its own buffer, and the parent, after waiting for
 * each event itself, checks every buffer.
 *
 * usage: drv_ipc_multi IMAGE                 the parent (starts the children)
 *        drv_ipc_multi IMAGE child K FD      child K, the shared block on FD */
#define _GNU_SOURCE
#include "drv_common.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS 4
#define WORDS (1u << 20)
#define SLOW_NS 20000000ull /* each step's slow kernel: 20 ms */

struct shared {
	int nprocs;
	int barrier, sense;
	int devices[MAX_PROCS];
	CUipcMemHandle mem[MAX_PROCS];
	CUipcEventHandle event[MAX_PROCS];
};

static CUfunction fill, slow;

static unsigned tag(int k)
{
	return 0xC0DE0000u + (unsigned)k;
}

/* simpleIPC's barrier: the last one in opens it, the last one out closes it. */
static void barrier_wait(volatile struct shared *sh)
{
	int n = sh->nprocs;
	if (__sync_add_and_fetch(&sh->barrier, 1) == n)
		sh->sense = 1;
	while (!sh->sense)
		sched_yield();
	if (__sync_add_and_fetch(&sh->barrier, -1) == 0)
		sh->sense = 0;
	while (sh->sense)
		sched_yield();
}

static void launch_fill(CUdeviceptr p, unsigned v, CUstream st)
{
	int n = WORDS;
	void *args[] = {&p, &v, &n};
	CHECK(cuLaunchKernel(fill, 256, 1, 1, 256, 1, 1, 0, st, args, NULL));
}

static void launch_slow(CUstream st)
{
	unsigned long long ns = SLOW_NS;
	void *args[] = {&ns};
	CHECK(cuLaunchKernel(slow, 1, 1, 1, 1, 1, 1, 0, st, args, NULL));
}

/* Whether every word of the buffer at p is v (read on stream st). */
static int all_words(CUdeviceptr p, unsigned v, CUstream st)
{
	unsigned *h;
	CHECK(cuMemAllocHost((void **)&h, WORDS * 4));
	CHECK(cuMemcpyDtoHAsync(h, p, WORDS * 4, st));
	CHECK(cuStreamSynchronize(st));
	size_t bad = 0;
	for (size_t i = 0; i < WORDS; i++)
		bad += h[i] != v;
	CHECK(cuMemFreeHost(h));
	return bad == 0;
}

static void load(const char *image)
{
	CUmodule m = drv_load_module(image);
	CHECK(cuModuleGetFunction(&fill, m, "fillU32"));
	CHECK(cuModuleGetFunction(&slow, m, "sleepNs"));
}

static int child(const char *image, int k, int fd)
{
	volatile struct shared *sh = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (sh == MAP_FAILED)
		return perror("mmap"), 1;
	int n = sh->nprocs;
	CUdevice dev;
	CUcontext ctx;
	CUstream st;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, sh->devices[k]));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	load(image);
	CUdeviceptr ptr[MAX_PROCS];
	CUevent ev[MAX_PROCS];
	for (int i = 0; i < n; i++) {
		CUipcMemHandle mh = sh->mem[i];
		CUipcEventHandle eh = sh->event[i];
		CHECK(cuIpcOpenMemHandle(&ptr[i], mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
		CHECK(cuIpcOpenEventHandle(&ev[i], eh));
	}
	for (int i = 0; i < n; i++) {
		int b = (i + k) % n;
		CHECK(cuStreamWaitEvent(st, ev[b], 0));
		launch_slow(st);
		launch_fill(ptr[b], tag(k), st);
		CHECK(cuEventRecord(ev[b], st));
		barrier_wait(sh);
	}
	CHECK(cuStreamWaitEvent(st, ev[k], 0));
	int ok = all_words(ptr[k], tag((k + 1) % n), st);
	EXPECT(ok, "child %d: its buffer holds the tag of child %d", k, (k + 1) % n);
	for (int i = 0; i < n; i++) {
		CHECK(cuIpcCloseMemHandle(ptr[i]));
		CHECK(cuEventDestroy(ev[i]));
	}
	CHECK(cuStreamDestroy(st));
	return drv_exit_status();
}

static int parent(char **argv)
{
	int ndev;
	CHECK(cuInit(0));
	CHECK(cuDeviceGetCount(&ndev));
	int n = ndev < MAX_PROCS ? ndev : MAX_PROCS;
	int fd = memfd_create("drv_ipc_multi", 0); /* inherited by the children */
	if (fd < 0 || ftruncate(fd, sizeof(struct shared)))
		return perror("memfd"), 1;
	volatile struct shared *sh = mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (sh == MAP_FAILED)
		return perror("mmap"), 1;
	CUcontext ctx[MAX_PROCS];
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CHECK(cuDeviceGet(&d, i));
		CHECK(cuDevicePrimaryCtxRetain(&ctx[i], d));
		sh->devices[i] = i;
	}
	sh->nprocs = n;
	/* Peer access both ways between every pair, as simpleIPC enables it. */
	for (int i = 0; i < n; i++)
		for (int j = 0; j < n; j++) {
			int can = 0;
			if (i != j && cuDeviceCanAccessPeer(&can, i, j) == CUDA_SUCCESS && can) {
				CHECK(cuCtxSetCurrent(ctx[i]));
				CHECK(cuCtxEnablePeerAccess(ctx[j], 0));
			}
		}
	CUdeviceptr ptr[MAX_PROCS];
	CUevent ev[MAX_PROCS];
	for (int i = 0; i < n; i++) {
		CUipcMemHandle mh;
		CUipcEventHandle eh;
		CHECK(cuCtxSetCurrent(ctx[i]));
		CHECK(cuMemAlloc(&ptr[i], WORDS * 4));
		CHECK(cuMemsetD32(ptr[i], 0, WORDS));
		CHECK(cuIpcGetMemHandle(&mh, ptr[i]));
		CHECK(cuEventCreate(&ev[i], CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
		CHECK(cuIpcGetEventHandle(&eh, ev[i]));
		memcpy((void *)&sh->mem[i], &mh, sizeof(mh));
		memcpy((void *)&sh->event[i], &eh, sizeof(eh));
	}
	printf("parent: %d process%s, one per device\n", n, n == 1 ? "" : "es");
	fflush(stdout);

	pid_t kids[MAX_PROCS];
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[len > 0 ? len : 0] = 0;
	for (int i = 0; i < n; i++) {
		if ((kids[i] = fork()) == 0) {
			char karg[16], fdarg[16];
			snprintf(karg, sizeof(karg), "%d", i);
			snprintf(fdarg, sizeof(fdarg), "%d", fd);
			execl(len > 0 ? self : argv[0], argv[0], argv[1], "child", karg, fdarg, (char *)NULL);
			_exit(127);
		}
	}
	for (int i = 0; i < n; i++) {
		int status = 0;
		waitpid(kids[i], &status, 0);
		int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
		printf("process %d: %s\n", i, ok ? "passed" : "FAILED");
		EXPECT(ok, "child %d exited with status %d", i, status);
	}

	/* Each buffer's last writer is the child after it; the parent waits for the children's
	 * records through its own events. */
	load(argv[1]);
	for (int b = 0; b < n; b++) {
		CUstream st;
		CHECK(cuCtxSetCurrent(ctx[b]));
		CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
		CHECK(cuEventSynchronize(ev[b]));
		EXPECT(cuEventQuery(ev[b]) == CUDA_SUCCESS, "the event of buffer %d is complete", b);
		CHECK(cuStreamWaitEvent(st, ev[b], 0));
		int ok = all_words(ptr[b], tag((b + 1) % n), st);
		printf("buffer %d: %s\n", b, ok ? "written last by the next process" : "WRONG");
		EXPECT(ok, "buffer %d holds the tag of child %d", b, (b + 1) % n);
		CHECK(cuStreamDestroy(st));
		CHECK(cuEventDestroy(ev[b]));
		CHECK(cuMemFree(ptr[b]));
	}
	for (int i = 0; i < n; i++)
		CHECK(cuDevicePrimaryCtxRelease(i));
	int rc = drv_exit_status();
	printf("%s\n", rc ? "FAIL" : "PASS");
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[2], "child"))
		return child(argv[1], atoi(argv[3]), atoi(argv[4]));
	if (argc != 2) {
		fprintf(stderr, "usage: %s IMAGE [child K FD]\n", argv[0]);
		return 2;
	}
	return parent(argv);
}
