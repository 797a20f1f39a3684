/* How the NVML shim (libnvidia-ml.so.1, frontend/nvml/) asks the daemon what NVML tells
 * beyond driver calls, through the process's one connection, which the client library
 * (libcuda.so.1) owns: a Remora-private export table, got with cuGetExportTable and
 * RM_NVML_BRIDGE_ID. A libcuda.so.1 that is not Remora's refuses the id, and the shim
 * reports NVML_ERROR_DRIVER_NOT_LOADED. */
#ifndef REMORA_NVML_BRIDGE_H
#define REMORA_NVML_BRIDGE_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

#include "nvml_abi.h"
#include "wire.h" /* RM_NVML_HAS_*: bits of valid */

/* "remora-nvml-brdg" */
#define RM_NVML_BRIDGE_ID {0x72, 0x65, 0x6d, 0x6f, 0x72, 0x61, 0x2d, 0x6e, 0x76, 0x6d, 0x6c, 0x2d, 0x62, 0x72, 0x64, 0x67}


struct rm_nvml_device_state {
	uint32_t valid;
	uint64_t total_bytes;     /* the device's memory narrowed by the client's quotas */
	uint64_t free_bytes;
	uint64_t client_bytes;    /* device memory this client holds */
	int has_context;          /* the client uses this GPU */
	uint32_t gpu_util, memory_util, temperature_c, power_mw, power_limit_mw, brand;
	char driver_version[80];
};

/* What the host's NVML says of a GPU's links (RM_OP_DEVICE_STATE with topology). */
#define RM_NVML_MAX_PEERS 64
struct rm_nvml_topology {
	int npeers;
	struct {
		int device;           /* the client's ordinal */
		uint32_t p2p_valid;   /* bit i: p2p[i] answered (nvmlGpuP2PCapsIndex_t i) */
		uint32_t p2p[NVML_P2P_CAPS_COUNT];
		int ancestor_valid;
		uint32_t ancestor;    /* nvmlGpuTopologyLevel_t */
	} peers[RM_NVML_MAX_PEERS];
	int nlinks;
	struct {
		uint32_t link, active, version, caps, caps_valid;
		int version_valid, remote_valid, remote_type_valid;
		nvmlPciInfo_t remote;
		uint32_t remote_type; /* nvmlIntNvLinkDeviceType_t */
	} links[NVML_NVLINK_MAX_LINKS];
	int numa_valid;
	uint32_t numa_node;
};

struct rm_nvml_bridge {
	size_t size;              /* sizeof(struct rm_nvml_bridge) */
	/* What the daemon says of the client's GPU ordinal; CUDA_SUCCESS or why not. */
	CUresult (*device_state)(int ordinal, struct rm_nvml_device_state *out);
	/* Its links to the client's other GPUs, NVLinks and NUMA node, checked. */
	CUresult (*device_topology)(int ordinal, struct rm_nvml_topology *out);
};

/* The client library's table (nvml_bridge.c). */
extern const struct rm_nvml_bridge rm_nvml_bridge_table;

#endif
