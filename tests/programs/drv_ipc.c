/* CUDA IPC between two processes: this program exports device memory (cuIpcGetMemHandle),
 * an interprocess event and a VMM allocation (cuMemExportToShareableHandle, a POSIX file
 * descriptor), then starts itself as the importer, passing the handles' bytes over a socket
 * and the descriptor by SCM_RIGHTS. The importer checks what the exporter wrote, writes with
 * kernels, records the event; the exporter then checks those writes.
 *
 * usage: drv_ipc IMAGE                  exporter (starts the importer itself)
 *        drv_ipc IMAGE importer FD      importer, on socket FD
 *        drv_ipc IMAGE export           prints handles of filled memory and of an event in
 *                                       hex; frees the memory at a line "free" on stdin,
 *                                       destroys the event at "destroy", exits at EOF
 *        drv_ipc IMAGE import HEX [EVHEX]   opens them and prints the results; then, now and at
 *                                       each line on stdin, the memory's checksum and the
 *                                       event recorded and waited for; closes both at EOF
 *        drv_ipc IMAGE meminfo          prints the device's free memory as it sees it
 * (the last two: tests/sharing/ipc_tenants.py, across tenants and daemons) */
#include "drv_common.h"

#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define N (1u << 18) /* words of the cuMemAlloc allocation */

struct message {
	CUipcMemHandle mem;
	CUipcEventHandle event;
	uint64_t vmm_size;
};

static CUfunction fill;

static void fill_u32(CUdeviceptr p, unsigned v, int n)
{
	void *args[] = {&p, &v, &n};
	CHECK(cuLaunchKernel(fill, (n + 255) / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
}

static uint64_t checksum(CUdeviceptr p, size_t words)
{
	unsigned *h = malloc(words * 4);
	CHECK(cuMemcpyDtoH(h, p, words * 4));
	uint64_t c = drv_fnv1a(h, words * 4);
	free(h);
	return c;
}

/* Words of a pattern: i * mul + add, except [from, to) which is v. */
static int check_words(CUdeviceptr p, size_t words, unsigned mul, unsigned add, size_t from, size_t to, unsigned v)
{
	unsigned *h = malloc(words * 4);
	CHECK(cuMemcpyDtoH(h, p, words * 4));
	size_t bad = 0;
	for (size_t i = 0; i < words; i++)
		bad += h[i] != (i >= from && i < to ? v : (unsigned)i * mul + add);
	free(h);
	return bad == 0;
}

static void put_words(CUdeviceptr p, size_t words, unsigned mul, unsigned add)
{
	unsigned *h = malloc(words * 4);
	for (size_t i = 0; i < words; i++)
		h[i] = (unsigned)i * mul + add;
	CHECK(cuMemcpyHtoD(p, h, words * 4));
	free(h);
}

static CUmemAllocationProp vmm_prop(void)
{
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	return prop;
}

/* Reserves, maps and opens to device 0 size bytes of physical allocation h. */
static CUdeviceptr vmm_map(CUmemGenericAllocationHandle h, size_t size)
{
	CUdeviceptr va;
	CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
	CHECK(cuMemMap(va, size, 0, h, 0));
	CUmemAccessDesc access = {.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
				  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	CHECK(cuMemSetAccess(va, size, &access, 1));
	return va;
}

static void vmm_unmap(CUdeviceptr va, size_t size)
{
	CHECK(cuMemUnmap(va, size));
	CHECK(cuMemAddressFree(va, size));
}

static int importer(int sock)
{
	struct message m;
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} c;
	struct iovec iov = {&m, sizeof(m)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf)};
	if (recvmsg(sock, &msg, 0) != (ssize_t)sizeof(m) || !CMSG_FIRSTHDR(&msg)) {
		fprintf(stderr, "importer: no handles came\n");
		return 1;
	}
	int fd;
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&msg)), sizeof(fd));

	/* Memory: the exporter's words, then the second half ours. */
	CUdeviceptr p, again, base;
	size_t size;
	CHECK(cuIpcOpenMemHandle(&p, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	EXPECT(check_words(p, N, 3, 1, 0, 0, 0), "the importer reads what the exporter wrote");
	CHECK(cuIpcOpenMemHandle(&again, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
	EXPECT(again == p, "opened again, the same pointer");
	CHECK(cuIpcCloseMemHandle(again));
	CHECK(cuMemGetAddressRange(&base, &size, p + 4));
	EXPECT(base == p && size >= N * 4, "the opened range is the allocation");
	fill_u32(p + N / 2 * 4, 0xC0FFEEu, N / 2);

	/* The event: recorded here after the kernel, waited for by the exporter. */
	CUevent ev;
	CHECK(cuIpcOpenEventHandle(&ev, m.event));
	CHECK(cuEventRecord(ev, NULL));
	CHECK(cuEventSynchronize(ev));

	/* The VMM allocation: the exporter's words, then the first quarter ours. */
	CUmemGenericAllocationHandle h;
	CHECK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
	close(fd);
	CUdeviceptr va = vmm_map(h, m.vmm_size);
	CHECK(cuMemRelease(h)); /* the mapping keeps it */
	size_t words = m.vmm_size / 4;
	EXPECT(check_words(va, words, 7, 5, 0, 0, 0), "the importer reads the exporter's VMM allocation");
	fill_u32(va, 0xBEEFu, (int)(words / 4));
	CHECK(cuCtxSynchronize());
	vmm_unmap(va, m.vmm_size);

	CHECK(cuIpcCloseMemHandle(p));
	CHECK(cuEventDestroy(ev));
	char done = 'd';
	if (write(sock, &done, 1) != 1)
		return 1;
	return drv_exit_status();
}

static int exporter(char **argv)
{
	CUdeviceptr p, self;
	CHECK(cuMemAlloc(&p, N * 4));
	put_words(p, N, 3, 1);
	struct message m;
	memset(&m, 0, sizeof(m));
	CHECK(cuIpcGetMemHandle(&m.mem, p));
	CUresult r = cuIpcOpenMemHandle(&self, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	printf("open in the exporting process: %s\n", drv_error_name(r));

	CUevent ev, plain;
	CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
	CHECK(cuIpcGetEventHandle(&m.event, ev));
	CHECK(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
	CUipcEventHandle unused;
	EXPECT(cuIpcGetEventHandle(&unused, plain) != CUDA_SUCCESS, "an event made without CU_EVENT_INTERPROCESS is refused");
	CHECK(cuEventDestroy(plain));

	CUmemAllocationProp prop = vmm_prop();
	size_t gran;
	CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
	m.vmm_size = gran;
	CUmemGenericAllocationHandle h;
	CHECK(cuMemCreate(&h, gran, &prop, 0));
	CUdeviceptr va = vmm_map(h, gran);
	put_words(va, gran / 4, 7, 5);
	int fd = -1;
	CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
	CHECK(cuMemRelease(h)); /* the mapping and the importer keep it */
	printf("exported: memory, an event and a VMM allocation (descriptor %s)\n", fd >= 0 ? "valid" : "invalid");
	fflush(stdout);

	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return perror("socketpair"), 1;
	pid_t child = fork();
	if (child == 0) {
		close(sv[0]);
		char fdarg[16];
		snprintf(fdarg, sizeof(fdarg), "%d", sv[1]);
		char self[4096];
		ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = 0;
		execl(n > 0 ? self : argv[0], argv[0], argv[1], "importer", fdarg, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} c;
	memset(&c, 0, sizeof(c));
	struct iovec iov = {&m, sizeof(m)};
	struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.buf, .msg_controllen = sizeof(c.buf)};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(fd));
	if (sendmsg(sv[0], &msg, 0) != (ssize_t)sizeof(m))
		return perror("sendmsg"), 1;
	close(fd);
	char done = 0;
	ssize_t got = read(sv[0], &done, 1);
	int status = 0;
	waitpid(child, &status, 0);
	EXPECT(got == 1 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the importer ran and passed (status %d)", status);

	CHECK(cuEventSynchronize(ev));
	printf("the importer's event: %s\n", drv_error_name(cuEventQuery(ev)));
	int mem_ok = check_words(p, N, 3, 1, N / 2, N, 0xC0FFEEu);
	int vmm_ok = check_words(va, gran / 4, 7, 5, 0, gran / 16, 0xBEEFu);
	printf("the importer's writes: memory %s, VMM allocation %s\n", mem_ok ? "seen" : "MISSING", vmm_ok ? "seen" : "MISSING");
	EXPECT(mem_ok && vmm_ok, "the exporter sees the importer's writes");
	vmm_unmap(va, gran);
	CHECK(cuEventDestroy(ev));
	CHECK(cuMemFree(p));
	int rc = drv_exit_status();
	printf("%s\n", rc ? "FAIL" : "PASS");
	return rc;
}

/* Export and import by hand, for the tests across tenants and daemons. */
static void put_hex(const char *what, const char *bytes, size_t n)
{
	printf("%s ", what);
	for (size_t i = 0; i < n; i++)
		printf("%02x", (unsigned char)bytes[i]);
	printf("\n");
}

static void get_hex(const char *hex, char *bytes, size_t n)
{
	memset(bytes, 0, n);
	for (size_t i = 0; i < n && hex[2 * i] && hex[2 * i + 1]; i++) {
		unsigned v;
		sscanf(hex + 2 * i, "%2x", &v);
		bytes[i] = (char)v;
	}
}

static int export_hex(void)
{
	CUdeviceptr p;
	CUipcMemHandle h;
	CUevent ev;
	CUipcEventHandle eh;
	CHECK(cuMemAlloc(&p, N * 4));
	put_words(p, N, 3, 1);
	CHECK(cuIpcGetMemHandle(&h, p));
	CHECK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS));
	CHECK(cuIpcGetEventHandle(&eh, ev));
	put_hex("memory", h.reserved, sizeof(h.reserved));
	put_hex("event", eh.reserved, sizeof(eh.reserved));
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		if (!strncmp(line, "free", 4))
			printf("free %s\n", drv_error_name(cuMemFree(p)));
		else if (!strncmp(line, "destroy", 7))
			printf("destroy %s\n", drv_error_name(cuEventDestroy(ev)));
		fflush(stdout);
	}
	return 0;
}

/* Each line on stdin: the memory's checksum, and the event recorded and waited for. */
static int import_hex(const char *hex, const char *event_hex)
{
	CUipcMemHandle h;
	CUipcEventHandle eh;
	CUevent ev = NULL;
	get_hex(hex, h.reserved, sizeof(h.reserved));
	CUdeviceptr p;
	CUresult r = cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
	printf("open %s\n", drv_error_name(r));
	if (r == CUDA_SUCCESS && event_hex) {
		get_hex(event_hex, eh.reserved, sizeof(eh.reserved));
		printf("event %s\n", drv_error_name(cuIpcOpenEventHandle(&ev, eh)));
	}
	fflush(stdout);
	if (r != CUDA_SUCCESS)
		return 0;
	char line[64];
	do {
		printf("checksum %016llx\n", (unsigned long long)checksum(p, N));
		if (ev) {
			CUresult rec = cuEventRecord(ev, NULL);
			printf("record %s\n", drv_error_name(rec == CUDA_SUCCESS ? cuEventSynchronize(ev) : rec));
		}
		fflush(stdout);
	} while (fgets(line, sizeof(line), stdin));
	printf("close %s\n", drv_error_name(cuIpcCloseMemHandle(p)));
	if (ev)
		printf("destroy %s\n", drv_error_name(cuEventDestroy(ev)));
	return 0;
}

/* The device's free memory as the client sees it. */
static int meminfo(void)
{
	size_t free_b, total_b;
	CHECK(cuMemGetInfo(&free_b, &total_b));
	printf("free %zu\n", free_b);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: %s IMAGE [importer FD | export | import HEX]\n", argv[0]);
		return 2;
	}
	drv_open_device0();
	CUmodule module = drv_load_module(argv[1]);
	CHECK(cuModuleGetFunction(&fill, module, "fillU32"));
	if (argc == 4 && !strcmp(argv[2], "importer"))
		return importer(atoi(argv[3]));
	if (argc == 3 && !strcmp(argv[2], "export"))
		return export_hex();
	if ((argc == 4 || argc == 5) && !strcmp(argv[2], "import"))
		return import_hex(argv[3], argc == 5 ? argv[4] : NULL);
	if (argc == 3 && !strcmp(argv[2], "meminfo"))
		return meminfo();
	return exporter(argv);
}
