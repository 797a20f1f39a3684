/* The registration thread. Each round: read the administrator's decision, mirror it,
 * then keep the lease alive and rewrite the member record (or, once removed, leave).
 * etcd being unreachable never stops serving; it is logged once and retried. A round
 * and the daemon's leaving on stop never overlap (round_lock); a round that a stop
 * interrupts ends after the etcd call it is in. */
#include "pool_member.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "pool.h"
#include "registry.h"

static pthread_mutex_t identity_lock = PTHREAD_MUTEX_INITIALIZER;
static char self_host[128], self_address[256], membership[16] = "none";

struct member_state {
	const struct rm_daemon_config *cfg;
	struct rm_etcd etcd;
	int64_t lease;
	char decision[16];  /* the administrator's decision last mirrored */
	int unreachable;    /* etcd failed last round (logged once) */
	int registered_once;
	pthread_mutex_t round_lock;
	int stopping;       /* set once by rm_pool_member_stop, read by the rounds (atomics) */
};

static struct member_state *running; /* the registration, once started (atomics) */

static int stopping(struct member_state *st)
{
	return __atomic_load_n(&st->stopping, __ATOMIC_ACQUIRE);
}

static void set_membership(const char *m)
{
	pthread_mutex_lock(&identity_lock);
	snprintf(membership, sizeof(membership), "%s", m);
	pthread_mutex_unlock(&identity_lock);
}

void rm_pool_member_identity(char *host, size_t hostlen, char *address, size_t addrlen, char *member,
			     size_t memberlen)
{
	pthread_mutex_lock(&identity_lock);
	snprintf(host, hostlen, "%s", self_host);
	snprintf(address, addrlen, "%s", self_address);
	snprintf(member, memberlen, "%s", membership);
	pthread_mutex_unlock(&identity_lock);
}

/* The member record from a snapshot of the registry. */
static void snapshot(struct rm_pool_member *m)
{
	struct rm_registry *reg = rm_registry();
	memset(m, 0, sizeof(*m));
	snprintf(m->host, sizeof(m->host), "%s", self_host);
	snprintf(m->address, sizeof(m->address), "%s", self_address);
	m->pid = (int)getpid();
	m->updated = (int64_t)time(NULL);
	rm_registry_lock();
	snprintf(m->state, sizeof(m->state), "%s", reg->draining ? "draining" : "serving");
	for (int i = 0; i < RM_MAX_CLIENTS; i++)
		m->clients += reg->clients[i].in_use != 0;
	m->ngpus = reg->ngpus < RM_POOL_MAX_GPUS ? reg->ngpus : RM_POOL_MAX_GPUS;
	for (int i = 0; i < m->ngpus; i++) {
		const struct rm_gpu_record *g = &reg->gpus[i];
		struct rm_pool_gpu *out = &m->gpus[i];
		out->index = i;
		snprintf(out->name, sizeof(out->name), "%s", g->name);
		snprintf(out->uuid, sizeof(out->uuid), "%s", g->uuid);
		out->total_bytes = g->total_bytes;
		out->free_bytes = g->free_bytes;
		out->clients = g->clients;
	}
	rm_registry_unlock();
}

/* Makes the registry follow a new decision: draining refuses new clients; removal and
 * no decision serve them. */
static void mirror(struct member_state *st, const char *decision)
{
	if (!strcmp(st->decision, decision))
		return;
	int drain = !strcmp(decision, "draining");
	rm_registry_lock();
	rm_registry()->draining = drain;
	rm_registry_unlock();
	if (!strcmp(decision, "removed"))
		rm_log(RM_LOG_WARN, "pool: %s was removed from the pool by an administrator; it keeps serving "
		       "its clients but is not registered until `remora pool undrain %s`", self_host, self_host);
	else if (drain)
		rm_log(RM_LOG_INFO, "pool: draining by an administrator's decision: no new clients, current ones go on");
	else
		rm_log(RM_LOG_INFO, "pool: serving (the administrator's decision was cleared)");
	snprintf(st->decision, sizeof(st->decision), "%s", decision);
}

/* Revokes the lease and deletes the record. 0, or -errno with st->etcd.error. */
static int leave(struct member_state *st)
{
	char key[512];
	snprintf(key, sizeof(key), RM_POOL_MEMBERS "%s", self_host);
	int err = 0;
	if (st->lease)
		err = rm_etcd_lease_revoke(&st->etcd, st->lease); /* takes the record with it */
	if (err == -ENOENT)
		err = 0; /* expired, and the record with it */
	st->lease = 0;
	int deleted = rm_etcd_delete(&st->etcd, key, NULL);
	return err ? err : deleted;
}

/* Keeps the lease (granting a new one once it has expired) and writes the record. */
static int refresh(struct member_state *st)
{
	int err = 0;
	if (st->lease && (err = rm_etcd_lease_keepalive(&st->etcd, st->lease)) == -ENOENT) {
		rm_log(RM_LOG_WARN, "pool: lease %lld expired; registering again", (long long)st->lease);
		st->lease = 0;
		err = 0;
	}
	if (!err && stopping(st))
		err = -ECANCELED;
	if (!err && !st->lease)
		err = rm_etcd_lease_grant(&st->etcd, st->cfg->lease_ttl_s, &st->lease);
	if (!err && stopping(st))
		err = -ECANCELED;
	if (err)
		return err;
	struct rm_pool_member m;
	snapshot(&m);
	char *json = rm_pool_member_json(&m), key[512];
	if (!json)
		return -ENOMEM;
	snprintf(key, sizeof(key), RM_POOL_MEMBERS "%s", self_host);
	err = rm_etcd_put(&st->etcd, key, json, st->lease);
	free(json);
	if (err == -ENOENT)
		st->lease = 0; /* expired between keepalive and put: next round registers again */
	if (!err && !st->registered_once) {
		rm_log(RM_LOG_INFO, "pool: registered as %s (%s) in %s, lease %d s", self_host, self_address,
		       st->etcd.endpoints[0], st->cfg->lease_ttl_s);
		st->registered_once = 1;
	}
	return err;
}

static void round_once(struct member_state *st)
{
	char decision[16];
	int err = rm_pool_get_admin(&st->etcd, self_host, decision, sizeof(decision));
	if (!err && stopping(st))
		return;
	if (!err) {
		mirror(st, decision);
		if (!strcmp(decision, "removed")) {
			leave(st);
			set_membership("removed");
		} else if (!(err = refresh(st))) {
			set_membership("registered");
		}
	}
	if (err == -ECANCELED)
		return;
	if (err && !st->unreachable) {
		rm_log(RM_LOG_WARN, "pool: %s; still serving, retrying", st->etcd.error);
		set_membership("unreachable");
	} else if (!err && st->unreachable) {
		rm_log(RM_LOG_INFO, "pool: etcd answers again");
	}
	st->unreachable = err != 0;
}

static void *member_main(void *arg)
{
	struct member_state *st = arg;
	int period_ms = st->cfg->lease_ttl_s * 1000 / 3;
	if (period_ms < 500)
		period_ms = 500;
	if (period_ms > 5000)
		period_ms = 5000;
	for (;;) {
		pthread_mutex_lock(&st->round_lock);
		if (stopping(st)) {
			pthread_mutex_unlock(&st->round_lock);
			break;
		}
		round_once(st);
		pthread_mutex_unlock(&st->round_lock);
		struct timespec ts = {period_ms / 1000, (long)(period_ms % 1000) * 1000000L};
		while (nanosleep(&ts, &ts) && errno == EINTR)
			;
	}
	return NULL;
}

/* The advertised address: scheme://bound, with a wildcard host replaced by this host's name. */
static void derive_address(const char *scheme, const char *bound, char *out, size_t len)
{
	const char *colon = strrchr(bound, ':');
	if (colon && (!strncmp(bound, "0.0.0.0:", 8) || !strncmp(bound, "[::]:", 5))) {
		char host[128] = "localhost";
		gethostname(host, sizeof(host) - 1);
		snprintf(out, len, "%s://%s%s", scheme, host, colon);
	} else {
		snprintf(out, len, "%s://%s", scheme, bound);
	}
}

/* The TLS files and the user of the configuration, with the password from its file. */
static int set_credentials(const struct rm_daemon_config *cfg, struct rm_etcd *e)
{
	struct rm_etcd_credentials c = {0};
	snprintf(c.ca_file, sizeof(c.ca_file), "%s", cfg->pool_ca);
	snprintf(c.cert_file, sizeof(c.cert_file), "%s", cfg->pool_cert);
	snprintf(c.key_file, sizeof(c.key_file), "%s", cfg->pool_key);
	snprintf(c.user, sizeof(c.user), "%s", cfg->pool_user);
	int err = 0;
	if (cfg->pool_password_file[0])
		err = rm_etcd_read_password(cfg->pool_password_file, c.password, sizeof(c.password), e->error,
					    sizeof(e->error));
	if (!err)
		err = rm_etcd_set_credentials(e, &c);
	explicit_bzero(c.password, sizeof(c.password));
	return err;
}

int rm_pool_member_start(const struct rm_daemon_config *cfg, const char *scheme, const char *bound)
{
	pthread_mutex_lock(&identity_lock);
	if (cfg->host_name[0])
		snprintf(self_host, sizeof(self_host), "%s", cfg->host_name);
	else if (gethostname(self_host, sizeof(self_host) - 1))
		snprintf(self_host, sizeof(self_host), "localhost");
	if (cfg->advertise[0])
		snprintf(self_address, sizeof(self_address), "%s", cfg->advertise);
	else
		derive_address(scheme, bound, self_address, sizeof(self_address));
	pthread_mutex_unlock(&identity_lock);
	if (!cfg->npool_endpoints)
		return 0;

	struct member_state *st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	st->cfg = cfg;
	char list[RM_CONFIG_MAX_ENDPOINTS * 258] = "";
	for (int i = 0; i < cfg->npool_endpoints; i++) {
		strcat(list, i ? "," : "");
		strcat(list, cfg->pool_endpoints[i]);
	}
	int err = rm_etcd_init(&st->etcd, list);
	if (!err)
		err = set_credentials(cfg, &st->etcd);
	if (err) {
		rm_log(RM_LOG_ERROR, "pool: %s", st->etcd.error);
		rm_etcd_close(&st->etcd);
		free(st);
		return err;
	}
	set_membership("unreachable"); /* until the first round succeeds */
	pthread_mutex_init(&st->round_lock, NULL);
	__atomic_store_n(&running, st, __ATOMIC_RELEASE);
	pthread_t t;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	err = -pthread_create(&t, &attr, member_main, st);
	pthread_attr_destroy(&attr);
	if (err) {
		rm_log(RM_LOG_ERROR, "pool: cannot start the registration thread: %s", strerror(-err));
		__atomic_store_n(&running, NULL, __ATOMIC_RELEASE);
		free(st);
	}
	return err;
}

int rm_pool_member_stop(void)
{
	struct member_state *st = __atomic_load_n(&running, __ATOMIC_ACQUIRE);
	if (!st)
		return 0;
	__atomic_store_n(&st->stopping, 1, __ATOMIC_RELEASE);
	pthread_mutex_lock(&st->round_lock); /* a round in progress ends after its current etcd call */
	int err = 0;
	char membership_now[16], host[128], address[256];
	rm_pool_member_identity(host, sizeof(host), address, sizeof(address), membership_now, sizeof(membership_now));
	if (strcmp(membership_now, "removed")) /* a removed member has left already */
		err = leave(st);
	if (err)
		rm_log(RM_LOG_WARN, "pool: could not leave the pool (%s); %s's entry stays until its lease expires "
		       "(at most %d s)", st->etcd.error, host, st->cfg->lease_ttl_s);
	else
		rm_log(RM_LOG_INFO, "pool: left the pool (%s's entry deleted)", host);
	set_membership("none");
	pthread_mutex_unlock(&st->round_lock);
	return err;
}
