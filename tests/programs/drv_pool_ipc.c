/* drv_pool_ipc IMAGE: NVIDIA's streamOrderedAllocationIPC sample's sequence through the
 * driver API (issue 39): memory pools shared between processes.
 *
 * The parent makes, on each device (up to 4), a stream and a pool made to be shared by a
 * POSIX file descriptor, allocates from it on the stream, and exports the pool (a descriptor)
 * and the allocation (cuMemPoolExportPointer's 64 bytes). It starts one child per device,
 * sending it the descriptors by SCM_RIGHTS over a socket; the export data travel through
 * shared memory. Child k, on device k, imports every pool (giving its device access where it
 * has none) and every allocation, fills allocation k with its tag on its stream, checks it
 * and frees what it imported with cuMemFreeAsync; a pool it imported makes no allocations.
 * The parent then checks every allocation and frees it, and destroys the pools.
 * With exporter-first (through Remora only: natively the exporter must outlive the importers'
 * use), the parent frees its allocations and destroys its pools once every child has imported
 * them, before the children use them; the children then exit without freeing what they
 * imported, which Remora releases.
 *
 * usage: drv_pool_ipc IMAGE [exporter-first]           the parent (starts the children)
 *        drv_pool_ipc IMAGE child K FD SOCK [exporter-first]   child K, the shared block on FD,
 *                                                      descriptors on SOCK */
#define _GNU_SOURCE
#include "drv_common.h"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_PROCS 4
#define WORDS (1u << 18)

struct shared {
	int nprocs;
	CUmemPoolPtrExportData data[MAX_PROCS];
};

static CUfunction fill;

static unsigned tag(int k)
{
	return 0xB00C0000u + (unsigned)k;
}

static int all_words(CUdeviceptr p, unsigned v, CUstream st)
{
	unsigned *h = malloc(WORDS * 4);
	CHECK(cuMemcpyDtoHAsync(h, p, WORDS * 4, st));
	CHECK(cuStreamSynchronize(st));
	size_t bad = 0;
	for (size_t i = 0; i < WORDS; i++)
		bad += h[i] != v;
	free(h);
	return bad == 0;
}

static int child(const char *image, int k, int shfd, int sock, int exporter_first)
{
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ, MAP_SHARED, shfd, 0);
	if (sh == MAP_FAILED)
		return perror("mmap"), 1;
	int n = sh->nprocs, fds[MAX_PROCS];
	union {
		char buf[CMSG_SPACE(sizeof(int) * MAX_PROCS)];
		struct cmsghdr align;
	} c;
	char byte;
	struct iovec iov = {&byte, 1};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf)};
	if (recvmsg(sock, &msg, 0) != 1 || !CMSG_FIRSTHDR(&msg)) {
		fprintf(stderr, "child %d: no descriptors came\n", k);
		return 1;
	}
	memcpy(fds, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(int) * n);

	CUdevice dev;
	CUcontext ctx;
	CUstream st;
	CHECK(cuInit(0));
	CHECK(cuDeviceGet(&dev, k));
	CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
	CHECK(cuCtxSetCurrent(ctx));
	CHECK(cuStreamCreate(&st, CU_STREAM_NON_BLOCKING));
	CHECK(cuModuleGetFunction(&fill, drv_load_module(image), "fillU32"));
	CUmemoryPool pools[MAX_PROCS];
	CUdeviceptr ptr[MAX_PROCS];
	for (int i = 0; i < n; i++) {
		CHECK(cuMemPoolImportFromShareableHandle(&pools[i], (void *)(uintptr_t)fds[i],
							 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		close(fds[i]);
		CUmemAccess_flags flags;
		CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = k};
		CHECK(cuMemPoolGetAccess(&flags, pools[i], &here));
		if (flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
			CUmemAccessDesc desc = {.location = here, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
			CHECK(cuMemPoolSetAccess(pools[i], &desc, 1));
		}
		CHECK(cuMemPoolImportPointer(&ptr[i], pools[i], &sh->data[i]));
	}
	char go = 'i';
	if (write(sock, &go, 1) != 1 || read(sock, &go, 1) != 1) /* imported; the parent's turn */
		return perror("child handshake"), 1;
	CUdeviceptr more;
	EXPECT(cuMemAllocFromPoolAsync(&more, 4096, pools[k], st) != CUDA_SUCCESS, "an imported pool makes no allocations");

	int words = WORDS;
	unsigned v = tag(k);
	void *args[] = {&ptr[k], &v, &words};
	CHECK(cuLaunchKernel(fill, 256, 1, 1, 256, 1, 1, 0, st, args, NULL));
	EXPECT(all_words(ptr[k], tag(k), st), "child %d reads back its writes", k);
	if (exporter_first)
		return drv_exit_status(); /* what it imported is released as it goes */
	for (int i = 0; i < n; i++)
		CHECK(cuMemFreeAsync(ptr[i], st));
	CHECK(cuStreamSynchronize(st));
	CHECK(cuStreamDestroy(st));
	return drv_exit_status();
}

static int parent(char **argv, int exporter_first)
{
	int ndev;
	CHECK(cuInit(0));
	CHECK(cuDeviceGetCount(&ndev));
	int n = ndev < MAX_PROCS ? ndev : MAX_PROCS;
	int shfd = memfd_create("drv_pool_ipc", 0); /* inherited by the children */
	if (shfd < 0 || ftruncate(shfd, sizeof(struct shared)))
		return perror("memfd"), 1;
	struct shared *sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED, shfd, 0);
	if (sh == MAP_FAILED)
		return perror("mmap"), 1;
	sh->nprocs = n;
	CUcontext ctx[MAX_PROCS];
	CUstream st[MAX_PROCS];
	CUmemoryPool pools[MAX_PROCS];
	CUdeviceptr ptr[MAX_PROCS];
	int fds[MAX_PROCS];
	for (int i = 0; i < n; i++) {
		CUdevice d;
		CHECK(cuDeviceGet(&d, i));
		CHECK(cuDevicePrimaryCtxRetain(&ctx[i], d));
		CHECK(cuCtxSetCurrent(ctx[i]));
		CHECK(cuStreamCreate(&st[i], CU_STREAM_NON_BLOCKING));
		CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
					.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
					.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = i}};
		CHECK(cuMemPoolCreate(&pools[i], &props));
		CHECK(cuMemAllocFromPoolAsync(&ptr[i], WORDS * 4, pools[i], st[i]));
		CHECK(cuMemsetD32Async(ptr[i], 0, WORDS, st[i]));
		CHECK(cuStreamSynchronize(st[i]));
		CHECK(cuMemPoolExportToShareableHandle(&fds[i], pools[i], CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
		CHECK(cuMemPoolExportPointer(&sh->data[i], ptr[i]));
	}
	/* A pool made without a handle type is not exported. */
	CUmemoryPool plain;
	CUmemPoolProps props = {.allocType = CU_MEM_ALLOCATION_TYPE_PINNED,
				.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	int unused = -1;
	CHECK(cuCtxSetCurrent(ctx[0]));
	CHECK(cuMemPoolCreate(&plain, &props));
	EXPECT(cuMemPoolExportToShareableHandle(&unused, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) != CUDA_SUCCESS,
	       "a pool made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR is not exported");
	CHECK(cuMemPoolDestroy(plain));
	printf("parent: %d pool%s exported, one process per device\n", n, n == 1 ? "" : "s");
	fflush(stdout);

	pid_t kids[MAX_PROCS];
	int socks[MAX_PROCS];
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[len > 0 ? len : 0] = 0;
	for (int i = 0; i < n; i++) {
		int sv[2];
		if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
			return perror("socketpair"), 1;
		if ((kids[i] = fork()) == 0) {
			close(sv[0]);
			char karg[16], fdarg[16], sockarg[16];
			snprintf(karg, sizeof(karg), "%d", i);
			snprintf(fdarg, sizeof(fdarg), "%d", shfd);
			snprintf(sockarg, sizeof(sockarg), "%d", sv[1]);
			execl(len > 0 ? self : argv[0], argv[0], argv[1], "child", karg, fdarg, sockarg,
			      exporter_first ? "exporter-first" : (char *)NULL, (char *)NULL);
			_exit(127);
		}
		close(sv[1]);
		union {
			char buf[CMSG_SPACE(sizeof(int) * MAX_PROCS)];
			struct cmsghdr align;
		} c;
		memset(&c, 0, sizeof(c));
		char byte = 'h';
		struct iovec iov = {&byte, 1};
		struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf,
				     .msg_controllen = CMSG_SPACE(sizeof(int) * n)};
		struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * n);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * n);
		if (sendmsg(sv[0], &msg, 0) != 1)
			return perror("sendmsg"), 1;
		socks[i] = sv[0];
	}
	char byte;
	for (int i = 0; i < n; i++)
		if (read(socks[i], &byte, 1) != 1)
			return fprintf(stderr, "child %d did not import\n", i), 1;
	for (int i = 0; exporter_first && i < n; i++) {
		CHECK(cuCtxSetCurrent(ctx[i]));
		CHECK(cuMemFreeAsync(ptr[i], st[i]));
		CHECK(cuStreamSynchronize(st[i]));
		CHECK(cuMemPoolDestroy(pools[i]));
	}
	if (exporter_first)
		printf("parent: freed and destroyed before the children's use\n");
	for (int i = 0; i < n; i++) {
		byte = 'g';
		if (write(socks[i], &byte, 1) != 1)
			return perror("parent handshake"), 1;
		close(socks[i]);
	}
	for (int i = 0; i < n; i++) {
		int status = 0;
		waitpid(kids[i], &status, 0);
		int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
		printf("process %d: %s\n", i, ok ? "passed" : "FAILED");
		EXPECT(ok, "child %d exited with status %d", i, status);
	}
	for (int i = 0; i < n; i++) {
		close(fds[i]);
		CHECK(cuCtxSetCurrent(ctx[i]));
		if (exporter_first) {
			CHECK(cuStreamDestroy(st[i]));
			continue;
		}
		int ok = all_words(ptr[i], tag(i), st[i]);
		printf("allocation %d: %s\n", i, ok ? "written by its process" : "WRONG");
		EXPECT(ok, "allocation %d holds the tag of child %d", i, i);
		CHECK(cuMemFreeAsync(ptr[i], st[i]));
		CHECK(cuStreamSynchronize(st[i]));
		CHECK(cuMemPoolDestroy(pools[i]));
		CHECK(cuStreamDestroy(st[i]));
	}
	for (int i = 0; i < n; i++)
		CHECK(cuDevicePrimaryCtxRelease(i));
	int rc = drv_exit_status();
	printf("%s\n", rc ? "FAIL" : "PASS");
	return rc;
}

int main(int argc, char **argv)
{
	if ((argc == 6 || argc == 7) && !strcmp(argv[2], "child"))
		return child(argv[1], atoi(argv[3]), atoi(argv[4]), atoi(argv[5]), argc == 7);
	if (argc != 2 && !(argc == 3 && !strcmp(argv[2], "exporter-first"))) {
		fprintf(stderr, "usage: %s IMAGE [exporter-first | child K FD SOCK [exporter-first]]\n", argv[0]);
		return 2;
	}
	return parent(argv, argc == 3);
}
