/* Asks NVML what NCCL and `nvidia-smi topo` ask of the GPUs and the links between them, as
 * they do (libnvidia-ml.so.1 dlopened by name), and prints key=value lines for
 * tests/nvml/nvml_topology.py: each value an answer, or "rc=N" for an NVML error N. */
#define _GNU_SOURCE 1
#include <dlfcn.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

#include "nvml_abi.h"

#define FN(name, ...) static nvmlReturn_t (*name)(__VA_ARGS__)
FN(nvmlInit_v2, void);
FN(nvmlDeviceGetCount_v2, unsigned int *);
FN(nvmlDeviceGetHandleByIndex_v2, unsigned int, nvmlDevice_t *);
FN(nvmlDeviceGetIndex, nvmlDevice_t, unsigned int *);
FN(nvmlDeviceGetP2PStatus, nvmlDevice_t, nvmlDevice_t, nvmlGpuP2PCapsIndex_t, nvmlGpuP2PStatus_t *);
FN(nvmlDeviceGetTopologyCommonAncestor, nvmlDevice_t, nvmlDevice_t, nvmlGpuTopologyLevel_t *);
FN(nvmlDeviceGetTopologyNearestGpus, nvmlDevice_t, nvmlGpuTopologyLevel_t, unsigned int *, nvmlDevice_t *);
FN(nvmlSystemGetTopologyGpuSet, unsigned int, unsigned int *, nvmlDevice_t *);
FN(nvmlDeviceGetNvLinkState, nvmlDevice_t, unsigned int, nvmlEnableState_t *);
FN(nvmlDeviceGetNvLinkVersion, nvmlDevice_t, unsigned int, unsigned int *);
FN(nvmlDeviceGetNvLinkCapability, nvmlDevice_t, unsigned int, nvmlNvLinkCapability_t, unsigned int *);
FN(nvmlDeviceGetNvLinkRemotePciInfo_v2, nvmlDevice_t, unsigned int, nvmlPciInfo_t *);
FN(nvmlDeviceGetNvLinkRemoteDeviceType, nvmlDevice_t, unsigned int, nvmlIntNvLinkDeviceType_t *);
FN(nvmlDeviceGetNumaNodeId, nvmlDevice_t, unsigned int *);
FN(nvmlDeviceGetCpuAffinity, nvmlDevice_t, unsigned int, unsigned long *);
FN(nvmlDeviceGetCpuAffinityWithinScope, nvmlDevice_t, unsigned int, unsigned long *, nvmlAffinityScope_t);
FN(nvmlDeviceGetMemoryAffinity, nvmlDevice_t, unsigned int, unsigned long *, nvmlAffinityScope_t);

#define LOAD(lib, name)                                                      \
	do {                                                                 \
		*(void **)&name = dlsym(lib, #name);                         \
		if (!name) {                                                 \
			fprintf(stderr, "nvml_topology: no %s\n", #name);     \
			exit(1);                                             \
		}                                                            \
	} while (0)

static nvmlDevice_t dev[64];
static unsigned int ndev;

static void indices(const char *key, nvmlReturn_t r, unsigned int n, const nvmlDevice_t *list)
{
	printf("%s=", key);
	if (r != NVML_SUCCESS) {
		printf("rc=%d\n", r);
		return;
	}
	for (unsigned int i = 0; i < n; i++) {
		unsigned int k = 99;
		nvmlDeviceGetIndex(list[i], &k);
		printf("%s%u", i ? "," : "", k);
	}
	printf("\n");
}

static void pairs(unsigned int i, unsigned int j)
{
	for (int c = 0; c < NVML_P2P_CAPS_COUNT; c++) {
		nvmlGpuP2PStatus_t st;
		nvmlReturn_t r = nvmlDeviceGetP2PStatus(dev[i], dev[j], (nvmlGpuP2PCapsIndex_t)c, &st);
		printf(r ? "p2p.%u.%u.%d=rc=%d\n" : "p2p.%u.%u.%d=%d\n", i, j, c, r ? (int)r : (int)st);
	}
	nvmlGpuTopologyLevel_t l;
	nvmlReturn_t r = nvmlDeviceGetTopologyCommonAncestor(dev[i], dev[j], &l);
	printf(r ? "ancestor.%u.%u=rc=%d\n" : "ancestor.%u.%u=%d\n", i, j, r ? (int)r : (int)l);
}

static void links(unsigned int i)
{
	int active = 0;
	for (unsigned int l = 0; l < NVML_NVLINK_MAX_LINKS; l++) {
		nvmlEnableState_t on;
		unsigned int v = 0, p2p = 0;
		nvmlPciInfo_t pci;
		nvmlReturn_t r = nvmlDeviceGetNvLinkState(dev[i], l, &on);
		if (r != NVML_SUCCESS) {
			printf("nvlink.%u.%u=rc=%d\n", i, l, r);
			continue;
		}
		active += on == NVML_FEATURE_ENABLED;
		if (on != NVML_FEATURE_ENABLED)
			continue;
		nvmlReturn_t rv = nvmlDeviceGetNvLinkVersion(dev[i], l, &v);
		nvmlReturn_t rc = nvmlDeviceGetNvLinkCapability(dev[i], l, NVML_NVLINK_CAP_P2P_SUPPORTED, &p2p);
		nvmlReturn_t rp = nvmlDeviceGetNvLinkRemotePciInfo_v2(dev[i], l, &pci);
		nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
		nvmlReturn_t rt = nvmlDeviceGetNvLinkRemoteDeviceType(dev[i], l, &type);
		printf("nvlink.%u.%u=%d,%u,%d,%u,%d,%s\n", i, l, rv, v, rc, p2p, rp, rp ? "-" : pci.busId);
		printf("nvlink-type.%u.%u=%d,%d\n", i, l, rt, (int)type);
	}
	printf("nvlinks.%u=%d\n", i, active);
}

int main(void)
{
	void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
	if (!lib) {
		fprintf(stderr, "nvml_topology: %s\n", dlerror());
		return 1;
	}
	LOAD(lib, nvmlInit_v2); LOAD(lib, nvmlDeviceGetCount_v2); LOAD(lib, nvmlDeviceGetHandleByIndex_v2);
	LOAD(lib, nvmlDeviceGetIndex); LOAD(lib, nvmlDeviceGetP2PStatus); LOAD(lib, nvmlDeviceGetTopologyCommonAncestor);
	LOAD(lib, nvmlDeviceGetTopologyNearestGpus); LOAD(lib, nvmlSystemGetTopologyGpuSet);
	LOAD(lib, nvmlDeviceGetNvLinkState); LOAD(lib, nvmlDeviceGetNvLinkVersion);
	LOAD(lib, nvmlDeviceGetNvLinkCapability); LOAD(lib, nvmlDeviceGetNvLinkRemotePciInfo_v2);
	LOAD(lib, nvmlDeviceGetNvLinkRemoteDeviceType);
	LOAD(lib, nvmlDeviceGetNumaNodeId); LOAD(lib, nvmlDeviceGetCpuAffinity);
	LOAD(lib, nvmlDeviceGetCpuAffinityWithinScope); LOAD(lib, nvmlDeviceGetMemoryAffinity);
	if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetCount_v2(&ndev) != NVML_SUCCESS || ndev > 64)
		return 1;
	printf("count=%u\n", ndev);
	for (unsigned int i = 0; i < ndev; i++)
		if (nvmlDeviceGetHandleByIndex_v2(i, &dev[i]) != NVML_SUCCESS)
			return 1;
	for (unsigned int i = 0; i < ndev; i++) {
		for (unsigned int j = 0; j < ndev; j++)
			pairs(i, j);
		nvmlDevice_t near[64];
		unsigned int n = 64;
		nvmlReturn_t r = nvmlDeviceGetTopologyNearestGpus(dev[i], NVML_TOPOLOGY_NODE, &n, near);
		char key[64];
		snprintf(key, sizeof(key), "nearest.%u", i);
		indices(key, r, n, near);
		links(i);
		unsigned int node = 0;
		r = nvmlDeviceGetNumaNodeId(dev[i], &node);
		printf(r ? "numa.%u=rc=%d\n" : "numa.%u=%d\n", i, r ? (int)r : (int)node);
		unsigned long cpus[16] = {0}, nodes[16] = {0}, scoped[16] = {0};
		nvmlReturn_t rc = nvmlDeviceGetCpuAffinity(dev[i], 16, cpus);
		nvmlReturn_t rs = nvmlDeviceGetCpuAffinityWithinScope(dev[i], 16, scoped, NVML_AFFINITY_SCOPE_SOCKET);
		nvmlReturn_t rm = nvmlDeviceGetMemoryAffinity(dev[i], 16, nodes, NVML_AFFINITY_SCOPE_NODE);
		printf("affinity.%u=%d,%d,%d,%d,%d\n", i, rc, rs, rm, cpus[0] != 0 && cpus[0] == scoped[0], nodes[0] & 1 ? 1 : 0);
	}
	cpu_set_t mine; /* a CPU this process may run on */
	unsigned int cpu = 0;
	if (sched_getaffinity(0, sizeof(mine), &mine) == 0)
		while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &mine))
			cpu++;
	nvmlDevice_t set[64];
	unsigned int n = 64;
	nvmlReturn_t r = nvmlSystemGetTopologyGpuSet(cpu, &n, set);
	indices("gpuset", r, n, set);
	return 0;
}
