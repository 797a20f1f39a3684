/* The topology part of RM_OP_DEVICE_STATE (host_topology.h): what the GPU host's NVML says
 * of the links between a GPU and the others the client sees, and of its NVLinks and NUMA
 * node, asked of the loaded NVML function by function (one it lacks leaves its part out). */
#include "host_topology.h"

#include <stdlib.h>
#include <string.h>

#include "host_nvml.h"
#include "nvml_abi.h"
#include "wire.h"

typedef nvmlReturn_t (*p2p_fn)(nvmlDevice_t, nvmlDevice_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t *);
typedef nvmlReturn_t (*ancestor_fn)(nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t *);
typedef nvmlReturn_t (*link_fn)(nvmlDevice_t, unsigned int, unsigned int *);
typedef nvmlReturn_t (*cap_fn)(nvmlDevice_t, unsigned int, nvmlNvLinkCapability_t, unsigned int *);
typedef nvmlReturn_t (*remote_fn)(nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
typedef nvmlReturn_t (*remote_type_fn)(nvmlDevice_t, unsigned int, nvmlIntNvLinkDeviceType_t *);
typedef nvmlReturn_t (*numa_fn)(nvmlDevice_t, unsigned int *);

static void peers(nvmlDevice_t d, const char *const *others, const int *ordinals, int n,
		  Remora__DeviceStateReply *rep, struct rm_host_topology_mem *mem)
{
	p2p_fn p2p = (p2p_fn)rm_host_nvml_sym("nvmlDeviceGetP2PStatus");
	ancestor_fn anc = (ancestor_fn)rm_host_nvml_sym("nvmlDeviceGetTopologyCommonAncestor");
	for (int i = 0; i < n && i < RM_TOPOLOGY_MAX_PEERS; i++) {
		void *o;
		if (!rm_host_nvml_device(others[i], &o)) /* the GPU itself too: NVML answers for a pair of one */
			continue;
		Remora__DeviceStateReply__Peer *p = &mem->peers[rep->n_peers];
		remora__device_state_reply__peer__init(p);
		p->device = ordinals[i];
		p->p2p_status = mem->p2p[rep->n_peers];
		p->n_p2p_status = NVML_P2P_CAPS_COUNT;
		for (int c = 0; p2p && c < NVML_P2P_CAPS_COUNT; c++) {
			nvmlGpuP2PStatus_t st;
			if (p2p(d, (nvmlDevice_t)o, (nvmlGpuP2PCapsIndex_t)c, &st) == NVML_SUCCESS) {
				p->p2p_status[c] = (uint32_t)st;
				p->p2p_valid |= 1u << c;
			}
		}
		nvmlGpuTopologyLevel_t level;
		if (anc && anc(d, (nvmlDevice_t)o, &level) == NVML_SUCCESS) {
			p->ancestor = (uint32_t)level;
			p->ancestor_valid = 1;
		}
		mem->peer_ptrs[rep->n_peers] = p;
		rep->n_peers++;
	}
	rep->peers = mem->peer_ptrs;
}

static void nvlinks(nvmlDevice_t d, Remora__DeviceStateReply *rep, struct rm_host_topology_mem *mem)
{
	link_fn state = (link_fn)rm_host_nvml_sym("nvmlDeviceGetNvLinkState");
	link_fn version = (link_fn)rm_host_nvml_sym("nvmlDeviceGetNvLinkVersion");
	cap_fn cap = (cap_fn)rm_host_nvml_sym("nvmlDeviceGetNvLinkCapability");
	remote_fn remote = (remote_fn)rm_host_nvml_sym("nvmlDeviceGetNvLinkRemotePciInfo_v2");
	remote_type_fn remote_type = (remote_type_fn)rm_host_nvml_sym("nvmlDeviceGetNvLinkRemoteDeviceType");
	for (unsigned l = 0; state && l < NVML_NVLINK_MAX_LINKS; l++) {
		unsigned int active;
		if (state(d, l, &active) != NVML_SUCCESS)
			continue;
		Remora__DeviceStateReply__NvLink *k = &mem->links[rep->n_nvlinks];
		remora__device_state_reply__nv_link__init(k);
		k->link = l;
		k->active = active;
		k->version_valid = version && version(d, l, &k->version) == NVML_SUCCESS;
		for (int c = 0; cap && c < NVML_NVLINK_CAP_COUNT; c++) {
			unsigned int v;
			if (cap(d, l, (nvmlNvLinkCapability_t)c, &v) == NVML_SUCCESS) {
				k->caps_valid |= 1u << c;
				k->caps |= (v ? 1u : 0u) << c;
			}
		}
		nvmlPciInfo_t pci;
		memset(&pci, 0, sizeof(pci));
		if (remote && remote(d, l, &pci) == NVML_SUCCESS) {
			pci.busId[sizeof(pci.busId) - 1] = 0;
			memcpy(mem->bus_ids[rep->n_nvlinks], pci.busId, sizeof(pci.busId));
			k->remote_valid = 1;
			k->remote_bus_id = mem->bus_ids[rep->n_nvlinks];
			k->remote_domain = pci.domain;
			k->remote_bus = pci.bus;
			k->remote_device = pci.device;
			k->remote_pci_device_id = pci.pciDeviceId;
			k->remote_pci_subsystem_id = pci.pciSubSystemId;
		}
		nvmlIntNvLinkDeviceType_t type;
		if (remote_type && remote_type(d, l, &type) == NVML_SUCCESS) {
			k->remote_type_valid = 1;
			k->remote_type = (uint32_t)type;
		}
		mem->link_ptrs[rep->n_nvlinks++] = k;
	}
	rep->nvlinks = mem->link_ptrs;
}

void rm_host_topology(const char *uuid, const char *const *others, const int *ordinals, int n,
		      Remora__DeviceStateReply *rep, struct rm_host_topology_mem *mem)
{
	void *d;
	if (!rm_host_nvml_device(uuid, &d))
		return;
	peers((nvmlDevice_t)d, others, ordinals, n, rep, mem);
	nvlinks((nvmlDevice_t)d, rep, mem);
	numa_fn numa = (numa_fn)rm_host_nvml_sym("nvmlDeviceGetNumaNodeId");
	if (numa && numa((nvmlDevice_t)d, &rep->numa_node) == NVML_SUCCESS)
		rep->valid |= RM_NVML_HAS_NUMA_NODE;
}
