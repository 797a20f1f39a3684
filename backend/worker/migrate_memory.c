/* What a session keeps for live migration (migrate.h): its modules' images, and the
 * reservations the memory it brought is mapped in. */
#include "migrate.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "contexts.h"
#include "driver_table.h"
#include "handle_alias.h"
#include "memory_window.h"
#include "quota.h"
#include "variable_alias.h"

void rm_migrate_keep_image(struct rm_channel *s, enum rm_handle_kind kind, uint64_t module, uint8_t *image, size_t n)
{
	struct rm_session *sh = s->sh;
	CUdevice dev = kind == RM_H_MODULE && s->cur ? s->cur->dev : -1;
	pthread_mutex_lock(&sh->lock);
	if (sh->nimages == sh->images_cap) {
		size_t cap = sh->images_cap ? sh->images_cap * 2 : 16;
		struct rm_kept_image *k = realloc(sh->images, cap * sizeof(*k));
		if (k)
			sh->images = k, sh->images_cap = cap;
	}
	if (sh->nimages < sh->images_cap) {
		sh->images[sh->nimages++] =
			(struct rm_kept_image){.module = module, .kind = kind, .dev = dev, .image = image, .n = n};
		image = NULL;
	}
	pthread_mutex_unlock(&sh->lock);
	free(image); /* not kept: the session cannot move (migrate_out.c says so) */
}

void rm_migrate_forget_image(struct rm_channel *s, uint64_t module)
{
	struct rm_session *sh = s->sh;
	struct rm_kept_image gone = {0};
	pthread_mutex_lock(&sh->lock);
	for (size_t i = 0; i < sh->nimages; i++)
		if (sh->images[i].module == module) {
			gone = sh->images[i];
			sh->images[i] = sh->images[--sh->nimages];
			break;
		}
	pthread_mutex_unlock(&sh->lock);
	rm_migrate_kept_image_free(&gone);
	rm_variable_alias_drop_parent(sh, module);
}

void rm_migrate_kept_image_free(struct rm_kept_image *k)
{
	free(k->image);
	for (size_t i = 0; i < k->nvars; i++)
		free(k->vars[i]);
	free(k->vars);
	*k = (struct rm_kept_image){0};
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

/* Whether run r and [base, base + size) share an address. */
static int run_overlaps(const struct rm_moved_run *r, uint64_t base, uint64_t size)
{
	return r->base < base + size && base < r->base + r->span;
}

/* Reservations at a moved client's addresses that it gave up, by freeing or moving away:
 * kept (parked) for its return. Given back, the driver lays what the worker loads next
 * there (an H100's, the images a target loads ahead of a client coming back), and the
 * client's addresses are taken when it returns. */
static pthread_mutex_t parked_lock = PTHREAD_MUTEX_INITIALIZER;
static struct parked {
	uint64_t base, size;
} *parked;
static size_t nparked, parked_cap;

/* At most this many parked: past it, the first one parked is given back for the new one
 * (a worker that many clients move through would otherwise keep every range they had). */
#define PARKED_MAX 1024

static void park(uint64_t base, uint64_t size)
{
	struct parked evicted = {0, 0};
	pthread_mutex_lock(&parked_lock);
	if (nparked == PARKED_MAX) {
		evicted = parked[0];
		memmove(&parked[0], &parked[1], (nparked - 1) * sizeof(*parked));
		nparked--;
	}
	int kept = nparked < parked_cap;
	if (!kept) {
		size_t cap = parked_cap ? parked_cap * 2 : 16;
		struct parked *p = realloc(parked, cap * sizeof(*p));
		if ((kept = p != NULL))
			parked = p, parked_cap = cap;
	}
	if (kept)
		parked[nparked++] = (struct parked){base, size};
	pthread_mutex_unlock(&parked_lock);
	if (evicted.size)
		rm_drv_cuMemAddressFree(evicted.base, evicted.size);
	if (!kept)
		rm_drv_cuMemAddressFree(base, size);
}

/* Whether [base, base + size) is one parked reservation. */
static int parked_exactly(uint64_t base, uint64_t size)
{
	int found = 0;
	pthread_mutex_lock(&parked_lock);
	for (size_t i = 0; i < nparked && !found; i++)
		found = parked[i].base == base && parked[i].size == size;
	pthread_mutex_unlock(&parked_lock);
	return found;
}

/* Whether a parked range shares an address with [base, base + size) and reaches past it. */
static int parked_sticking_out(uint64_t base, uint64_t size)
{
	int found = 0;
	pthread_mutex_lock(&parked_lock);
	for (size_t i = 0; i < nparked && !found; i++) {
		const struct parked *p = &parked[i];
		found = p->base < base + size && base < p->base + p->size && (p->base < base || p->base + p->size > base + size);
	}
	pthread_mutex_unlock(&parked_lock);
	return found;
}

/* Whether the whole blocks [base, base + size) lies in are parked as one range, other than
 * it (rm_migrate_hold_range's second choice): the span is then mapped block by block. */
static int parked_as_blocks(uint64_t base, uint64_t size)
{
	uint64_t first = base & ~(RM_MOVED_BLOCK - 1), end = (base + size + RM_MOVED_BLOCK - 1) & ~(RM_MOVED_BLOCK - 1);
	return end > base && (first != base || end != base + size) && parked_exactly(first, end - first);
}

/* Reserves [base, base + size) at exactly that address, or fails with ALREADY_MAPPED: a
 * parked reservation of exactly that range, else a new one, once the parked ones it
 * overlaps are given back. */
static CUresult reserve_at(uint64_t base, uint64_t size, uint64_t alignment)
{
	pthread_mutex_lock(&parked_lock);
	for (size_t i = 0; i < nparked;) {
		struct parked p = parked[i];
		if (p.base >= base + size || base >= p.base + p.size) {
			i++;
			continue;
		}
		memmove(&parked[i], &parked[i + 1], (--nparked - i) * sizeof(*parked)); /* in the order parked */
		if (p.base == base && p.size == size) {
			pthread_mutex_unlock(&parked_lock);
			return CUDA_SUCCESS;
		}
		rm_drv_cuMemAddressFree(p.base, p.size);
	}
	CUdeviceptr got = 0;
	CUresult r = rm_drv_cuMemAddressReserve(&got, size, alignment, base, 0);
	pthread_mutex_unlock(&parked_lock);
	if (r == CUDA_SUCCESS && got != base) {
		rm_log(RM_LOG_DEBUG, "migration: 0x%llx not reserved (the driver gave 0x%llx)", (unsigned long long)base,
		       (unsigned long long)got);
		rm_drv_cuMemAddressFree(got, size);
		r = CUDA_ERROR_ALREADY_MAPPED;
	}
	return r;
}

/* The reserved block holding address a, or NULL. */
static struct rm_moved_block *block_of(struct rm_session *sh, uint64_t a)
{
	uint64_t base = a & ~(RM_MOVED_BLOCK - 1);
	for (size_t i = 0; i < sh->nmoved_blocks; i++)
		if (sh->moved_blocks[i].base == base)
			return &sh->moved_blocks[i];
	return NULL;
}

/* The block holding address a, reserved there when no run holds it yet, and counted as
 * holding one more run. Under the session's main thread (as runs are). */
static CUresult block_hold(struct rm_session *sh, uint64_t a)
{
	uint64_t base = a & ~(RM_MOVED_BLOCK - 1);
	struct rm_moved_block *held = block_of(sh, a);
	if (held) {
		held->runs++;
		return CUDA_SUCCESS;
	}
	if (sh->nmoved_blocks == sh->moved_blocks_cap) {
		size_t cap = sh->moved_blocks_cap ? sh->moved_blocks_cap * 2 : 16;
		struct rm_moved_block *b = realloc(sh->moved_blocks, cap * sizeof(*b));
		if (!b)
			return CUDA_ERROR_OUT_OF_MEMORY;
		sh->moved_blocks = b, sh->moved_blocks_cap = cap;
	}
	CUresult r = reserve_at(base, RM_MOVED_BLOCK, RM_MOVED_BLOCK);
	if (r != CUDA_SUCCESS)
		return r;
	sh->moved_blocks[sh->nmoved_blocks++] = (struct rm_moved_block){base, 1};
	return CUDA_SUCCESS;
}

static void block_leave(struct rm_session *sh, uint64_t a)
{
	struct rm_moved_block *b = block_of(sh, a);
	if (b && !--b->runs) {
		park(b->base, RM_MOVED_BLOCK);
		*b = sh->moved_blocks[--sh->nmoved_blocks];
	}
}

/* Unreserves run r's addresses: its own reservation, or its part of its block's. */
static void run_unreserve(struct rm_session *sh, const struct rm_moved_run *r)
{
	if (r->in_window)
		return; /* the window's reservation stays */
	if (r->reserved_alone)
		park(r->base, r->span);
	else
		block_leave(sh, r->base);
}

/* Maps new memory of dev on run r, [base, base + span): reserved alone, at exactly those
 * addresses or not at all (ALREADY_MAPPED), or (not alone) in the block it lies in,
 * reserved at that address first where no run holds it. */
static CUresult map_run(struct rm_session *sh, CUdevice dev, struct rm_moved_run *run, int alone)
{
	uint64_t base = run->base;
	size_t span = run->span;
	CUmemGenericAllocationHandle *phys = &run->phys;
	CUresult r;
	run->reserved_alone = alone;
	run->in_window = rm_window_holds(base, span);
	if (run->in_window) {
		; /* reserved with the window */
	} else if (alone) {
		if ((r = reserve_at(base, span, 0)) != CUDA_SUCCESS)
			return r;
	} else if ((r = block_hold(sh, base)) != CUDA_SUCCESS) {
		return r;
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
		run_unreserve(sh, run);
	return r;
}

/* Undoes map_run; a run of the window is unmapped in the background, and its granules are
 * the window's again once it is (memory_window.h). */
static void run_unmap(struct rm_session *sh, const struct rm_moved_run *r)
{
	if (r->in_window && !rm_window_unmap_later(r->base, r->span, r->phys))
		return;
	rm_drv_cuMemUnmap(r->base, r->span);
	rm_drv_cuMemRelease(r->phys);
	run_unreserve(sh, r);
	if (r->in_window)
		rm_window_released(r->base, r->span);
}

static void unmap_run(struct rm_channel *s, const struct rm_moved_run *r)
{
	run_unmap(s->sh, r);
	rm_session_uncharge(s, r->span);
}

/* Each run [base, base + size) lies in loses a user; the last one's unmaps it. */
static void leave_runs(struct rm_channel *s, uint64_t base, uint64_t size)
{
	struct rm_session *sh = s->sh;
	for (size_t i = 0; i < sh->nmoved_runs;) {
		struct rm_moved_run *r = &sh->moved_runs[i];
		if (run_overlaps(r, base, size) && !--r->users) {
			struct rm_moved_run gone = *r;
			sh->moved_runs[i] = sh->moved_runs[--sh->nmoved_runs];
			unmap_run(s, &gone);
			continue;
		}
		i++;
	}
}

/* The runs and blocks of every session: a client's threads allocate and free moved memory
 * (memory_window.h) beside its main thread. */
static pthread_mutex_t runs_lock = PTHREAD_MUTEX_INITIALIZER;

/* A span is mapped as one run where the driver reserves exactly its addresses, else as one
 * run per block it lies in. Under runs_lock. */
static CUresult map_span(struct rm_channel *s, CUdevice dev, uint64_t base, uint64_t size)
{
	struct rm_session *sh = s->sh;
	CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
				    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = dev}};
	size_t gran = 0;
	CUresult r = rm_drv_cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
	if (r == CUDA_SUCCESS && (!gran || (gran & (gran - 1)) || gran > RM_MOVED_BLOCK || base % gran || size % gran ||
				  !size || base + size < base))
		r = CUDA_ERROR_INVALID_VALUE; /* not this GPU's granules: another model */
	for (size_t i = 0; r == CUDA_SUCCESS && i < sh->nmoved_runs; i++)
		if (run_overlaps(&sh->moved_runs[i], base, size))
			r = CUDA_ERROR_INVALID_VALUE; /* spans do not overlap */
	if (r != CUDA_SUCCESS)
		return r;
	if ((r = rm_session_charge(s, size)) != CUDA_SUCCESS)
		return r;
	size_t first = sh->nmoved_runs;
	struct rm_moved_run whole = {.base = base, .span = size};
	if (!rm_window_holds(base, size) && parked_as_blocks(base, size))
		r = CUDA_ERROR_ALREADY_MAPPED; /* its blocks held ahead: mapped in them */
	else if ((r = map_run(sh, dev, &whole, 1)) == CUDA_SUCCESS) {
		if (!run_add(sh, whole))
			return CUDA_SUCCESS;
		run_unmap(sh, &whole);
		rm_session_uncharge(s, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	r = CUDA_SUCCESS;
	for (uint64_t at = base; at < base + size;) {
		uint64_t block_end = (at & ~(RM_MOVED_BLOCK - 1)) + RM_MOVED_BLOCK;
		struct rm_moved_run run = {.base = at, .span = (block_end < base + size ? block_end : base + size) - at};
		if ((r = map_run(sh, dev, &run, 0)) != CUDA_SUCCESS)
			break;
		if (run_add(sh, run)) {
			run_unmap(sh, &run);
			r = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		at += run.span;
	}
	if (r != CUDA_SUCCESS) { /* the span's runs so far undone, and the whole span uncharged */
		while (sh->nmoved_runs > first) {
			struct rm_moved_run gone = sh->moved_runs[--sh->nmoved_runs];
			run_unmap(sh, &gone);
		}
		rm_session_uncharge(s, size);
	}
	return r;
}

CUresult rm_migrate_map_span(struct rm_channel *s, CUdevice dev, uint64_t base, uint64_t size)
{
	pthread_mutex_lock(&runs_lock);
	CUresult r = map_span(s, dev, base, size);
	pthread_mutex_unlock(&runs_lock);
	if (r == CUDA_SUCCESS)
		rm_window_taken(base, size);
	return r;
}

/* Under runs_lock. */
static CUresult own(struct rm_channel *s, uint64_t base, uint64_t size)
{
	struct rm_session *sh = s->sh;
	uint64_t covered = 0; /* inside one span, as the source sends them: its runs, end to end */
	for (size_t i = 0; i < sh->nmoved_runs; i++) {
		const struct rm_moved_run *r = &sh->moved_runs[i];
		if (run_overlaps(r, base, size))
			covered += (r->base + r->span < base + size ? r->base + r->span : base + size) -
				   (r->base > base ? r->base : base);
	}
	if (!size || base + size < base || covered != size)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sh->nmoved_runs; i++)
		if (run_overlaps(&sh->moved_runs[i], base, size))
			sh->moved_runs[i].users++;
	rm_session_own_memory(s, RM_H_MOVED_MEMORY, base, size, 0);
	return CUDA_SUCCESS;
}

CUresult rm_migrate_reserve_range(uint64_t base, uint64_t size)
{
	if (!size || base + size < base)
		return CUDA_ERROR_INVALID_VALUE;
	return reserve_at(base, size, base % RM_MOVED_BLOCK ? 0 : RM_MOVED_BLOCK);
}

void rm_migrate_hold_freed(uint64_t base, uint64_t size)
{
	uint64_t span = (size + RM_GRANULE - 1) / RM_GRANULE * RM_GRANULE;
	CUdeviceptr got = 0;
	if (base % RM_GRANULE || span < size || rm_drv_cuMemAddressReserve(&got, span, 0, base, 0) != CUDA_SUCCESS)
		return;
	if (got == base)
		park(base, span);
	else
		rm_drv_cuMemAddressFree(got, span);
}

void rm_migrate_park_range(uint64_t base, uint64_t size)
{
	park(base, size);
}

int rm_migrate_hold_range(uint64_t base, uint64_t size)
{
	if (rm_window_holds(base, size)) /* this worker's window keeps its addresses */
		return 1;
	uint64_t first = base & ~(RM_MOVED_BLOCK - 1), end = (base + size + RM_MOVED_BLOCK - 1) & ~(RM_MOVED_BLOCK - 1);
	if (base + size < base || end < base)
		return 0;
	if (parked_exactly(base, size) || parked_exactly(first, end - first))
		return 1; /* kept since the client left (its span alone, or its blocks) */
	/* Its own addresses (parked pieces of them given back first), unless that would give
	 * back a parked range reaching past them: an H100's driver does not always reserve a
	 * range at once at an address just given back. */
	if (!parked_sticking_out(base, size) && reserve_at(base, size, 0) == CUDA_SUCCESS) {
		park(base, size);
		return 1;
	}
	/* The whole blocks it lies in, which an H100's driver reserves at their address where
	 * it moves a range's other hints elsewhere; the state then maps it block by block. */
	if ((first == base && end == base + size) || reserve_at(first, end - first, RM_MOVED_BLOCK) != CUDA_SUCCESS)
		return 0;
	park(first, end - first);
	return 1;
}

CUresult rm_migrate_own(struct rm_channel *s, uint64_t base, uint64_t size)
{
	pthread_mutex_lock(&runs_lock);
	CUresult r = own(s, base, size);
	pthread_mutex_unlock(&runs_lock);
	return r;
}

CUresult rm_migrate_map_owned(struct rm_channel *s, CUdevice dev, uint64_t base, uint64_t span, uint64_t size)
{
	pthread_mutex_lock(&runs_lock);
	size_t first = s->sh->nmoved_runs;
	CUresult r = map_span(s, dev, base, span);
	if (r == CUDA_SUCCESS && (r = own(s, base, size)) != CUDA_SUCCESS) {
		while (s->sh->nmoved_runs > first) {
			struct rm_moved_run gone = s->sh->moved_runs[--s->sh->nmoved_runs];
			unmap_run(s, &gone);
		}
	}
	pthread_mutex_unlock(&runs_lock);
	return r;
}

void rm_migrate_drop_unused(struct rm_channel *s)
{
	struct rm_session *sh = s->sh;
	pthread_mutex_lock(&runs_lock);
	for (size_t i = 0; i < sh->nmoved_runs;) {
		if (!sh->moved_runs[i].users) {
			struct rm_moved_run gone = sh->moved_runs[i];
			sh->moved_runs[i] = sh->moved_runs[--sh->nmoved_runs];
			unmap_run(s, &gone);
			continue;
		}
		i++;
	}
	pthread_mutex_unlock(&runs_lock);
}

CUresult rm_migrate_free_moved(struct rm_channel *s, const struct rm_handle *h)
{
	CUresult r = rm_session_synchronize_all(s); /* no work of the client's may still use it */
	if (r == CUDA_SUCCESS)
		rm_migrate_release_moved(s, h);
	else
		rm_session_own_memory(s, RM_H_MOVED_MEMORY, h->value, h->size, 0);
	return r;
}

void rm_migrate_release_moved(struct rm_channel *s, const struct rm_handle *h)
{
	pthread_mutex_lock(&runs_lock);
	leave_runs(s, h->value, h->size);
	pthread_mutex_unlock(&runs_lock);
}

/* Runs of the window's memory that a client exported (CUDA IPC) and then freed, or left at
 * its end, while another client has it open: the worker's, until the last one closes it.
 * Under runs_lock. */
static struct rm_moved_run *orphans;
static size_t norphans, orphans_cap;

int rm_migrate_owns_run(struct rm_channel *s, const struct rm_handle *h)
{
	int owns = 0;
	pthread_mutex_lock(&runs_lock);
	for (size_t i = 0; i < s->sh->nmoved_runs && !owns; i++) {
		const struct rm_moved_run *r = &s->sh->moved_runs[i];
		owns = r->base == h->value && r->in_window && r->users == 1 && h->size <= r->span;
	}
	pthread_mutex_unlock(&runs_lock);
	return owns;
}

int rm_migrate_orphan_moved(struct rm_channel *s, const struct rm_handle *h)
{
	struct rm_session *sh = s->sh;
	int err = -ENOENT;
	pthread_mutex_lock(&runs_lock);
	for (size_t i = 0; i < sh->nmoved_runs && err == -ENOENT; i++) {
		struct rm_moved_run *r = &sh->moved_runs[i];
		if (r->base != h->value || !r->in_window || r->users != 1)
			continue;
		if (norphans == orphans_cap) {
			size_t cap = orphans_cap ? orphans_cap * 2 : 8;
			struct rm_moved_run *o = realloc(orphans, cap * sizeof(*o));
			if (!o) {
				err = -ENOMEM;
				break;
			}
			orphans = o, orphans_cap = cap;
		}
		orphans[norphans++] = *r;
		rm_session_uncharge(s, r->span);
		*r = sh->moved_runs[--sh->nmoved_runs];
		err = 0;
	}
	pthread_mutex_unlock(&runs_lock);
	return err;
}

int rm_migrate_free_orphan(uint64_t base)
{
	struct rm_moved_run gone = {0};
	int found = 0;
	pthread_mutex_lock(&runs_lock);
	for (size_t i = 0; i < norphans && !found; i++)
		if (orphans[i].base == base) {
			gone = orphans[i];
			orphans[i] = orphans[--norphans];
			found = 1;
		}
	pthread_mutex_unlock(&runs_lock);
	if (found)
		run_unmap(NULL, &gone); /* a window's run: no session's reservation */
	return found ? 0 : -ENOENT;
}

void rm_migrate_session_free(struct rm_session *sh)
{
	for (size_t i = 0; i < sh->nimages; i++)
		rm_migrate_kept_image_free(&sh->images[i]);
	free(sh->images);
	sh->images = NULL;
	sh->nimages = sh->images_cap = 0;
	free(sh->moved_runs); /* unmapped by release_moved_memory */
	sh->moved_runs = NULL;
	sh->nmoved_runs = 0;
	free(sh->moved_blocks); /* freed with their last runs */
	sh->moved_blocks = NULL;
	sh->nmoved_blocks = 0;
	rm_alias_free(sh);
	rm_variable_alias_free(sh);
}
