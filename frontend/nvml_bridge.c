/* The NVML shim's way to the daemon (nvml_bridge.h): a private export table whose one
 * call asks RM_OP_DEVICE_STATE on the process's connection. */
#include "nvml_bridge.h"

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

const struct rm_nvml_bridge rm_nvml_bridge_table = {
	.size = sizeof(struct rm_nvml_bridge),
	.device_state = device_state,
};
