/* Virtual memory management, modelled with the host's: a physical allocation is a
 * memfd of its size (charged to the device like cuMemAlloc), a reservation an
 * inaccessible anonymous mapping, and cuMemMap maps the memfd over part of it, so that
 * two mappings of one allocation alias as on a GPU. A mapped piece is tracked as an
 * allocation (TD_ALLOC_MAPPING) so that copies and kernels may use it. */
#include "testdriver.h"

#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#define TD_MAGIC_PHYS 0x50485953 /* "PHYS" */
#define GRANULARITY (2u << 20)
#define MAX_RESERVATIONS 256

struct td_phys {
	uint32_t magic;
	int fd;
	size_t size;
	CUmemAllocationProp prop;
	int mappings;    /* guarded by td_lock */
	bool released;
};

struct reservation {
	uintptr_t base;
	size_t size;
	int access;      /* CUmemAccess_flags given by cuMemSetAccess */
};

static struct reservation reservations[MAX_RESERVATIONS]; /* guarded by td_lock */

/* Mapped pieces: which physical allocation backs each (td_alloc has no room for it). */
struct piece {
	uintptr_t base;
	size_t size;
	struct td_phys *phys;
};
static struct piece *pieces;
static size_t npieces, pieces_cap;

static struct reservation *reservation_of(uintptr_t p, size_t size)
{
	for (int i = 0; i < MAX_RESERVATIONS; i++) {
		struct reservation *r = &reservations[i];
		if (r->size && p >= r->base && p - r->base <= r->size && size <= r->size - (p - r->base))
			return r;
	}
	return NULL;
}

static CUresult phys_of(CUmemGenericAllocationHandle h, struct td_phys **out)
{
	struct td_phys *p = (struct td_phys *)(uintptr_t)h;
	if (!p || p->magic != TD_MAGIC_PHYS || p->released)
		return CUDA_ERROR_INVALID_VALUE;
	*out = p;
	return CUDA_SUCCESS;
}

/* A host location: the host's memory, of its one NUMA node (0). */
static bool host_location(const CUmemLocation *loc)
{
	return loc->type == CU_MEM_LOCATION_TYPE_HOST || loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT ||
	       (loc->type == CU_MEM_LOCATION_TYPE_HOST_NUMA && loc->id == 0);
}

static CUresult prop_ok(const CUmemAllocationProp *prop)
{
	if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED)
		return CUDA_ERROR_INVALID_VALUE;
	if (host_location(&prop->location))
		return CUDA_SUCCESS;
	if (prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	return prop->location.id >= 0 && prop->location.id < td_device_count() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* The device whose memory an allocation takes; -1: the host's. */
static int device_of(const CUmemAllocationProp *prop)
{
	return prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id : -1;
}

TD_EXPORT CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
						 CUmemAllocationGranularity_flags option)
{
	(void)option;
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	CUresult rc = prop_ok(prop);
	if (rc != CUDA_SUCCESS || !granularity)
		return rc != CUDA_SUCCESS ? rc : CUDA_ERROR_INVALID_VALUE;
	*granularity = GRANULARITY;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size, const CUmemAllocationProp *prop,
			       unsigned long long flags)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc == CUDA_SUCCESS)
		rc = prop_ok(prop);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!handle || !size || size % GRANULARITY || flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (device_of(prop) >= 0 && !td_device_reserve(device_of(prop), size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct td_phys *p = calloc(1, sizeof(*p));
	int fd = p ? memfd_create("td-phys", MFD_CLOEXEC) : -1;
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		if (fd >= 0)
			close(fd);
		free(p);
		if (device_of(prop) >= 0)
			td_device_unreserve(device_of(prop), size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*p = (struct td_phys){.magic = TD_MAGIC_PHYS, .fd = fd, .size = size, .prop = *prop};
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* Caller holds td_lock: frees p once it is released and no longer mapped. */
static void phys_put_locked(struct td_phys *p)
{
	if (!p->released || p->mappings)
		return;
	close(p->fd);
	int device = device_of(&p->prop);
	size_t size = p->size;
	p->magic = 0;
	free(p);
	if (device < 0)
		return;
	pthread_mutex_unlock(&td_lock);
	td_device_unreserve(device, size);
	pthread_mutex_lock(&td_lock);
}

TD_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	struct td_phys *p;
	CUresult rc = phys_of(handle, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	pthread_mutex_lock(&td_lock);
	p->released = true;
	phys_put_locked(p);
	pthread_mutex_unlock(&td_lock);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop, CUmemGenericAllocationHandle handle)
{
	struct td_phys *p;
	CUresult rc = phys_of(handle, &p);
	if (rc == CUDA_SUCCESS && !prop)
		rc = CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		*prop = p->prop;
	return rc;
}

TD_EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				       unsigned long long flags)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!ptr || !size || size % GRANULARITY || flags || (alignment && (alignment & (alignment - 1))))
		return CUDA_ERROR_INVALID_VALUE;
	size_t align = alignment > GRANULARITY ? alignment : GRANULARITY;
	uintptr_t base = 0;
	/* A hint is taken where that range is free, as the driver does (live migration relies
	 * on it); else the reservation goes elsewhere. */
	if (addr && addr % align == 0 && !td_fail_now(TD_FAIL_ADDRESS_HINT)) {
		void *h = mmap((void *)(uintptr_t)addr, size, PROT_NONE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
		if (h != MAP_FAILED && (uintptr_t)h == addr)
			base = addr;
		else if (h != MAP_FAILED)
			munmap(h, size);
	}
	if (!base) { /* over-reserve and trim to the alignment */
		char *m = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (m == MAP_FAILED)
			return CUDA_ERROR_OUT_OF_MEMORY;
		base = ((uintptr_t)m + align - 1) & ~(uintptr_t)(align - 1);
		if (base > (uintptr_t)m)
			munmap(m, base - (uintptr_t)m);
		munmap((char *)base + size, (uintptr_t)m + size + align - (base + size));
	}
	pthread_mutex_lock(&td_lock);
	struct reservation *r = NULL;
	for (int i = 0; i < MAX_RESERVATIONS && !r; i++)
		if (!reservations[i].size)
			r = &reservations[i];
	if (r)
		*r = (struct reservation){.base = base, .size = size};
	pthread_mutex_unlock(&td_lock);
	if (!r) {
		munmap((void *)base, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ptr = base;
	return CUDA_SUCCESS;
}

static bool mapped_within_locked(uintptr_t p, size_t size)
{
	for (size_t i = 0; i < npieces; i++)
		if (pieces[i].base < p + size && p < pieces[i].base + pieces[i].size)
			return true;
	return false;
}

TD_EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	pthread_mutex_lock(&td_lock);
	struct reservation *r = reservation_of(ptr, size);
	CUresult rc = r && r->base == ptr && r->size == size && !mapped_within_locked(ptr, size) ? CUDA_SUCCESS
												   : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		r->size = 0;
	pthread_mutex_unlock(&td_lock);
	if (rc == CUDA_SUCCESS) {
		munmap((void *)(uintptr_t)ptr, size);
		td_freed_va_record(ptr);
	}
	return rc;
}

TD_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
			    unsigned long long flags)
{
	struct td_context *ctx;
	struct td_phys *p;
	CUresult rc = td_require_context(&ctx);
	if (rc == CUDA_SUCCESS)
		rc = phys_of(handle, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!size || flags || ptr % GRANULARITY || size % GRANULARITY || offset % GRANULARITY || offset > p->size ||
	    size > p->size - offset)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	rc = reservation_of(ptr, size) && !mapped_within_locked(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS && npieces == pieces_cap) {
		size_t cap = pieces_cap ? pieces_cap * 2 : 16;
		struct piece *grown = realloc(pieces, cap * sizeof(*grown));
		if (grown) {
			pieces = grown;
			pieces_cap = cap;
		} else {
			rc = CUDA_ERROR_OUT_OF_MEMORY;
		}
	}
	if (rc == CUDA_SUCCESS && mmap((void *)(uintptr_t)ptr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
				       p->fd, (off_t)offset) == MAP_FAILED)
		rc = CUDA_ERROR_OUT_OF_MEMORY;
	if (rc == CUDA_SUCCESS) {
		pieces[npieces++] = (struct piece){.base = ptr, .size = size, .phys = p};
		p->mappings++;
	}
	pthread_mutex_unlock(&td_lock);
	if (rc == CUDA_SUCCESS)
		rc = td_track((void *)(uintptr_t)ptr, size, TD_ALLOC_MAPPING, ctx,
			      device_of(&p->prop) >= 0 ? device_of(&p->prop) : ctx->device);
	return rc;
}

/* Unmaps every piece inside [ptr, ptr + size), which must not cut one. */
TD_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	struct td_context *ctx = td_current_context();
	if (ctx)
		td_context_synchronize(ctx);
	pthread_mutex_lock(&td_lock);
	CUresult rc = reservation_of(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < npieces && rc == CUDA_SUCCESS; i++) {
		struct piece *c = &pieces[i];
		bool overlaps = c->base < ptr + size && ptr < c->base + c->size;
		if (overlaps && (c->base < ptr || c->base + c->size > ptr + size))
			rc = CUDA_ERROR_INVALID_VALUE;
	}
	uintptr_t gone[64];
	size_t ngone = 0;
	for (size_t i = 0; i < npieces && rc == CUDA_SUCCESS;) {
		struct piece c = pieces[i];
		if (c.base >= ptr && c.base + c.size <= ptr + size) {
			pieces[i] = pieces[--npieces];
			c.phys->mappings--;
			phys_put_locked(c.phys);
			if (ngone < 64)
				gone[ngone++] = c.base;
		} else {
			i++;
		}
	}
	pthread_mutex_unlock(&td_lock);
	if (rc != CUDA_SUCCESS)
		return rc;
	for (size_t i = 0; i < ngone; i++)
		td_untrack(gone[i], TD_ALLOC_MAPPING);
	mmap((void *)(uintptr_t)ptr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!desc || !count)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < count; i++)
		if (!host_location(&desc[i].location) &&
		    (desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE || desc[i].location.id < 0 ||
		     desc[i].location.id >= td_device_count()))
			return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&td_lock);
	struct reservation *r = reservation_of(ptr, size);
	CUresult rc = r && mapped_within_locked(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (rc == CUDA_SUCCESS)
		r->access = desc[count - 1].flags;
	pthread_mutex_unlock(&td_lock);
	return rc;
}

TD_EXPORT CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!flags || !location)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&td_lock);
	struct reservation *r = reservation_of(ptr, 1);
	CUresult rc = r ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
	if (r)
		*flags = (unsigned long long)r->access;
	pthread_mutex_unlock(&td_lock);
	return rc;
}

/* ---- sharing (CUDA IPC's VMM path) ----
 * A POSIX file descriptor is a descriptor of the allocation's memfd: imported, here or in
 * another process, it is a physical allocation of that memfd, so that mappings alias. */

TD_EXPORT CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
						 CUmemAllocationHandleType handleType, unsigned long long flags)
{
	struct td_phys *p;
	CUresult rc = phys_of(handle, &p);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!shareableHandle || flags || !(p->prop.requestedHandleTypes & handleType))
		return CUDA_ERROR_INVALID_VALUE; /* not asked for at cuMemCreate */
	if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	int fd = dup(p->fd);
	if (fd < 0)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*(int *)shareableHandle = fd;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
						   CUmemAllocationHandleType shHandleType)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
		return CUDA_ERROR_NOT_SUPPORTED;
	off_t size = lseek((int)(intptr_t)osHandle, 0, SEEK_END);
	if (size <= 0 || size % GRANULARITY)
		return CUDA_ERROR_INVALID_VALUE;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0}};
	if (!td_device_reserve(0, (size_t)size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	struct td_phys *p = calloc(1, sizeof(*p));
	int fd = p ? fcntl((int)(intptr_t)osHandle, F_DUPFD_CLOEXEC, 0) : -1;
	if (fd < 0) {
		free(p);
		td_device_unreserve(0, (size_t)size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*p = (struct td_phys){.magic = TD_MAGIC_PHYS, .fd = fd, .size = (size_t)size, .prop = prop};
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
	return CUDA_SUCCESS;
}
