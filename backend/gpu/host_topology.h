/* What the GPU host's NVML says of a GPU's links (RM_OP_DEVICE_STATE with topology): the
 * NVML shim's topology, P2P, NVLink and NUMA answers (frontend/nvml/topology.c). */
#ifndef REMORA_HOST_TOPOLOGY_H
#define REMORA_HOST_TOPOLOGY_H

#include "nvml_abi.h"
#include "remora.pb-c.h"

#define RM_TOPOLOGY_MAX_PEERS 64

/* The reply's storage, the caller's until the reply is sent. */
struct rm_host_topology_mem {
	Remora__DeviceStateReply__Peer peers[RM_TOPOLOGY_MAX_PEERS], *peer_ptrs[RM_TOPOLOGY_MAX_PEERS];
	uint32_t p2p[RM_TOPOLOGY_MAX_PEERS][NVML_P2P_CAPS_COUNT];
	Remora__DeviceStateReply__NvLink links[NVML_NVLINK_MAX_LINKS], *link_ptrs[NVML_NVLINK_MAX_LINKS];
	char bus_ids[NVML_NVLINK_MAX_LINKS][NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
};

/* Fills rep's peers (the n GPUs of UUIDs others, the client's ordinals ordinals, the
 * GPU itself among them), nvlinks and NUMA node for the GPU of uuid; nothing where there is no NVML. */
void rm_host_topology(const char *uuid, const char *const *others, const int *ordinals, int n,
		      Remora__DeviceStateReply *rep, struct rm_host_topology_mem *mem);

#endif
