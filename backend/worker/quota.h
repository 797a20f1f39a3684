/* A session's device memory against its quotas (docs/sharing.md, "Quotas"): what an
 * allocation is charged, and the client's view of the device's memory. */
#ifndef REMORA_QUOTA_H
#define REMORA_QUOTA_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

struct rm_channel;

/* What an allocation of bytes is charged: what the driver takes for it, not what was asked
 * (docs/sharing.md, "Quotas"). cuMemAlloc gives no two allocations one 512-byte block, and
 * maps an allocation of 2 MiB or more in whole 2 MiB pages: 20,000 one-byte allocations
 * took 5.1 MB of the device. So below 2 MiB, bytes rounded up to 512; from 2 MiB, to 2 MiB. */
#define RM_CHARGE_SMALL_UNIT 512u
#define RM_CHARGE_LARGE_UNIT (2u << 20)
static inline uint64_t rm_charged_bytes(uint64_t bytes)
{
	uint64_t unit = bytes < RM_CHARGE_LARGE_UNIT ? RM_CHARGE_SMALL_UNIT : RM_CHARGE_LARGE_UNIT;
	return bytes > UINT64_MAX - unit ? UINT64_MAX : (bytes + unit - 1) / unit * unit;
}
/* Charges a new allocation of bytes (rm_charged_bytes of them) to the client's and its
 * tenant's quotas: CUDA_ERROR_OUT_OF_MEMORY (and a log line) when it would pass either.
 * rm_session_uncharge gives back what charging the same bytes took. */
CUresult rm_session_charge(struct rm_channel *s, uint64_t bytes);
void rm_session_uncharge(struct rm_channel *s, uint64_t bytes);
/* Moves a charge of from bytes to to bytes (each as rm_charged_bytes rounds it): charges
 * the growth (CUDA_ERROR_OUT_OF_MEMORY and a log line past a quota, from still charged)
 * or gives back the shrink. */
CUresult rm_session_recharge(struct rm_channel *s, uint64_t from, uint64_t to);
/* Host-located physical allocations (cuMemCreate of a host location: the GPU host's
 * memory) are charged to the client's host memory (client_host_memory_limit, host_memory.h)
 * instead: CUDA_ERROR_OUT_OF_MEMORY (and a log line) past it. Once made, the allocation is
 * noted (CUDA_ERROR_OUT_OF_MEMORY: no memory for the note), so that
 * rm_session_uncharge_physical gives back to the account that was charged. */
CUresult rm_session_charge_host(struct rm_channel *s, uint64_t bytes);
void rm_session_uncharge_host(struct rm_channel *s, uint64_t bytes);
CUresult rm_session_note_host_physical(uint64_t handle, uint64_t bytes);
void rm_session_uncharge_physical(struct rm_channel *s, uint64_t handle, uint64_t bytes);
/* The client's view of device memory: the device's, narrowed by its quotas. */
void rm_session_memory_view(struct rm_channel *s, size_t *free_b, size_t *total_b);
/* The device memory one client of its tenant may hold now (registry.h); 0: no limit. */
uint64_t rm_session_client_limit(struct rm_channel *s);

#endif
