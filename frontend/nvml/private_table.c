/* NVML's private export table, as nvidia-smi asks for it (proto/nvml.spec, class private).
 *
 * Before anything else nvidia-smi looks up nvmlInternalGetExportTable and asks it for table
 * 6c3efec4-8fc9-4e6c-a327-ee696e12f7c4; without an answer it stops with "Mismatch in
 * versions between nvidia-smi and NVML". The table is a size in bytes, then entry points
 * that NVIDIA documents nowhere. What is known of them was learned by watching nvidia-smi
 * 580 call them (each slot its own trampoline): slot 81 finds a device by index, slots
 * 213-215 list a device's processes into entries of ENTRY_BYTES, slots 230 and 249 give a
 * device's host-side PCIe generation and its sparse operation mode. Every other slot is
 * answered with nothing: on a device, a count of zero written through its second argument
 * (the views that list things read it), elsewhere success with no effect, since nvidia-smi
 * gives up a whole view on any error. docs/operations.md says what nvidia-smi shows. */
#include "nvml_shim.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "log.h"

#define SLOTS 256
#define SLOT_HANDLE_BY_INDEX 81
#define LOOKUP_BY_INDEX 0x22 /* slot 81's third argument when it finds a device by index */
#define SLOT_PROCESSES_FIRST 213
#define SLOT_PROCESSES_LAST 215
#define SLOT_HOST_PCIE_GEN 230
#define SLOT_SPARSE_MODE 249

/* One process of a slot 213-215 list: nvmlProcessDetail_v1_t's numbers, then its name. */
#define ENTRY_NAME_AT 32
#define ENTRY_NAME_LEN 4096
#define ENTRY_BYTES (ENTRY_NAME_AT + ENTRY_NAME_LEN)

/* The table id as its bytes are printed, and as a GUID struct lays them out (little-endian
 * first three fields): the callers seen pass the second; both are taken. */
static const uint8_t table_id[16] = {0x6c, 0x3e, 0xfe, 0xc4, 0x8f, 0xc9, 0x4e, 0x6c,
				     0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};
static const uint8_t table_id_guid[16] = {0xc4, 0xfe, 0x3e, 0x6c, 0xc9, 0x8f, 0x6c, 0x4e,
					  0xa3, 0x27, 0xee, 0x69, 0x6e, 0x12, 0xf7, 0xc4};

static void put_u32(uint8_t *at, uint32_t v) { memcpy(at, &v, sizeof(v)); }
static void put_u64(uint8_t *at, uint64_t v) { memcpy(at, &v, sizeof(v)); }

/* Slots 213-215: the device's processes into entries (capacity in *count, set to how many). */
static nvmlReturn_t list_processes(nvmlDevice_t device, unsigned int *count, uint8_t *entries)
{
	unsigned int n = 1;
	nvmlProcessInfo_t p;
	nvmlReturn_t r = nvmlDeviceGetComputeRunningProcesses_v3(device, &n, &p);
	if (r != NVML_SUCCESS)
		return r;
	n = n < *count ? n : *count;
	for (unsigned int i = 0; i < n; i++) {
		uint8_t *e = entries + (size_t)i * ENTRY_BYTES;
		memset(e, 0, ENTRY_BYTES);
		put_u32(e, p.pid);
		put_u64(e + 8, p.usedGpuMemory);
		put_u32(e + 16, p.gpuInstanceId);
		put_u32(e + 20, p.computeInstanceId);
		FILE *f = fopen("/proc/self/comm", "r"); /* the one process listed is this one */
		if (f) {
			if (!fgets((char *)e + ENTRY_NAME_AT, ENTRY_NAME_LEN, f))
				e[ENTRY_NAME_AT] = 0;
			e[ENTRY_NAME_AT + strcspn((char *)e + ENTRY_NAME_AT, "\n")] = 0;
			fclose(f);
		}
	}
	*count = n;
	return NVML_SUCCESS;
}

static nvmlReturn_t private_call(unsigned int slot, void *a0, void *a1, void *a2)
{
	static uint8_t logged[SLOTS];
	if (!__atomic_exchange_n(&logged[slot], 1, __ATOMIC_RELAXED))
		rm_log(RM_LOG_DEBUG, "NVML private table: slot %u called", slot);
	nvmlDevice_t device = a0;
	/* Slot 81 as seen finding a device: (index, nvmlDevice_t *out, 0x22); other calls
	 * through it are answered as every other slot's. */
	if (slot == SLOT_HANDLE_BY_INDEX && (uintptr_t)a0 < 64 && a1 && (uintptr_t)a2 == LOOKUP_BY_INDEX)
		return nvmlDeviceGetHandleByIndex_v2((unsigned int)(uintptr_t)a0, a1);
	if (!rm_nvml_is_device(device) || !a1)
		return NVML_SUCCESS;
	if (slot >= SLOT_PROCESSES_FIRST && slot <= SLOT_PROCESSES_LAST && a2)
		return list_processes(device, a1, a2);
	if (slot == SLOT_HOST_PCIE_GEN || slot == SLOT_SPARSE_MODE)
		return NVML_ERROR_NOT_SUPPORTED;
	*(unsigned int *)a1 = 0;
	return NVML_SUCCESS;
}

/* A trampoline per slot, so that a call says which slot it came through. */
#define SLOT_FN(hi, lo)                                                                        \
	static nvmlReturn_t slot_##hi##_##lo(void *a0, void *a1, void *a2)                     \
	{                                                                                      \
		return private_call((hi) * 16 + (lo), a0, a1, a2);                              \
	}
#define SLOT_ADDR(hi, lo) (const void *)slot_##hi##_##lo,
#define ROW(M, hi)                                                                                       \
	M(hi, 0) M(hi, 1) M(hi, 2) M(hi, 3) M(hi, 4) M(hi, 5) M(hi, 6) M(hi, 7) M(hi, 8) M(hi, 9) M(hi, 10) \
	M(hi, 11) M(hi, 12) M(hi, 13) M(hi, 14) M(hi, 15)
#define ALL(M)                                                                                            \
	ROW(M, 0) ROW(M, 1) ROW(M, 2) ROW(M, 3) ROW(M, 4) ROW(M, 5) ROW(M, 6) ROW(M, 7) ROW(M, 8) ROW(M, 9) \
	ROW(M, 10) ROW(M, 11) ROW(M, 12) ROW(M, 13) ROW(M, 14) ROW(M, 15)

ALL(SLOT_FN)

static const void *const trampolines[SLOTS] = {ALL(SLOT_ADDR)};

RM_NVML_EXPORT nvmlReturn_t nvmlInternalGetExportTable(const void **table, const void *id)
{
	static const void *exported[SLOTS];
	if (!table || !id)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (memcmp(id, table_id, 16) && memcmp(id, table_id_guid, 16)) {
		const uint8_t *b = id;
		rm_log(RM_LOG_WARN, "NVML private table %02x%02x%02x%02x-%02x%02x-... refused: NVML_ERROR_NOT_SUPPORTED",
		       b[0], b[1], b[2], b[3], b[4], b[5]);
		return NVML_ERROR_NOT_SUPPORTED;
	}
	if (!exported[0]) { /* racing callers write the same values */
		for (int i = 1; i < SLOTS; i++)
			exported[i] = trampolines[i];
		exported[0] = (const void *)(uintptr_t)sizeof(exported);
	}
	*table = exported;
	return NVML_SUCCESS;
}
