/* The configuration in force, and its reload on SIGHUP (reload.h).
 * SIGHUP wakes a thread (signals.h), which reads the configuration again (the files and
 * flags remorad started with) and, if it is whole, puts in force what can change while
 * clients are served: tenants (added, their tokens and quotas changed, removed ones
 * retired: they admit no one, their clients go on), the default quotas, allow_anonymous,
 * the admin credential, max_clients_per_gpu, the handshake bounds and shutdown_grace.
 * The rest (where it listens, the driver, TLS files, the pool...) needs a restart and is
 * logged as such. Quotas reach the workers through the registry: new allocations of
 * every client are checked against them. A configuration that does not read or check is
 * refused whole, and the running one stays.
 * Readers take the configuration once per request (rm_server_config); a replaced one is
 * kept for the next RETIRED_KEPT reloads, at least RELOAD_GAP_S apart, so that no reader
 * still holds it when its memory is used again. */
#include "reload.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "handshakes.h"
#include "log.h"
#include "registry.h"
#include "server.h"
#include "signals.h"

#define RETIRED_KEPT 4
#define RELOAD_GAP_S 1

/* The configuration in force: the one remorad started with, then each that SIGHUP loaded.
 * Readers take it once per request with rm_server_config(). */
static const struct rm_daemon_config *config;

const struct rm_daemon_config *rm_server_config(void)
{
	return __atomic_load_n(&config, __ATOMIC_ACQUIRE);
}

static int (*reread_config)(struct rm_daemon_config *out);
static struct rm_daemon_config *config_slots[RETIRED_KEPT];
static struct rm_signal_pipe hup;

/* Each tenant's quotas, defaults resolved, into the registry where charges read them. */
static void publish_limits(const struct rm_daemon_config *c)
{
	rm_registry_set_limits(-1, c->anonymous.memory_limit ? c->anonymous.memory_limit : c->tenant_memory_limit,
			       c->anonymous.client_memory_limit ? c->anonymous.client_memory_limit
								: c->client_memory_limit);
	for (int i = 0; i < c->ntenants; i++) {
		const struct rm_tenant_config *t = &c->tenants[i];
		rm_registry_set_limits(i, t->memory_limit ? t->memory_limit : c->tenant_memory_limit,
				       t->client_memory_limit ? t->client_memory_limit : c->client_memory_limit);
	}
}

/* The tenants of fresh, in the running configuration's order (a tenant keeps its index,
 * which names its registry figures and its worker); new ones after them. -1: too many. */
static int keep_tenant_order(const struct rm_daemon_config *old, const struct rm_daemon_config *fresh,
			     struct rm_daemon_config *out, int *added, int *retired)
{
	int n = old->ntenants;
	*added = *retired = 0;
	for (int i = 0; i < old->ntenants; i++) {
		int j = 0;
		while (j < fresh->ntenants && strcmp(fresh->tenants[j].name, old->tenants[i].name))
			j++;
		if (j < fresh->ntenants) {
			out->tenants[i] = fresh->tenants[j];
		} else {
			out->tenants[i] = old->tenants[i];
			*retired += !out->tenants[i].retired;
			out->tenants[i].retired = 1;
		}
	}
	for (int j = 0; j < fresh->ntenants; j++) {
		int i = 0;
		while (i < old->ntenants && strcmp(fresh->tenants[j].name, old->tenants[i].name))
			i++;
		if (i < old->ntenants)
			continue;
		if (n == RM_CONFIG_MAX_TENANTS)
			return -1;
		out->tenants[n++] = fresh->tenants[j];
		(*added)++;
	}
	out->ntenants = n;
	return 0;
}

/* What a reload cannot change, named if the file changed it. */
static void note_restart_only(const struct rm_daemon_config *o, const struct rm_daemon_config *n)
{
	char which[512] = "";
#define DIFFERS(field) (memcmp(&o->field, &n->field, sizeof(o->field)) != 0)
#define NOTE(field, name) \
	if (DIFFERS(field)) \
		snprintf(which + strlen(which), sizeof(which) - strlen(which), "%s%s", which[0] ? ", " : "", name)
	NOTE(listen, "listen");
	NOTE(driver, "driver");
	NOTE(nccl_library, "nccl_library");
	NOTE(nccl_twins, "nccl_twins");
	NOTE(isolation, "isolation");
	NOTE(workers_per_tenant, "workers_per_tenant");
	NOTE(mps_control, "mps_control");
	NOTE(mps_directory, "mps_directory");
	NOTE(module_loading, "module_loading");
	NOTE(hardware_queues, "hardware_queues");
	NOTE(queue_sharing_wait, "queue_sharing");
	NOTE(gpu_sync, "gpu_sync");
	NOTE(gpu_malloc_heap, "gpu_malloc_heap");
	NOTE(gpu_wait_spin_us, "gpu_wait_spin_us");
	NOTE(tls_cert, "tls_cert");
	NOTE(tls_key, "tls_key");
	NOTE(tls_client_ca, "tls_client_ca");
	NOTE(user, "user");
	NOTE(worker_host_memory_limit, "worker_host_memory_limit");
	NOTE(client_host_memory_limit, "client_host_memory_limit");
	NOTE(shm_ring_max, "shm_ring_max");
	NOTE(pool_endpoints, "pool");
	NOTE(advertise, "advertise");
	NOTE(host_name, "host_name");
	NOTE(lease_ttl_s, "lease_ttl");
	NOTE(peer_timeout_s, "peer_timeout");
	NOTE(max_channels, "max_channels");
#undef NOTE
#undef DIFFERS
	if (which[0])
		rm_log(RM_LOG_WARN, "SIGHUP: %s changed: they take effect when remorad restarts", which);
}

static void reload(int generation)
{
	struct rm_daemon_config *fresh = calloc(1, sizeof(*fresh));
	struct rm_daemon_config *next = config_slots[generation % RETIRED_KEPT];
	if (!next)
		next = config_slots[generation % RETIRED_KEPT] = malloc(sizeof(*next));
	if (!fresh || !next) {
		rm_log(RM_LOG_ERROR, "SIGHUP: out of memory; the running configuration stays");
		free(fresh);
		return;
	}
	if (reread_config(fresh)) {
		rm_log(RM_LOG_ERROR, "SIGHUP: the configuration was refused (above); the running one stays");
		free(fresh);
		return;
	}
	const struct rm_daemon_config *old = rm_server_config();
	note_restart_only(old, fresh);
	/* What cannot change stays as it runs; the rest is the file's. */
	*next = *old;
	int added, retired;
	if (keep_tenant_order(old, fresh, next, &added, &retired)) {
		rm_log(RM_LOG_ERROR, "SIGHUP: more than %d tenants since remorad started; the running configuration stays",
		       RM_CONFIG_MAX_TENANTS);
		free(fresh);
		return;
	}
	next->anonymous = fresh->anonymous;
	next->allow_anonymous = fresh->allow_anonymous;
	memcpy(next->admin_token, fresh->admin_token, sizeof(next->admin_token));
	memcpy(next->admin_cn, fresh->admin_cn, sizeof(next->admin_cn));
	next->max_clients_per_gpu = fresh->max_clients_per_gpu;
	next->client_memory_limit = fresh->client_memory_limit;
	next->tenant_memory_limit = fresh->tenant_memory_limit;
	next->hello_timeout_s = fresh->hello_timeout_s;
	next->max_pending_hellos = fresh->max_pending_hellos;
	next->max_pending_hellos_per_address = fresh->max_pending_hellos_per_address;
	next->shutdown_grace_s = fresh->shutdown_grace_s;
	explicit_bzero(fresh, sizeof(*fresh));
	free(fresh);
	__atomic_store_n(&config, next, __ATOMIC_RELEASE);
	publish_limits(next);
	rm_handshakes_configure(next);
	rm_auth_warn_credentials(next);
	rm_log(RM_LOG_INFO, "SIGHUP: configuration reloaded: %d tenant(s), %d new, %d retired; quotas apply to "
	       "allocations from now on, every client stays connected", next->ntenants, added, retired);
}

static void *reloader(void *arg)
{
	(void)arg;
	int generation = 0;
	while (rm_signal_wait(&hup)) {
		reload(generation++);
		sleep(RELOAD_GAP_S); /* and the signals that came meanwhile make one more reload */
	}
	return NULL;
}

void rm_reload_start(const struct rm_daemon_config *cfg, int (*reread)(struct rm_daemon_config *out))
{
	config = cfg;
	publish_limits(cfg);
	reread_config = reread;
	pthread_t t;
	if (!reread || rm_signal_pipe_open(&hup) || pthread_create(&t, NULL, reloader, NULL)) {
		signal(SIGHUP, SIG_IGN);
		rm_log(RM_LOG_WARN, "SIGHUP will not reload the configuration (no thread for it)");
		return;
	}
	pthread_detach(t);
	rm_signal_route(SIGHUP, &hup, RM_SIGNAL_RESTART);
}

int rm_reload_reread(struct rm_daemon_config *out)
{
	return reread_config ? reread_config(out) : 0;
}
