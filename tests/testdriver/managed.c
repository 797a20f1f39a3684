/* Managed memory: cuMemAllocManaged and the calls about it.
 *
 * The test driver's device memory is host memory already, so managed memory differs in
 * where it lives: each allocation is a mapping of its own in a range no malloc uses
 * (from MANAGED_BASE up), page-aligned and a whole number of pages, so that its address is
 * stable and distinct; a client of Remora maps its copy at that same address (a
 * collision there would be a real finding, not noise). Prefetches and advice change
 * nothing but what cuMemRangeGetAttribute reports; a prefetch is ordered on its stream. */
#include "testdriver.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* Clear of AddressSanitizer's heap (0x600000000000 up), which a client may run with. */
#define MANAGED_BASE 0x500000000000ull
#define MANAGED_ALIGN (64u << 10)
#define NO_LOCATION (-2)

static uintptr_t next_base = MANAGED_BASE;

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

static void set_defaults(struct td_alloc *a, const void *arg)
{
	a->flags = *(const unsigned *)arg;
	a->preferred = NO_LOCATION;
	a->last_prefetch = NO_LOCATION;
}

TD_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytes, unsigned int flags)
{
	struct td_context *ctx;
	CUresult rc = td_require_context(&ctx);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!dptr || !bytes || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
		return CUDA_ERROR_INVALID_VALUE;
	size_t size = round_up(bytes, MANAGED_ALIGN);
	if (!td_device_reserve(ctx->device, size))
		return CUDA_ERROR_OUT_OF_MEMORY;
	void *p = MAP_FAILED;
	for (int tries = 0; tries < 64 && p == MAP_FAILED; tries++) {
		uintptr_t at = __atomic_fetch_add(&next_base, size, __ATOMIC_RELAXED);
		p = mmap((void *)at, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (p != MAP_FAILED && p != (void *)at) { /* a kernel without MAP_FIXED_NOREPLACE took it as a hint */
			munmap(p, size);
			p = MAP_FAILED;
		}
	}
	if (p == MAP_FAILED || (rc = td_track(p, size, TD_ALLOC_MANAGED, ctx, ctx->device)) != CUDA_SUCCESS) {
		if (p != MAP_FAILED)
			munmap(p, size);
		td_device_unreserve(ctx->device, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	td_managed_update((uintptr_t)p, set_defaults, &flags);
	*dptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

/* [ptr, ptr + count) inside one managed allocation: a copy of it in *out. */
static CUresult managed_range(CUdeviceptr ptr, size_t count, struct td_alloc *out)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count || !td_find_alloc(ptr, count, out) || out->kind != TD_ALLOC_MANAGED)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

static bool location_ok(int device) { return device == CU_DEVICE_CPU || (device >= 0 && device < td_device_count()); }

static void set_prefetch(struct td_alloc *a, const void *arg) { a->last_prefetch = *(const int *)arg; }

TD_EXPORT CUresult cuMemPrefetchAsync(CUdeviceptr ptr, size_t count, CUdevice device, CUstream stream)
{
	struct td_alloc a;
	struct td_stream *s;
	CUresult rc = managed_range(ptr, count, &a);
	if (rc == CUDA_SUCCESS && !location_ok(device))
		rc = CUDA_ERROR_INVALID_DEVICE;
	if (rc == CUDA_SUCCESS)
		rc = td_resolve_stream(stream, &s);
	if (rc == CUDA_SUCCESS)
		rc = td_capture_usable(s);
	if (rc != CUDA_SUCCESS)
		return rc;
	struct td_op *op = td_op_new(TD_OP_NOTHING);
	if (!op)
		return CUDA_ERROR_OUT_OF_MEMORY;
	td_enqueue(s, op);
	int d = device;
	td_managed_update(ptr, set_prefetch, &d);
	return CUDA_SUCCESS;
}

static int location_device(CUmemLocation location)
{
	return location.type == CU_MEM_LOCATION_TYPE_HOST ? CU_DEVICE_CPU
	       : location.type == CU_MEM_LOCATION_TYPE_DEVICE ? location.id : -3;
}

TD_EXPORT CUresult cuMemPrefetchAsync_v2(CUdeviceptr ptr, size_t count, CUmemLocation location, unsigned int flags,
					 CUstream stream)
{
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	return cuMemPrefetchAsync(ptr, count, location_device(location), stream);
}

struct advice {
	CUmem_advise advice;
	int device;
};

static void apply_advice(struct td_alloc *a, const void *arg)
{
	const struct advice *v = arg;
	switch (v->advice) {
	case CU_MEM_ADVISE_SET_READ_MOSTLY: a->read_mostly = 1; break;
	case CU_MEM_ADVISE_UNSET_READ_MOSTLY: a->read_mostly = 0; break;
	case CU_MEM_ADVISE_SET_PREFERRED_LOCATION: a->preferred = v->device; break;
	case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION: a->preferred = NO_LOCATION; break;
	default: break;
	}
}

TD_EXPORT CUresult cuMemAdvise(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUdevice device)
{
	struct td_alloc a;
	CUresult rc = managed_range(ptr, count, &a);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
		return CUDA_ERROR_INVALID_VALUE;
	bool needs_device = advice != CU_MEM_ADVISE_SET_READ_MOSTLY && advice != CU_MEM_ADVISE_UNSET_READ_MOSTLY &&
			    advice != CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION;
	if (needs_device && !location_ok(device))
		return CUDA_ERROR_INVALID_DEVICE;
	struct advice v = {advice, device};
	td_managed_update(ptr, apply_advice, &v);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemAdvise_v2(CUdeviceptr ptr, size_t count, CUmem_advise advice, CUmemLocation location)
{
	return cuMemAdvise(ptr, count, advice, location_device(location));
}

static void attach(struct td_alloc *a, const void *arg) { a->flags = *(const unsigned *)arg; }

TD_EXPORT CUresult cuStreamAttachMemAsync(CUstream stream, CUdeviceptr ptr, size_t length, unsigned int flags)
{
	struct td_alloc a;
	struct td_stream *s;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = managed_range(ptr, 1, &a);
	if (rc == CUDA_SUCCESS && (a.base != ptr || (length && length != a.size)))
		rc = CUDA_ERROR_INVALID_VALUE; /* the whole allocation, as CUDA asks */
	if (rc == CUDA_SUCCESS)
		rc = td_resolve_stream(stream, &s);
	if (rc != CUDA_SUCCESS)
		return rc;
	td_managed_update(ptr, attach, &flags);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemRangeGetAttribute(void *data, size_t size, CUmem_range_attribute attribute, CUdeviceptr ptr,
					  size_t count)
{
	struct td_alloc a;
	CUresult rc = managed_range(ptr, count, &a);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!data || size != 4)
		return CUDA_ERROR_INVALID_VALUE;
	int v;
	switch (attribute) {
	case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY: v = a.read_mostly; break;
	case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION: v = a.preferred; break;
	case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION: v = a.last_prefetch; break;
	default: return CUDA_ERROR_INVALID_VALUE;
	}
	memcpy(data, &v, sizeof v);
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuMemRangeGetAttributes(void **data, size_t *sizes, CUmem_range_attribute *attributes,
					   size_t n, CUdeviceptr ptr, size_t count)
{
	if (!data || !sizes || !attributes || !n)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < n; i++) {
		CUresult rc = cuMemRangeGetAttribute(data[i], sizes[i], attributes[i], ptr, count);
		if (rc != CUDA_SUCCESS)
			return rc;
	}
	return CUDA_SUCCESS;
}
