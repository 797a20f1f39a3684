/* Virtual memory management (typed bodies of generated handlers).
 *
 * What a client holds: physical allocations (RM_H_PHYSICAL, charged to its quotas like
 * cuMemAlloc from cuMemCreate until they are both released and unmapped, as the driver
 * frees them), reserved address ranges (RM_H_VA_RANGE) and the pieces of them it mapped
 * (RM_H_MAPPING: usable device memory for later pointer checks, the physical allocation
 * as parent). Device ordinals in locations are the client's, translated both ways. An
 * allocation may live on a device or in the GPU host's memory; access is for devices only
 * (the client's CPU cannot reach the GPU host's memory). */
#include "dispatch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deferred.h"
#include "ipc.h"
#include "log.h"
#include "memory_window.h"
#include "worker.h"

#define MAX_ACCESS_DESCS 64

/* The calls that check the client's records, call the driver and then update them go one
 * at a time in a worker, so that two threads of a client cannot both pass a check (a
 * channel each, docs/protocol.md). They are rare: an allocator growing or shrinking. */
static pthread_mutex_t vmm_lock = PTHREAD_MUTEX_INITIALIZER;

/* The client's location as the host's: a device location with the client's ordinal. */
static CUresult location_in(struct rm_channel *s, CUmemLocation *loc)
{
	if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE)
		return rm_unsupported_use("virtual memory access from a location other than a device");
	CUdevice dev;
	CUresult r = rm_session_device(s, loc->id, &dev);
	if (r == CUDA_SUCCESS)
		loc->id = dev;
	return r;
}

/* Where an allocation may live: a device of the client's, or the GPU host's memory (HOST,
 * HOST_NUMA with the GPU host's node, which cuDeviceGetAttribute's HOST_NUMA_ID gives, or
 * HOST_NUMA_CURRENT: the worker's node), which its GPUs reach and the client's CPU cannot. */
static int host_located(const CUmemLocation *loc)
{
	return loc->type == CU_MEM_LOCATION_TYPE_HOST || loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
	       loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

/* A copy of the client's allocation properties the driver may be given. */
static CUresult prop_in(struct rm_channel *s, const CUmemAllocationProp *from, CUmemAllocationProp *prop)
{
	memcpy(prop, from, sizeof(*prop));
	prop->win32HandleMetaData = NULL; /* a pointer of the client's means nothing here */
	return host_located(&prop->location) ? CUDA_SUCCESS : location_in(s, &prop->location);
}

CUresult rm_body_cuMemGetAllocationGranularity(struct rm_channel *s, size_t *granularity, const CUmemAllocationProp *prop,
					       CUmemAllocationGranularity_flags option)
{
	CUmemAllocationProp p;
	CUresult r = prop_in(s, prop, &p);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuMemGetAllocationGranularity(granularity, &p, option);
	return r;
}

CUresult rm_body_cuMemCreate(struct rm_channel *s, CUmemGenericAllocationHandle *handle, size_t size,
			     const CUmemAllocationProp *prop, unsigned long long flags)
{
	CUmemAllocationProp p;
	CUresult r = prop_in(s, prop, &p);
	if (r != CUDA_SUCCESS)
		return r;
	int host = host_located(&p.location);
	if ((r = host ? rm_session_charge_host(s, size) : rm_session_charge(s, size)) != CUDA_SUCCESS)
		return r;
	r = rm_drv_cuMemCreate(handle, size, &p, flags);
	if (r == CUDA_SUCCESS && host && rm_session_note_host_physical(*handle, size) != CUDA_SUCCESS) {
		rm_drv_cuMemRelease(*handle);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_PHYSICAL, *handle, size, 0);
	else if (host)
		rm_session_uncharge_host(s, size);
	else
		rm_session_uncharge(s, size);
	return r;
}

/* Whether h is a live (unreleased) physical allocation of the client's; logged if not. */
static int physical(struct rm_channel *s, CUmemGenericAllocationHandle h)
{
	struct rm_handle p;
	if (!rm_session_find(s, RM_H_PHYSICAL, h, &p) || p.parent) {
		rm_session_log(s, RM_LOG_WARN, "refused physical allocation 0x%llx it does not own",
		               (unsigned long long)h);
		return 0;
	}
	return 1;
}

static int maps(const struct rm_handle *h, void *handle)
{
	return h->parent == *(uint64_t *)handle;
}

static int mapped(struct rm_channel *s, uint64_t handle)
{
	return rm_session_each(s, RM_H_MAPPING, maps, &handle);
}

/* Forgets a released physical allocation no longer mapped, and its charge. */
static void settle(struct rm_channel *s, uint64_t handle)
{
	struct rm_handle p;
	if (!rm_session_find(s, RM_H_PHYSICAL, handle, &p) || !p.parent || mapped(s, handle))
		return;
	rm_session_disown_value(s, RM_H_PHYSICAL, handle);
	rm_session_uncharge_physical(s, handle, p.size);
	if (rm_ipc_leave(s, RM_IPC_PHYSICAL, handle) == RM_IPC_LAST) /* shared: released now, by its last holder */
		rm_drv_cuMemRelease(handle);
}

CUresult rm_body_cuMemRelease(struct rm_channel *s, CUmemGenericAllocationHandle handle)
{
	pthread_mutex_lock(&vmm_lock);
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	int mine = physical(s, handle), refs = mine ? rm_ipc_unref(s, RM_IPC_PHYSICAL, handle) : 0;
	if (mine && refs > 0) { /* imported again: one release each */
		r = CUDA_SUCCESS;
	} else if (mine) {
		r = refs < 0 ? rm_drv_cuMemRelease(handle) : CUDA_SUCCESS; /* shared: the last holder releases it */
		if (r == CUDA_SUCCESS) {
			rm_session_set_parent(s, RM_H_PHYSICAL, handle, 1); /* released: freed once unmapped */
			settle(s, handle);
		}
	}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

CUresult rm_body_cuMemGetAllocationPropertiesFromHandle(struct rm_channel *s, CUmemAllocationProp *prop,
							CUmemGenericAllocationHandle handle)
{
	if (!physical(s, handle))
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = rm_drv_cuMemGetAllocationPropertiesFromHandle(prop, handle);
	if (r == CUDA_SUCCESS && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
		CUdevice ord;
		r = rm_session_device_out(s, prop->location.id, &ord);
		prop->location.id = ord;
	}
	prop->win32HandleMetaData = NULL;
	return r;
}

CUresult rm_body_cuMemAddressReserve(struct rm_channel *s, CUdeviceptr *ptr, size_t size, size_t alignment,
				     CUdeviceptr addr, unsigned long long flags)
{
	CUresult r = CUDA_SUCCESS;
	if (rm_worker_config()->migratable_memory) /* in this worker's window, to move (memory_window.h) */
		r = (*ptr = rm_window_reserve(size, alignment)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
	else
		r = rm_drv_cuMemAddressReserve(ptr, size, alignment, addr, flags); /* addr is only a hint */
	if (r == CUDA_SUCCESS)
		rm_session_own_memory(s, RM_H_VA_RANGE, *ptr, size, 0);
	return r;
}

struct span {
	uint64_t ptr, size;
	int cut;
};

static int holds(const struct rm_handle *h, void *arg)
{
	const struct span *x = arg;
	return x->ptr >= h->value && x->ptr - h->value <= h->size && x->size <= h->size - (x->ptr - h->value);
}

/* Whether a reservation of the client's holds [ptr, ptr + size) (logged if not). */
static int reservation(struct rm_channel *s, uint64_t ptr, uint64_t size)
{
	struct span x = {ptr, size, 0};
	if (rm_session_each(s, RM_H_VA_RANGE, holds, &x))
		return 1;
	rm_session_log(s, RM_LOG_WARN, "refused address range 0x%llx+%llu outside its reservations",
	               (unsigned long long)ptr, (unsigned long long)size);
	return 0;
}

static int overlaps(const struct rm_handle *h, void *arg)
{
	const struct span *x = arg;
	if (h->value >= x->ptr + x->size || x->ptr >= h->value + h->size)
		return 0;
	return !x->cut || h->value < x->ptr || h->value + h->size > x->ptr + x->size;
}

/* Whether a mapping of the client's overlaps [ptr, ptr + size); with cut, one that is
 * not wholly inside it. */
static int overlapping(struct rm_channel *s, uint64_t ptr, uint64_t size, int cut)
{
	struct span x = {ptr, size, cut};
	return rm_session_each(s, RM_H_MAPPING, overlaps, &x);
}

/* Unmaps made off the clients' threads (cuMemUnmap waits for every client's work in the
 * shared context, deferred.h) and not yet done: a range may not be mapped again, nor its
 * reservation freed, before. */
#define MAX_PENDING 256
static struct pending_unmap {
	uint64_t ptr, size;
} pending[MAX_PENDING];
static int npending;
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t unmapped = PTHREAD_COND_INITIALIZER;

static int pending_over_locked(uint64_t ptr, uint64_t size)
{
	for (int i = 0; i < npending; i++)
		if (pending[i].ptr < ptr + size && ptr < pending[i].ptr + pending[i].size)
			return 1;
	return 0;
}

static int pending_over(uint64_t ptr, uint64_t size)
{
	pthread_mutex_lock(&pending_lock);
	int over = pending_over_locked(ptr, size);
	pthread_mutex_unlock(&pending_lock);
	return over;
}

/* Waits until no unmap of [ptr, ptr + size) is pending. */
static void wait_unmapped(uint64_t ptr, uint64_t size)
{
	pthread_mutex_lock(&pending_lock);
	while (pending_over_locked(ptr, size))
		pthread_cond_wait(&unmapped, &pending_lock);
	pthread_mutex_unlock(&pending_lock);
}

static void unmap_done(void *arg)
{
	struct pending_unmap *u = arg;
	pthread_mutex_lock(&pending_lock);
	for (int i = 0; i < npending; i++)
		if (pending[i].ptr == u->ptr && pending[i].size == u->size) {
			pending[i] = pending[--npending];
			break;
		}
	pthread_cond_broadcast(&unmapped);
	pthread_mutex_unlock(&pending_lock);
	free(u);
}

/* The driver's unmap of [ptr, ptr + size), off the thread when there is room to track it. */
static CUresult unmap(uint64_t ptr, uint64_t size)
{
	struct pending_unmap *u = malloc(sizeof(*u));
	pthread_mutex_lock(&pending_lock);
	int later = u && npending < MAX_PENDING;
	if (later)
		pending[npending++] = *u = (struct pending_unmap){ptr, size};
	pthread_mutex_unlock(&pending_lock);
	if (!later) {
		free(u);
		return rm_drv_cuMemUnmap(ptr, size);
	}
	rm_deferred_release_range(NULL, RM_DEFER_UNMAP, ptr, size, unmap_done, u);
	return CUDA_SUCCESS;
}

/* The whole reservation, with nothing of it mapped; after its unmaps still pending, off
 * the thread too (they go in order). */
CUresult rm_body_cuMemAddressFree(struct rm_channel *s, CUdeviceptr ptr, size_t size)
{
	pthread_mutex_lock(&vmm_lock);
	struct rm_handle h;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (rm_session_find(s, RM_H_VA_RANGE, ptr, &h) && h.size == size && !overlapping(s, ptr, size, 0)) {
		r = CUDA_SUCCESS;
		if (h.parent) /* a range moved in: parked, reserved (an unmap pending in it is harmless) */
			rm_va_range_give_back(s, &h);
		else if (pending_over(ptr, size))
			rm_deferred_release_range(NULL, RM_DEFER_ADDRESS_FREE, ptr, size, NULL, NULL);
		else
			r = rm_window_address_free(ptr, size);
		if (r == CUDA_SUCCESS)
			rm_session_disown_value(s, RM_H_VA_RANGE, ptr);
	}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

/* Inside a reservation of the client's, of a physical allocation of its own. */
CUresult rm_body_cuMemMap(struct rm_channel *s, CUdeviceptr ptr, size_t size, size_t offset,
			  CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	wait_unmapped(ptr, size); /* an unmap of its own, made off its thread */
	pthread_mutex_lock(&vmm_lock);
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (size && reservation(s, ptr, size) && physical(s, handle) && !overlapping(s, ptr, size, 0)) {
		r = rm_drv_cuMemMap(ptr, size, offset, handle, flags);
		if (r == CUDA_SUCCESS)
			rm_session_own_memory(s, RM_H_MAPPING, ptr, size, handle);
	}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

struct inside {
	uint64_t ptr, size;
	struct rm_handle *found;
	size_t n, cap;
};

static int collect_inside(const struct rm_handle *h, void *arg)
{
	struct inside *x = arg;
	if (h->value < x->ptr || h->value + h->size > x->ptr + x->size)
		return 0;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 8;
		struct rm_handle *f = realloc(x->found, cap * sizeof(*f));
		if (!f)
			return 1;
		x->found = f, x->cap = cap;
	}
	x->found[x->n++] = *h;
	return 0;
}

/* Every mapping inside [ptr, ptr + size), which may not cut one. The client's work done
 * (it may use the range), the driver's unmap, which waits for every client's, is made off
 * its thread (unmap). */
CUresult rm_body_cuMemUnmap(struct rm_channel *s, CUdeviceptr ptr, size_t size)
{
	CUresult r = rm_session_synchronize_all(s);
	if (r != CUDA_SUCCESS)
		return r;
	pthread_mutex_lock(&vmm_lock);
	r = CUDA_ERROR_INVALID_VALUE;
	if (size && reservation(s, ptr, size) && !overlapping(s, ptr, size, 1)) {
		r = unmap(ptr, size);
		struct inside x = {ptr, size, NULL, 0, 0};
		if (r == CUDA_SUCCESS && rm_session_each(s, RM_H_MAPPING, collect_inside, &x))
			rm_session_log(s, RM_LOG_ERROR, "out of memory forgetting unmapped ranges");
		for (size_t i = 0; i < x.n; i++) {
			rm_session_disown_value(s, RM_H_MAPPING, x.found[i].value);
			settle(s, x.found[i].parent);
		}
		free(x.found);
	}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

/* Access for devices of the client's, to mapped memory of its reservations. */
CUresult rm_body_cuMemSetAccess(struct rm_channel *s, CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
				size_t count)
{
	CUmemAccessDesc d[MAX_ACCESS_DESCS];
	if (!count || count > MAX_ACCESS_DESCS || !size || !reservation(s, ptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(d, desc, count * sizeof(*d));
	for (size_t i = 0; i < count; i++) {
		if (host_located(&d[i].location)) /* the client's CPU: it cannot reach the GPU host's memory */
			return rm_unsupported_use("cuMemSetAccess for a host location (the CPU of the GPU host, not the client's)");
		CUresult r = location_in(s, &d[i].location);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return rm_drv_cuMemSetAccess(ptr, size, d, count);
}

CUresult rm_body_cuMemGetAccess(struct rm_channel *s, unsigned long long *flags, const CUmemLocation *location,
				CUdeviceptr ptr)
{
	CUmemLocation loc = *location;
	if (host_located(&loc)) { /* never granted (cuMemSetAccess) */
		*flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
		return reservation(s, ptr, 1) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	}
	CUresult r = location_in(s, &loc);
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuMemGetAccess(flags, &loc, ptr);
	return r;
}

/* CUDA IPC's VMM path (proto/api.spec): the client library puts the token in a memfd, the
 * descriptor the program passes on; only CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR. */
CUresult rm_body_cuMemExportToShareableHandle(struct rm_channel *s, void *shareableHandle,
					      CUmemGenericAllocationHandle handle, CUmemAllocationHandleType handleType,
					      unsigned long long flags)
{
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported_use("cuMemExportToShareableHandle of a handle type but a POSIX file descriptor");
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&vmm_lock);
	struct rm_handle p;
	CUresult r = CUDA_ERROR_INVALID_VALUE;
	if (physical(s, handle) && rm_session_find(s, RM_H_PHYSICAL, handle, &p)) {
		int fd = -1; /* the driver's verdict: an allocation made to be shared so; its descriptor is not used */
		r = rm_drv_cuMemExportToShareableHandle(&fd, handle, handleType, 0);
		if (r == CUDA_SUCCESS && fd >= 0)
			close(fd);
		CUmemAllocationProp prop;
		struct rm_ipc_object o = {.value = handle, .size = p.size, .device = -1};
		if (r == CUDA_SUCCESS && rm_drv_cuMemGetAllocationPropertiesFromHandle(&prop, handle) == CUDA_SUCCESS &&
		    prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE)
			o.device = prop.location.id;
		else if (r == CUDA_SUCCESS) /* charged to the exporter's host memory, which no importer shares */
			r = rm_unsupported_use("cuMemExportToShareableHandle of host-located memory");
		if (r == CUDA_SUCCESS)
			r = rm_ipc_export(s, RM_IPC_PHYSICAL, &o, shareableHandle);
	}
	pthread_mutex_unlock(&vmm_lock);
	return r;
}

/* The exporter's physical allocation, the importer's to map and release, charged to it
 * (osHandle: the token its library read from the descriptor). */
CUresult rm_body_cuMemImportFromShareableHandle(struct rm_channel *s, CUmemGenericAllocationHandle *handle,
						void *osHandle, CUmemAllocationHandleType shHandleType)
{
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return rm_unsupported_use("cuMemImportFromShareableHandle of a handle type but a POSIX file descriptor");
	pthread_mutex_lock(&vmm_lock);
	struct rm_ipc_object o;
	struct rm_handle p;
	int again = 0;
	CUresult r = rm_ipc_open(s, RM_IPC_PHYSICAL, osHandle, RM_IPC_TOKEN_SIZE, &o, &again);
	if (r == CUDA_SUCCESS && rm_session_find(s, RM_H_PHYSICAL, o.value, &p)) {
		if (p.parent) /* released, still mapped: held again */
			rm_session_set_parent(s, RM_H_PHYSICAL, o.value, 0);
	} else if (r == CUDA_SUCCESS) {
		r = rm_session_charge(s, o.size);
		if (r == CUDA_SUCCESS)
			rm_session_own_memory(s, RM_H_PHYSICAL, o.value, o.size, 0);
		else if (rm_ipc_leave(s, RM_IPC_PHYSICAL, o.value) == RM_IPC_LAST)
			rm_drv_cuMemRelease(o.value);
	}
	if (r == CUDA_SUCCESS)
		*handle = o.value;
	pthread_mutex_unlock(&vmm_lock);
	return r;
}
