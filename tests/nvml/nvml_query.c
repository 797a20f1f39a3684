/* Asks NVML what a monitoring agent, nvidia-smi or PyTorch asks, as they do: libnvidia-ml.so.1
 * dlopened by name. Prints key=value lines for tests/nvml/nvml_shim.py; after the first
 * round it allocates device memory through the driver API and asks again.
 * usage: nvml_query [ALLOC_MIB [HOLD_SECONDS]]: HOLD_SECONDS keeps the memory (and the
 * session) that long before the end, for tests that look at a client while it runs. */
#include <cuda.h>
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvml_abi.h"

#define FN(name, ...) static nvmlReturn_t (*name)(__VA_ARGS__)
FN(nvmlInit_v2, void);
FN(nvmlShutdown, void);
FN(nvmlDeviceGetCount_v2, unsigned int *);
FN(nvmlDeviceGetHandleByIndex_v2, unsigned int, nvmlDevice_t *);
FN(nvmlDeviceGetHandleByUUID, const char *, nvmlDevice_t *);
FN(nvmlDeviceGetHandleByPciBusId_v2, const char *, nvmlDevice_t *);
FN(nvmlDeviceGetIndex, nvmlDevice_t, unsigned int *);
FN(nvmlDeviceGetName, nvmlDevice_t, char *, unsigned int);
FN(nvmlDeviceGetUUID, nvmlDevice_t, char *, unsigned int);
FN(nvmlDeviceGetPciInfo_v3, nvmlDevice_t, nvmlPciInfo_t *);
FN(nvmlDeviceGetMemoryInfo, nvmlDevice_t, nvmlMemory_t *);
FN(nvmlDeviceGetMemoryInfo_v2, nvmlDevice_t, nvmlMemory_v2_t *);
FN(nvmlDeviceGetCudaComputeCapability, nvmlDevice_t, int *, int *);
FN(nvmlDeviceGetUtilizationRates, nvmlDevice_t, nvmlUtilization_t *);
FN(nvmlDeviceGetTemperature, nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int *);
FN(nvmlDeviceGetFanSpeed, nvmlDevice_t, unsigned int *);
FN(nvmlDeviceGetTemperatureV, nvmlDevice_t, nvmlTemperature_v1_t *);
FN(nvmlDeviceGetComputeRunningProcesses_v3, nvmlDevice_t, unsigned int *, nvmlProcessInfo_t *);
FN(nvmlSystemGetCudaDriverVersion_v2, int *);
FN(nvmlSystemGetDriverVersion, char *, unsigned int);
static const char *(*nvmlErrorString)(nvmlReturn_t);
FN(nvmlInternalGetExportTable, const void **, const void *);
FN(nvmlEventSetCreate, void **);
FN(nvmlEventSetFree, void *);
FN(nvmlEventSetWait_v2, void *, void *, unsigned int);
FN(nvmlDeviceRegisterEvents, nvmlDevice_t, unsigned long long, void *);
FN(nvmlDeviceGetSupportedEventTypes, nvmlDevice_t, unsigned long long *);
FN(nvmlDeviceGetMigMode, nvmlDevice_t, unsigned int *, unsigned int *);
FN(nvmlDeviceGetMaxMigDeviceCount, nvmlDevice_t, unsigned int *);

static void *lib;

/* Event sets and MIG, as nvidia-smi asks: a set is made, no event type is supported, a
 * wait times out, and a device has MIG disabled and no MIG devices. */
static void events_and_mig(void)
{
	nvmlDevice_t d;
	void *set = NULL;
	unsigned long long types = ~0ull;
	unsigned int cur = 9, pending = 9, migs = 9;
	char data[64];
	if (nvmlDeviceGetHandleByIndex_v2(0, &d) != NVML_SUCCESS)
		return;
	printf("event_set_rc=%d\n", nvmlEventSetCreate(&set));
	nvmlReturn_t r = nvmlDeviceGetSupportedEventTypes(d, &types);
	printf("event_types_rc=%d\nevent_types=%llu\n", r, types);
	printf("register_none_rc=%d\n", nvmlDeviceRegisterEvents(d, 0, set));
	printf("register_xid_rc=%d\n", nvmlDeviceRegisterEvents(d, 8 /* Xid critical errors */, set));
	printf("event_wait_rc=%d\n", nvmlEventSetWait_v2(set, data, 10));
	printf("event_free_rc=%d\n", nvmlEventSetFree(set));
	r = nvmlDeviceGetMigMode(d, &cur, &pending);
	printf("mig_mode_rc=%d\nmig_mode=%u/%u\n", r, cur, pending);
	r = nvmlDeviceGetMaxMigDeviceCount(d, &migs);
	printf("mig_devices_rc=%d\nmig_devices=%u\n", r, migs);
}

static void *need(const char *name)
{
	void *p = dlsym(lib, name);
	if (!p) {
		fprintf(stderr, "nvml_query: libnvidia-ml.so.1 lacks %s\n", name);
		exit(1);
	}
	return p;
}
#define LOAD(name) *(void **)&name = need(#name)

#define MUST(call)                                                                       \
	do {                                                                             \
		nvmlReturn_t r_ = (call);                                                \
		if (r_ != NVML_SUCCESS) {                                                \
			fprintf(stderr, "nvml_query: %s: %d (%s)\n", #call, r_, nvmlErrorString(r_)); \
			exit(1);                                                         \
		}                                                                        \
	} while (0)

static void memory(nvmlDevice_t d, const char *when)
{
	nvmlMemory_t m;
	nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
	MUST(nvmlDeviceGetMemoryInfo(d, &m));
	MUST(nvmlDeviceGetMemoryInfo_v2(d, &m2));
	printf("%s.total=%llu\n%s.free=%llu\n%s.used=%llu\n%s.v2_total=%llu\n", when, m.total, when, m.free, when, m.used,
	       when, m2.total);
	nvmlProcessInfo_t p[4];
	unsigned int n = 4;
	MUST(nvmlDeviceGetComputeRunningProcesses_v3(d, &n, p));
	printf("%s.processes=%u\n", when, n);
	for (unsigned int i = 0; i < n; i++)
		printf("%s.process=%u:%llu\n", when, p[i].pid, p[i].usedGpuMemory);
}

/* nvidia-smi's private table (frontend/nvml/private_table.c): its size, the device of
 * slot 81 and the process list of slot 213 (entries of 4128 bytes: pid first). */
static void private_table(nvmlDevice_t d)
{
	static const unsigned char id[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
					     0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
	static const unsigned char other[16] = {1, 2, 3};
	const void **table = NULL;
	MUST(nvmlInternalGetExportTable((const void **)&table, id));
	printf("private.size=%zu\n", (size_t)(uintptr_t)table[0]);
	nvmlDevice_t found = NULL;
	nvmlReturn_t (*by_index)(uintptr_t, nvmlDevice_t *, uintptr_t) = (void *)table[81];
	printf("private.by_index=%s\n", by_index(0, &found, 0x22) == NVML_SUCCESS && found == d ? "agrees" : "differs");
	static unsigned char entries[4][4128];
	unsigned int n = 4;
	nvmlReturn_t (*list)(nvmlDevice_t, unsigned int *, void *) = (void *)table[213];
	nvmlReturn_t r = list(d, &n, entries);
	unsigned int pid = 0;
	memcpy(&pid, entries[0], sizeof(pid));
	printf("private.processes_rc=%d\nprivate.processes=%u\nprivate.process=%u:%s\n", r, n, pid,
	       (const char *)entries[0] + 32);
	const void *none = NULL;
	printf("private.other_table_rc=%d\n", nvmlInternalGetExportTable(&none, other));
}

int main(int argc, char **argv)
{
	size_t alloc = (argc > 1 ? strtoull(argv[1], NULL, 0) : 16) << 20;
	if (!(lib = dlopen("libnvidia-ml.so.1", RTLD_NOW))) {
		fprintf(stderr, "nvml_query: %s\n", dlerror());
		return 1;
	}
	LOAD(nvmlInit_v2); LOAD(nvmlShutdown); LOAD(nvmlDeviceGetCount_v2); LOAD(nvmlDeviceGetHandleByIndex_v2);
	LOAD(nvmlDeviceGetHandleByUUID); LOAD(nvmlDeviceGetHandleByPciBusId_v2); LOAD(nvmlDeviceGetIndex);
	LOAD(nvmlDeviceGetName); LOAD(nvmlDeviceGetUUID); LOAD(nvmlDeviceGetPciInfo_v3);
	LOAD(nvmlDeviceGetMemoryInfo); LOAD(nvmlDeviceGetMemoryInfo_v2); LOAD(nvmlDeviceGetCudaComputeCapability);
	LOAD(nvmlDeviceGetUtilizationRates); LOAD(nvmlDeviceGetTemperature); LOAD(nvmlDeviceGetFanSpeed);
	LOAD(nvmlDeviceGetComputeRunningProcesses_v3); LOAD(nvmlSystemGetCudaDriverVersion_v2);
	LOAD(nvmlSystemGetDriverVersion); LOAD(nvmlErrorString); LOAD(nvmlInternalGetExportTable);
	LOAD(nvmlDeviceGetTemperatureV);
	LOAD(nvmlEventSetCreate); LOAD(nvmlEventSetFree); LOAD(nvmlEventSetWait_v2); LOAD(nvmlDeviceRegisterEvents);
	LOAD(nvmlDeviceGetSupportedEventTypes); LOAD(nvmlDeviceGetMigMode); LOAD(nvmlDeviceGetMaxMigDeviceCount);

	MUST(nvmlInit_v2());
	unsigned int count;
	MUST(nvmlDeviceGetCount_v2(&count));
	printf("count=%u\n", count);
	int cuda;
	MUST(nvmlSystemGetCudaDriverVersion_v2(&cuda));
	printf("cuda_driver=%d\n", cuda);
	char text[128];
	printf("driver_version_rc=%d\n", nvmlSystemGetDriverVersion(text, sizeof(text)));
	for (unsigned int i = 0; i < count; i++) {
		nvmlDevice_t d, by_uuid, by_pci;
		unsigned int idx = 99;
		char name[96], uuid[96];
		nvmlPciInfo_t pci;
		int major, minor;
		MUST(nvmlDeviceGetHandleByIndex_v2(i, &d));
		MUST(nvmlDeviceGetName(d, name, sizeof(name)));
		MUST(nvmlDeviceGetUUID(d, uuid, sizeof(uuid)));
		MUST(nvmlDeviceGetPciInfo_v3(d, &pci));
		MUST(nvmlDeviceGetCudaComputeCapability(d, &major, &minor));
		MUST(nvmlDeviceGetHandleByUUID(uuid, &by_uuid));
		MUST(nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &by_pci));
		MUST(nvmlDeviceGetIndex(by_uuid, &idx));
		printf("gpu%u.name=%s\ngpu%u.uuid=%s\ngpu%u.bus_id=%s\ngpu%u.cc=%d.%d\n", i, name, i, uuid, i, pci.busId, i,
		       major, minor);
		printf("gpu%u.lookups=%s\n", i, by_uuid == d && by_pci == d && idx == i ? "agree" : "disagree");
		printf("gpu%u.short_name_rc=%d\n", i, nvmlDeviceGetName(d, name, 4));
		nvmlUtilization_t u;
		unsigned int v;
		printf("gpu%u.utilization_rc=%d\n", i, nvmlDeviceGetUtilizationRates(d, &u));
		printf("gpu%u.temperature_rc=%d\n", i, nvmlDeviceGetTemperature(d, NVML_TEMPERATURE_GPU, &v));
		printf("gpu%u.fan_rc=%d\n", i, nvmlDeviceGetFanSpeed(d, &v));
		nvmlTemperature_v1_t tv = {NVML_TEMPERATURE_V1, NVML_TEMPERATURE_GPU, 0};
		printf("gpu%u.temperature_v_rc=%d\n", i, nvmlDeviceGetTemperatureV(d, &tv));
		tv.version = 0;
		printf("gpu%u.temperature_v0_rc=%d\n", i, nvmlDeviceGetTemperatureV(d, &tv));
	}
	if (count) /* nvidia-smi makes an event set before it shows anything */
		events_and_mig();
	nvmlDevice_t bad;
	printf("bad_index_rc=%d\n", nvmlDeviceGetHandleByIndex_v2(count, &bad));
	printf("unknown_uuid_rc=%d\n", nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &bad));
	printf("error_string_3=%s\n", nvmlErrorString(NVML_ERROR_NOT_SUPPORTED));
	if (count) {
		nvmlDevice_t d;
		MUST(nvmlDeviceGetHandleByIndex_v2(0, &d));
		memory(d, "before");
		CUcontext ctx;
		CUdeviceptr p;
		CUresult r = cuInit(0);
		if (r == CUDA_SUCCESS)
			r = cuDevicePrimaryCtxRetain(&ctx, 0);
		if (r == CUDA_SUCCESS)
			r = cuCtxSetCurrent(ctx);
		if (r == CUDA_SUCCESS)
			r = cuMemAlloc(&p, alloc);
		if (r != CUDA_SUCCESS) {
			fprintf(stderr, "nvml_query: allocating %zu bytes: %d\n", alloc, r);
			return 1;
		}
		printf("pid=%d\nallocated=%zu\n", (int)getpid(), alloc);
		memory(d, "after");
		private_table(d);
		fflush(stdout);
		if (argc > 2)
			sleep((unsigned int)atoi(argv[2]));
	}
	MUST(nvmlShutdown());
	printf("shutdown_again_rc=%d\n", nvmlShutdown());
	return 0;
}
