/* The GPU host's NVML, loaded once per process at the first query (host_nvml.h). */
#include "host_nvml.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "nvml_abi.h"
#include "wire.h"

#define MAX_CACHED 64

static char lib_path[512] = "libnvidia-ml.so.1";
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int loaded;
static void *lib;
static struct {
	nvmlReturn_t (*init)(void);
	nvmlReturn_t (*by_uuid)(const char *, nvmlDevice_t *);
	nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t *);
	nvmlReturn_t (*temperature)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *);
	nvmlReturn_t (*power)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*power_limit)(nvmlDevice_t, unsigned int *);
	nvmlReturn_t (*brand)(nvmlDevice_t, nvmlBrandType_t *);
	nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t *);
	nvmlReturn_t (*driver_version)(char *, unsigned int);
} fn;
static struct {
	char uuid[48];
	nvmlDevice_t dev;
} cache[MAX_CACHED];
static int ncached;

void rm_host_nvml_configure(const char *path)
{
	snprintf(lib_path, sizeof(lib_path), "%s", path ? path : "");
}

static void load(void)
{
	if (!lib_path[0])
		return;
	lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		rm_log(RM_LOG_INFO, "no host NVML (%s): utilization, temperature and power are not reported", dlerror());
		return;
	}
	fn.init = (nvmlReturn_t (*)(void))dlsym(lib, "nvmlInit_v2");
	fn.by_uuid = (nvmlReturn_t (*)(const char *, nvmlDevice_t *))dlsym(lib, "nvmlDeviceGetHandleByUUID");
	fn.utilization = (nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t *))dlsym(lib, "nvmlDeviceGetUtilizationRates");
	fn.temperature = (nvmlReturn_t (*)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *))dlsym(lib, "nvmlDeviceGetTemperature");
	fn.power = (nvmlReturn_t (*)(nvmlDevice_t, unsigned int *))dlsym(lib, "nvmlDeviceGetPowerUsage");
	fn.power_limit = (nvmlReturn_t (*)(nvmlDevice_t, unsigned int *))dlsym(lib, "nvmlDeviceGetEnforcedPowerLimit");
	fn.brand = (nvmlReturn_t (*)(nvmlDevice_t, nvmlBrandType_t *))dlsym(lib, "nvmlDeviceGetBrand");
	fn.memory = (nvmlReturn_t (*)(nvmlDevice_t, nvmlMemory_t *))dlsym(lib, "nvmlDeviceGetMemoryInfo");
	fn.driver_version = (nvmlReturn_t (*)(char *, unsigned int))dlsym(lib, "nvmlSystemGetDriverVersion");
	nvmlReturn_t r = fn.init && fn.by_uuid ? fn.init() : NVML_ERROR_FUNCTION_NOT_FOUND;
	if (r != NVML_SUCCESS) {
		rm_log(RM_LOG_WARN, "the host NVML %s did not start (%d): utilization, temperature and power are not reported",
		       lib_path, r);
		dlclose(lib);
		lib = NULL;
		return;
	}
	loaded = 1;
	rm_log(RM_LOG_INFO, "host NVML %s loaded", lib_path);
}

static int handle_of(const char *uuid, nvmlDevice_t *out)
{
	int found = 0;
	pthread_mutex_lock(&lock);
	for (int i = 0; i < ncached && !found; i++)
		if (!strcmp(cache[i].uuid, uuid)) {
			*out = cache[i].dev;
			found = 1;
		}
	if (!found && fn.by_uuid(uuid, out) == NVML_SUCCESS) {
		found = 1;
		if (ncached < MAX_CACHED && strlen(uuid) < sizeof(cache[0].uuid)) {
			strcpy(cache[ncached].uuid, uuid);
			cache[ncached++].dev = *out;
		}
	}
	pthread_mutex_unlock(&lock);
	return found;
}

void rm_host_nvml_gpu(const char *uuid, struct rm_host_gpu_state *out)
{
	memset(out, 0, sizeof(*out));
	pthread_once(&load_once, load);
	nvmlDevice_t d;
	if (!loaded || !handle_of(uuid, &d))
		return;
	nvmlUtilization_t u;
	nvmlMemory_t m;
	nvmlBrandType_t b;
	if (fn.utilization && fn.utilization(d, &u) == NVML_SUCCESS) {
		out->gpu_util = u.gpu;
		out->memory_util = u.memory;
		out->valid |= RM_NVML_HAS_UTILIZATION;
	}
	if (fn.temperature && fn.temperature(d, NVML_TEMPERATURE_GPU, &out->temperature_c) == NVML_SUCCESS)
		out->valid |= RM_NVML_HAS_TEMPERATURE;
	if (fn.power && fn.power(d, &out->power_mw) == NVML_SUCCESS)
		out->valid |= RM_NVML_HAS_POWER;
	if (fn.power_limit && fn.power_limit(d, &out->power_limit_mw) == NVML_SUCCESS)
		out->valid |= RM_NVML_HAS_POWER_LIMIT;
	if (fn.brand && fn.brand(d, &b) == NVML_SUCCESS) {
		out->brand = (uint32_t)b;
		out->valid |= RM_NVML_HAS_BRAND;
	}
	if (fn.memory && fn.memory(d, &m) == NVML_SUCCESS) {
		out->mem_total = m.total;
		out->mem_used = m.used;
		out->valid |= RM_HOST_HAS_MEMORY;
	}
	if (fn.driver_version && fn.driver_version(out->driver_version, sizeof(out->driver_version)) == NVML_SUCCESS) {
		out->driver_version[sizeof(out->driver_version) - 1] = 0;
		out->valid |= RM_NVML_HAS_DRIVER_VERSION;
	}
}

int rm_host_nvml_device(const char *uuid, void **out)
{
	pthread_once(&load_once, load);
	nvmlDevice_t d;
	if (!loaded || !handle_of(uuid, &d))
		return 0;
	*out = d;
	return 1;
}

void *rm_host_nvml_sym(const char *name)
{
	pthread_once(&load_once, load);
	return loaded ? dlsym(lib, name) : NULL;
}
