/* NVML events and MIG as a client of a shared GPU sees them (proto/nvml.spec, class impl).
 *
 * nvidia-smi makes an event set before it shows anything and stops with "Internal NVML
 * error" without one. No GPU event (Xid errors, clock changes) reaches a client through
 * Remora, so a set can be made and freed, a device supports no event types, registering
 * any type is NVML_ERROR_NOT_SUPPORTED, and a wait ends with NVML_ERROR_TIMEOUT when its
 * timeout has passed. The GPUs a client sees are whole devices: MIG is disabled on them
 * and they have no MIG devices. docs/operations.md. */
#include "nvml_shim.h"

#include <stdlib.h>
#include <time.h>

#define EVENT_SET_MAGIC 0x524d4e56u /* "VNMR": a set this shim made */
#define WAIT_MAX_MS 60000u          /* one wait sleeps at most this long */

struct nvmlEventSet_st {
	unsigned int magic;
};
typedef struct nvmlEventSet_st *nvmlEventSet_t;

RM_NVML_EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
	if (!set)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!(*set = malloc(sizeof(**set))))
		return NVML_ERROR_MEMORY;
	(*set)->magic = EVENT_SET_MAGIC;
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
	if (!set || set->magic != EVENT_SET_MAGIC)
		return NVML_ERROR_INVALID_ARGUMENT;
	set->magic = 0;
	free(set);
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *types)
{
	if (!types || !rm_nvml_is_device(device))
		return NVML_ERROR_INVALID_ARGUMENT;
	*types = 0;
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long types, nvmlEventSet_t set)
{
	if (!rm_nvml_is_device(device) || !set || set->magic != EVENT_SET_MAGIC)
		return NVML_ERROR_INVALID_ARGUMENT;
	return types ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

/* No event ever comes: the wait is its timeout (capped), then NVML_ERROR_TIMEOUT. */
static nvmlReturn_t wait_for_none(nvmlEventSet_t set, const void *data, unsigned int timeout_ms)
{
	if (!set || set->magic != EVENT_SET_MAGIC || !data)
		return NVML_ERROR_INVALID_ARGUMENT;
	unsigned int ms = timeout_ms < WAIT_MAX_MS ? timeout_ms : WAIT_MAX_MS;
	struct timespec left = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&left, &left))
		;
	return NVML_ERROR_TIMEOUT;
}

RM_NVML_EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, void *data, unsigned int timeout_ms)
{
	return wait_for_none(set, data, timeout_ms);
}

RM_NVML_EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, void *data, unsigned int timeout_ms)
{
	return wait_for_none(set, data, timeout_ms);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending)
{
	if (!current || !pending || !rm_nvml_is_device(device))
		return NVML_ERROR_INVALID_ARGUMENT;
	*current = *pending = NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
	if (!count || !rm_nvml_is_device(device))
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = 0;
	return NVML_SUCCESS;
}
