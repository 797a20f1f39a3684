/* remora pool ... and remora status: the administrator's view of the pool (in etcd)
 * and of one daemon (asked directly). Library calls return -errno; only this file
 * prints, one line per error, and exits non-zero. A daemon's strings and etcd's errors
 * are escaped here before they reach the terminal (common/text.h; in JSON as \u00NN);
 * pool records arrive escaped from pool/pool.c. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "link.h"
#include "migrate.h"
#include "pool.h"
#include "remora.pb-c.h"
#include "text.h"

#define DEFAULT_DAEMON "127.0.0.1:7700"
#define STATUS_TIMEOUT_MS 3000
#define TEXT_MAX 256 /* a peer's string as printed, escapes included */

int cmd_pool(int argc, char **argv);
int cmd_status(int argc, char **argv);

struct pool_args {
	const char *endpoints; /* --pool, else REMORA_POOL */
	/* --pool-ca, --pool-cert, --pool-key, --pool-user, --pool-password-file; each else
	 * its REMORA_POOL_* variable (etcd.h) */
	const char *ca, *cert, *key, *user, *password_file;
	int json;
	const char *host;      /* the one positional argument, if any */
	const char *server;    /* --server (status) */
	const char *migrate;   /* --migrate HOST (drain): its clients move there */
};

/* Takes "--pool-ca VALUE" and the other credential options; 1 when name is one of them. */
static int pool_option(const char *name, const char *value, struct pool_args *a)
{
	static const struct {
		const char *name;
		size_t offset;
	} options[] = {
		{"--pool-ca", offsetof(struct pool_args, ca)},
		{"--pool-cert", offsetof(struct pool_args, cert)},
		{"--pool-key", offsetof(struct pool_args, key)},
		{"--pool-user", offsetof(struct pool_args, user)},
		{"--pool-password-file", offsetof(struct pool_args, password_file)},
	};
	for (size_t i = 0; value && i < sizeof(options) / sizeof(options[0]); i++)
		if (!strcmp(name, options[i].name)) {
			*(const char **)((char *)a + options[i].offset) = value;
			return 1;
		}
	return 0;
}

/* Copies an option's value over what the environment gave; -1 when it does not fit. */
static int override(char *dst, size_t cap, const char *value)
{
	if (!value)
		return 0;
	if (strlen(value) >= cap)
		return -1;
	memcpy(dst, value, strlen(value) + 1);
	return 0;
}

/* Reads --pool URLS, --json, the credential options and at most one positional
 * argument; 0, or 2 after a usage line. */
static int parse_args(const char *cmd, int argc, char **argv, struct pool_args *a)
{
	static const char *const valued[] = {"--pool", "--pool-ca", "--pool-cert", "--pool-key", "--pool-user",
					     "--pool-password-file", "--token", "--server"};
	a->endpoints = getenv("REMORA_POOL");
	for (int i = 1; i < argc; i++) {
		for (size_t k = 0; i + 1 == argc && k < sizeof(valued) / sizeof(valued[0]); k++)
			if (!strcmp(argv[i], valued[k]) && (strcmp(valued[k], "--server") || !strcmp(cmd, "status"))) {
				fprintf(stderr, "remora %s: option %s needs a value\n", cmd, argv[i]);
				return 2;
			}
		if (!strcmp(argv[i], "--pool") && i + 1 < argc)
			a->endpoints = argv[++i];
		else if (!strncmp(argv[i], "--pool=", 7))
			a->endpoints = argv[i] + 7;
		else if (!strcmp(argv[i], "--json"))
			a->json = 1;
		else if (pool_option(argv[i], i + 1 < argc ? argv[i + 1] : NULL, a))
			i++;
		else if (!strcmp(cmd, "status") && !strcmp(argv[i], "--server") && i + 1 < argc)
			a->server = argv[++i];
		else if (!strcmp(cmd, "status") && !strncmp(argv[i], "--server=", 9))
			a->server = argv[i] + 9;
		else if (!strcmp(cmd, "pool drain") && !strcmp(argv[i], "--migrate") && i + 1 < argc)
			a->migrate = argv[++i];
		else if (!strcmp(argv[i], "--token") && i + 1 < argc)
			setenv("REMORA_TOKEN", argv[++i], 1); /* what status presents (docs/security.md) */
		else if (argv[i][0] == '-' || a->host) {
			fprintf(stderr, "remora %s: unexpected argument %s\n", cmd, argv[i]);
			return 2;
		} else
			a->host = argv[i];
	}
	return 0;
}

static int open_pool(const char *cmd, const struct pool_args *a, struct rm_etcd *e)
{
	if (!a->endpoints || !*a->endpoints) {
		fprintf(stderr, "remora %s: no pool given: use --pool http://HOST:PORT or set REMORA_POOL\n", cmd);
		return 2;
	}
	struct rm_etcd_credentials c;
	int err = rm_etcd_init(e, a->endpoints);
	if (!err)
		err = rm_etcd_credentials_from_env(&c, e->error, sizeof(e->error));
	if (!err && (override(c.ca_file, sizeof(c.ca_file), a->ca) || override(c.cert_file, sizeof(c.cert_file), a->cert) ||
		     override(c.key_file, sizeof(c.key_file), a->key) || override(c.user, sizeof(c.user), a->user))) {
		snprintf(e->error, sizeof(e->error), "a --pool-* option's value is too long");
		err = -EINVAL;
	}
	if (!err && a->password_file)
		err = rm_etcd_read_password(a->password_file, c.password, sizeof(c.password), e->error, sizeof(e->error));
	if (!err)
		err = rm_etcd_set_credentials(e, &c);
	explicit_bzero(c.password, sizeof(c.password));
	if (err) {
		char t[TEXT_MAX];
		fprintf(stderr, "remora %s: %s\n", cmd, rm_text_escape(t, sizeof(t), e->error));
		return 2;
	}
	return 0;
}

/* "12.5/80.0 GiB", or MiB below a GiB. */
static const char *fmt_mem(char *buf, size_t len, uint64_t free_b, uint64_t total_b)
{
	if (total_b >= (1ull << 30))
		snprintf(buf, len, "%.1f/%.1f GiB", (double)free_b / (1 << 30), (double)total_b / (1 << 30));
	else
		snprintf(buf, len, "%llu/%llu MiB", (unsigned long long)(free_b >> 20),
			 (unsigned long long)(total_b >> 20));
	return buf;
}

static void member_totals(const struct rm_pool_member *m, uint64_t *free_b, uint64_t *total_b)
{
	*free_b = *total_b = 0;
	for (int i = 0; i < m->ngpus; i++) {
		*free_b += m->gpus[i].free_bytes;
		*total_b += m->gpus[i].total_bytes;
	}
}

/* A JSON string of plain ASCII: control characters, DEL and bytes above 0x7f escaped
 * as \u00NN (a byte above 0x7f reads as the Latin-1 character of that number). */
static void print_json_string(const char *s)
{
	putchar('"');
	for (const unsigned char *p = (const unsigned char *)s; *p; p++)
		if (*p == '"' || *p == '\\')
			printf("\\%c", *p);
		else if (*p < 0x20 || *p >= 0x7f)
			printf("\\u%04x", *p);
		else
			putchar(*p);
	putchar('"');
}

/* The local time of t as "%Y-%m-%d %H:%M:%S"-like fmt, or "?" for one out of range. */
static const char *fmt_time(char *buf, size_t len, int64_t t, const char *fmt)
{
	time_t tt = (time_t)t;
	struct tm tm;
	if (!localtime_r(&tt, &tm) || !strftime(buf, len, fmt, &tm))
		snprintf(buf, len, "?");
	return buf;
}

static void print_member_json(const struct rm_pool_member *m)
{
	printf("{\"host\":");
	print_json_string(m->host);
	printf(",\"address\":");
	print_json_string(m->address);
	printf(",\"state\":");
	print_json_string(rm_pool_state(m));
	printf(",\"registered\":%s,\"admin\":", m->registered ? "true" : "false");
	print_json_string(m->admin);
	printf(",\"clients\":%d,\"pid\":%d,\"updated\":%lld,\"gpus\":[", m->clients, m->pid, (long long)m->updated);
	for (int i = 0; i < m->ngpus; i++) {
		const struct rm_pool_gpu *g = &m->gpus[i];
		printf("%s{\"index\":%d,\"name\":", i ? "," : "", g->index);
		print_json_string(g->name);
		printf(",\"uuid\":");
		print_json_string(g->uuid);
		printf(",\"total\":%llu,\"free\":%llu,\"clients\":%d}", (unsigned long long)g->total_bytes,
		       (unsigned long long)g->free_bytes, g->clients);
	}
	printf("]}");
}

static int pool_list(struct rm_etcd *e, const struct pool_args *a)
{
	struct rm_pool_member *list;
	int n, err = rm_pool_list(e, &list, &n);
	if (err) {
		char t[TEXT_MAX];
		fprintf(stderr, "remora pool list: %s\n", rm_text_escape(t, sizeof(t), e->error));
		return 1;
	}
	if (a->json) {
		printf("{\"members\":[");
		for (int i = 0; i < n; i++) {
			printf(i ? "," : "");
			print_member_json(&list[i]);
		}
		printf("]}\n");
	} else {
		printf("%-20s %-28s %-9s %4s %7s  %s\n", "HOST", "ADDRESS", "STATE", "GPUS", "CLIENTS", "FREE/TOTAL");
		for (int i = 0; i < n; i++) {
			const struct rm_pool_member *m = &list[i];
			uint64_t f, t;
			char mem[64];
			member_totals(m, &f, &t);
			printf("%-20s %-28s %-9s %4d %7d  %s\n", m->host, m->registered ? m->address : "-",
			       rm_pool_state(m), m->ngpus, m->clients, m->registered ? fmt_mem(mem, sizeof(mem), f, t) : "-");
		}
	}
	free(list);
	return 0;
}

static int pool_show(struct rm_etcd *e, const struct pool_args *a)
{
	struct rm_pool_member *m = malloc(sizeof(*m));
	if (!m)
		return 1;
	int err = rm_pool_find(e, a->host, m);
	if (err) {
		char t[TEXT_MAX];
		fprintf(stderr, "remora pool show: %s\n", rm_text_escape(t, sizeof(t), e->error));
		free(m);
		return 1;
	}
	if (a->json) {
		print_member_json(m);
		printf("\n");
	} else {
		printf("host      %s\naddress   %s\nstate     %s%s\nclients   %d\n", m->host,
		       m->registered ? m->address : "-", rm_pool_state(m),
		       m->registered ? "" : " (not registered: its daemon is gone or removed)", m->clients);
		if (m->registered) {
			char when[64];
			printf("updated   %s (pid %d)\n", fmt_time(when, sizeof(when), m->updated, "%Y-%m-%d %H:%M:%S"), m->pid);
		}
		for (int i = 0; i < m->ngpus; i++) {
			char mem[64];
			const struct rm_pool_gpu *g = &m->gpus[i];
			printf("GPU %-3d   %s  %s  %s free  %d client(s)\n", g->index, g->name, g->uuid,
			       fmt_mem(mem, sizeof(mem), g->free_bytes, g->total_bytes), g->clients);
		}
	}
	free(m);
	return 0;
}

/* drain, undrain, remove: the host must be known to the pool. */
static int pool_decide(struct rm_etcd *e, const struct pool_args *a, const char *sub)
{
	struct rm_pool_member *m = malloc(sizeof(*m));
	if (!m)
		return 1;
	int err = rm_pool_find(e, a->host, m);
	if (!err) {
		if (!strcmp(sub, "drain"))
			err = rm_pool_set_admin(e, a->host, "draining");
		else if (!strcmp(sub, "undrain"))
			err = rm_pool_set_admin(e, a->host, NULL);
		else {
			char key[512];
			snprintf(key, sizeof(key), RM_POOL_MEMBERS "%s", a->host);
			err = rm_pool_set_admin(e, a->host, "removed");
			if (!err)
				err = rm_etcd_delete(e, key, NULL);
		}
	}
	if (err) {
		char t[TEXT_MAX];
		fprintf(stderr, "remora pool %s: %s\n", sub, rm_text_escape(t, sizeof(t), e->error));
		free(m);
		return 1;
	}
	int rc = 0;
	if (!strcmp(sub, "drain") && a->migrate) { /* docs/pool.md, "Live migration" */
		struct rm_pool_member *to = malloc(sizeof(*to));
		char addr[sizeof(to->address)];
		snprintf(addr, sizeof(addr), "%s", a->migrate);
		if (to && !strchr(a->migrate, ':') && !rm_pool_find(e, a->migrate, to))
			snprintf(addr, sizeof(addr), "%s", to->address);
		free(to);
		printf("%s: draining: no new clients; moving its clients to %s\n", a->host, addr);
		rc = rm_cli_migrate_all(m->address, addr);
	} else if (!strcmp(sub, "drain"))
		printf("%s: draining: no new clients; its %d current client(s) go on\n", a->host, m->clients);
	else if (!strcmp(sub, "undrain"))
		printf("%s: serving%s\n", a->host, m->registered ? "" : " once its daemon registers again");
	else
		printf("%s: removed from the pool; `remora pool undrain %s` lets it register again\n", a->host, a->host);
	free(m);
	return rc;
}

int cmd_pool(int argc, char **argv)
{
	static const char usage[] =
		"usage: remora pool list [--json] | show HOST [--json] | drain HOST [--migrate HOST] | undrain HOST | remove HOST\n"
		"       [--pool http[s]://HOST:PORT[,...]]  (default: REMORA_POOL)\n"
		"       [--pool-ca FILE] [--pool-cert FILE --pool-key FILE] [--pool-user NAME --pool-password-file FILE]\n"
		"       (defaults: REMORA_POOL_CA, _CERT, _KEY, _USER, _PASSWORD_FILE or _PASSWORD)\n";
	if (argc < 2) {
		fputs(usage, stderr);
		return 2;
	}
	const char *sub = argv[1];
	int known = !strcmp(sub, "list") || !strcmp(sub, "show") || !strcmp(sub, "drain") ||
		    !strcmp(sub, "undrain") || !strcmp(sub, "remove");
	if (!known) {
		fprintf(stderr, "remora pool: unknown command %s\n%s", sub, usage);
		return 2;
	}
	char cmd[32];
	snprintf(cmd, sizeof(cmd), "pool %s", sub);
	struct pool_args a = {0};
	struct rm_etcd e;
	int rc = parse_args(cmd, argc - 1, argv + 1, &a);
	if (!rc && !strcmp(sub, "list") && a.host) {
		fprintf(stderr, "remora pool list: unexpected argument %s\n", a.host);
		rc = 2;
	}
	if (!rc && strcmp(sub, "list") && !a.host) {
		fprintf(stderr, "remora pool %s: name a HOST\n", sub);
		rc = 2;
	}
	if (!rc)
		rc = open_pool(cmd, &a, &e);
	if (rc)
		return rc;
	if (!strcmp(sub, "list"))
		rc = pool_list(&e, &a);
	else if (!strcmp(sub, "show"))
		rc = pool_show(&e, &a);
	else
		rc = pool_decide(&e, &a, sub);
	rm_etcd_close(&e);
	return rc;
}

/* Asks the daemon at addr for its status; *rep is the unpacked reply. */
int fetch_status(const char *addr, Remora__StatusReply **rep, char *why, size_t whylen)
{
	const char *hostport;
	const struct rm_transport *tp = rm_transport_for(addr, &hostport);
	if (!tp) {
		snprintf(why, whylen, "%s names an unknown transport", addr);
		return -EINVAL;
	}
	struct rm_conn *conn;
	rm_transport_set_why(0, "%s", "");
	int err = tp->dial(hostport, STATUS_TIMEOUT_MS, &conn);
	if (err) {
		snprintf(why, whylen, "cannot reach remorad at %s: %s", addr, rm_transport_why(err));
		return err;
	}
	struct rm_link l;
	rm_conn_set_liveness(conn, STATUS_TIMEOUT_MS, STATUS_TIMEOUT_MS); /* a frozen daemon: an answer, not a hang */
	if ((err = rm_link_init(&l, conn))) {
		rm_conn_close(conn);
		snprintf(why, whylen, "out of memory");
		return err;
	}
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_STATUS, .seq = 1}, rf;
	uint8_t *msg = NULL, req_buf[512];
	/* The credential: REMORA_TOKEN (a tenant's or the admin's), else the connection's
	 * client certificate (REMORA_TLS_CERT) if any. */
	Remora__StatusRequest req = REMORA__STATUS_REQUEST__INIT;
	const char *token = getenv("REMORA_TOKEN");
	if (token) {
		req.credential.data = (uint8_t *)token;
		req.credential.len = strlen(token);
	}
	f.msg_len = (uint32_t)remora__status_request__get_packed_size(&req);
	err = f.msg_len > sizeof(req_buf) ? -E2BIG : 0;
	if (!err) {
		remora__status_request__pack(&req, req_buf);
		err = rm_link_send(&l, &f, req_buf, NULL, 0);
	}
	if (!err)
		err = rm_link_read_frame(&l, &rf);
	if (!err && (rf.op != RM_OP_STATUS || !(rf.flags & RM_F_REPLY) || rf.bulk_len))
		err = -EPROTO;
	if (!err && rf.result == 800 /* CUDA_ERROR_NOT_PERMITTED */) {
		snprintf(why, whylen, "remorad at %s refused: status needs a credential it accepts (REMORA_TOKEN or "
			 "--token: a tenant's token shows its clients, the admin token all; or a client certificate)", addr);
		rm_link_close(&l);
		return -EACCES;
	}
	if (!err && !(msg = malloc(rf.msg_len ? rf.msg_len : 1)))
		err = -ENOMEM;
	if (!err)
		err = rm_link_read(&l, msg, rf.msg_len);
	if (!err && !(*rep = remora__status_reply__unpack(NULL, rf.msg_len, msg)))
		err = -EPROTO;
	if (err)
		snprintf(why, whylen, "remorad at %s gave no status (%s)%s", addr,
			 *rm_transport_last_why() ? rm_transport_last_why()
			 : err == -ECONNRESET ? "it closed the connection" : strerror(-err),
			 err == -ETIMEDOUT ? ": it is frozen or unreachable" : ": is it an older remorad?");
	free(msg);
	rm_link_close(&l);
	return err;
}

/* "usage":{...} of accounting (docs/operations.md); absent usage prints zeros. */
static void print_usage_json(const Remora__StatusReply *r, const Remora__StatusReply__Usage *u)
{
	printf(",\"usage\":{\"calls\":{");
	for (size_t k = 0; u && k < u->n_calls && k < r->n_call_kinds; k++) {
		printf("%s", k ? "," : "");
		print_json_string(r->call_kinds[k]);
		printf(":%llu", (unsigned long long)u->calls[k]);
	}
	printf("},\"errors\":%llu,\"bytes_htod\":%llu,\"bytes_dtoh\":%llu,\"gpu_seconds\":%.9f,\"peak_memory\":%llu,"
	       "\"queue_wait_seconds\":%.9f}",
	       (unsigned long long)(u ? u->errors : 0), (unsigned long long)(u ? u->bytes_htod : 0),
	       (unsigned long long)(u ? u->bytes_dtoh : 0), u ? (double)u->gpu_ns / 1e9 : 0.0,
	       (unsigned long long)(u ? u->peak_bytes : 0), u ? (double)u->queue_wait_ns / 1e9 : 0.0);
}

static void print_status(const Remora__StatusReply *r, int json)
{
	if (json) {
		printf("{\"host\":");
		print_json_string(r->host);
		printf(",\"address\":");
		print_json_string(r->address);
		printf(",\"draining\":%s,\"pool\":", r->draining ? "true" : "false");
		print_json_string(r->pool);
		printf(",\"driver_version\":%d,\"gpus\":[", r->driver_version);
		for (size_t i = 0; i < r->n_gpus; i++) {
			const Remora__StatusReply__Gpu *g = r->gpus[i];
			printf("%s{\"index\":%u,\"name\":", i ? "," : "", g->index);
			print_json_string(g->name);
			printf(",\"uuid\":");
			print_json_string(g->uuid);
			printf(",\"total\":%llu,\"free\":%llu,\"clients\":%u}", (unsigned long long)g->total_bytes,
			       (unsigned long long)g->free_bytes, g->clients);
		}
		printf("],\"clients\":[");
		for (size_t i = 0; i < r->n_clients; i++) {
			const Remora__StatusReply__Client *c = r->clients[i];
			printf("%s{\"session\":%llu,\"tenant\":", i ? "," : "", (unsigned long long)c->session_id);
			print_json_string(c->tenant);
			printf(",\"program\":");
			print_json_string(c->name);
			printf(",\"peer\":");
			print_json_string(c->peer);
			printf(",\"pid\":%u,\"gpu_mask\":%llu,\"memory\":%llu,\"memory_limit\":%llu,\"since\":%lld", c->pid,
			       (unsigned long long)c->gpu_mask, (unsigned long long)c->mem_bytes,
			       (unsigned long long)c->memory_limit, (long long)c->since);
			print_usage_json(r, c->usage);
			printf("}");
		}
		printf("],\"tenants\":[");
		for (size_t i = 0; i < r->n_tenants; i++) {
			const Remora__StatusReply__Tenant *t = r->tenants[i];
			printf("%s{\"name\":", i ? "," : "");
			print_json_string(t->name);
			printf(",\"clients\":%u,\"sessions\":%llu,\"memory\":%llu,\"memory_limit\":%llu", t->clients,
			       (unsigned long long)t->sessions, (unsigned long long)t->mem_bytes,
			       (unsigned long long)t->memory_limit);
			print_usage_json(r, t->usage);
			printf("}");
		}
		printf("],\"history\":[");
		for (size_t i = 0; i < r->n_history; i++) {
			const Remora__StatusReply__Finished *h = r->history[i];
			printf("%s{\"session\":%llu,\"tenant\":", i ? "," : "", (unsigned long long)h->session_id);
			print_json_string(h->tenant);
			printf(",\"program\":");
			print_json_string(h->name);
			printf(",\"pid\":%u,\"since\":%lld,\"until\":%lld", h->pid, (long long)h->since, (long long)h->until);
			print_usage_json(r, h->usage);
			printf("}");
		}
		printf("]}\n");
		return;
	}
	char host[TEXT_MAX], addr[TEXT_MAX], pool[TEXT_MAX];
	printf("host %s  address %s  state %s  pool %s  driver %d\n", rm_text_escape(host, sizeof(host), r->host),
	       rm_text_escape(addr, sizeof(addr), r->address), r->draining ? "draining" : "serving",
	       rm_text_escape(pool, sizeof(pool), r->pool), r->driver_version);
	printf("\n%-4s %-32s %-40s %-20s %s\n", "GPU", "NAME", "UUID", "FREE/TOTAL", "CLIENTS");
	for (size_t i = 0; i < r->n_gpus; i++) {
		const Remora__StatusReply__Gpu *g = r->gpus[i];
		char mem[64], name[TEXT_MAX], uuid[TEXT_MAX];
		printf("%-4u %-32s %-40s %-20s %u\n", g->index, rm_text_escape(name, sizeof(name), g->name),
		       rm_text_escape(uuid, sizeof(uuid), g->uuid), fmt_mem(mem, sizeof(mem), g->free_bytes, g->total_bytes),
		       g->clients);
	}
	printf("\n%-8s %-12s %-16s %-8s %-22s %-6s %12s  %s\n", "SESSION", "TENANT", "PROGRAM", "PID", "PEER", "GPUS",
	       "MEMORY_MIB", "SINCE");
	if (!r->n_clients)
		printf("(no clients)\n");
	for (size_t i = 0; i < r->n_clients; i++) {
		const Remora__StatusReply__Client *c = r->clients[i];
		char gpus[80] = "", when[32], tenant[TEXT_MAX], name[TEXT_MAX], peer[TEXT_MAX];
		for (int g = 0; g < 64 && strlen(gpus) < sizeof(gpus) - 4; g++)
			if (c->gpu_mask >> g & 1)
				snprintf(gpus + strlen(gpus), sizeof(gpus) - strlen(gpus), "%s%d", gpus[0] ? "," : "", g);
		printf("%-8llu %-12s %-16s %-8u %-22s %-6s %12.1f  %s\n", (unsigned long long)c->session_id,
		       rm_text_escape(tenant, sizeof(tenant), c->tenant), rm_text_escape(name, sizeof(name), c->name), c->pid,
		       rm_text_escape(peer, sizeof(peer), c->peer), gpus, (double)c->mem_bytes / (1 << 20),
		       fmt_time(when, sizeof(when), c->since, "%H:%M:%S"));
	}
	if (r->n_tenants)
		printf("\n%-12s %8s %9s %14s %14s %14s %12s\n", "TENANT", "CLIENTS", "SESSIONS", "GPU_SECONDS", "HTOD_MIB",
		       "DTOH_MIB", "PEAK_MIB");
	for (size_t i = 0; i < r->n_tenants; i++) {
		const Remora__StatusReply__Tenant *t = r->tenants[i];
		const Remora__StatusReply__Usage *u = t->usage;
		char name[TEXT_MAX];
		printf("%-12s %8u %9llu %14.3f %14.1f %14.1f %12.1f\n", rm_text_escape(name, sizeof(name), t->name), t->clients,
		       (unsigned long long)t->sessions, u ? (double)u->gpu_ns / 1e9 : 0.0,
		       u ? (double)u->bytes_htod / (1 << 20) : 0.0, u ? (double)u->bytes_dtoh / (1 << 20) : 0.0,
		       u ? (double)u->peak_bytes / (1 << 20) : 0.0);
	}
}

int cmd_status(int argc, char **argv)
{
	struct pool_args a = {0};
	int rc = parse_args("status", argc, argv, &a);
	if (rc)
		return rc;
	if (a.server && a.host) {
		fprintf(stderr, "remora status: give a HOST or --server, not both\n");
		return 2;
	}
	const char *env = getenv("REMORA_SERVER");
	char addr[256];
	/* --server, else the HOST argument, else REMORA_SERVER, else the local daemon. */
	snprintf(addr, sizeof(addr), "%s",
		 a.server ? a.server : a.host ? a.host : env && *env ? env : DEFAULT_DAEMON);
	/* A name without a port is a pool member's: look its address up. */
	if (a.host && !strchr(a.host, ':')) {
		struct rm_etcd e;
		struct rm_pool_member *m = malloc(sizeof(*m));
		if (!m || (rc = open_pool("status", &a, &e))) {
			free(m);
			return rc ? rc : 1;
		}
		int err = rm_pool_find(&e, a.host, m);
		rm_etcd_close(&e);
		if (err || !m->registered) {
			char t[TEXT_MAX];
			fprintf(stderr, "remora status: %s\n",
				err ? rm_text_escape(t, sizeof(t), e.error) : "no registered host of that name in the pool");
			free(m);
			return 1;
		}
		snprintf(addr, sizeof(addr), "%s", m->address);
		free(m);
	}
	Remora__StatusReply *rep;
	char why[512];
	if (fetch_status(addr, &rep, why, sizeof(why))) {
		fprintf(stderr, "remora status: %s\n", why);
		return 1;
	}
	print_status(rep, a.json);
	remora__status_reply__free_unpacked(rep, NULL);
	return 0;
}
