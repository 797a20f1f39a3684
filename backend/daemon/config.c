/* Reading remorad's configuration file: "key = value" lines (the value bare or in
 * double quotes; a key once per section), '#' comments, and "[tenant NAME]" sections
 * whose keys describe that tenant. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "address.h"
#include "credential.h"
#include "log.h"
#include "size.h"
#include "wire.h"

#define CONFIG_MAX_BYTES (1 << 20)

void rm_config_defaults(struct rm_daemon_config *c)
{
	memset(c, 0, sizeof(*c));
	snprintf(c->listen, sizeof(c->listen), "tcp://0.0.0.0:7700");
	snprintf(c->host_nvml, sizeof(c->host_nvml), "libnvidia-ml.so.1");
	c->kernel_timing = 1;
	c->launch_replay = 1;
	snprintf(c->driver, sizeof(c->driver), "libcuda.so.1");
	snprintf(c->nccl_library, sizeof(c->nccl_library), "libnccl.so.2");
	c->nccl_timeout_s = 300;
	c->nccl_twins = 1;
	c->isolation = RM_ISOLATE_PROCESS;
	c->workers_per_tenant = 1;
	snprintf(c->mps_control, sizeof(c->mps_control), "nvidia-cuda-mps-control");
	c->allow_anonymous = 0;
	c->compress_copies = 1;
	snprintf(c->module_loading, sizeof(c->module_loading), "context");
	c->hardware_queues = 0; /* 32, or 2 under tenant_isolation = mps (main.c) */
	c->queue_sharing_wait = 1;
	c->queue_idle_after = 10;
	snprintf(c->gpu_sync, sizeof(c->gpu_sync), "auto");
	c->gpu_wait_spin_us = -1;
	snprintf(c->anonymous.name, sizeof(c->anonymous.name), "anonymous");
	c->lease_ttl_s = 10;
	c->hello_timeout_s = 5;
	c->max_pending_hellos = 256;
	c->max_pending_hellos_per_address = 64;
	c->shutdown_grace_s = 10;
	c->peer_timeout_s = RM_DEFAULT_PEER_TIMEOUT_MS / 1000;
	c->max_channels = RM_DEFAULT_MAX_CHANNELS;
	c->shared_pinned_limit = 16ull << 30;
	c->shm_ring_max = 16ull << 20;
	long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
	c->worker_host_memory_limit = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 4 : 4ull << 30;
	c->client_host_memory_limit = 1ull << 30; /* the largest image (RM_MAX_IMAGE_LEN) fits */
}

static int parse_int(const char *s, int lo, int hi, int *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno || v < lo || v > hi)
		return -1;
	*out = (int)v;
	return 0;
}

static int parse_bool(const char *s, int *out)
{
	if (!strcmp(s, "yes") || !strcmp(s, "true") || !strcmp(s, "1"))
		*out = 1;
	else if (!strcmp(s, "no") || !strcmp(s, "false") || !strcmp(s, "0"))
		*out = 0;
	else
		return -1;
	return 0;
}

static int copy_str(char *dst, size_t cap, const char *v)
{
	if (strlen(v) >= cap)
		return -1;
	memcpy(dst, v, strlen(v) + 1);
	return 0;
}

static int set_endpoints(struct rm_daemon_config *c, const char *v)
{
	char buf[2048];
	if (copy_str(buf, sizeof(buf), v))
		return -1;
	c->npool_endpoints = 0;
	for (char *save, *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		if (c->npool_endpoints == RM_CONFIG_MAX_ENDPOINTS ||
		    copy_str(c->pool_endpoints[c->npool_endpoints], sizeof(c->pool_endpoints[0]), tok))
			return -1;
		c->npool_endpoints++;
	}
	return 0;
}

int rm_config_set(struct rm_daemon_config *c, const char *key, const char *v, char *why, int whylen)
{
	int bad = 0;
	char detail[200] = "";
	if (!strcmp(key, "listen"))
		bad = rm_address_check(v, 1, detail, sizeof(detail)) || copy_str(c->listen, sizeof(c->listen), v);
	else if (!strcmp(key, "host_nvml"))
		bad = copy_str(c->host_nvml, sizeof(c->host_nvml), v);
	else if (!strcmp(key, "kernel_timing"))
		bad = parse_bool(v, &c->kernel_timing);
	else if (!strcmp(key, "launch_replay"))
		bad = parse_bool(v, &c->launch_replay);
	else if (!strcmp(key, "metrics_listen"))
		bad = (*v && rm_address_check(v, 1, detail, sizeof(detail))) ||
		      copy_str(c->metrics_listen, sizeof(c->metrics_listen), v);
	else if (!strcmp(key, "driver"))
		bad = copy_str(c->driver, sizeof(c->driver), v) || !*v;
	else if (!strcmp(key, "nccl_library"))
		bad = copy_str(c->nccl_library, sizeof(c->nccl_library), v) || !*v;
	else if (!strcmp(key, "nccl_timeout"))
		bad = parse_int(v, 1, 86400, &c->nccl_timeout_s);
	else if (!strcmp(key, "nccl_twins"))
		bad = parse_bool(v, &c->nccl_twins);
	else if (!strcmp(key, "ready_file"))
		bad = copy_str(c->ready_file, sizeof(c->ready_file), v);
	else if (!strcmp(key, "user"))
		bad = copy_str(c->user, sizeof(c->user), v) || !*v;
	else if (!strcmp(key, "max_clients_per_gpu"))
		bad = parse_int(v, 0, 1 << 20, &c->max_clients_per_gpu);
	else if (!strcmp(key, "client_memory_limit"))
		bad = rm_parse_size(v, &c->client_memory_limit);
	else if (!strcmp(key, "tenant_memory_limit"))
		bad = rm_parse_size(v, &c->tenant_memory_limit);
	else if (!strcmp(key, "worker_host_memory_limit"))
		bad = rm_parse_size(v, &c->worker_host_memory_limit);
	else if (!strcmp(key, "client_host_memory_limit"))
		bad = rm_parse_size(v, &c->client_host_memory_limit);
	else if (!strcmp(key, "tenant_isolation")) {
		if (!strcmp(v, "process"))
			c->isolation = RM_ISOLATE_PROCESS;
		else if (!strcmp(v, "shared"))
			c->isolation = RM_ISOLATE_SHARED;
		else if (!strcmp(v, "mps"))
			c->isolation = RM_ISOLATE_MPS;
		else
			bad = 1;
	} else if (!strcmp(key, "workers_per_tenant")) {
		bad = parse_int(v, 1, RM_CONFIG_MAX_WORKERS_PER_TENANT, &c->workers_per_tenant);
	} else if (!strcmp(key, "mps_control")) {
		bad = copy_str(c->mps_control, sizeof(c->mps_control), v) || !*v;
	} else if (!strcmp(key, "mps_directory")) {
		bad = copy_str(c->mps_directory, sizeof(c->mps_directory), v) || (*v && *v != '/');
	} else if (!strcmp(key, "module_loading")) {
		bad = strcmp(v, "context") && strcmp(v, "eager") && strcmp(v, "lazy");
		if (!bad)
			snprintf(c->module_loading, sizeof(c->module_loading), "%s", v);
	} else if (!strcmp(key, "hardware_queues"))
		bad = parse_int(v, 1, 32, &c->hardware_queues);
	else if (!strcmp(key, "queue_sharing")) {
		bad = strcmp(v, "wait") && strcmp(v, "direct");
		if (!bad)
			c->queue_sharing_wait = !strcmp(v, "wait");
	} else if (!strcmp(key, "gpu_sync")) {
		bad = strcmp(v, "auto") && strcmp(v, "spin") && strcmp(v, "yield") && strcmp(v, "block");
		if (!bad)
			snprintf(c->gpu_sync, sizeof(c->gpu_sync), "%s", v);
	} else if (!strcmp(key, "gpu_malloc_heap")) {
		bad = rm_parse_size(v, &c->gpu_malloc_heap);
	} else if (!strcmp(key, "gpu_wait_spin_us"))
		bad = parse_int(v, 0, 1000, &c->gpu_wait_spin_us);
	else if (!strcmp(key, "kernel_time_limit"))
		bad = parse_int(v, 0, 86400, &c->kernel_time_limit_s);
	else if (!strcmp(key, "queue_idle_after"))
		bad = parse_int(v, 1, 3600, &c->queue_idle_after);
	else if (!strcmp(key, "allow_anonymous"))
		bad = parse_bool(v, &c->allow_anonymous);
	else if (!strcmp(key, "compress_copies"))
		bad = parse_bool(v, &c->compress_copies);
	else if (!strcmp(key, "migratable_memory"))
		bad = parse_bool(v, &c->migratable_memory);
	else if (!strcmp(key, "admin_token"))
		bad = copy_str(c->admin_token, sizeof(c->admin_token), v) || !*v ||
		      (rm_credential_is_hash(v) && rm_credential_check_hash(v));
	else if (!strcmp(key, "admin_cn"))
		bad = copy_str(c->admin_cn, sizeof(c->admin_cn), v) || !*v;
	else if (!strcmp(key, "tls_cert"))
		bad = copy_str(c->tls_cert, sizeof(c->tls_cert), v) || !*v;
	else if (!strcmp(key, "tls_key"))
		bad = copy_str(c->tls_key, sizeof(c->tls_key), v) || !*v;
	else if (!strcmp(key, "tls_client_ca"))
		bad = copy_str(c->tls_client_ca, sizeof(c->tls_client_ca), v) || !*v;
	else if (!strcmp(key, "pool"))
		bad = set_endpoints(c, v);
	else if (!strcmp(key, "advertise"))
		bad = (*v && rm_address_check(v, 0, detail, sizeof(detail))) ||
		      copy_str(c->advertise, sizeof(c->advertise), v);
	else if (!strcmp(key, "host_name"))
		bad = copy_str(c->host_name, sizeof(c->host_name), v);
	else if (!strcmp(key, "pool_ca"))
		bad = copy_str(c->pool_ca, sizeof(c->pool_ca), v);
	else if (!strcmp(key, "pool_cert"))
		bad = copy_str(c->pool_cert, sizeof(c->pool_cert), v);
	else if (!strcmp(key, "pool_key"))
		bad = copy_str(c->pool_key, sizeof(c->pool_key), v);
	else if (!strcmp(key, "pool_user"))
		bad = copy_str(c->pool_user, sizeof(c->pool_user), v);
	else if (!strcmp(key, "pool_password_file"))
		bad = copy_str(c->pool_password_file, sizeof(c->pool_password_file), v);
	else if (!strcmp(key, "lease_ttl"))
		bad = parse_int(v, 2, 3600, &c->lease_ttl_s);
	else if (!strcmp(key, "hello_timeout"))
		bad = parse_int(v, 1, 3600, &c->hello_timeout_s);
	else if (!strcmp(key, "max_pending_hellos"))
		bad = parse_int(v, 1, 65536, &c->max_pending_hellos);
	else if (!strcmp(key, "max_pending_hellos_per_address"))
		bad = parse_int(v, 1, 65536, &c->max_pending_hellos_per_address);
	else if (!strcmp(key, "shutdown_grace"))
		bad = parse_int(v, 0, 3600, &c->shutdown_grace_s);
	else if (!strcmp(key, "peer_timeout"))
		bad = parse_int(v, 1, 3600, &c->peer_timeout_s);
	else if (!strcmp(key, "max_channels"))
		bad = parse_int(v, 0, RM_MAX_CHANNELS, &c->max_channels);
	else if (!strcmp(key, "shared_pinned_limit"))
		bad = rm_parse_size(v, &c->shared_pinned_limit);
	else if (!strcmp(key, "shm_ring_max"))
		bad = rm_parse_size(v, &c->shm_ring_max) || c->shm_ring_max < (64u << 10) ||
		      c->shm_ring_max > (64u << 20) || (c->shm_ring_max & (c->shm_ring_max - 1));
	else {
		snprintf(why, whylen, "unknown setting '%s'", key);
		return -1;
	}
	if (bad && detail[0])
		snprintf(why, whylen, "bad value for %s: %s", key, detail);
	else if (bad)
		snprintf(why, whylen, "bad value '%s' for %s", v, key);
	return bad ? -1 : 0;
}

static int set_tenant(struct rm_tenant_config *t, const char *key, const char *v, char *why, int whylen)
{
	int bad = 0;
	if (!strcmp(key, "token"))
		bad = copy_str(t->token, sizeof(t->token), v) || !*v ||
		      (rm_credential_is_hash(v) && rm_credential_check_hash(v));
	else if (!strcmp(key, "memory_limit"))
		bad = rm_parse_size(v, &t->memory_limit);
	else if (!strcmp(key, "client_memory_limit"))
		bad = rm_parse_size(v, &t->client_memory_limit);
	else if (!strcmp(key, "kernel_time_limit"))
		bad = parse_int(v, 1, 86400, &t->kernel_time_limit_s);
	else if (!strcmp(key, "compute_share"))
		bad = parse_int(v, 1, 100, &t->compute_share);
	else if (!strcmp(key, "priority")) {
		bad = strcmp(v, "normal") && strcmp(v, "low");
		t->priority = !strcmp(v, "low");
	} else {
		snprintf(why, whylen, "unknown tenant setting '%s'", key);
		return -1;
	}
	if (bad)
		snprintf(why, whylen, "bad value '%s' for %s", v, key);
	return bad ? -1 : 0;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	char *e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = 0;
	return s;
}

/* The NAME of a "[tenant NAME]" line: 0, or -1 when the line is anything else. */
static int section_name(const char *s, char *name, size_t cap)
{
	static const char keyword[] = "[tenant";
	if (strncmp(s, keyword, sizeof(keyword) - 1) || !isblank((unsigned char)s[sizeof(keyword) - 1]))
		return -1;
	s += sizeof(keyword) - 1;
	while (isblank((unsigned char)*s))
		s++;
	size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-");
	const char *end = s + n;
	while (isblank((unsigned char)*end))
		end++;
	if (n == 0 || n >= cap || strcmp(end, "]"))
		return -1;
	memcpy(name, s, n);
	name[n] = 0;
	return 0;
}

/* Where a line's comment starts: its first '#' outside double quotes; NULL for none. */
static char *comment_start(char *s)
{
	int quoted = 0;
	for (; *s; s++)
		if (*s == '"')
			quoted = !quoted;
		else if (*s == '#' && !quoted)
			return s;
	return NULL;
}

/* A value in double quotes loses them. A single quote or an unclosed double quote
 * opening a value is refused: it would otherwise become part of the value. */
static int unquote(char **value, char *why, size_t whylen)
{
	char *v = *value;
	size_t n = strlen(v);
	if (v[0] == '\'') {
		snprintf(why, whylen, "single quotes are not understood: write the value bare or in double quotes");
		return -1;
	}
	if (v[0] != '"')
		return 0;
	if (n < 2 || v[n - 1] != '"' || memchr(v + 1, '"', n - 2)) {
		snprintf(why, whylen, "a value in double quotes ends with the closing quote and holds no other");
		return -1;
	}
	v[n - 1] = 0;
	*value = v + 1;
	return 0;
}

/* The keys one section has set, to refuse a key set twice. */
#define SECTION_MAX_KEYS 64
struct section_keys {
	int n;
	char key[SECTION_MAX_KEYS][40];
	int line[SECTION_MAX_KEYS];
};

/* The line that already set key in this section; 0 after recording it as set at line. */
static int set_before(struct section_keys *k, const char *key, int line)
{
	for (int i = 0; i < k->n; i++)
		if (!strcmp(k->key[i], key))
			return k->line[i];
	if (k->n < SECTION_MAX_KEYS && strlen(key) < sizeof(k->key[0])) {
		strcpy(k->key[k->n], key);
		k->line[k->n++] = line;
	}
	return 0;
}

/* The whole file at path, NUL-terminated, in a buffer of *cap bytes that the caller wipes
 * (it holds credentials) and frees; NULL after logging why. Read with read(), so that no
 * stdio buffer keeps a copy. */
static char *read_whole(const char *path, size_t *cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	size_t n = 0;
	if (fd < 0 || fstat(fd, &st)) {
		rm_log(RM_LOG_ERROR, "cannot read the configuration %s: %s", path, strerror(errno));
		goto out;
	}
	if (st.st_size > CONFIG_MAX_BYTES) {
		rm_log(RM_LOG_ERROR, "the configuration %s is larger than %d bytes", path, CONFIG_MAX_BYTES);
		goto out;
	}
	*cap = (size_t)st.st_size + 1;
	if (!(buf = calloc(1, *cap))) {
		rm_log(RM_LOG_ERROR, "cannot read the configuration %s: out of memory", path);
		goto out;
	}
	for (ssize_t r; n < *cap - 1; n += (size_t)r)
		if ((r = read(fd, buf + n, *cap - 1 - n)) <= 0) {
			if (r < 0 && errno == EINTR) {
				r = 0;
				continue;
			}
			if (r == 0)
				break; /* shorter than it was: what was read */
			rm_log(RM_LOG_ERROR, "cannot read the configuration %s: %s", path, strerror(errno));
			explicit_bzero(buf, *cap);
			free(buf);
			buf = NULL;
			goto out;
		}
	buf[n] = 0;
out:
	if (fd >= 0)
		close(fd);
	return buf;
}

int rm_config_load(struct rm_daemon_config *c, const char *path)
{
	size_t cap = 0;
	char *text = read_whole(path, &cap), *next = text;
	if (!text)
		return -1;
	char line[2048], why[300];
	struct rm_tenant_config *tenant = NULL;
	struct section_keys keys = {0};
	int lineno = 0, err = 0, first_tenant = c->ntenants, tenant_line[RM_CONFIG_MAX_TENANTS] = {0};
	while (!err && *next) {
		lineno++;
		size_t n = strcspn(next, "\n") + (next[strcspn(next, "\n")] == '\n');
		if (n > sizeof(line) - 1) { /* as fgets into line would find it */
			rm_log(RM_LOG_ERROR, "%s:%d: line longer than %zu bytes", path, lineno, sizeof(line) - 2);
			err = -1;
			break;
		}
		memcpy(line, next, n);
		line[n] = 0;
		next += n;
		char *hash = comment_start(line);
		if (hash)
			*hash = 0;
		char *s = trim(line);
		if (!*s)
			continue;
		why[0] = 0;
		if (*s == '[') {
			char name[64];
			int tenant_keyword = !strncmp(s, "[tenant", 7) && (s[7] == ']' || isblank((unsigned char)s[7]));
			if (!tenant_keyword) {
				snprintf(why, sizeof(why), "unknown section %.64s: the only section is [tenant NAME]", s);
				err = -1;
			} else if (section_name(s, name, sizeof(name))) {
				snprintf(why, sizeof(why), "expected [tenant NAME], NAME of letters, digits, '.', '_' or '-'");
				err = -1;
			} else if (c->ntenants == RM_CONFIG_MAX_TENANTS) {
				snprintf(why, sizeof(why), "more than %d tenants", RM_CONFIG_MAX_TENANTS);
				err = -1;
			} else {
				tenant_line[c->ntenants] = lineno;
				tenant = &c->tenants[c->ntenants++];
				memset(tenant, 0, sizeof(*tenant));
				keys.n = 0;
				snprintf(tenant->name, sizeof(tenant->name), "%s", name);
			}
		} else {
			char *eq = strchr(s, '=');
			if (!eq) {
				snprintf(why, sizeof(why), "expected key = value");
				err = -1;
			} else {
				*eq = 0;
				char *key = trim(s), *val = trim(eq + 1);
				int before;
				err = unquote(&val, why, sizeof(why));
				if (!err)
					err = tenant ? set_tenant(tenant, key, val, why, sizeof(why))
						     : rm_config_set(c, key, val, why, sizeof(why));
				if (!err && (before = set_before(&keys, key, lineno))) {
					snprintf(why, sizeof(why), "%s set again (first at line %d)", key, before);
					err = -1;
				}
			}
		}
		if (err)
			rm_log(RM_LOG_ERROR, "%s:%d: %s", path, lineno, why);
	}
	explicit_bzero(line, sizeof(line));
	explicit_bzero(why, sizeof(why));
	if (text)
		explicit_bzero(text, cap);
	free(text);
	/* Tenants of this file, against each other and those of a file read before; a token
	 * id names one stored credential (credential.h). */
	char id[RM_TOKEN_ID_MAX + 1], other[RM_TOKEN_ID_MAX + 1];
	for (int i = first_tenant; !err && i < c->ntenants; i++) {
		int has_id = rm_credential_stored_id(c->tenants[i].token, id) > 0;
		for (int j = 0; !err && j < i; j++)
			if ((c->tenants[i].token[0] && !strcmp(c->tenants[i].token, c->tenants[j].token)) ||
			    !strcmp(c->tenants[i].name, c->tenants[j].name)) {
				rm_log(RM_LOG_ERROR, "%s:%d: tenant %s shares a name or a token with tenant %s", path,
				       tenant_line[i], c->tenants[i].name, c->tenants[j].name);
				err = -1;
			} else if (has_id && rm_credential_stored_id(c->tenants[j].token, other) && !strcmp(id, other)) {
				rm_log(RM_LOG_ERROR, "%s:%d: tenant %s's token has the token id '%s' of tenant %s's: "
				       "each token needs an id of its own (docs/security.md)", path, tenant_line[i],
				       c->tenants[i].name, id, c->tenants[j].name);
				err = -1;
			}
	}
	return err;
}

int rm_config_check(const struct rm_daemon_config *c, char *why, int whylen)
{
	int tls = !strncmp(c->listen, "tls://", 6);
	for (int i = 0; i < c->ntenants; i++)
		if (!c->tenants[i].token[0] && !(tls && c->tls_client_ca[0])) {
			snprintf(why, whylen, "tenant %s has no token, and no client certificate can name it "
				 "(that needs a tls:// listen address and tls_client_ca)", c->tenants[i].name);
			return -1;
		}
	if (tls && (!c->tls_cert[0] || !c->tls_key[0])) {
		snprintf(why, whylen, "listen = %s needs tls_cert and tls_key (--tls-cert, --tls-key)", c->listen);
		return -1;
	}
	if (!tls && (c->tls_cert[0] || c->tls_key[0] || c->tls_client_ca[0])) {
		snprintf(why, whylen, "TLS settings are given but listen = %s is not a tls:// address", c->listen);
		return -1;
	}
	if (!c->pool_cert[0] != !c->pool_key[0]) {
		snprintf(why, whylen, "pool_cert and pool_key go together: etcd's --client-cert-auth needs both");
		return -1;
	}
	if (!c->pool_user[0] != !c->pool_password_file[0]) {
		snprintf(why, whylen, "pool_user and pool_password_file go together (the password is not written in "
			 "the configuration)");
		return -1;
	}
	char id[RM_TOKEN_ID_MAX + 1], admin_id[RM_TOKEN_ID_MAX + 1];
	for (int i = 0; rm_credential_stored_id(c->admin_token, admin_id) && i < c->ntenants; i++)
		if (rm_credential_stored_id(c->tenants[i].token, id) && !strcmp(id, admin_id)) {
			snprintf(why, whylen, "tenant %s's token has the token id '%s' of admin_token: each token needs an "
				 "id of its own (docs/security.md)", c->tenants[i].name, id);
			return -1;
		}
	for (int i = 0; c->isolation != RM_ISOLATE_MPS && i < c->ntenants; i++)
		if (c->tenants[i].compute_share || c->tenants[i].priority) {
			snprintf(why, whylen, "tenant %s sets %s, which only tenant_isolation = mps enforces",
				 c->tenants[i].name, c->tenants[i].compute_share ? "compute_share" : "priority");
			return -1;
		}
	if (c->isolation == RM_ISOLATE_SHARED && c->workers_per_tenant > 1) {
		snprintf(why, whylen, "workers_per_tenant = %d needs a worker per tenant: tenant_isolation = process or mps",
			 c->workers_per_tenant);
		return -1;
	}
	if (c->admin_cn[0] && !c->tls_client_ca[0]) {
		snprintf(why, whylen, "admin_cn needs tls_client_ca: only a verified certificate names the admin");
		return -1;
	}
	return 0;
}
