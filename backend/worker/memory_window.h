/* Device memory at addresses unique to this worker (migratable_memory; docs/pool.md, "Live
 * migration"). A client that moves keeps its device addresses, so the target must map its
 * memory there; memory the driver placed (cuMemAlloc) lies where the target worker's own
 * driver and host mappings lie too, in the same region of every process. With
 * migratable_memory, cuMemAlloc instead maps memory (the virtual memory API) in a window of
 * 1 TiB that this worker reserves at the first allocation, at one of 64 places below the
 * region processes map into, chosen at random, as moved memory is (RM_H_MOVED_MEMORY,
 * migrate.h): every allocation then moves, to any remorad whose window differs. */
#ifndef REMORA_MEMORY_WINDOW_H
#define REMORA_MEMORY_WINDOW_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "session.h"

/* bytes of the client's, mapped at blocks of the window and owned by s as moved memory:
 * charged as its granules (CUDA_ERROR_OUT_OF_MEMORY past its quota or the window). */
CUresult rm_window_alloc(struct rm_channel *s, size_t bytes, CUdeviceptr *out);
/* Whether [base, base + size) lies in the window (reserved: mapped without a reservation of
 * its own). */
int rm_window_holds(uint64_t base, uint64_t size);
/* A client's address reservation (cuMemAddressReserve) of size bytes at alignment (0: the
 * granule) in the window, in whole 32 MiB blocks at a block's start, so that a target
 * worker can reserve the same addresses (the driver honours only such hints): its address,
 * or 0 when the window has no room (or none could be reserved). */
uint64_t rm_window_reserve(size_t size, size_t alignment);
/* Gives back a reservation: granules of the window, or the driver's reservation. */
CUresult rm_window_address_free(uint64_t base, uint64_t size);
/* Memory at [base, base + size) given back (freed, moved away, or its session ended): its
 * blocks inside the window are free again. */
void rm_window_released(uint64_t base, uint64_t size);
/* Memory of a client moving in at [base, base + size): blocks of the window it lies in are
 * no longer handed out. */
void rm_window_taken(uint64_t base, uint64_t size);
/* Unmaps and releases the mapping [base, base + span) of the window off the caller's thread
 * (deferred.h), then gives its granules back: cuMemUnmap waits for every kernel of the
 * shared context, other clients' too, which a client's free must not (docs/sharing.md).
 * Its caller has waited for the client's own work. 0, or -errno where it must unmap itself. */
int rm_window_unmap_later(uint64_t base, uint64_t span, CUmemGenericAllocationHandle phys);
/* Waits up to timeout_ms for the unmaps queued to be done: 1 when any was queued. An
 * allocation short of memory waits RM_WINDOW_UNMAP_WAIT_MS for them, as does a client moving
 * back into the window. */
#define RM_WINDOW_UNMAP_WAIT_MS 10000
int rm_window_wait_unmaps(int timeout_ms);

#endif
