/* A GPU host's NVML for the CPU test driver's two devices (tests/nvml/nvml_topology.py): a
 * fixed, deliberately lopsided topology, so that an answer given for the wrong GPU shows.
 * GPU i is the test driver's device i (its UUID's last byte). Between GPU 0 and 1: P2P
 * read, write, NVLink and atomics OK, PCI OK from 0 to 1 and not supported from 1 to 0;
 * common ancestor NODE. GPU 0 has NVLinks 0-3 active, GPU 1 links 0-1, each to the other
 * GPU (version 4, P2P capable); the rest of the 18 inactive. NUMA node i. Everything else
 * is absent, as from an NVML that lacks it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml_abi.h"

#define EXPORT __attribute__((visibility("default")))

static struct nvmlDevice_st {
	int index;
} gpus[2] = {{0}, {1}};

static int index_of(nvmlDevice_t d)
{
	return d == &gpus[0] ? 0 : d == &gpus[1] ? 1 : -1;
}

EXPORT nvmlReturn_t nvmlInit_v2(void) { return NVML_SUCCESS; }

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
	size_t n = uuid ? strlen(uuid) : 0;
	if (n < 2 || !device)
		return NVML_ERROR_INVALID_ARGUMENT;
	long i = strtol(uuid + n - 2, NULL, 16);
	if (i < 0 || i > 1)
		return NVML_ERROR_NOT_FOUND;
	*device = &gpus[i];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuP2PCapsIndex_t c,
					   nvmlGpuP2PStatus_t *st)
{
	int i = index_of(a), j = index_of(b);
	if (i < 0 || j < 0 || i == j || !st || (unsigned)c >= NVML_P2P_CAPS_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	*st = c == NVML_P2P_CAPS_INDEX_PCI && i == 1 ? NVML_P2P_STATUS_NOT_SUPPORTED : NVML_P2P_STATUS_OK;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t a, nvmlDevice_t b, nvmlGpuTopologyLevel_t *l)
{
	int i = index_of(a), j = index_of(b);
	if (i < 0 || j < 0 || !l)
		return NVML_ERROR_INVALID_ARGUMENT;
	*l = i == j ? NVML_TOPOLOGY_INTERNAL : NVML_TOPOLOGY_NODE;
	return NVML_SUCCESS;
}

static int link_ok(nvmlDevice_t d, unsigned int link)
{
	return index_of(d) >= 0 && link < NVML_NVLINK_MAX_LINKS;
}

static int active(nvmlDevice_t d, unsigned int link)
{
	return link < (index_of(d) == 0 ? 4u : 2u);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t d, unsigned int link, nvmlEnableState_t *on)
{
	if (!link_ok(d, link) || !on)
		return NVML_ERROR_INVALID_ARGUMENT;
	*on = active(d, link) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t d, unsigned int link, unsigned int *v)
{
	if (!link_ok(d, link) || !v)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!active(d, link))
		return NVML_ERROR_NOT_SUPPORTED;
	*v = 4;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t d, unsigned int link, nvmlNvLinkCapability_t c,
						  unsigned int *r)
{
	if (!link_ok(d, link) || !r || (unsigned)c >= NVML_NVLINK_CAP_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	*r = active(d, link) && (c == NVML_NVLINK_CAP_P2P_SUPPORTED || c == NVML_NVLINK_CAP_P2P_ATOMICS ||
				 c == NVML_NVLINK_CAP_VALID);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t d, unsigned int link, nvmlIntNvLinkDeviceType_t *t)
{
	if (!link_ok(d, link) || !t)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!active(d, link))
		return NVML_ERROR_NOT_SUPPORTED;
	*t = NVML_NVLINK_DEVICE_TYPE_GPU; /* each active link joins the two GPUs */
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t d, unsigned int link, nvmlPciInfo_t *pci)
{
	if (!link_ok(d, link) || !pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!active(d, link))
		return NVML_ERROR_NOT_SUPPORTED;
	int other = 1 - index_of(d);
	memset(pci, 0, sizeof(*pci));
	pci->bus = 0x19 + (unsigned)other; /* the test driver's PCI bus of device `other` */
	snprintf(pci->busId, sizeof(pci->busId), "00000000:%02X:00.0", pci->bus);
	snprintf(pci->busIdLegacy, sizeof(pci->busIdLegacy), "0000:%02X:00.0", pci->bus);
	pci->pciDeviceId = 0x233010de;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t d, unsigned int *node)
{
	if (index_of(d) < 0 || !node)
		return NVML_ERROR_INVALID_ARGUMENT;
	*node = (unsigned)index_of(d);
	return NVML_SUCCESS;
}
