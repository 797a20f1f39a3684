/* Host allocations and registrations (page-aligned and locked where the limits allow,
 * tracked so that cuMemFreeHost, cuMemHostGetFlags and pointer attributes know them),
 * and mapped host memory.
 *
 * Mapped memory: the GPU cannot reach this process's memory across a network, so
 * cuMemHostGetDevicePointer gives an allocation a device buffer of its size (a
 * cuMemAlloc of the client's, charged to its quota) and the two copies are kept
 * coherent at synchronization points (docs/architecture.md, "Memory of every kind"):
 *   - before a kernel launch, a host copy that changed since it last went up goes to
 *     the device buffer, on the launch's stream; and before a synchronizing call, if
 *     kernels were launched since the last time, on a stream of its own, so that a kernel
 *     still running sees what the host wrote before the call waits for it;
 *   - after a synchronizing call that succeeded (stream, event or context synchronize,
 *     stream and event queries, blocking copies), if kernels were launched since the
 *     last time, every device buffer comes back to its host copy.
 * Bytes the host changed between a launch and the next synchronization are kept unless
 * the device changed the same bytes; the GPU's writes are seen by the host only after
 * synchronizing.
 * The device buffers of a process are bounded together by MAPPED_LIMIT. A pinned
 * allocation lies where the daemon reserved its address (host_alias.h), so that its device
 * buffer is mapped at the same address: a kernel handed the host pointer itself (unified
 * addressing) reads the device buffer, made at the first launch that names it
 * (rm_host_alias_params).
 *
 * Shared pinned memory (docs/hotpath.md): where the connection passes descriptors (the
 * daemon is on this host), an allocation of SHARE_MIN bytes or more is made from a sealed
 * memfd and shared with the daemon, which registers it with the driver; copies from and to
 * it then carry only where they are (memory.c). A share the daemon refuses leaves the
 * allocation plain memory of this process, copied over the connection as before. */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "graph_host.h"
#include "host_alias.h"
#include "host_memfd.h"
#include "remora.pb-c.h"
#include "transport.h"

#define MAPPED_LIMIT (64u << 20) /* bytes of device buffers for mapped host memory, per process */
#define HOST_BUFFER_ID_BIT (1ull << 63)
#define PUSH_RUNS_MAX 64       /* changed runs sent up before a synchronizing call, per allocation */
#define SHARE_MIN (64u << 10)    /* smaller allocations are not worth a descriptor and a round trip */

/* A host allocation's device buffer (owned by its struct host_alloc). */
struct mapping {
	CUdeviceptr dptr;
	CUcontext ctx;     /* current when it was made: its copies are made in it */
	void *shadow;      /* the host copy as it last went up or came down */
	CUstream side;     /* where changes go up before a synchronizing call; made when first needed */
};

struct host_alloc {
	void *p;
	size_t size;
	unsigned int flags;
	int registered; /* the program's own memory, given by cuMemHostRegister */
	int from_memfd; /* a MAP_SHARED mapping of a memfd (size_mapped bytes), not posix_memalign's */
	int from_mmap;  /* an anonymous mapping (size_mapped bytes) at its alias's address */
	int shared;     /* ... that the daemon registered (RM_OP_HOST_SHARE) */
	size_t size_mapped;
	uint64_t id;
	struct mapping *map;
	struct rm_host_alias alias; /* the daemon's reservation at p; alias.va 0: none */
	struct host_alloc *next;
};

/* host_lock guards the list and each record's fields; coherence_lock orders the
 * coherence copies and a mapping's removal, and is taken before host_lock, never inside it. */
static pthread_mutex_t host_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t coherence_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_alloc *host_allocs;
static uint64_t next_id = 1;
static size_t mapped_bytes;         /* under host_lock */
static atomic_int nmapped;          /* allocations with a device buffer */
static atomic_int launched;         /* a kernel was launched since device buffers last came down */
/* The span of every aliased allocation, for a quick look at kernel parameters (under
 * host_lock; read without it as a hint). */
static uint64_t alias_lo = UINT64_MAX, alias_hi;

static void insert(struct host_alloc *a)
{
	pthread_mutex_lock(&host_lock);
	a->id = HOST_BUFFER_ID_BIT | next_id++;
	a->next = host_allocs;
	host_allocs = a;
	pthread_mutex_unlock(&host_lock);
}

/* Makes a's memory a memfd mapping shared with the daemon, where the connection and the
 * daemon allow; 0 leaves a as it was (the caller allocates it the usual way). */
static int share_new(struct host_alloc *a, size_t bytesize, size_t page, void *at)
{
	if (bytesize < SHARE_MIN || !rm_rpc_passes_fds() || !rm_ctx_current())
		return 0;
	size_t len = (bytesize + page - 1) & ~(page - 1);
	int fd = -1;
	uint64_t ino = 0;
	void *p = NULL;
	int err = rm_memfd_map(len, at, &p, &fd, &ino);
	if (err) {
		rm_log(RM_LOG_DEBUG, "cuMemHostAlloc: no memfd for %zu bytes (%s): not shared", bytesize, strerror(-err));
		return 0;
	}
	Remora__HostShare req = REMORA__HOST_SHARE__INIT;
	req.addr = (uint64_t)(uintptr_t)p;
	req.length = bytesize;
	req.inode = ino;
	struct rm_rpc_call c = {.op = RM_OP_HOST_SHARE, .req = &req.base, .pass_fd = &fd};
	CUresult r = rm_rpc(&c);
	close(fd); /* the mapping holds the file; the daemon has its own descriptor */
	a->p = p;
	a->from_memfd = 1;
	a->size_mapped = len;
	a->shared = r == CUDA_SUCCESS;
	if (!a->shared) {
		rm_log(RM_LOG_DEBUG, "cuMemHostAlloc: %zu bytes not shared with the daemon (error %d): copied over "
		       "the connection", bytesize, (int)r);
		mlock(p, len);
	}
	return 1;
}

/* Gives back a's memory: unshared first (the daemon drains the client's work on it),
 * then unmapped or freed. */
static void host_memory_free(struct host_alloc *a)
{
	if (a->shared) {
		Remora__HostShare req = REMORA__HOST_SHARE__INIT;
		req.addr = (uint64_t)(uintptr_t)a->p;
		CUresult r = rm_rpc_simple(RM_OP_HOST_UNSHARE, &req.base, NULL, NULL);
		if (r != CUDA_SUCCESS) /* the daemon lost or gone: it released the region with the session */
			rm_log(RM_LOG_DEBUG, "cuMemFreeHost: unsharing %p: error %d", a->p, (int)r);
	}
	if (a->from_memfd || a->from_mmap) {
		munmap(a->p, a->size_mapped);
	} else {
		munlock(a->p, a->size);
		free(a->p);
	}
	rm_host_alias_release(&a->alias);
}

/* Places a's memory (len bytes, whole pages) where the daemon reserved its address; 0
 * leaves a without an alias (the caller places it the usual way). */
static int alias_new(struct host_alloc *a, size_t bytesize, size_t len, size_t page)
{
	if (rm_host_alias_reserve(len, &a->alias))
		return 0;
	void *at = (void *)(uintptr_t)a->alias.va;
	if (!share_new(a, bytesize, page, at)) {
		void *p = mmap(at, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p == at) {
			a->p = p;
			a->from_mmap = 1;
			a->size_mapped = len;
			mlock(p, len); /* best effort: RLIMIT_MEMLOCK may refuse */
		} else if (p != MAP_FAILED) {
			munmap(p, len);
		}
	}
	if (a->p != at) { /* the address is taken here: no alias */
		rm_log(RM_LOG_DEBUG, "cuMemHostAlloc: the address the daemon reserved (%p) is taken in this process", at);
		if (a->p)
			host_memory_free(a);
		rm_host_alias_release(&a->alias);
		a->p = NULL;
		a->from_memfd = a->from_mmap = a->shared = 0;
		return 0;
	}
	pthread_mutex_lock(&host_lock);
	if (a->alias.va < alias_lo)
		alias_lo = a->alias.va;
	if (a->alias.va + len > alias_hi)
		alias_hi = a->alias.va + len;
	pthread_mutex_unlock(&host_lock);
	return 1;
}

RM_EXPORT CUresult CUDAAPI cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
	if (!pp || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	struct host_alloc *a = calloc(1, sizeof(*a));
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *p = NULL;
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t len = (bytesize + page - 1) & ~(page - 1);
	if (alias_new(a, bytesize, len, page) || share_new(a, bytesize, page, NULL)) {
		p = a->p;
	} else if (posix_memalign(&p, page, bytesize)) {
		free(a);
		return CUDA_ERROR_OUT_OF_MEMORY;
	} else {
		mlock(p, bytesize); /* best effort: RLIMIT_MEMLOCK may refuse */
	}
	a->p = p;
	a->size = bytesize;
	a->flags = Flags;
	insert(a);
	rm_transport_pin(p, bytesize); /* rdma: registered once, read from and into straight */
	*pp = p;
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuMemAllocHost_v2(void **pp, size_t bytesize)
{
	return cuMemHostAlloc(pp, bytesize, 0);
}

/* Frees a's device buffer, if it has one, in the context it was made in. */
static void unmap(struct host_alloc *a)
{
	struct mapping *m = a->map;
	if (!m)
		return;
	CUcontext cur = rm_ctx_current();
	int pushed = cur != m->ctx && cuCtxPushCurrent_v2(m->ctx) == CUDA_SUCCESS;
	CUresult r = CUDA_SUCCESS;
	if (a->alias.backing) { /* the reservation stays until the memory is freed */
		r = cuMemUnmap(a->alias.va, a->alias.reserved);
		cuMemRelease(a->alias.backing);
		a->alias.backing = 0;
	} else {
		r = cuMemFree_v2(m->dptr);
	}
	if (m->side)
		cuStreamDestroy_v2(m->side);
	if (r != CUDA_SUCCESS)
		rm_log(RM_LOG_WARN, "freeing the device buffer of mapped host memory %p: error %d", a->p, (int)r);
	if (pushed)
		cuCtxPopCurrent_v2(&cur);
	pthread_mutex_lock(&host_lock);
	mapped_bytes -= a->size;
	pthread_mutex_unlock(&host_lock);
	atomic_fetch_sub(&nmapped, 1);
	free(m->shadow);
	free(m);
	a->map = NULL;
}

void rm_host_memory_ctx_gone(CUcontext ctx)
{
	pthread_mutex_lock(&coherence_lock); /* the list changes only under it */
	pthread_mutex_lock(&host_lock);
	struct host_alloc *a = host_allocs;
	pthread_mutex_unlock(&host_lock);
	for (; a; a = a->next)
		if (a->map && a->map->ctx == ctx)
			unmap(a);
	pthread_mutex_unlock(&coherence_lock);
}

/* Unlinks the allocation starting at p of the given origin, or returns NULL. */
static struct host_alloc *take_host_alloc(void *p, int registered)
{
	pthread_mutex_lock(&coherence_lock); /* no coherence copy is using it meanwhile */
	pthread_mutex_lock(&host_lock);
	struct host_alloc **link = &host_allocs;
	while (*link && ((*link)->p != p || (*link)->registered != registered))
		link = &(*link)->next;
	struct host_alloc *a = *link;
	if (a)
		*link = a->next;
	pthread_mutex_unlock(&host_lock);
	if (a)
		unmap(a);
	pthread_mutex_unlock(&coherence_lock);
	return a;
}

RM_EXPORT CUresult CUDAAPI cuMemFreeHost(void *p)
{
	struct host_alloc *a = take_host_alloc(p, 0);
	if (!a)
		return CUDA_ERROR_INVALID_VALUE;
	rm_transport_unpin(a->p);
	host_memory_free(a);
	free(a);
	return CUDA_SUCCESS;
}

/* Copies from and to registered memory already go straight from the program's
 * buffer; registering locks it where the limits allow and records it. */
RM_EXPORT CUresult CUDAAPI cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
	if (!p || !bytesize)
		return CUDA_ERROR_INVALID_VALUE;
	if (rm_host_alloc_find(p, NULL, NULL, NULL))
		return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
	struct host_alloc *a = calloc(1, sizeof(*a));
	if (!a)
		return CUDA_ERROR_OUT_OF_MEMORY;
	mlock(p, bytesize);
	a->p = p;
	a->size = bytesize;
	a->flags = Flags;
	a->registered = 1;
	insert(a);
	rm_transport_pin(p, bytesize);
	return CUDA_SUCCESS;
}

RM_EXPORT CUresult CUDAAPI cuMemHostRegister(void *p, size_t bytesize, unsigned int Flags)
{
	return cuMemHostRegister_v2(p, bytesize, Flags);
}

RM_EXPORT CUresult CUDAAPI cuMemHostUnregister(void *p)
{
	struct host_alloc *a = take_host_alloc(p, 1);
	if (!a)
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	rm_transport_unpin(a->p);
	munlock(a->p, a->size);
	free(a);
	return CUDA_SUCCESS;
}

/* Caller holds host_lock. */
static struct host_alloc *find_locked(const void *p)
{
	for (struct host_alloc *a = host_allocs; a; a = a->next)
		if ((const char *)p >= (char *)a->p && (const char *)p < (char *)a->p + a->size)
			return a;
	return NULL;
}

int rm_host_alloc_info(const void *p, struct rm_host_info *out)
{
	pthread_mutex_lock(&host_lock);
	struct host_alloc *a = find_locked(p);
	if (a && out)
		*out = (struct rm_host_info){.base = a->p, .size = a->size, .flags = a->flags, .buffer_id = a->id,
					     .mapped = a->map ? a->map->dptr : 0};
	pthread_mutex_unlock(&host_lock);
	return a != NULL;
}

int rm_host_shared_find(const void *p, size_t n, uint64_t *region, uint64_t *offset)
{
	pthread_mutex_lock(&host_lock);
	struct host_alloc *a = find_locked(p);
	size_t off = a ? (size_t)((const char *)p - (char *)a->p) : 0;
	int shared = a && a->shared && n <= a->size - off;
	if (shared) {
		*region = (uint64_t)(uintptr_t)a->p;
		*offset = off;
	}
	pthread_mutex_unlock(&host_lock);
	return shared;
}

int rm_host_alloc_find(const void *p, void **base, size_t *size, unsigned int *flags)
{
	struct rm_host_info info;
	if (!rm_host_alloc_info(p, &info))
		return 0;
	if (base)
		*base = info.base;
	if (size)
		*size = info.size;
	if (flags)
		*flags = info.flags;
	return 1;
}

RM_EXPORT CUresult CUDAAPI cuMemHostGetFlags(unsigned int *pFlags, void *p)
{
	if (!pFlags)
		return CUDA_ERROR_INVALID_VALUE;
	return rm_host_alloc_find(p, NULL, NULL, pFlags) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* Gives the allocation holding p a device buffer, made in the current context and
 * filled with the host copy, unless it has one. Every pinned allocation and registration
 * may be mapped, as on a GPU with unified addressing, whatever its flags. */
RM_EXPORT CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int Flags)
{
	if (!pdptr || !p || Flags)
		return CUDA_ERROR_INVALID_VALUE;
	CUcontext ctx = rm_ctx_current();
	if (!ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&coherence_lock);
	pthread_mutex_lock(&host_lock);
	struct host_alloc *a = find_locked(p);
	CUresult r = a ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	int fits = a && !a->map && a->size <= MAPPED_LIMIT - mapped_bytes;
	if (fits)
		mapped_bytes += a->size; /* reserved while the buffer is made (coherence_lock keeps a) */
	else if (a && !a->map)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&host_lock);
	if (r == CUDA_ERROR_OUT_OF_MEMORY)
		rm_log(RM_LOG_ERROR, "cuMemHostGetDevicePointer: mapping %zu bytes of host memory would pass the %u bytes "
		       "this process may map (mapped memory is copied at synchronization points: docs/architecture.md)",
		       a->size, MAPPED_LIMIT);
	if (fits) {
		struct mapping *m = calloc(1, sizeof(*m));
		void *shadow = malloc(a->size);
		r = !m || !shadow ? CUDA_ERROR_OUT_OF_MEMORY
		    : a->alias.va ? rm_host_alias_back(&a->alias) /* at the host address itself */
				  : cuMemAlloc_v2(&m->dptr, a->size);
		if (r == CUDA_SUCCESS && a->alias.va)
			m->dptr = a->alias.va;
		if (r == CUDA_SUCCESS) {
			memcpy(shadow, a->p, a->size);
			r = rm_copy_to_device(m->dptr, shadow, a->size, NULL, 1);
			if (r != CUDA_SUCCESS && a->alias.backing) {
				cuMemUnmap(a->alias.va, a->alias.reserved);
				cuMemRelease(a->alias.backing);
				a->alias.backing = 0;
			} else if (r != CUDA_SUCCESS) {
				cuMemFree_v2(m->dptr);
			}
		}
		pthread_mutex_lock(&host_lock);
		if (r == CUDA_SUCCESS) {
			m->ctx = ctx;
			m->shadow = shadow;
			a->map = m;
			atomic_fetch_add(&nmapped, 1);
		} else {
			mapped_bytes -= a->size;
			free(shadow);
			free(m);
		}
		pthread_mutex_unlock(&host_lock);
	}
	if (r == CUDA_SUCCESS)
		*pdptr = a->map->dptr + (CUdeviceptr)((char *)p - (char *)a->p);
	pthread_mutex_unlock(&coherence_lock);
	return r;
}

/* Runs copy(a, arg, other) on every mapped allocation with the coherence lock held and
 * its context current (other: not the caller's); stops at the first error. */
static CUresult each_mapped(CUresult (*copy)(struct host_alloc *a, void *arg, int other), void *arg)
{
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&coherence_lock);
	/* The list may grow meanwhile (at its head); records of mapped allocations stay
	 * while coherence_lock is held. */
	pthread_mutex_lock(&host_lock);
	struct host_alloc *a = host_allocs;
	pthread_mutex_unlock(&host_lock);
	for (; a && r == CUDA_SUCCESS; a = a->next) {
		if (!a->map)
			continue;
		CUcontext cur = rm_ctx_current();
		int pushed = cur != a->map->ctx && cuCtxPushCurrent_v2(a->map->ctx) == CUDA_SUCCESS;
		r = copy(a, arg, pushed);
		if (pushed)
			cuCtxPopCurrent_v2(&cur);
	}
	pthread_mutex_unlock(&coherence_lock);
	return r;
}

/* On the launch's stream, or the NULL stream of another context's allocation. */
static CUresult push(struct host_alloc *a, void *arg, int other)
{
	struct mapping *m = a->map;
	if (!memcmp(m->shadow, a->p, a->size))
		return CUDA_SUCCESS;
	memcpy(m->shadow, a->p, a->size);
	return rm_copy_to_device(m->dptr, m->shadow, a->size, other ? NULL : *(CUstream *)arg, 0);
}

/* Brings down what the device changed: each byte of the device buffer that differs from
 * the shadow (as it last went up or came down) goes to the host copy and the shadow; what
 * the host changed meanwhile (its own stores, or a copy into it) and the device did not is
 * kept, and goes up before the next launch. */
static CUresult pull(struct host_alloc *a, void *arg, int other)
{
	(void)arg;
	(void)other;
	struct mapping *m = a->map;
	unsigned char *dev = malloc(a->size), *shadow = m->shadow, *host = a->p;
	CUresult r = dev ? rm_copy_from_device(dev, m->dptr, a->size) : CUDA_ERROR_OUT_OF_MEMORY;
	size_t both = 0, first = 0;
	for (size_t i = 0; r == CUDA_SUCCESS && i < a->size; i++) {
		if (dev[i] == shadow[i])
			continue;
		if (host[i] != shadow[i] && host[i] != dev[i] && !both++)
			first = i;
		host[i] = shadow[i] = dev[i];
	}
	free(dev);
	/* Both sides wrote these bytes meanwhile: a concurrent access a copy kept coherent at
	 * synchronization cannot merge. An error, never a wrong answer. */
	if (both) {
		rm_log(RM_LOG_ERROR, "mapped host memory at %p: the host and the GPU both wrote %zu byte(s) of it "
		       "between a launch and its synchronize; a remote GPU sees host memory only at launches and "
		       "synchronizations, so the host's writes are lost", (void *)(host + first), both);
		r = CUDA_ERROR_NOT_SUPPORTED;
	}
	return r;
}

/* Now, on the mapping's own stream, which waits for no other: a kernel still running sees
 * it before the synchronizing call that follows waits for the kernel (one spinning on a
 * flag the host sets, as natively it would). Only the runs of bytes the host changed go,
 * so that what a running kernel wrote elsewhere in the allocation stays; past
 * PUSH_RUNS_MAX runs, the rest waits for the next launch. */
static CUresult push_now(struct host_alloc *a, void *arg, int other)
{
	(void)arg;
	(void)other;
	struct mapping *m = a->map;
	unsigned char *host = a->p, *shadow = m->shadow;
	CUresult r = CUDA_SUCCESS;
	int runs = 0;
	for (size_t i = 0; i < a->size && r == CUDA_SUCCESS && runs < PUSH_RUNS_MAX;) {
		if (host[i] == shadow[i]) {
			i++;
			continue;
		}
		size_t end = i;
		while (end < a->size && host[end] != shadow[end])
			end++;
		if (!m->side && (r = cuStreamCreate(&m->side, CU_STREAM_NON_BLOCKING)) != CUDA_SUCCESS)
			break;
		memcpy(shadow + i, host + i, end - i);
		r = rm_copy_to_device(m->dptr + i, shadow + i, end - i, m->side, 0);
		runs++;
		i = end;
	}
	return r;
}

CUresult rm_mapped_before_sync(void)
{
	if (!atomic_load(&nmapped) || !atomic_load(&launched) || rm_graph_host_draining())
		return CUDA_SUCCESS;
	return each_mapped(push_now, NULL);
}

CUresult rm_mapped_before_launch(CUstream stream)
{
	CUresult r = rm_managed_push(stream);
	if (r != CUDA_SUCCESS)
		return r;
	if (!atomic_load(&nmapped))
		return CUDA_SUCCESS;
	atomic_store(&launched, 1);
	return each_mapped(push, &stream);
}

int rm_sync_has_effects(void)
{
	return atomic_load(&nmapped) || rm_managed_any() || rm_graph_host_pending() || rm_hostfn_used();
}

CUresult rm_mapped_after_sync(void)
{
	if (rm_graph_host_draining())
		return CUDA_SUCCESS; /* the drain's own calls bring nothing down */
	CUresult r = rm_graph_host_after_sync(); /* graphs' host destinations (graph_host.c) */
	if (r == CUDA_SUCCESS)
		r = rm_managed_pull();
	if (r != CUDA_SUCCESS)
		return r;
	if (!atomic_load(&nmapped) || !atomic_exchange(&launched, 0))
		return CUDA_SUCCESS;
	return each_mapped(pull, NULL);
}

CUresult rm_host_alias_params(const uint8_t *params, size_t len)
{
	if (__atomic_load_n(&alias_hi, __ATOMIC_RELAXED) == 0)
		return CUDA_SUCCESS; /* no aliased allocation: most programs */
	for (size_t o = 0; o + sizeof(uint64_t) <= len; o += sizeof(uint64_t)) {
		uint64_t v;
		memcpy(&v, params + o, sizeof(v));
		if (v < __atomic_load_n(&alias_lo, __ATOMIC_RELAXED) || v >= __atomic_load_n(&alias_hi, __ATOMIC_RELAXED))
			continue;
		pthread_mutex_lock(&host_lock);
		struct host_alloc *a = find_locked((const void *)(uintptr_t)v);
		int unbacked = a && a->alias.va && !a->map;
		pthread_mutex_unlock(&host_lock);
		CUdeviceptr dptr;
		CUresult r = unbacked ? cuMemHostGetDevicePointer_v2(&dptr, (void *)(uintptr_t)v, 0) : CUDA_SUCCESS;
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}
