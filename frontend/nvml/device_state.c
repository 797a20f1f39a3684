/* The NVML shim's answers about a GPU's state (proto/nvml.spec, class impl): memory,
 * utilization, thermals, power and processes, from what the daemon tells of the GPU through
 * the client library's bridge (nvml_bridge.h). docs/operations.md says what each answer
 * means for a client of a shared GPU. */
#include "nvml_shim.h"

#include <string.h>
#include <unistd.h>

#include "nvml_bridge.h"

/* ---- memory, utilization, thermals, power ---- */

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	struct rm_nvml_device_state st;
	nvmlReturn_t ret = memory ? rm_nvml_state_of(device, &st) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS) {
		memory->total = st.total_bytes;
		memory->free = st.free_bytes;
		memory->used = st.total_bytes - st.free_bytes;
	}
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
	struct rm_nvml_device_state st;
	if (!memory)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memory->version != nvmlMemory_v2)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	nvmlReturn_t ret = rm_nvml_state_of(device, &st);
	if (ret == NVML_SUCCESS) {
		memory->total = st.total_bytes;
		memory->reserved = 0;
		memory->free = st.free_bytes;
		memory->used = st.total_bytes - st.free_bytes;
	}
	return ret;
}

/* A figure of the host's NVML (bit has of valid), or NVML_ERROR_NOT_SUPPORTED. */
static nvmlReturn_t host_figure(nvmlDevice_t device, void *out, uint32_t has, struct rm_nvml_device_state *st)
{
	nvmlReturn_t ret = out ? rm_nvml_state_of(device, st) : NVML_ERROR_INVALID_ARGUMENT;
	return ret == NVML_SUCCESS && !(st->valid & has) ? NVML_ERROR_NOT_SUPPORTED : ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
	struct rm_nvml_device_state st;
	nvmlReturn_t ret = host_figure(device, utilization, RM_NVML_HAS_UTILIZATION, &st);
	if (ret == NVML_SUCCESS) {
		utilization->gpu = st.gpu_util;
		utilization->memory = st.memory_util;
	}
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
						     unsigned int *temp)
{
	struct rm_nvml_device_state st;
	if (sensorType != NVML_TEMPERATURE_GPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = host_figure(device, temp, RM_NVML_HAS_TEMPERATURE, &st);
	if (ret == NVML_SUCCESS)
		*temp = st.temperature_c;
	return ret;
}

/* nvidia-smi's default table asks this one (it shows ERR! for a missing entry point). */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature)
{
	unsigned int t;
	if (!temperature)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (temperature->version != NVML_TEMPERATURE_V1)
		return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
	nvmlReturn_t ret = nvmlDeviceGetTemperature(device, temperature->sensorType, &t);
	if (ret == NVML_SUCCESS)
		temperature->temperature = (int)t;
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int *power)
{
	struct rm_nvml_device_state st;
	nvmlReturn_t ret = host_figure(device, power, RM_NVML_HAS_POWER, &st);
	if (ret == NVML_SUCCESS)
		*power = st.power_mw;
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t device, unsigned int *limit)
{
	struct rm_nvml_device_state st;
	nvmlReturn_t ret = host_figure(device, limit, RM_NVML_HAS_POWER_LIMIT, &st);
	if (ret == NVML_SUCCESS)
		*limit = st.power_limit_mw;
	return ret;
}

/* ---- processes: this client alone, on a GPU whose context it uses ---- */

static nvmlReturn_t processes(nvmlDevice_t device, unsigned int *count, void *infos, size_t size, int compute)
{
	struct rm_nvml_device_state st;
	nvmlReturn_t ret = count ? rm_nvml_state_of(device, &st) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret != NVML_SUCCESS)
		return ret;
	unsigned int n = compute && st.has_context ? 1 : 0;
	if (*count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	*count = n;
	if (!n)
		return NVML_SUCCESS;
	if (!infos)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlProcessInfo_t p = {.pid = (unsigned int)getpid(), .usedGpuMemory = st.client_bytes,
			       .gpuInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT,
			       .computeInstanceId = NVML_VALUE_NOT_AVAILABLE_UINT};
	if (size == sizeof(nvmlProcessInfo_t)) {
		memcpy(infos, &p, sizeof(p));
	} else {
		nvmlProcessInfo_v1_t v1 = {.pid = p.pid, .usedGpuMemory = p.usedGpuMemory};
		memcpy(infos, &v1, sizeof(v1));
	}
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
								    nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 1);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
								    nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 1);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
								 nvmlProcessInfo_v1_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 1);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
								     nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 0);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
								     nvmlProcessInfo_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 0);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses(nvmlDevice_t device, unsigned int *infoCount,
								  nvmlProcessInfo_v1_t *infos)
{
	return processes(device, infoCount, infos, sizeof(*infos), 0);
}
