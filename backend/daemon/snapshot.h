/* A consistent copy of the registry (registry.h), taken under its lock, for the readers
 * that answer outside it: remora status (admin.c) and the metrics (metrics.c). */
#ifndef REMORA_SNAPSHOT_H
#define REMORA_SNAPSHOT_H

#include "config.h"
#include "registry.h"

struct rm_snapshot {
	int ngpus, nclients, draining;
	struct rm_gpu_record gpus[RM_MAX_GPUS];
	struct rm_client_record clients[RM_MAX_CLIENTS];
	struct rm_tenant_usage tenants[RM_CONFIG_MAX_TENANTS + 1]; /* usage.departed: plus the live clients' */
	struct rm_client_history history[RM_HISTORY];              /* oldest first */
	int nhistory;
};

/* Fills s (large: allocate it). */
void rm_snapshot_take(struct rm_snapshot *s);

/* The name of configuration tenant t (-1: anonymous), its clients' and its own memory quotas. */
const char *rm_tenant_name(const struct rm_daemon_config *cfg, int t);
uint64_t rm_tenant_client_limit(const struct rm_daemon_config *cfg, int t);
uint64_t rm_tenant_limit(const struct rm_daemon_config *cfg, int t);
/* The registry slot's tenant index back to a configuration tenant (-1: anonymous). */
int rm_tenant_of_slot(int slot);

#endif
