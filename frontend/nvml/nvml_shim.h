/* The NVML shim (libnvidia-ml.so.1): what its files share. Its surface is proto/nvml.spec;
 * the functions of class impl are in nvml.c and events.c, the rest generated (scripts/gen_nvml.py). */
#ifndef REMORA_NVML_SHIM_H
#define REMORA_NVML_SHIM_H

#include "nvml_abi.h"

#define RM_NVML_EXPORT __attribute__((visibility("default")))

/* Whether d is one of the shim's device handles (nvml.c). */
int rm_nvml_is_device(nvmlDevice_t d);

/* Answered by nvml.c, called by the private table too. */
nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device);
nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
						     nvmlProcessInfo_t *infos);

/* What every unsupported function returns, logging its name once. */
int rm_nvml_unsupported(const char *name);

#endif
