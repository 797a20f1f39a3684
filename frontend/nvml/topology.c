/* The NVML shim's answers about the links between GPUs (proto/nvml.spec, class impl): P2P
 * status, common ancestors, nearest GPUs, NVLinks and NUMA nodes as the GPU host's NVML
 * gives them, for the GPUs the client sees and by its ordinals (nvml_bridge.h); what the
 * host's NVML does not answer is NVML_ERROR_NOT_SUPPORTED. CPU and memory affinity are
 * the client's: its GPUs are across a network from every CPU and NUMA node of its host, so
 * each GPU is as near to any of them, and every CPU the process may run on (every NUMA
 * node of the host) is answered (docs/status.md). */
#define _GNU_SOURCE 1
#include "nvml_shim.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nvml_bridge.h"

/* The daemon's answer for d, in storage of the caller's. */
static nvmlReturn_t topology(nvmlDevice_t d, struct rm_nvml_topology **t)
{
	*t = malloc(sizeof(**t));
	if (!*t)
		return NVML_ERROR_MEMORY;
	nvmlReturn_t ret = rm_nvml_topology_of(d, *t);
	if (ret != NVML_SUCCESS) {
		free(*t);
		*t = NULL;
	}
	return ret;
}

/* The index of the peer entry of t for the GPU of handle other, or -1. */
static int peer_index(const struct rm_nvml_topology *t, nvmlDevice_t other)
{
	for (int i = 0; i < t->npeers; i++)
		if (rm_nvml_device_at(t->peers[i].device) == other)
			return i;
	return -1;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
						   nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t *p2pStatus)
{
	struct rm_nvml_topology *t;
	if (!p2pStatus || (unsigned)p2pIndex >= NVML_P2P_CAPS_COUNT || !rm_nvml_is_device(device2))
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = topology(device1, &t);
	if (ret != NVML_SUCCESS)
		return ret;
	int i = peer_index(t, device2);
	if (i >= 0 && (t->peers[i].p2p_valid & (1u << p2pIndex)))
		*p2pStatus = (nvmlGpuP2PStatus_t)t->peers[i].p2p[p2pIndex];
	else
		ret = NVML_ERROR_NOT_SUPPORTED;
	free(t);
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
								nvmlGpuTopologyLevel_t *pathInfo)
{
	struct rm_nvml_topology *t;
	if (!pathInfo || !rm_nvml_is_device(device2))
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = topology(device1, &t);
	if (ret != NVML_SUCCESS)
		return ret;
	int i = peer_index(t, device2);
	if (i >= 0 && t->peers[i].ancestor_valid)
		*pathInfo = (nvmlGpuTopologyLevel_t)t->peers[i].ancestor;
	else
		ret = NVML_ERROR_NOT_SUPPORTED;
	free(t);
	return ret;
}

/* Hands out n devices: *count n and NVML_SUCCESS where they fit (or only the count is
 * asked, *count 0), else *count n and NVML_ERROR_INSUFFICIENT_SIZE. */
static nvmlReturn_t hand_out(nvmlDevice_t *found, unsigned n, unsigned int *count, nvmlDevice_t *deviceArray)
{
	if (*count == 0) {
		*count = n;
		return NVML_SUCCESS;
	}
	if (!deviceArray)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (*count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	memcpy(deviceArray, found, n * sizeof(*found));
	*count = n;
	return NVML_SUCCESS;
}

/* The other GPUs of the client whose common ancestor with device is level or nearer. */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
							     unsigned int *count, nvmlDevice_t *deviceArray)
{
	struct rm_nvml_topology *t;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = topology(device, &t);
	if (ret != NVML_SUCCESS)
		return ret;
	nvmlDevice_t found[RM_NVML_MAX_PEERS];
	unsigned n = 0;
	int any = 0;
	for (int i = 0; i < t->npeers; i++) {
		nvmlDevice_t o = rm_nvml_device_at(t->peers[i].device);
		any |= t->peers[i].ancestor_valid;
		if (o && o != device && t->peers[i].ancestor_valid && t->peers[i].ancestor <= (uint32_t)level)
			found[n++] = o;
	}
	free(t);
	return any || n ? hand_out(found, n, count, deviceArray) : NVML_ERROR_NOT_SUPPORTED;
}

/* Whether cpu is one the process may run on. */
static int client_cpu(unsigned int cpu)
{
	cpu_set_t set;
	return cpu < CPU_SETSIZE && sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_ISSET(cpu, &set);
}

/* Every GPU of the client is as near to any CPU of the client's host. */
RM_NVML_EXPORT nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
							nvmlDevice_t *deviceArray)
{
	if (!count || !client_cpu(cpuNumber))
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlDevice_t found[RM_NVML_MAX_PEERS];
	unsigned n = 0;
	for (nvmlDevice_t d; n < RM_NVML_MAX_PEERS && (d = rm_nvml_device_at((int)n));)
		found[n++] = d;
	return n ? hand_out(found, n, count, deviceArray) : NVML_ERROR_UNINITIALIZED;
}

/* device's topology in *t, its link number link at (*t)->links[*k]; or why not (*t NULL). */
static nvmlReturn_t with_link(nvmlDevice_t device, unsigned int link, struct rm_nvml_topology **t, int *k)
{
	*t = NULL;
	if (link >= NVML_NVLINK_MAX_LINKS)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = topology(device, t);
	if (ret != NVML_SUCCESS)
		return ret; /* *t NULL */
	for (*k = 0; *k < (*t)->nlinks; (*k)++)
		if ((*t)->links[*k].link == link)
			return NVML_SUCCESS;
	free(*t);
	*t = NULL;
	return NVML_ERROR_NOT_SUPPORTED;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
						     nvmlEnableState_t *isActive)
{
	struct rm_nvml_topology *t;
	int k;
	if (!isActive)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = with_link(device, link, &t, &k);
	if (ret == NVML_SUCCESS)
		*isActive = t->links[k].active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
	free(t);
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
	struct rm_nvml_topology *t;
	int k;
	if (!version)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = with_link(device, link, &t, &k);
	if (ret == NVML_SUCCESS && t->links[k].version_valid)
		*version = t->links[k].version;
	else if (ret == NVML_SUCCESS)
		ret = NVML_ERROR_NOT_SUPPORTED;
	free(t);
	return ret;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
							  nvmlNvLinkCapability_t capability, unsigned int *capResult)
{
	struct rm_nvml_topology *t;
	int k;
	if (!capResult || (unsigned)capability >= NVML_NVLINK_CAP_COUNT)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = with_link(device, link, &t, &k);
	if (ret == NVML_SUCCESS && (t->links[k].caps_valid & (1u << capability)))
		*capResult = (t->links[k].caps >> capability) & 1u;
	else if (ret == NVML_SUCCESS)
		ret = NVML_ERROR_NOT_SUPPORTED;
	free(t);
	return ret;
}

/* The far end of a link as the GPU host's PCI tree names it (a GPU or an NVSwitch). */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
								nvmlPciInfo_t *pci)
{
	struct rm_nvml_topology *t;
	int k;
	if (!pci)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = with_link(device, link, &t, &k);
	if (ret == NVML_SUCCESS && t->links[k].remote_valid)
		*pci = t->links[k].remote;
	else if (ret == NVML_SUCCESS)
		ret = NVML_ERROR_NOT_SUPPORTED;
	free(t);
	return ret;
}

/* What the far end of a link is (a GPU, an NVSwitch), as the GPU host's NVML says;
 * PyTorch's driver API asks for this entry point by name. */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
								 nvmlIntNvLinkDeviceType_t *type)
{
	struct rm_nvml_topology *t;
	int k;
	if (!type)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = with_link(device, link, &t, &k);
	if (ret == NVML_SUCCESS && t->links[k].remote_type_valid)
		*type = (nvmlIntNvLinkDeviceType_t)t->links[k].remote_type;
	else if (ret == NVML_SUCCESS)
		ret = NVML_ERROR_NOT_SUPPORTED;
	free(t);
	return ret;
}

/* The GPU's own NUMA node on the GPU host (its memory's, on a coherent system). */
RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
	struct rm_nvml_topology *t;
	if (!node)
		return NVML_ERROR_INVALID_ARGUMENT;
	nvmlReturn_t ret = topology(device, &t);
	if (ret == NVML_SUCCESS && t->numa_valid)
		*node = t->numa_node;
	else if (ret == NVML_SUCCESS)
		ret = NVML_ERROR_NOT_SUPPORTED;
	free(t);
	return ret;
}

/* Sets bit i of words[n] for each i marked in mark (of nbits); the rest cleared. */
static void bits(unsigned long *words, unsigned int n, int (*mark)(unsigned int), unsigned int nbits)
{
	const unsigned w = 8 * sizeof(unsigned long);
	memset(words, 0, n * sizeof(*words));
	for (unsigned int i = 0; i < nbits && i / w < n; i++)
		if (mark(i))
			words[i / w] |= 1ul << (i % w);
}

static nvmlReturn_t affinity_of(nvmlDevice_t device, unsigned int size, unsigned long *set, int (*mark)(unsigned int),
		       unsigned int nbits)
{
	if (!size || !set)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (!rm_nvml_is_device(device))
		return NVML_ERROR_INVALID_ARGUMENT;
	bits(set, size, mark, nbits);
	return NVML_SUCCESS;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
						     unsigned long *cpuSet)
{
	return affinity_of(device, cpuSetSize, cpuSet, client_cpu, CPU_SETSIZE);
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
								unsigned long *cpuSet, nvmlAffinityScope_t scope)
{
	if ((unsigned)scope > NVML_AFFINITY_SCOPE_SOCKET)
		return NVML_ERROR_INVALID_ARGUMENT;
	return affinity_of(device, cpuSetSize, cpuSet, client_cpu, CPU_SETSIZE);
}

/* Whether node is an online NUMA node of the client's host (node 0 where it tells none). */
static int client_node(unsigned int node)
{
	char list[256] = "0";
	FILE *f = fopen("/sys/devices/system/node/online", "r");
	if (f) {
		if (!fgets(list, sizeof(list), f))
			snprintf(list, sizeof(list), "0");
		fclose(f);
	}
	for (char *p = list; *p;) { /* "0-3,5" */
		char *end;
		unsigned long lo = strtoul(p, &end, 10), hi = lo;
		if (end == p)
			break;
		if (*end == '-')
			hi = strtoul(end + 1, &end, 10);
		if (node >= lo && node <= hi)
			return 1;
		p = *end == ',' ? end + 1 : end;
		if (*p == '\n')
			break;
	}
	return 0;
}

RM_NVML_EXPORT nvmlReturn_t nvmlDeviceGetMemoryAffinity(nvmlDevice_t device, unsigned int nodeSetSize,
							unsigned long *nodeSet, nvmlAffinityScope_t scope)
{
	if ((unsigned)scope > NVML_AFFINITY_SCOPE_SOCKET)
		return NVML_ERROR_INVALID_ARGUMENT;
	return affinity_of(device, nodeSetSize, nodeSet, client_node, 1024);
}
