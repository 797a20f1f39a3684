/* The NVML shim's way to the daemon (nvml_bridge.h): a private export table whose one
 * call asks RM_OP_DEVICE_STATE on the process's connection. */
#include "nvml_bridge.h"

#include <stdio.h>
#include <string.h>

#include "client.h"
#include "export_tables.h"
#include "remora.pb-c.h"

static CUresult device_state(int ordinal, struct rm_nvml_device_state *out)
{
	if (!out || ordinal < 0)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__DeviceState req = REMORA__DEVICE_STATE__INIT;
	req.device = ordinal;
	Remora__DeviceStateReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_DEVICE_STATE, &req.base, &remora__device_state_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	memset(out, 0, sizeof(*out));
	if (r == CUDA_SUCCESS && rep) {
		if (rep->driver_version && strlen(rep->driver_version) >= sizeof(out->driver_version)) {
			rm_rpc_free(&rep->base);
			return rm_rpc_bad_reply("device state: a driver version of %zu bytes", strlen(rep->driver_version));
		}
		out->valid = rep->valid;
		out->total_bytes = rep->total_bytes;
		out->free_bytes = rep->free_bytes < rep->total_bytes ? rep->free_bytes : rep->total_bytes;
		out->client_bytes = rep->client_bytes;
		out->has_context = rep->has_context;
		out->gpu_util = rep->gpu_util <= 100 ? rep->gpu_util : 100;
		out->memory_util = rep->memory_util <= 100 ? rep->memory_util : 100;
		out->temperature_c = rep->temperature_c;
		out->power_mw = rep->power_mw;
		out->power_limit_mw = rep->power_limit_mw;
		out->brand = rep->brand;
		if (rep->driver_version)
			strcpy(out->driver_version, rep->driver_version);
	} else if (r == CUDA_SUCCESS) {
		r = CUDA_ERROR_UNKNOWN;
	}
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

/* The reply's parts, each bounded before it is copied. */
static CUresult topology_of(const Remora__DeviceStateReply *rep, struct rm_nvml_topology *out)
{
	if (rep->n_peers > RM_NVML_MAX_PEERS || rep->n_nvlinks > NVML_NVLINK_MAX_LINKS)
		return rm_rpc_bad_reply("device topology: %zu peers, %zu links", rep->n_peers, rep->n_nvlinks);
	for (size_t i = 0; i < rep->n_peers; i++) {
		const Remora__DeviceStateReply__Peer *p = rep->peers[i];
		if (p->n_p2p_status > NVML_P2P_CAPS_COUNT || p->device < 0 ||
		    (p->p2p_valid >> p->n_p2p_status))
			return rm_rpc_bad_reply("device topology: peer %zu malformed", i);
		out->peers[i].device = p->device;
		out->peers[i].p2p_valid = p->p2p_valid;
		memcpy(out->peers[i].p2p, p->p2p_status, p->n_p2p_status * sizeof(uint32_t));
		out->peers[i].ancestor_valid = p->ancestor_valid;
		out->peers[i].ancestor = p->ancestor;
	}
	out->npeers = (int)rep->n_peers;
	for (size_t i = 0; i < rep->n_nvlinks; i++) {
		const Remora__DeviceStateReply__NvLink *k = rep->nvlinks[i];
		if (k->link >= NVML_NVLINK_MAX_LINKS ||
		    (k->remote_bus_id && strlen(k->remote_bus_id) >= NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE))
			return rm_rpc_bad_reply("device topology: link %zu malformed", i);
		out->links[i].link = k->link;
		out->links[i].active = k->active;
		out->links[i].version_valid = k->version_valid;
		out->links[i].version = k->version;
		out->links[i].caps_valid = k->caps_valid;
		out->links[i].caps = k->caps;
		out->links[i].remote_valid = k->remote_valid;
		out->links[i].remote_type_valid = k->remote_type_valid;
		out->links[i].remote_type = k->remote_type;
		nvmlPciInfo_t *r = &out->links[i].remote;
		snprintf(r->busId, sizeof(r->busId), "%s", k->remote_bus_id ? k->remote_bus_id : "");
		snprintf(r->busIdLegacy, sizeof(r->busIdLegacy), "%s", r->busId);
		r->domain = k->remote_domain;
		r->bus = k->remote_bus;
		r->device = k->remote_device;
		r->pciDeviceId = k->remote_pci_device_id;
		r->pciSubSystemId = k->remote_pci_subsystem_id;
	}
	out->nlinks = (int)rep->n_nvlinks;
	out->numa_valid = !!(rep->valid & RM_NVML_HAS_NUMA_NODE);
	out->numa_node = rep->numa_node;
	return CUDA_SUCCESS;
}

static CUresult device_topology(int ordinal, struct rm_nvml_topology *out)
{
	if (!out || ordinal < 0)
		return CUDA_ERROR_INVALID_VALUE;
	Remora__DeviceState req = REMORA__DEVICE_STATE__INIT;
	req.device = ordinal;
	req.topology = 1;
	Remora__DeviceStateReply *rep = NULL;
	CUresult r = rm_rpc_simple(RM_OP_DEVICE_STATE, &req.base, &remora__device_state_reply__descriptor,
				   (ProtobufCMessage **)&rep);
	memset(out, 0, sizeof(*out));
	if (r == CUDA_SUCCESS && rep)
		r = topology_of(rep, out);
	else if (r == CUDA_SUCCESS)
		r = CUDA_ERROR_UNKNOWN;
	rm_rpc_free(rep ? &rep->base : NULL);
	return r;
}

const struct rm_nvml_bridge rm_nvml_bridge_table = {
	.size = sizeof(struct rm_nvml_bridge),
	.device_state = device_state,
	.device_topology = device_topology,
};
