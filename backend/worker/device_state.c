/* RM_OP_DEVICE_STATE: what the NVML shim answers about a GPU the client sees, beyond
 * driver calls (docs/operations.md): memory narrowed by the client's quotas as
 * cuMemGetInfo is, what the client holds, and the host NVML's figures where it has them. */
#include "device_state.h"

#include <stdlib.h>
#include <string.h>

#include "gpus.h"
#include "host_nvml.h"
#include "host_topology.h"
#include "registry.h"
#include "remora.pb-c.h"

static int uses_device(struct rm_channel *s, CUdevice dev)
{
	int used = 0;
	pthread_mutex_lock(&s->sh->lock);
	for (int i = 0; i < s->sh->nctx && !used; i++)
		used = s->sh->ctxs[i].dev == dev;
	pthread_mutex_unlock(&s->sh->lock);
	return used;
}

/* The GPU's links to the client's other GPUs, by the client's ordinals. */
static void topology(struct rm_channel *s, const char *uuid, Remora__DeviceStateReply *rep,
		     struct rm_host_topology_mem *mem)
{
	char uuids[RM_TOPOLOGY_MAX_PEERS][48];
	const char *others[RM_TOPOLOGY_MAX_PEERS];
	int ordinals[RM_TOPOLOGY_MAX_PEERS], n = 0;
	struct rm_registry *reg = rm_registry();
	rm_registry_lock();
	for (int i = 0; i < s->sh->ndevices && n < RM_TOPOLOGY_MAX_PEERS; i++) {
		int dev = s->sh->devices[i];
		if (dev < 0 || dev >= reg->ngpus)
			continue;
		memcpy(uuids[n], reg->gpus[dev].uuid, sizeof(uuids[n]));
		uuids[n][sizeof(uuids[n]) - 1] = 0;
		others[n] = uuids[n];
		ordinals[n++] = i;
	}
	rm_registry_unlock();
	rm_host_topology(uuid, others, ordinals, n, rep, mem);
}

void rm_handle_device_state(struct rm_channel *s, struct rm_request *rq)
{
	Remora__DeviceState *req = (void *)rm_request_unpack(rq, &remora__device_state__descriptor);
	if (!req)
		return;
	Remora__DeviceStateReply rep = REMORA__DEVICE_STATE_REPLY__INIT;
	struct rm_host_topology_mem *mem = NULL;
	struct rm_host_gpu_state host;
	CUdevice dev = 0;
	CUresult r = rm_session_device(s, req->device, &dev);
	if (r == CUDA_SUCCESS) {
		struct rm_registry *reg = rm_registry();
		char uuid[48] = "";
		size_t free_b = 0, total_b = 0;
		int have = rm_gpu_memory(dev, &free_b, &total_b) == CUDA_SUCCESS;
		rm_registry_lock();
		if (dev >= 0 && dev < reg->ngpus) {
			memcpy(uuid, reg->gpus[dev].uuid, sizeof(uuid));
			uuid[sizeof(uuid) - 1] = 0;
			if (!have) { /* no context of this process on it yet: as a worker last saw it */
				total_b = reg->gpus[dev].total_bytes;
				free_b = reg->gpus[dev].free_bytes;
			}
		}
		rep.client_bytes = reg->clients[s->sh->slot].mem_bytes;
		rm_registry_unlock();
		rm_session_memory_view(s, &free_b, &total_b);
		rep.total_bytes = total_b;
		rep.free_bytes = free_b;
		rep.has_context = uses_device(s, dev);
		rm_host_nvml_gpu(uuid, &host);
		rep.valid = host.valid & (RM_NVML_HAS_UTILIZATION | RM_NVML_HAS_TEMPERATURE | RM_NVML_HAS_POWER |
					  RM_NVML_HAS_BRAND | RM_NVML_HAS_DRIVER_VERSION | RM_NVML_HAS_POWER_LIMIT);
		rep.gpu_util = host.gpu_util;
		rep.memory_util = host.memory_util;
		rep.temperature_c = host.temperature_c;
		rep.power_mw = host.power_mw;
		rep.power_limit_mw = host.power_limit_mw;
		rep.brand = host.brand;
		rep.driver_version = host.driver_version;
		if (req->topology && !(mem = calloc(1, sizeof(*mem))))
			r = CUDA_ERROR_OUT_OF_MEMORY;
		else if (req->topology)
			topology(s, uuid, &rep, mem);
	}
	rm_request_finish(s, rq, r, r == CUDA_SUCCESS ? &rep.base : NULL);
	free(mem);
	protobuf_c_message_free_unpacked(&req->base, NULL);
}
