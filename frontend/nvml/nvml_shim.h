/* The NVML shim (libnvidia-ml.so.1): what its files share. Its surface is proto/nvml.spec;
 * the functions of class impl are in nvml.c, device_state.c and events.c, the rest
 * generated (scripts/gen_nvml.py). */
#ifndef REMORA_NVML_SHIM_H
#define REMORA_NVML_SHIM_H

#include "nvml_abi.h"

#define RM_NVML_EXPORT __attribute__((visibility("default")))

/* Whether d is one of the shim's device handles (nvml.c). */
int rm_nvml_is_device(nvmlDevice_t d);
/* What the daemon tells of the GPU behind handle d (nvml_bridge.h): NVML_SUCCESS with *st,
 * or why not (nvml.c). */
struct rm_nvml_device_state;
nvmlReturn_t rm_nvml_state_of(nvmlDevice_t d, struct rm_nvml_device_state *st);

/* What the daemon tells of the links of the GPU behind handle d (nvml_bridge.h), or why
 * not; the shim's handle of the client's ordinal i (NULL past its GPUs) (nvml.c). */
struct rm_nvml_topology;
nvmlReturn_t rm_nvml_topology_of(nvmlDevice_t d, struct rm_nvml_topology *t);
nvmlDevice_t rm_nvml_device_at(int ordinal);

/* Answered by nvml.c, called by the private table too. */
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
						     nvmlProcessInfo_t *infos);

/* What every unsupported function returns, logging its name once. */
int rm_nvml_unsupported(const char *name);

#endif
