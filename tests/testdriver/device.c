/* Driver initialisation and device queries: an sm_90-like device. */
#include "testdriver.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCI_BUS_BASE 0x19
#define MAX_INT 2147483647

pthread_mutex_t td_lock = PTHREAD_MUTEX_INITIALIZER;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static bool initialized;
static int device_count = 1;
static size_t total_mem_bytes = (size_t)4 << 30;
static int hardware_queues;   /* 0: every stream independent (no channel model) */

/* Attribute values by CUdevice_attribute; 0 entries are listed too, so every
 * attribute below CU_DEVICE_ATTRIBUTE_MAX has an explicit value. */
struct attr_value { bool known; int value; };
#define A(name, v) [CU_DEVICE_ATTRIBUTE_##name] = { true, (v) }
static const struct attr_value attr_values[CU_DEVICE_ATTRIBUTE_MAX] = {
	A(MAX_THREADS_PER_BLOCK, 1024),
	A(MAX_BLOCK_DIM_X, 1024), A(MAX_BLOCK_DIM_Y, 1024), A(MAX_BLOCK_DIM_Z, 64),
	A(MAX_GRID_DIM_X, MAX_INT), A(MAX_GRID_DIM_Y, 65535), A(MAX_GRID_DIM_Z, 65535),
	A(MAX_SHARED_MEMORY_PER_BLOCK, 49152),
	A(TOTAL_CONSTANT_MEMORY, 65536),
	A(WARP_SIZE, 32),
	A(MAX_PITCH, MAX_INT),
	A(MAX_REGISTERS_PER_BLOCK, 65536),
	A(CLOCK_RATE, 1980000),
	A(TEXTURE_ALIGNMENT, 512),
	A(GPU_OVERLAP, 1),
	A(MULTIPROCESSOR_COUNT, 132),
	A(KERNEL_EXEC_TIMEOUT, 0),
	A(INTEGRATED, 0),
	A(CAN_MAP_HOST_MEMORY, 1),
	A(COMPUTE_MODE, CU_COMPUTEMODE_DEFAULT),
	A(MAXIMUM_TEXTURE1D_WIDTH, 131072),
	A(MAXIMUM_TEXTURE2D_WIDTH, 131072), A(MAXIMUM_TEXTURE2D_HEIGHT, 65536),
	A(MAXIMUM_TEXTURE3D_WIDTH, 16384), A(MAXIMUM_TEXTURE3D_HEIGHT, 16384),
	A(MAXIMUM_TEXTURE3D_DEPTH, 16384),
	A(MAXIMUM_TEXTURE2D_LAYERED_WIDTH, 32768), A(MAXIMUM_TEXTURE2D_LAYERED_HEIGHT, 32768),
	A(MAXIMUM_TEXTURE2D_LAYERED_LAYERS, 2048),
	A(SURFACE_ALIGNMENT, 512),
	A(CONCURRENT_KERNELS, 1),
	A(ECC_ENABLED, 1),
	A(PCI_BUS_ID, PCI_BUS_BASE), /* per device: see device_attribute() */
	A(PCI_DEVICE_ID, 0),
	A(TCC_DRIVER, 0),
	A(MEMORY_CLOCK_RATE, 2619000),
	A(GLOBAL_MEMORY_BUS_WIDTH, 5120),
	A(L2_CACHE_SIZE, 52428800),
	A(MAX_THREADS_PER_MULTIPROCESSOR, 2048),
	A(ASYNC_ENGINE_COUNT, 2),
	A(UNIFIED_ADDRESSING, 1),
	A(MAXIMUM_TEXTURE1D_LAYERED_WIDTH, 32768), A(MAXIMUM_TEXTURE1D_LAYERED_LAYERS, 2048),
	A(CAN_TEX2D_GATHER, 0),
	A(MAXIMUM_TEXTURE2D_GATHER_WIDTH, 32768), A(MAXIMUM_TEXTURE2D_GATHER_HEIGHT, 32768),
	A(MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE, 8192), A(MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE, 8192),
	A(MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE, 32768),
	A(PCI_DOMAIN_ID, 0),
	A(TEXTURE_PITCH_ALIGNMENT, 32),
	A(MAXIMUM_TEXTURECUBEMAP_WIDTH, 32768),
	A(MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH, 32768), A(MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS, 2046),
	A(MAXIMUM_SURFACE1D_WIDTH, 32768),
	A(MAXIMUM_SURFACE2D_WIDTH, 131072), A(MAXIMUM_SURFACE2D_HEIGHT, 65536),
	A(MAXIMUM_SURFACE3D_WIDTH, 16384), A(MAXIMUM_SURFACE3D_HEIGHT, 16384),
	A(MAXIMUM_SURFACE3D_DEPTH, 16384),
	A(MAXIMUM_SURFACE1D_LAYERED_WIDTH, 32768), A(MAXIMUM_SURFACE1D_LAYERED_LAYERS, 2048),
	A(MAXIMUM_SURFACE2D_LAYERED_WIDTH, 32768), A(MAXIMUM_SURFACE2D_LAYERED_HEIGHT, 32768),
	A(MAXIMUM_SURFACE2D_LAYERED_LAYERS, 2048),
	A(MAXIMUM_SURFACECUBEMAP_WIDTH, 32768),
	A(MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH, 32768), A(MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS, 2046),
	A(MAXIMUM_TEXTURE1D_LINEAR_WIDTH, 268435456),
	A(MAXIMUM_TEXTURE2D_LINEAR_WIDTH, 131072), A(MAXIMUM_TEXTURE2D_LINEAR_HEIGHT, 65000),
	A(MAXIMUM_TEXTURE2D_LINEAR_PITCH, 2097120),
	A(MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH, 32768), A(MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT, 32768),
	A(COMPUTE_CAPABILITY_MAJOR, 9), A(COMPUTE_CAPABILITY_MINOR, 0),
	A(MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH, 32768),
	A(STREAM_PRIORITIES_SUPPORTED, 1),
	A(GLOBAL_L1_CACHE_SUPPORTED, 1), A(LOCAL_L1_CACHE_SUPPORTED, 1),
	A(MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472),
	A(MAX_REGISTERS_PER_MULTIPROCESSOR, 65536),
	A(MANAGED_MEMORY, 1),
	A(MULTI_GPU_BOARD, 0), A(MULTI_GPU_BOARD_GROUP_ID, 0),
	A(HOST_NATIVE_ATOMIC_SUPPORTED, 0),
	A(SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO, 2),
	A(PAGEABLE_MEMORY_ACCESS, 0),
	A(CONCURRENT_MANAGED_ACCESS, 1),
	A(COMPUTE_PREEMPTION_SUPPORTED, 1),
	A(CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0),
	A(CAN_USE_STREAM_MEM_OPS_V1, 0), A(CAN_USE_64_BIT_STREAM_MEM_OPS_V1, 0),
	A(CAN_USE_STREAM_WAIT_VALUE_NOR_V1, 0),
	A(COOPERATIVE_LAUNCH, 1), A(COOPERATIVE_MULTI_DEVICE_LAUNCH, 0),
	A(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448),
	A(CAN_FLUSH_REMOTE_WRITES, 0),
	A(HOST_REGISTER_SUPPORTED, 1),
	A(PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0),
	A(DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0),
	A(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
	A(HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 1),
	A(HANDLE_TYPE_WIN32_HANDLE_SUPPORTED, 0), A(HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED, 0),
	A(MAX_BLOCKS_PER_MULTIPROCESSOR, 32),
	A(GENERIC_COMPRESSION_SUPPORTED, 0),
	A(MAX_PERSISTING_L2_CACHE_SIZE, 33554432),
	A(MAX_ACCESS_POLICY_WINDOW_SIZE, 134213632),
	A(GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, 1),
	A(RESERVED_SHARED_MEMORY_PER_BLOCK, 1024),
	A(SPARSE_CUDA_ARRAY_SUPPORTED, 1),
	A(READ_ONLY_HOST_REGISTER_SUPPORTED, 1),
	A(TIMELINE_SEMAPHORE_INTEROP_SUPPORTED, 1),
	A(MEMORY_POOLS_SUPPORTED, 1),
	A(GPU_DIRECT_RDMA_SUPPORTED, 1),
	A(GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS, 1),
	A(GPU_DIRECT_RDMA_WRITES_ORDERING, 0),
	A(MEMPOOL_SUPPORTED_HANDLE_TYPES, 1),
	A(CLUSTER_LAUNCH, 1),
	A(DEFERRED_MAPPING_CUDA_ARRAY_SUPPORTED, 1),
	A(CAN_USE_64_BIT_STREAM_MEM_OPS, 1),
	A(CAN_USE_STREAM_WAIT_VALUE_NOR, 1),
	A(DMA_BUF_SUPPORTED, 0),
	A(IPC_EVENT_SUPPORTED, 1),
	A(MEM_SYNC_DOMAIN_COUNT, 4),
	A(TENSOR_MAP_ACCESS_SUPPORTED, 1),
	A(HANDLE_TYPE_FABRIC_SUPPORTED, 0),
	A(UNIFIED_FUNCTION_POINTERS, 0),
	A(NUMA_CONFIG, 0), A(NUMA_ID, -1),
	A(MULTICAST_SUPPORTED, 0),
	A(MPS_ENABLED, 0),
	A(HOST_NUMA_ID, 0),
	A(D3D12_CIG_SUPPORTED, 0),
	A(MEM_DECOMPRESS_ALGORITHM_MASK, 0), A(MEM_DECOMPRESS_MAXIMUM_LENGTH, 0),
	A(VULKAN_CIG_SUPPORTED, 0),
	A(GPU_PCI_DEVICE_ID, (int)0x233010de),     /* device 0x2330, vendor 0x10de */
	A(GPU_PCI_SUBSYSTEM_ID, (int)0x16c110de),
	A(HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
	A(HOST_NUMA_MEMORY_POOLS_SUPPORTED, 0),
	A(HOST_NUMA_MULTINODE_IPC_SUPPORTED, 0),
	A(HOST_MEMORY_POOLS_SUPPORTED, 0),
	A(HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 1),
	A(HOST_ALLOC_DMA_BUF_SUPPORTED, 0),
	A(ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED, 0),
};
#undef A

static long env_long(const char *name, long fallback, long min, long max)
{
	const char *text = getenv(name);
	if (!text || !*text)
		return fallback;
	char *end;
	long value = strtol(text, &end, 10);
	if (*end || value < min || value > max)
		return fallback;
	return value;
}

static void read_environment(void)
{
	device_count = (int)env_long("REMORA_TESTDRIVER_DEVICES", 1, 0, TD_MAX_DEVICES);
	total_mem_bytes = (size_t)env_long("REMORA_TESTDRIVER_MEM_MB", 4096, 1, 1L << 24) << 20;
	/* As CUDA: at most 32; unset or not a positive number leaves the model off. */
	long queues = env_long("CUDA_DEVICE_MAX_CONNECTIONS", 0, 1, LONG_MAX);
	hardware_queues = queues > TD_MAX_HARDWARE_QUEUES ? TD_MAX_HARDWARE_QUEUES : (int)queues;
	td_fail_configure();
}

bool td_initialized(void) { return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE); }
int td_device_count(void) { return device_count; }
int td_hardware_queues(void) { return hardware_queues; }

/* REMORA_TESTDRIVER_CHANNELS=N: a GPU whose other contexts took all but N of its channels.
 * A context asking for more hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, read when the
 * context is made; 8 unset) cannot be made: out of memory, as on the GPU. */
bool td_channels_fit(void)
{
	long left = env_long("REMORA_TESTDRIVER_CHANNELS", 0, 1, LONG_MAX);
	return !left || env_long("CUDA_DEVICE_MAX_CONNECTIONS", 8, 1, LONG_MAX) <= left;
}
size_t td_device_total_mem(int ordinal) { (void)ordinal; return total_mem_bytes; }

static CUresult check_device(CUdevice dev)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (dev < 0 || dev >= device_count)
		return CUDA_ERROR_INVALID_DEVICE;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuInit(unsigned int flags)
{
	if (flags != 0)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&init_once, read_environment);
	__atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
	return device_count ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

/* No private export tables: a library that looks one up (NVRTC does, when it compiles)
 * takes its other path, as with a driver that does not know the table. */
TD_EXPORT CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	(void)id;
	if (!table)
		return CUDA_ERROR_INVALID_VALUE;
	*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}

TD_EXPORT CUresult cuDriverGetVersion(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = TD_DRIVER_VERSION;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetCount(int *count)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = device_count;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult rc = check_device(ordinal);
	if (rc == CUDA_SUCCESS)
		*device = ordinal;
	return rc;
}

TD_EXPORT CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(name, (size_t)len, "%s", "Remora Test Device");
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	*bytes = total_mem_bytes;
	return CUDA_SUCCESS;
}

static int pci_bus_of(CUdevice dev) { return PCI_BUS_BASE + dev; }

TD_EXPORT CUresult cuDeviceGetAttribute(int *value, CUdevice_attribute attrib, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!value || attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX || !attr_values[attrib].known)
		return CUDA_ERROR_INVALID_VALUE;
	*value = attrib == CU_DEVICE_ATTRIBUTE_PCI_BUS_ID ? pci_bus_of(dev) : attr_values[attrib].value;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetUuid_v2(CUuuid *uuid, CUdevice dev)
{
	static const unsigned char base[16] = { 0x52, 0x45, 0x4d, 0x4f, 0x52, 0x41, 0x40, 0x54,
						0x84, 0x44, 0x45, 0x56, 0x00, 0x00, 0x00, 0x00 };
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!uuid)
		return CUDA_ERROR_INVALID_VALUE;
	memcpy(uuid->bytes, base, sizeof base);
	uuid->bytes[15] = (char)dev;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
	return cuDeviceGetUuid_v2(uuid, dev);
}

TD_EXPORT CUresult cuDeviceGetPCIBusId(char *bus_id, int len, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!bus_id || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	snprintf(bus_id, (size_t)len, "%04X:%02X:00.0", 0, pci_bus_of(dev));
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *bus_id)
{
	if (!td_initialized())
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dev || !bus_id)
		return CUDA_ERROR_INVALID_VALUE;
	unsigned domain = 0, bus, device, function = 0;
	int used = 0;
	if (sscanf(bus_id, "%x:%x:%x.%x%n", &domain, &bus, &device, &function, &used) != 4 || bus_id[used]) {
		domain = 0, used = 0;
		if (sscanf(bus_id, "%x:%x.%x%n", &bus, &device, &function, &used) != 3 || bus_id[used])
			return CUDA_ERROR_INVALID_VALUE;
	}
	for (int i = 0; i < device_count; i++) {
		if (domain == 0 && (int)bus == pci_bus_of(i) && device == 0 && function == 0) {
			*dev = i;
			return CUDA_SUCCESS;
		}
	}
	return CUDA_ERROR_INVALID_DEVICE;
}

TD_EXPORT CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!major || !minor)
		return CUDA_ERROR_INVALID_VALUE;
	*major = attr_values[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR].value;
	*minor = attr_values[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR].value;
	return CUDA_SUCCESS;
}

TD_EXPORT CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev)
{
	CUresult rc = check_device(dev);
	if (rc != CUDA_SUCCESS)
		return rc;
	if (!prop)
		return CUDA_ERROR_INVALID_VALUE;
#define V(name) attr_values[CU_DEVICE_ATTRIBUTE_##name].value
	*prop = (CUdevprop){
		.maxThreadsPerBlock = V(MAX_THREADS_PER_BLOCK),
		.maxThreadsDim = { V(MAX_BLOCK_DIM_X), V(MAX_BLOCK_DIM_Y), V(MAX_BLOCK_DIM_Z) },
		.maxGridSize = { V(MAX_GRID_DIM_X), V(MAX_GRID_DIM_Y), V(MAX_GRID_DIM_Z) },
		.sharedMemPerBlock = V(MAX_SHARED_MEMORY_PER_BLOCK),
		.totalConstantMemory = V(TOTAL_CONSTANT_MEMORY),
		.SIMDWidth = V(WARP_SIZE),
		.memPitch = V(MAX_PITCH),
		.regsPerBlock = V(MAX_REGISTERS_PER_BLOCK),
		.clockRate = V(CLOCK_RATE),
		.textureAlign = V(TEXTURE_ALIGNMENT),
	};
#undef V
	return CUDA_SUCCESS;
}
