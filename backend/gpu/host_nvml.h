/* The GPU host's own NVML (libnvidia-ml.so.1), dlopened where there is one, for what the
 * driver API does not tell: utilization, temperature, power, brand, the driver's version.
 * Absent (a host with the test driver), every figure is simply unknown. */
#ifndef REMORA_HOST_NVML_H
#define REMORA_HOST_NVML_H

#include <stdint.h>

struct rm_host_gpu_state {
	uint32_t valid;            /* RM_NVML_HAS_* bits (common/wire.h) of the figures known */
	uint32_t gpu_util, memory_util, temperature_c, power_mw, power_limit_mw, brand;
	uint64_t mem_total, mem_used; /* valid with RM_HOST_HAS_MEMORY */
	char driver_version[80];
};
#define RM_HOST_HAS_MEMORY (1u << 16)

/* Which library to load (the configuration's host_nvml; "" loads none). Before any query. */
void rm_host_nvml_configure(const char *path);
/* The figures of the GPU with this UUID ("GPU-..."); out->valid 0 when none is known. */
void rm_host_nvml_gpu(const char *uuid, struct rm_host_gpu_state *out);
/* The loaded NVML's handle of the GPU with this UUID (an nvmlDevice_t): 1, or 0 when there
 * is no NVML or no such GPU; and a function of that NVML by name, or NULL
 * (host_topology.c). */
int rm_host_nvml_device(const char *uuid, void **out);
void *rm_host_nvml_sym(const char *name);

#endif
