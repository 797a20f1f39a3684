/* The part of NVML's ABI that Remora answers (the NVML shim, frontend/nvml/) or reads from
 * the GPU host's own libnvidia-ml.so.1 (backend/gpu/host_nvml.c). Written from NVML's public API
 * reference: the toolkit's nvml.h is not on every build machine (Debian ships it only in
 * non-free). Only types and values whose layout NVML keeps stable (versioned entry points
 * for changed ones) are here. */
#ifndef REMORA_NVML_ABI_H
#define REMORA_NVML_ABI_H

typedef enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_ALREADY_INITIALIZED = 5,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_INSUFFICIENT_POWER = 8,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
	NVML_ERROR_TIMEOUT = 10,
	NVML_ERROR_IRQ_ISSUE = 11,
	NVML_ERROR_LIBRARY_NOT_FOUND = 12,
	NVML_ERROR_FUNCTION_NOT_FOUND = 13,
	NVML_ERROR_CORRUPTED_INFOROM = 14,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_RESET_REQUIRED = 16,
	NVML_ERROR_OPERATING_SYSTEM = 17,
	NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18,
	NVML_ERROR_IN_USE = 19,
	NVML_ERROR_MEMORY = 20,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22,
	NVML_ERROR_INSUFFICIENT_RESOURCES = 23,
	NVML_ERROR_FREQ_NOT_SUPPORTED = 24,
	NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25,
	NVML_ERROR_DEPRECATED = 26,
	NVML_ERROR_NOT_READY = 27,
	NVML_ERROR_GPU_NOT_FOUND = 28,
	NVML_ERROR_INVALID_STATE = 29,
	NVML_ERROR_UNKNOWN = 999,
} nvmlReturn_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_DEVICE_NAME_BUFFER_SIZE 64
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
#define NVML_DEVICE_UUID_BUFFER_SIZE 80
#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE 80
#define NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE 80
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE 32
#define NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE 16

/* nvmlDeviceGetPciInfo_v2 and _v3 (and today's nvmlPciInfo_t). */
typedef struct {
	char busIdLegacy[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;    /* device id << 16 | vendor id */
	unsigned int pciSubSystemId;
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
} nvmlPciInfo_t;

/* The first nvmlDeviceGetPciInfo's. */
typedef struct {
	char busId[NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE];
	unsigned int domain;
	unsigned int bus;
	unsigned int device;
	unsigned int pciDeviceId;
	unsigned int pciSubSystemId;
	unsigned int reserved0, reserved1, reserved2, reserved3;
} nvmlPciInfo_v1_t;

typedef struct {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

typedef struct {
	unsigned int version;        /* nvmlMemory_v2 */
	unsigned long long total;
	unsigned long long reserved;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_v2_t;
#define NVML_STRUCT_VERSION(size, ver) ((unsigned int)(size) | ((unsigned int)(ver) << 24))
#define nvmlMemory_v2 NVML_STRUCT_VERSION(sizeof(nvmlMemory_v2_t), 2)

typedef struct {
	unsigned int gpu;            /* percent of the last sample period a kernel ran */
	unsigned int memory;         /* percent of it device memory was read or written */
} nvmlUtilization_t;

/* nvmlDeviceGetComputeRunningProcesses (v1) */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
} nvmlProcessInfo_v1_t;

/* ..._v2 and _v3 (today's nvmlProcessInfo_t) */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;
	unsigned int gpuInstanceId;  /* 0xFFFFFFFF: not a MIG instance */
	unsigned int computeInstanceId;
} nvmlProcessInfo_t;

typedef enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;

/* nvmlDeviceGetTemperatureV's argument, version 1 (NVML's struct versions: size | version << 24). */
typedef struct {
	unsigned int version;
	nvmlTemperatureSensors_t sensorType;
	int temperature;
} nvmlTemperature_v1_t;
#define NVML_TEMPERATURE_V1 ((unsigned int)(sizeof(nvmlTemperature_v1_t) | (1u << 24)))

typedef enum { NVML_BRAND_UNKNOWN = 0 } nvmlBrandType_t;

typedef enum { NVML_FEATURE_DISABLED = 0, NVML_FEATURE_ENABLED = 1 } nvmlEnableState_t;

typedef enum { NVML_COMPUTEMODE_DEFAULT = 0 } nvmlComputeMode_t;

#define NVML_INIT_FLAG_NO_GPUS 1
#define NVML_INIT_FLAG_NO_ATTACH 2

#define NVML_VALUE_NOT_AVAILABLE_UINT 0xFFFFFFFFu

/* Topology (nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetTopologyNearestGpus). */
typedef enum {
	NVML_TOPOLOGY_INTERNAL = 0,
	NVML_TOPOLOGY_SINGLE = 10,
	NVML_TOPOLOGY_MULTIPLE = 20,
	NVML_TOPOLOGY_HOSTBRIDGE = 30,
	NVML_TOPOLOGY_NODE = 40,
	NVML_TOPOLOGY_SYSTEM = 50,
} nvmlGpuTopologyLevel_t;

/* nvmlDeviceGetP2PStatus: what is asked (PROP is PCI's old name) and the answer. */
typedef enum {
	NVML_P2P_CAPS_INDEX_READ = 0,
	NVML_P2P_CAPS_INDEX_WRITE = 1,
	NVML_P2P_CAPS_INDEX_NVLINK = 2,
	NVML_P2P_CAPS_INDEX_ATOMICS = 3,
	NVML_P2P_CAPS_INDEX_PCI = 4,
	NVML_P2P_CAPS_INDEX_UNKNOWN = 5,
} nvmlGpuP2PCapsIndex_t;
#define NVML_P2P_CAPS_COUNT 5

typedef enum {
	NVML_P2P_STATUS_OK = 0,
	NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = 1,
	NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2,
	NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3,
	NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4,
	NVML_P2P_STATUS_NOT_SUPPORTED = 5,
	NVML_P2P_STATUS_UNKNOWN = 6,
} nvmlGpuP2PStatus_t;

/* NVLink (nvmlDeviceGetNvLink*). */
#define NVML_NVLINK_MAX_LINKS 18
typedef enum { /* what is at a link's far end */
	NVML_NVLINK_DEVICE_TYPE_GPU = 0x00,
	NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01,
	NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02,
	NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF,
} nvmlIntNvLinkDeviceType_t;
typedef enum {
	NVML_NVLINK_CAP_P2P_SUPPORTED = 0,
	NVML_NVLINK_CAP_SYSMEM_ACCESS = 1,
	NVML_NVLINK_CAP_P2P_ATOMICS = 2,
	NVML_NVLINK_CAP_SYSMEM_ATOMICS = 3,
	NVML_NVLINK_CAP_SLI_BRIDGE = 4,
	NVML_NVLINK_CAP_VALID = 5,
	NVML_NVLINK_CAP_COUNT = 6,
} nvmlNvLinkCapability_t;

/* nvmlDeviceGetCpuAffinityWithinScope, nvmlDeviceGetMemoryAffinity. */
typedef enum { NVML_AFFINITY_SCOPE_NODE = 0, NVML_AFFINITY_SCOPE_SOCKET = 1 } nvmlAffinityScope_t;

#endif
