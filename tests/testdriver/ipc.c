/* CUDA IPC between processes. A handle names the exporting process and a descriptor of its:
 * exporting an allocation moves its bytes into a memfd mapped at the same address (shared
 * from then on), and an interprocess event's state is a shared page (struct td_ipc_event:
 * how many records were made, how many are done). Another process opens the handle through
 * /proc/PID/fd/FD and maps the memfd or the page; in the exporting process it is refused as
 * the driver refuses it (CUDA_ERROR_INVALID_CONTEXT). An event's record is a host op of its
 * stream marking it done; a wait, a host op spinning until the latest record is done, as a
 * GPU's wait on a semaphore. A page stays mapped for the process's life (a stream's queued
 * op may still name it). The VMM path, whose memory is a memfd, works likewise (vmm.c). */
#include "testdriver.h"

#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define IPC_MAGIC_MEM 0x50494454u   /* "TDIP" */
#define IPC_MAGIC_EVENT 0x45494454u /* "TDIE" */

struct td_ipc_handle {
	uint32_t magic;
	uint32_t pid;
	uint64_t what; /* the base address or the event */
	uint64_t size; /* memory: its length */
	int32_t fd;    /* the exporter's descriptor of the memfd or the page */
	uint64_t id;   /* memory: the allocation's buffer id (an address is used again) */
};

_Static_assert(sizeof(struct td_ipc_handle) <= CU_IPC_HANDLE_SIZE, "a handle fits CUipcMemHandle");

struct td_ipc_event {
	uint64_t recorded; /* records made, by any process */
	uint64_t done;     /* the latest record done (a number of recorded) */
};

/* Exported allocations (their memfds) and opened ones (mappings of another process's). */
struct shared_mem {
	uintptr_t base;
	size_t size;
	int fd;            /* exported: this process's memfd */
	uint64_t id;       /* exported: the allocation's buffer id */
	uint32_t pid;      /* opened: the exporter, its base and buffer id */
	uint64_t what;
	unsigned refs;
	bool pool;         /* opened: an allocation of an imported pool (freed, not closed) */
};
static pthread_mutex_t ipc_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shared_mem *mems;
static size_t nmems, mems_cap;

static void put(char *reserved, const struct td_ipc_handle *h)
{
	memset(reserved, 0, CU_IPC_HANDLE_SIZE);
	memcpy(reserved, h, sizeof(*h));
}

/* The other process's descriptor in h, opened here: -1 where it is this process's own. */
static CUresult open_other(const char *reserved, uint32_t magic, struct td_ipc_handle *h, int *fd)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	memcpy(h, reserved, sizeof(*h));
	if (h->magic != magic)
		return CUDA_ERROR_INVALID_VALUE;
	if (h->pid == (uint32_t)getpid())
		return CUDA_ERROR_INVALID_CONTEXT;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%u/fd/%d", h->pid, h->fd);
	*fd = open(path, O_RDWR | O_CLOEXEC);
	return *fd < 0 ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

static struct shared_mem *add_mem(void)
{
	if (nmems == mems_cap) {
		size_t cap = mems_cap ? 2 * mems_cap : 16;
		struct shared_mem *grown = realloc(mems, cap * sizeof(*grown));
		if (!grown)
			return NULL;
		mems = grown, mems_cap = cap;
	}
	return memset(&mems[nmems++], 0, sizeof(mems[0]));
}

/* The allocation's bytes moved into a memfd mapped in its place (under ipc_lock). An entry of
 * a freed allocation at the same address goes. */
static int share_alloc(const struct td_alloc *a)
{
	for (size_t i = 0; i < nmems; i++)
		if (mems[i].base == a->base && !mems[i].pid && mems[i].id == a->buffer_id)
			return mems[i].fd;
		else if (mems[i].base == a->base && !mems[i].pid) {
			close(mems[i].fd);
			mems[i--] = mems[--nmems];
		}
	int fd = memfd_create("td-ipc-mem", MFD_CLOEXEC);
	struct shared_mem *m = fd >= 0 ? add_mem() : NULL;
	if (!m || ftruncate(fd, (off_t)a->size) || pwrite(fd, (void *)a->base, a->size, 0) != (ssize_t)a->size ||
	    mmap((void *)a->base, a->size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0) == MAP_FAILED) {
		if (m)
			nmems--;
		if (fd >= 0)
			close(fd);
		return -1;
	}
	*m = (struct shared_mem){.base = a->base, .size = a->size, .fd = fd, .id = a->buffer_id};
	return fd;
}

TD_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_alloc a;
	if (!pHandle || !td_find_alloc(dptr, 1, &a) || a.kind != TD_ALLOC_DEVICE || a.pool)
		return CUDA_ERROR_INVALID_VALUE; /* cuMemAlloc's memory only: not a pool's, managed or host */
	int fd = td_ipc_share_alloc(&a);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct td_ipc_handle h = {IPC_MAGIC_MEM, (uint32_t)getpid(), a.base, a.size, fd, a.buffer_id};
	put(pHandle->reserved, &h);
	return CUDA_SUCCESS;
}

int td_ipc_share_alloc(const struct td_alloc *a)
{
	pthread_mutex_lock(&ipc_lock);
	int fd = share_alloc(a);
	pthread_mutex_unlock(&ipc_lock);
	return fd;
}

/* Maps another process's allocation (exporter pid, its base what, buffer id, size, our
 * descriptor fd of its memfd, which this closes); opened again, the same mapping, counted. */
CUresult td_ipc_open_mem(uint32_t pid, uint64_t what, uint64_t id, uint64_t size, int fd, bool pool,
			 CUdeviceptr *pdptr)
{
	struct td_ipc_handle h = {IPC_MAGIC_MEM, pid, what, size, fd, id};
	CUresult rc = CUDA_SUCCESS;
	pthread_mutex_lock(&ipc_lock);
	for (size_t i = 0; i < nmems; i++)
		if (mems[i].pid == h.pid && mems[i].what == h.what && mems[i].id == h.id) {
			mems[i].refs++;
			*pdptr = mems[i].base;
			pthread_mutex_unlock(&ipc_lock);
			close(fd);
			return CUDA_SUCCESS;
		}
	struct td_context *ctx = td_current_context();
	void *p = mmap(NULL, h.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	struct shared_mem *m = p != MAP_FAILED ? add_mem() : NULL;
	if (m && td_track(p, h.size, TD_ALLOC_DEVICE, ctx, ctx->device) == CUDA_SUCCESS) {
		*m = (struct shared_mem){.base = (uintptr_t)p, .size = h.size, .fd = -1, .id = h.id, .pid = h.pid,
					 .what = h.what, .refs = 1, .pool = pool};
		*pdptr = (CUdeviceptr)(uintptr_t)p;
	} else {
		if (m)
			nmems--;
		if (p != MAP_FAILED)
			munmap(p, h.size);
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_unlock(&ipc_lock);
	return rc;
}

TD_EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	if (!pdptr || (Flags & ~(unsigned)CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
		return CUDA_ERROR_INVALID_VALUE;
	struct td_ipc_handle h;
	int fd = -1;
	CUresult rc = open_other(handle.reserved, IPC_MAGIC_MEM, &h, &fd);
	return rc == CUDA_SUCCESS ? td_ipc_open_mem(h.pid, h.what, h.id, h.size, fd, false, pdptr) : rc;
}

TD_EXPORT CUresult cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
	return cuIpcOpenMemHandle_v2(pdptr, handle, Flags);
}

bool td_ipc_close_mem(CUdeviceptr dptr, bool pool)
{
	bool found = false;
	pthread_mutex_lock(&ipc_lock);
	for (size_t i = 0; i < nmems && !found; i++)
		if (mems[i].pid && mems[i].base == dptr && mems[i].pool == pool) {
			if (--mems[i].refs == 0) {
				td_untrack(mems[i].base, TD_ALLOC_DEVICE);
				munmap((void *)mems[i].base, mems[i].size);
				mems[i] = mems[--nmems];
			}
			found = true;
		}
	pthread_mutex_unlock(&ipc_lock);
	return found;
}

TD_EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr dptr)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	return td_ipc_close_mem(dptr, false) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- events ---- */

/* A shared page for an interprocess event of this process: its descriptor in *fd. */
struct td_ipc_event *td_ipc_event_new(int *fd)
{
	*fd = memfd_create("td-ipc-event", MFD_CLOEXEC);
	void *p = MAP_FAILED;
	if (*fd >= 0 && !ftruncate(*fd, sizeof(struct td_ipc_event)))
		p = mmap(NULL, sizeof(struct td_ipc_event), PROT_READ | PROT_WRITE, MAP_SHARED, *fd, 0);
	if (p == MAP_FAILED && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return p == MAP_FAILED ? NULL : p;
}

struct ipc_op {
	struct td_ipc_event *ev;
	uint64_t n;
};

static void signal_done(void *arg)
{
	struct ipc_op *o = arg;
	uint64_t d = __atomic_load_n(&o->ev->done, __ATOMIC_ACQUIRE);
	while (d < o->n && !__atomic_compare_exchange_n(&o->ev->done, &d, o->n, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
		;
	free(o);
}

static void wait_done(void *arg)
{
	struct ipc_op *o = arg;
	while (__atomic_load_n(&o->ev->done, __ATOMIC_ACQUIRE) < o->n)
		sched_yield();
	free(o);
}

static CUresult enqueue(struct td_stream *s, void (*fn)(void *), struct td_ipc_event *ev, uint64_t n)
{
	struct ipc_op *o = malloc(sizeof(*o));
	struct td_op *op = o ? td_op_new(TD_OP_HOST) : NULL;
	if (!op) {
		free(o);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*o = (struct ipc_op){ev, n};
	op->u.host.fn = fn;
	op->u.host.data = o;
	td_enqueue(s, op);
	return CUDA_SUCCESS;
}

CUresult td_ipc_event_record(struct td_ipc_event *ev, struct td_stream *s)
{
	return enqueue(s, signal_done, ev, __atomic_add_fetch(&ev->recorded, 1, __ATOMIC_ACQ_REL));
}

CUresult td_ipc_event_wait(struct td_ipc_event *ev, struct td_stream *s)
{
	uint64_t n = __atomic_load_n(&ev->recorded, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&ev->done, __ATOMIC_ACQUIRE) >= n ? CUDA_SUCCESS : enqueue(s, wait_done, ev, n);
}

CUresult td_ipc_event_query(struct td_ipc_event *ev)
{
	return __atomic_load_n(&ev->done, __ATOMIC_ACQUIRE) >= __atomic_load_n(&ev->recorded, __ATOMIC_ACQUIRE)
		       ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult td_ipc_event_synchronize(struct td_ipc_event *ev)
{
	uint64_t n = __atomic_load_n(&ev->recorded, __ATOMIC_ACQUIRE);
	while (__atomic_load_n(&ev->done, __ATOMIC_ACQUIRE) < n)
		sched_yield();
	return td_sticky_error();
}

TD_EXPORT CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
	struct td_event *e = (struct td_event *)event;
	if (!pHandle || !e || e->magic != TD_MAGIC_EVENT)
		return CUDA_ERROR_INVALID_HANDLE;
	if (!(e->flags & CU_EVENT_INTERPROCESS) || !(e->flags & CU_EVENT_DISABLE_TIMING) || !e->ipc)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_ipc_handle h = {IPC_MAGIC_EVENT, (uint32_t)getpid(), (uint64_t)(uintptr_t)e, 0, e->ipc_fd, 0};
	put(pHandle->reserved, &h);
	return CUDA_SUCCESS;
}

/* An event of the current context over the exporter's page. */
TD_EXPORT CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
	if (!phEvent)
		return CUDA_ERROR_INVALID_VALUE;
	struct td_ipc_handle h;
	int fd = -1;
	CUresult rc = open_other(handle.reserved, IPC_MAGIC_EVENT, &h, &fd);
	if (rc != CUDA_SUCCESS)
		return rc;
	void *page = mmap(NULL, sizeof(struct td_ipc_event), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (page == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	rc = td_event_new(phEvent, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS, page);
	if (rc != CUDA_SUCCESS)
		munmap(page, sizeof(struct td_ipc_event));
	return rc;
}
