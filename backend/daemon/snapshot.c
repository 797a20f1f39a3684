/* Registry snapshots (snapshot.h). */
#include "snapshot.h"

#include <string.h>

void rm_snapshot_take(struct rm_snapshot *s)
{
	struct rm_registry *reg = rm_registry();
	rm_registry_lock();
	s->ngpus = reg->ngpus;
	s->draining = reg->draining;
	memcpy(s->gpus, reg->gpus, sizeof(s->gpus));
	memcpy(s->tenants, reg->tenants, sizeof(s->tenants));
	s->nclients = 0;
	for (int i = 0; i < RM_MAX_CLIENTS; i++)
		if (reg->clients[i].in_use)
			s->clients[s->nclients++] = reg->clients[i];
	uint64_t n = reg->history_count < RM_HISTORY ? reg->history_count : RM_HISTORY;
	for (uint64_t i = 0; i < n; i++)
		s->history[i] = reg->history[(reg->history_count - n + i) % RM_HISTORY];
	s->nhistory = (int)n;
	rm_registry_unlock();
	for (int i = 0; i < s->nclients; i++) {
		int t = rm_registry_tenant_slot(s->clients[i].tenant);
		if (t >= 0 && t <= RM_CONFIG_MAX_TENANTS)
			rm_usage_merge(&s->tenants[t].departed, &s->clients[i].usage);
	}
	for (int t = 0; t <= RM_CONFIG_MAX_TENANTS; t++)
		if (s->tenants[t].peak_mem_bytes > s->tenants[t].departed.peak_mem_bytes)
			s->tenants[t].departed.peak_mem_bytes = s->tenants[t].peak_mem_bytes;
}

static const struct rm_tenant_config *tenant(const struct rm_daemon_config *cfg, int t)
{
	return t >= 0 && t < cfg->ntenants ? &cfg->tenants[t] : &cfg->anonymous;
}

const char *rm_tenant_name(const struct rm_daemon_config *cfg, int t)
{
	return tenant(cfg, t)->name;
}

/* The quotas in force are the registry's (SIGHUP may have changed them since cfg). */
uint64_t rm_tenant_client_limit(const struct rm_daemon_config *cfg, int t)
{
	(void)cfg;
	rm_registry_lock();
	uint64_t v = rm_registry()->tenants[rm_registry_tenant_slot(t)].client_memory_limit;
	rm_registry_unlock();
	return v;
}

uint64_t rm_tenant_limit(const struct rm_daemon_config *cfg, int t)
{
	(void)cfg;
	rm_registry_lock();
	uint64_t v = rm_registry()->tenants[rm_registry_tenant_slot(t)].memory_limit;
	rm_registry_unlock();
	return v;
}

int rm_tenant_of_slot(int slot)
{
	return slot >= RM_CONFIG_MAX_TENANTS ? -1 : slot;
}
