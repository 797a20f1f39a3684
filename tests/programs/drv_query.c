/* drv_query: driver version, devices and every device attribute, UUIDs, PCI
 * bus ids, error names, and the error for an invalid device ordinal. */
#include "drv_common.h"

/* Capabilities a remote client has only in part, which Remora reports absent by design
 * (docs/sharing.md, "Faults"; fault_suite.py partial checks them): listed without a value,
 * so that native and remote runs compare. */
static int in_part_remotely(int attr)
{
	switch (attr) {
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS:
	case CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES:
	case CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_ONLY_PARTIAL_HOST_NATIVE_ATOMIC_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST:
	case CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_MULTI_DEVICE_LAUNCH: /* its launch call is not forwarded */
	case CU_DEVICE_ATTRIBUTE_HOST_MEMORY_POOLS_SUPPORTED:      /* nor are pools of host memory */
	case CU_DEVICE_ATTRIBUTE_HOST_NUMA_MEMORY_POOLS_SUPPORTED:
		return 1;
	default:
		return 0;
	}
}

static void query_device(int ordinal)
{
	CUdevice dev;
	char name[256], bus_id[64];
	size_t total_mem;
	CUuuid uuid;
	int major, minor;

	CHECK(cuDeviceGet(&dev, ordinal));
	CHECK(cuDeviceGetName(name, sizeof name, dev));
	CHECK(cuDeviceTotalMem(&total_mem, dev));
	CHECK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
	CHECK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
	EXPECT(name[0] != '\0', "empty device name");
	EXPECT(total_mem > 0, "zero total memory");
	printf("device %d name=\"%s\" total_mem=%zu compute_capability=%d.%d\n", ordinal, name, total_mem,
	       major, minor);

	for (int attr = CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK; attr < CU_DEVICE_ATTRIBUTE_MAX; attr++) {
		int value;
		CUresult rc = cuDeviceGetAttribute(&value, (CUdevice_attribute)attr, dev);
		if (rc == CUDA_SUCCESS && in_part_remotely(attr))
			printf("device %d attribute %d answered (a capability a remote client has in part)\n", ordinal, attr);
		else if (rc == CUDA_SUCCESS)
			printf("device %d attribute %d = %d\n", ordinal, attr, value);
		else
			printf("device %d attribute %d error %s\n", ordinal, attr, drv_error_name(rc));
	}
	int value;
	CHECK(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev));
	EXPECT(value == 32, "warp size %d", value);
	EXPECT_RESULT(cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, dev), CUDA_ERROR_INVALID_VALUE);

	CHECK(cuDeviceGetUuid(&uuid, dev));
	printf("device %d uuid=", ordinal);
	for (int i = 0; i < 16; i++)
		printf("%02x%s", (unsigned char)uuid.bytes[i], i == 3 || i == 5 || i == 7 || i == 9 ? "-" : "");
	printf("\n");

	CHECK(cuDeviceGetPCIBusId(bus_id, sizeof bus_id, dev));
	CUdevice by_bus;
	CHECK(cuDeviceGetByPCIBusId(&by_bus, bus_id));
	EXPECT(by_bus == dev, "cuDeviceGetByPCIBusId(%s) gave %d", bus_id, by_bus);
	printf("device %d pci_bus_id=%s\n", ordinal, bus_id);
}

int main(void)
{
	int version, count;
	CHECK(cuInit(0));
	CHECK(cuDriverGetVersion(&version));
	EXPECT(version >= 13000, "driver version %d", version);
	printf("driver_version_major=%d\n", version / 1000);
	CHECK(cuDeviceGetCount(&count));
	EXPECT(count >= 1, "no devices");
	printf("device_count=%d\n", count);

	for (int i = 0; i < count; i++)
		query_device(i);

	/* UUIDs must tell devices apart. */
	for (int i = 0; i < count; i++) {
		for (int j = i + 1; j < count; j++) {
			CUuuid a, b;
			CHECK(cuDeviceGetUuid(&a, i));
			CHECK(cuDeviceGetUuid(&b, j));
			EXPECT(memcmp(a.bytes, b.bytes, 16) != 0, "devices %d and %d share a UUID", i, j);
		}
	}

	CUdevice dev;
	EXPECT_RESULT(cuDeviceGet(&dev, count), CUDA_ERROR_INVALID_DEVICE);
	EXPECT_RESULT(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
	printf("invalid_ordinal=%s\n", "CUDA_ERROR_INVALID_DEVICE");

	static const struct { CUresult code; const char *name; } codes[] = {
		{ CUDA_SUCCESS, "CUDA_SUCCESS" },
		{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE" },
		{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY" },
		{ CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE" },
		{ CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE" },
		{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND" },
		{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY" },
		{ CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS" },
		{ CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN" },
	};
	for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++) {
		const char *name = NULL, *text = NULL;
		CHECK(cuGetErrorName(codes[i].code, &name));
		CHECK(cuGetErrorString(codes[i].code, &text));
		EXPECT(name && strcmp(name, codes[i].name) == 0, "name of %d is %s", (int)codes[i].code, name);
		EXPECT(text && text[0], "no description for %s", codes[i].name);
		/* Descriptions differ between implementations: stderr only. */
		fprintf(stderr, "%s: %s\n", name, text);
		printf("error %d name=%s\n", (int)codes[i].code, name);
	}
	const char *name;
	EXPECT_RESULT(cuGetErrorName((CUresult)987654, &name), CUDA_ERROR_INVALID_VALUE);
	return drv_exit_status();
}
