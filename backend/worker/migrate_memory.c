/* What a session keeps for live migration (migrate.h): its modules' images, and the
 * reservations the memory it brought is mapped in. */
#include "migrate.h"

#include <stdlib.h>
#include <string.h>

#include "driver_table.h"
#include "handle_alias.h"
#include "quota.h"

void rm_migrate_keep_image(struct rm_channel *s, uint64_t module, uint8_t *image, size_t n)
{
	struct rm_session *sh = s->sh;
	pthread_mutex_lock(&sh->lock);
	if (sh->nimages == sh->images_cap) {
		size_t cap = sh->images_cap ? sh->images_cap * 2 : 16;
		struct rm_kept_image *k = realloc(sh->images, cap * sizeof(*k));
		if (k)
			sh->images = k, sh->images_cap = cap;
	}
	if (sh->nimages < sh->images_cap) {
		sh->images[sh->nimages++] = (struct rm_kept_image){module, image, n};
		image = NULL;
	}
	pthread_mutex_unlock(&sh->lock);
	free(image); /* not kept: the session cannot move (migrate_out.c says so) */
}

void rm_migrate_forget_image(struct rm_channel *s, uint64_t module)
{
	struct rm_session *sh = s->sh;
	uint8_t *gone = NULL;
	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < sh->nimages; i++)
		if (sh->images[i].module == module) {
			gone = sh->images[i].image;
			sh->images[i] = sh->images[--sh->nimages];
			break;
		}
	pthread_mutex_unlock(&sh->lock);
	free(gone);
}

static int run_add(struct rm_session *sh, struct rm_moved_run r)
{
	if (sh->nmoved_runs == sh->moved_runs_cap) {
		size_t cap = sh->moved_runs_cap ? sh->moved_runs_cap * 2 : 16;
		struct rm_moved_run *g = realloc(sh->moved_runs, cap * sizeof(*g));
		if (!g)
			return -1;
		sh->moved_runs = g, sh->moved_runs_cap = cap;
	}
	sh->moved_runs[sh->nmoved_runs++] = r;
	return 0;
}

/* The run holding granule g, or NULL. Under sh->lock (only the session's main thread
 * changes runs: restoring, freeing, releasing). */
static struct rm_moved_run *run_of(struct rm_session *sh, uint64_t g)
{
	for (size_t i = 0; i < sh->nmoved_runs; i++)
		if (g >= sh->moved_runs[i].base && g - sh->moved_runs[i].base < sh->moved_runs[i].span)
			return &sh->moved_runs[i];
	return NULL;
}

/* Reserves [base, base + span) exactly there and maps new memory of dev on it. The
 * alignment is the granule's: left 0, the driver aligns a reservation to more than a
 * granule and so moves a hint that is only granule-aligned (measured on an H100). */
static CUresult map_run(CUdevice dev, uint64_t base, size_t span, size_t gran, CUmemGenericAllocationHandle *phys)
{
	CUdeviceptr got = 0;
	CUresult r = rm_drv_cuMemAddressReserve(&got, span, gran, base, 0);
	if (r != CUDA_SUCCESS)
		return r;
	if (got != base) {
		rm_drv_cuMemAddressFree(got, span);
		return CUDA_ERROR_ALREADY_MAPPED;
	}
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	CUmemAccessDesc access = {.location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	r = rm_drv_cuMemCreate(phys, span, &prop, 0);
	if (r == CUDA_SUCCESS && (r = rm_drv_cuMemMap(base, span, 0, *phys, 0)) != CUDA_SUCCESS)
		rm_drv_cuMemRelease(*phys);
	if (r == CUDA_SUCCESS && (r = rm_drv_cuMemSetAccess(base, span, &access, 1)) != CUDA_SUCCESS) {
		rm_drv_cuMemUnmap(base, span);
		rm_drv_cuMemRelease(*phys);
	}
	if (r != CUDA_SUCCESS)
		rm_drv_cuMemAddressFree(base, span);
	return r;
}

static void unmap_run(struct rm_channel *s, const struct rm_moved_run *r)
{
	rm_drv_cuMemUnmap(r->base, r->span);
	rm_drv_cuMemRelease(r->phys);
	rm_drv_cuMemAddressFree(r->base, r->span);
	rm_session_uncharge(s, r->span);
}

/* Each run [base, base + size) lies in loses a user; the last one's unmaps it. */
static void leave_runs(struct rm_channel *s, uint64_t base, uint64_t size)
{
	struct rm_session *sh = s->sh;
	for (size_t i = 0; i < sh->nmoved_runs;) {
		struct rm_moved_run *r = &sh->moved_runs[i];
		if (r->base < base + size && base < r->base + r->span && !--r->users) {
			struct rm_moved_run gone = *r;
			sh->moved_runs[i] = sh->moved_runs[--sh->nmoved_runs];
			unmap_run(s, &gone);
			continue;
		}
		i++;
	}
}

CUresult rm_migrate_map_span(struct rm_channel *s, CUdevice dev, uint64_t base, uint64_t size)
{
	struct rm_session *sh = s->sh;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	size_t gran = 0;
	CUresult r = rm_drv_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r == CUDA_SUCCESS && (!gran || (gran & (gran - 1)) || base % gran || size % gran))
		r = CUDA_ERROR_INVALID_VALUE; /* not this GPU's granules: another model */
	for (size_t i = 0; r == CUDA_SUCCESS && i < sh->nmoved_runs; i++)
		if (sh->moved_runs[i].base < base + size && base < sh->moved_runs[i].base + sh->moved_runs[i].span)
			r = CUDA_ERROR_INVALID_VALUE; /* spans do not overlap */
	if (r != CUDA_SUCCESS)
		return r;
	struct rm_moved_run run = {.base = base, .span = size};
	if ((r = rm_session_charge(s, size)) != CUDA_SUCCESS)
		return r;
	if ((r = map_run(dev, base, size, gran, &run.phys)) != CUDA_SUCCESS) {
		rm_session_uncharge(s, size);
		return r;
	}
	if (run_add(sh, run)) {
		unmap_run(s, &run);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

CUresult rm_migrate_own(struct rm_channel *s, uint64_t base, uint64_t size)
{
	struct rm_session *sh = s->sh;
	const struct rm_moved_run *r = run_of(sh, base);
	if (!r || size > r->base + r->span - base) /* inside one span, as the source sends them */
		return CUDA_ERROR_INVALID_VALUE;
	sh->moved_runs[r - sh->moved_runs].users++;
	rm_session_own_memory(s, RM_H_MOVED_MEMORY, base, size, 0);
	return CUDA_SUCCESS;
}

void rm_migrate_drop_unused(struct rm_channel *s)
{
	struct rm_session *sh = s->sh;
	for (size_t i = 0; i < sh->nmoved_runs;) {
		if (!sh->moved_runs[i].users) {
			struct rm_moved_run gone = sh->moved_runs[i];
			sh->moved_runs[i] = sh->moved_runs[--sh->nmoved_runs];
			unmap_run(s, &gone);
			continue;
		}
		i++;
	}
}

CUresult rm_migrate_free_moved(struct rm_channel *s, const struct rm_handle *h)
{
	CUresult r = rm_session_synchronize_all(s); /* no work of the client's may still use it */
	if (r == CUDA_SUCCESS)
		leave_runs(s, h->value, h->size);
	else
		rm_session_own_memory(s, RM_H_MOVED_MEMORY, h->value, h->size, 0);
	return r;
}

void rm_migrate_release_moved(struct rm_channel *s, const struct rm_handle *h)
{
	leave_runs(s, h->value, h->size);
}

void rm_migrate_session_free(struct rm_session *sh)
{
	for (size_t i = 0; i < sh->nimages; i++)
		free(sh->images[i].image);
	free(sh->images);
	sh->images = NULL;
	sh->nimages = sh->images_cap = 0;
	free(sh->moved_runs); /* unmapped by release_moved_memory */
	sh->moved_runs = NULL;
	sh->nmoved_runs = 0;
	rm_alias_free(sh);
}
