/* The NVML shim's answers (proto/nvml.spec, class impl): the GPUs this client sees through
 * Remora, from driver calls on the client library (libcuda.so.1, which this library is
 * linked against: one connection per process) and, for what NVML tells beyond them, from
 * the daemon through the client library's bridge (nvml_bridge.h). docs/operations.md says
 * what each answer means for a client of a shared GPU. */
#include "nvml_shim.h"

#include <cuda.h>
#include <ctype.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"
#include "nvml_bridge.h"

#define MAX_DEVICES 64

struct nvmlDevice_st {
	int ordinal;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int refs;           /* nvmlInit calls not matched by nvmlShutdown (under lock) */
static int ndevices;       /* the client's GPUs, counted at the first init */
static const struct rm_nvml_bridge *bridge;
static struct nvmlDevice_st devices[MAX_DEVICES];

static void log_once_init(void)
{
	rm_log_init("remora-nvml", RM_LOG_ERROR);
}

static void log_init(void)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	pthread_once(&once, log_once_init);
}

int rm_nvml_unsupported(const char *name)
{
	static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
	static const char *seen[256];
	static int nseen;
	log_init();
	pthread_mutex_lock(&seen_lock);
	int known = 0;
	for (int i = 0; i < nseen && !known; i++)
		known = seen[i] == name;
	if (!known && nseen < 256)
		seen[nseen++] = name;
	pthread_mutex_unlock(&seen_lock);
	if (!known)
		rm_log(RM_LOG_WARN, "%s is not supported by Remora's NVML: returning NVML_ERROR_NOT_SUPPORTED", name);
	return NVML_ERROR_NOT_SUPPORTED;
}

static nvmlReturn_t from_cu(CUresult r)
{
	switch (r) {
	case CUDA_SUCCESS: return NVML_SUCCESS;
	case CUDA_ERROR_INVALID_VALUE:
	case CUDA_ERROR_INVALID_DEVICE: return NVML_ERROR_INVALID_ARGUMENT;
	case CUDA_ERROR_NOT_SUPPORTED: return NVML_ERROR_NOT_SUPPORTED;
	case CUDA_ERROR_NOT_INITIALIZED: return NVML_ERROR_UNINITIALIZED;
	case CUDA_ERROR_OUT_OF_MEMORY: return NVML_ERROR_MEMORY;
	case CUDA_ERROR_NO_DEVICE:
	case CUDA_ERROR_DEVICE_UNAVAILABLE: return NVML_ERROR_DRIVER_NOT_LOADED; /* no daemon, or lost */
	default: return NVML_ERROR_UNKNOWN;
	}
}

static nvmlReturn_t init(unsigned int flags)
{
	log_init();
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&lock);
	if (refs == 0) {
		static const CUuuid id = {RM_NVML_BRIDGE_ID};
		const void *table = NULL;
		int n = 0;
		CUresult r = cuInit(0);
		if (r != CUDA_SUCCESS) {
			ret = from_cu(r);
		} else if (cuGetExportTable(&table, &id) != CUDA_SUCCESS || !table ||
			   ((const struct rm_nvml_bridge *)table)->size < sizeof(struct rm_nvml_bridge)) {
			rm_log(RM_LOG_ERROR, "the libcuda.so.1 loaded is not Remora's client library (or an older one)");
			ret = NVML_ERROR_LIB_RM_VERSION_MISMATCH;
		} else if ((r = cuDeviceGetCount(&n)) != CUDA_SUCCESS) {
			ret = from_cu(r);
		} else {
			bridge = table;
			ndevices = n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
			for (int i = 0; i < ndevices; i++)
				devices[i].ordinal = i;
		}
		if (ret == NVML_SUCCESS && ndevices == 0 && !(flags & NVML_INIT_FLAG_NO_GPUS))
			ret = NVML_ERROR_DRIVER_NOT_LOADED;
	}
	if (ret == NVML_SUCCESS)
		refs++;
	pthread_mutex_unlock(&lock);
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlInit_v2(void) { return init(0); }
RM_NVML_EXPORT nvmlReturn_t nvmlInit(void) { return init(0); }
RM_NVML_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { return init(flags); }

RM_NVML_EXPORT nvmlReturn_t nvmlShutdown(void)
{
	nvmlReturn_t ret = NVML_SUCCESS;
	pthread_mutex_lock(&lock);
	if (refs == 0)
		ret = NVML_ERROR_UNINITIALIZED;
	else
		refs--;
	pthread_mutex_unlock(&lock);
	return ret;
}

static int initialized(void)
{
	return __atomic_load_n(&refs, __ATOMIC_ACQUIRE) > 0;
}

/* The device behind handle d: NVML_SUCCESS with *ordinal, or why not. */
static nvmlReturn_t device_of(nvmlDevice_t d, int *ordinal)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!d || d < devices || d >= devices + ndevices)
		return NVML_ERROR_INVALID_ARGUMENT;
	*ordinal = d->ordinal;
	return NVML_SUCCESS;
}

int rm_nvml_is_device(nvmlDevice_t d)
{
	int ordinal;
	return device_of(d, &ordinal) == NVML_SUCCESS;
}

static nvmlReturn_t copy_string(char *dst, unsigned int len, const char *src)
{
	if (!dst)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (strlen(src) >= len)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	memcpy(dst, src, strlen(src) + 1);
	return NVML_SUCCESS;
}

nvmlReturn_t rm_nvml_state_of(nvmlDevice_t d, struct rm_nvml_device_state *st)
{
	int ord;
	nvmlReturn_t ret = device_of(d, &ord);
	return ret != NVML_SUCCESS ? ret : from_cu(bridge->device_state(ord, st));
}

nvmlReturn_t rm_nvml_topology_of(nvmlDevice_t d, struct rm_nvml_topology *t)
{
	int ord;
	nvmlReturn_t ret = device_of(d, &ord);
	return ret != NVML_SUCCESS ? ret : from_cu(bridge->device_topology(ord, t));
}

nvmlDevice_t rm_nvml_device_at(int ordinal)
{
	return initialized() && ordinal >= 0 && ordinal < ndevices ? &devices[ordinal] : NULL;
}

/* ---- errors and versions ---- */

RM_NVML_EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
	switch (result) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
	case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
	case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
	case NVML_ERROR_TIMEOUT: return "Timeout";
	case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
	case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
	case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
	case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
	case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
	case NVML_ERROR_RESET_REQUIRED: return "GPU requires restart";
	case NVML_ERROR_OPERATING_SYSTEM: return "The operating system has blocked the request";
	case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch";
	case NVML_ERROR_IN_USE: return "In use by another client";
	case NVML_ERROR_MEMORY: return "Insufficient Memory";
	case NVML_ERROR_NO_DATA: return "No data";
	case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
	case NVML_ERROR_DEPRECATED: return "Deprecated";
	case NVML_ERROR_NOT_READY: return "Not Ready";
	case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
	case NVML_ERROR_INVALID_STATE: return "Invalid state";
	default: return "Unknown Error";
	}
}

/* The host's driver version, from the daemon (the first GPU's answer). */
static nvmlReturn_t host_driver_version(char *out, size_t len)
{
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (!ndevices)
		return NVML_ERROR_NOT_SUPPORTED;
	struct rm_nvml_device_state st;
	nvmlReturn_t ret = rm_nvml_state_of(&devices[0], &st);
	if (ret == NVML_SUCCESS && !(st.valid & RM_NVML_HAS_DRIVER_VERSION))
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS)
		snprintf(out, len, "%s", st.driver_version);
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
	char v[80];
	nvmlReturn_t ret = version ? host_driver_version(v, sizeof(v)) : NVML_ERROR_INVALID_ARGUMENT;
	return ret == NVML_SUCCESS ? copy_string(version, length, v) : ret;
}

/* NVML's version is "CUDA major.driver version", as NVIDIA's library says it. */
RM_NVML_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
	char v[80], out[96];
	int cuda = 0;
	nvmlReturn_t ret = version ? host_driver_version(v, sizeof(v)) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret != NVML_SUCCESS)
		return ret;
	cuDriverGetVersion(&cuda);
	snprintf(out, sizeof(out), "%d.%s", cuda / 1000, v);
	return copy_string(version, length, out);
}

RM_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
	if (!cudaDriverVersion)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	return from_cu(cuDriverGetVersion(cudaDriverVersion));
}

RM_NVML_EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
	return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ---- devices and handles ---- */

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
	if (!deviceCount)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	*deviceCount = (unsigned int)ndevices;
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
	return nvmlDeviceGetCount_v2(deviceCount);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!device)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	if (index >= (unsigned int)ndevices)
		return NVML_ERROR_INVALID_ARGUMENT;
	*device = &devices[index];
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByIndex_v2(index, device);
}

static nvmlReturn_t uuid_of(int ordinal, char *out, size_t len)
{
	CUuuid u;
	CUresult r = cuDeviceGetUuid(&u, ordinal);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	const unsigned char *b = (const unsigned char *)u.bytes;
	snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
		 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	if (!uuid || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	for (int i = 0; i < ndevices; i++) {
		char mine[NVML_DEVICE_UUID_BUFFER_SIZE];
		nvmlReturn_t ret = uuid_of(i, mine, sizeof(mine));
		if (ret != NVML_SUCCESS)
			return ret;
		if (!strcasecmp(mine, uuid)) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

/* A PCI bus id, "domain:bus:device.function" or "bus:device.function", in hex. */
static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev)
{
	unsigned int fn = 0;
	char end;
	if (sscanf(s, "%x:%x:%x.%x%c", dom, bus, dev, &fn, &end) == 4)
		return 0;
	*dom = 0;
	return sscanf(s, "%x:%x.%x%c", bus, dev, &fn, &end) == 3 ? 0 : -1;
}

static nvmlReturn_t bus_of(int ordinal, unsigned int *dom, unsigned int *bus, unsigned int *dev)
{
	char id[64];
	CUresult r = cuDeviceGetPCIBusId(id, sizeof(id), ordinal);
	if (r != CUDA_SUCCESS)
		return from_cu(r);
	return parse_bus_id(id, dom, bus, dev) ? NVML_ERROR_UNKNOWN : NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
	unsigned int dom, bus, dev;
	if (!pciBusId || !device || parse_bus_id(pciBusId, &dom, &bus, &dev))
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!initialized())
		return NVML_ERROR_UNINITIALIZED;
	for (int i = 0; i < ndevices; i++) {
		unsigned int d2, b2, v2;
		nvmlReturn_t ret = bus_of(i, &d2, &b2, &v2);
		if (ret != NVML_SUCCESS)
			return ret;
		if (d2 == dom && b2 == bus && v2 == dev) {
			*device = &devices[i];
			return NVML_SUCCESS;
		}
	}
	return NVML_ERROR_NOT_FOUND;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
	return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index)
{
	int ord;
	nvmlReturn_t ret = index ? device_of(device, &ord) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		*index = (unsigned int)ord;
	return ret;
}

/* The client's ordinal: there is no /dev/nvidiaN for a remote GPU on the client's host. */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber)
{
	return nvmlDeviceGetIndex(device, minorNumber);
}

/* ---- identity ---- */

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
	int ord;
	char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	nvmlReturn_t ret = name ? device_of(device, &ord) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		ret = from_cu(cuDeviceGetName(buf, sizeof(buf), ord));
	return ret == NVML_SUCCESS ? copy_string(name, length, buf) : ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	int ord;
	char buf[NVML_DEVICE_UUID_BUFFER_SIZE];
	nvmlReturn_t ret = uuid ? device_of(device, &ord) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		ret = uuid_of(ord, buf, sizeof(buf));
	return ret == NVML_SUCCESS ? copy_string(uuid, length, buf) : ret;
}

/* The PCI device and subsystem ids are not known through the driver API: 0. */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	int ord;
	unsigned int dom, bus, dev;
	nvmlReturn_t ret = pci ? device_of(device, &ord) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		ret = bus_of(ord, &dom, &bus, &dev);
	if (ret != NVML_SUCCESS)
		return ret;
	memset(pci, 0, sizeof(*pci));
	pci->domain = dom;
	pci->bus = bus;
	pci->device = dev;
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "%04X:%02X:%02X.0", dom & 0xffff, bus & 0xff, dev & 0xff);
	snprintf(pci->busId, sizeof(pci->busId), "%08X:%02X:%02X.0", dom, bus & 0xff, dev & 0xff);
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
	return nvmlDeviceGetPciInfo_v3(device, pci);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_v1_t *pci)
{
	nvmlPciInfo_t p;
	nvmlReturn_t ret = pci ? nvmlDeviceGetPciInfo_v3(device, &p) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret != NVML_SUCCESS)
		return ret;
	memset(pci, 0, sizeof(*pci));
	memcpy(pci->busId, p.busIdLegacy, sizeof(pci->busId));
	pci->domain = p.domain;
	pci->bus = p.bus;
	pci->device = p.device;
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
	int ord;
	nvmlReturn_t ret = major && minor ? device_of(device, &ord) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		ret = from_cu(cuDeviceGetAttribute(major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, ord));
	if (ret == NVML_SUCCESS)
		ret = from_cu(cuDeviceGetAttribute(minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, ord));
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type)
{
	struct rm_nvml_device_state st;
	nvmlReturn_t ret = type ? rm_nvml_state_of(device, &st) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS && !(st.valid & RM_NVML_HAS_BRAND))
		ret = NVML_ERROR_NOT_SUPPORTED;
	if (ret == NVML_SUCCESS)
		*type = (nvmlBrandType_t)st.brand;
	return ret;
}

/* Shared among clients as the default mode shares a GPU among processes. */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode)
{
	int ord;
	nvmlReturn_t ret = mode ? device_of(device, &ord) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		*mode = NVML_COMPUTEMODE_DEFAULT;
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
	int ord;
	nvmlReturn_t ret = isMigDevice ? device_of(device, &ord) : NVML_ERROR_INVALID_ARGUMENT;
	if (ret == NVML_SUCCESS)
		*isMigDevice = 0;
	return ret;
}
