/* The metrics responder and the exposition text (metrics.h). Names and labels follow
 * Prometheus's conventions, so that `promtool check metrics` passes (the metrics-promtool
 * test): snake_case, base units in the name (bytes, seconds, celsius, watts, ratios),
 * _total on counters only. Per GPU, per client and per tenant; docs/operations.md maps
 * NVIDIA's DCGM exporter's names onto these. Everything in a label that a client chose
 * (its program's name, its peer) is escaped, and bytes outside printable ASCII become '?'. */
#include "metrics.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "host_nvml.h"
#include "log.h"
#include "server.h"
#include "wire.h"

/* ---- the text ---- */

struct buf {
	char *p;
	size_t len, cap;
	int failed;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct buf *b, const char *fmt, ...)
{
	if (b->failed)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->failed = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		size_t cap = b->cap * 2 + (size_t)n;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->failed = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

/* A label value: escaped as the format asks, printable ASCII only, at most 128 bytes. */
static const char *label(char *out, size_t cap, const char *v)
{
	size_t o = 0;
	for (size_t i = 0; v[i] && i < 128 && o + 3 < cap; i++) {
		unsigned char c = (unsigned char)v[i];
		if (c == '\\' || c == '"') {
			out[o++] = '\\';
			out[o++] = (char)c;
		} else if (c == '\n') {
			out[o++] = '\\';
			out[o++] = 'n';
		} else {
			out[o++] = c >= 0x20 && c < 0x7f ? (char)c : '?';
		}
	}
	out[o] = 0;
	return out;
}

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
	put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void gpus(struct buf *b, const struct rm_snapshot *s, const char *host)
{
	static const struct {
		const char *name, *type, *help;
	} fam[] = {
		{"remora_dev_fb_bytes", "gauge", "Device memory in all."},
		{"remora_dev_fb_free_bytes", "gauge", "Device memory free, as a worker last saw it."},
		{"remora_dev_fb_used_bytes", "gauge", "Device memory used, as a worker last saw it."},
		{"remora_dev_clients", "gauge", "Clients that may use the GPU."},
		{"remora_dev_gpu_utilization_ratio", "gauge", "Time a kernel ran (0 to 1), from the host's NVML."},
		{"remora_dev_memory_utilization_ratio", "gauge", "Time device memory was read or written (0 to 1), from the host's NVML."},
		{"remora_dev_gpu_temperature_celsius", "gauge", "GPU temperature, from the host's NVML."},
		{"remora_dev_power_watts", "gauge", "Power draw, from the host's NVML."},
	};
	struct rm_host_gpu_state st[RM_MAX_GPUS];
	for (int i = 0; i < s->ngpus; i++)
		rm_host_nvml_gpu(s->gpus[i].uuid, &st[i]);
	for (size_t f = 0; f < sizeof(fam) / sizeof(fam[0]); f++) {
		family(b, fam[f].name, fam[f].type, fam[f].help);
		for (int i = 0; i < s->ngpus; i++) {
			const struct rm_gpu_record *g = &s->gpus[i];
			const struct rm_host_gpu_state *h = &st[i];
			double v;
			switch (f) {
			case 0: v = (double)g->total_bytes; break;
			case 1: v = (double)g->free_bytes; break;
			case 2: v = (double)(g->total_bytes - (g->free_bytes < g->total_bytes ? g->free_bytes : g->total_bytes)); break;
			case 3: v = g->clients; break;
			case 4: if (!(h->valid & RM_NVML_HAS_UTILIZATION)) continue; v = h->gpu_util / 100.0; break;
			case 5: if (!(h->valid & RM_NVML_HAS_UTILIZATION)) continue; v = h->memory_util / 100.0; break;
			case 6: if (!(h->valid & RM_NVML_HAS_TEMPERATURE)) continue; v = h->temperature_c; break;
			default: if (!(h->valid & RM_NVML_HAS_POWER)) continue; v = h->power_mw / 1000.0; break;
			}
			char name[300], uuid[120];
			put(b, "%s{gpu=\"%d\",uuid=\"%s\",device=\"nvidia%d\",model_name=\"%s\",hostname=\"%s\"} %.15g\n",
			    fam[f].name, i, label(uuid, sizeof(uuid), g->uuid), i, label(name, sizeof(name), g->name), host, v);
		}
	}
}

/* The usage families, for clients (ids[i] labels usage u[i]) or tenants. */
static void usage(struct buf *b, const char *who, int n, const char *const *ids, const struct rm_usage *const *u)
{
	char name[96];
	snprintf(name, sizeof(name), "remora_%s_calls_total", who);
	family(b, name, "counter", "Calls forwarded, by kind.");
	for (int i = 0; i < n; i++)
		for (int k = 0; k < RM_CALL_KINDS; k++)
			put(b, "%s{%s,kind=\"%s\"} %llu\n", name, ids[i], rm_call_kind_names[k], (unsigned long long)u[i]->calls[k]);
	snprintf(name, sizeof(name), "remora_%s_errors_total", who);
	family(b, name, "counter", "Calls that returned an error.");
	for (int i = 0; i < n; i++)
		put(b, "%s{%s} %llu\n", name, ids[i], (unsigned long long)u[i]->errors);
	snprintf(name, sizeof(name), "remora_%s_copy_bytes_total", who);
	family(b, name, "counter", "Bytes copied between host and device, by direction.");
	for (int i = 0; i < n; i++) {
		put(b, "%s{%s,direction=\"htod\"} %llu\n", name, ids[i], (unsigned long long)u[i]->bytes_htod);
		put(b, "%s{%s,direction=\"dtoh\"} %llu\n", name, ids[i], (unsigned long long)u[i]->bytes_dtoh);
	}
	snprintf(name, sizeof(name), "remora_%s_gpu_seconds_total", who);
	family(b, name, "counter", "Kernel time, measured with events on the daemon's streams.");
	for (int i = 0; i < n; i++)
		put(b, "%s{%s} %.9f\n", name, ids[i], (double)u[i]->gpu_ns / 1e9);
	snprintf(name, sizeof(name), "remora_%s_queue_wait_seconds_total", who);
	family(b, name, "counter", "Time calls were held because a hardware queue was shared with other clients.");
	for (int i = 0; i < n; i++)
		put(b, "%s{%s} %.9f\n", name, ids[i], (double)u[i]->queue_wait_ns / 1e9);
	snprintf(name, sizeof(name), "remora_%s_fb_peak_bytes", who);
	family(b, name, "gauge", "The most device memory held at once.");
	for (int i = 0; i < n; i++)
		put(b, "%s{%s} %llu\n", name, ids[i], (unsigned long long)u[i]->peak_mem_bytes);
}

static void gauge_rows(struct buf *b, const char *name, const char *help, int n, const char *const *ids,
		       const uint64_t *v)
{
	family(b, name, "gauge", help);
	for (int i = 0; i < n; i++)
		put(b, "%s{%s} %llu\n", name, ids[i], (unsigned long long)v[i]);
}

char *rm_metrics_render(const struct rm_snapshot *s, const struct rm_daemon_config *cfg, const char *host_raw,
			size_t *len)
{
	struct buf b = {.cap = 1 << 16};
	/* A row's labels: each value escaped from at most 128 bytes (256), four of them fit. */
	enum { NT = RM_CONFIG_MAX_TENANTS + 1, ID = 2048 };
	char host[300];
	char *ids = malloc((size_t)(RM_MAX_CLIENTS + NT) * ID);
	const char **idp = calloc(RM_MAX_CLIENTS + NT, sizeof(*idp));
	const struct rm_usage **up = calloc(RM_MAX_CLIENTS + NT, sizeof(*up));
	uint64_t *v = malloc((RM_MAX_CLIENTS + NT) * sizeof(*v));
	b.p = malloc(b.cap);
	if (!ids || !idp || !up || !v || !b.p)
		goto fail;
	label(host, sizeof(host), host_raw);

	family(&b, "remora_up", "gauge", "1: remorad serves.");
	put(&b, "remora_up{hostname=\"%s\"} 1\n", host);
	family(&b, "remora_draining", "gauge", "1: the daemon takes no new clients.");
	put(&b, "remora_draining{hostname=\"%s\"} %d\n", host, s->draining != 0);
	gpus(&b, s, host);

	/* Clients connected now. */
	int n = s->nclients;
	for (int i = 0; i < n; i++) {
		const struct rm_client_record *c = &s->clients[i];
		char tenant[300], prog[300], peer[300];
		snprintf(ids + (size_t)i * ID, ID, "session=\"%llu\",tenant=\"%s\",program=\"%s\",pid=\"%u\",peer=\"%s\",hostname=\"%s\"",
			 (unsigned long long)c->session_id, label(tenant, sizeof(tenant), rm_tenant_name(cfg, c->tenant)),
			 label(prog, sizeof(prog), c->name), c->pid, label(peer, sizeof(peer), c->peer), host);
		idp[i] = ids + (size_t)i * ID;
		up[i] = &c->usage;
	}
	usage(&b, "client", n, idp, up);
	for (int i = 0; i < n; i++)
		v[i] = s->clients[i].mem_bytes;
	gauge_rows(&b, "remora_client_fb_used_bytes", "Device memory the client holds.", n, idp, v);
	for (int i = 0; i < n; i++)
		v[i] = rm_tenant_client_limit(cfg, s->clients[i].tenant);
	gauge_rows(&b, "remora_client_fb_limit_bytes", "The client's quota of device memory (0: none).", n, idp, v);
	for (int i = 0; i < n; i++)
		v[i] = (uint64_t)s->clients[i].since;
	gauge_rows(&b, "remora_client_start_time_seconds", "When the client connected (Unix time).", n, idp, v);

	/* Tenants that have had a client: their totals include clients that left. */
	int nt = 0;
	int slots[NT];
	for (int slot = 0; slot < NT; slot++) {
		if (!s->tenants[slot].sessions)
			continue;
		char tenant[300];
		snprintf(ids + (size_t)nt * ID, ID, "tenant=\"%s\",hostname=\"%s\"",
			 label(tenant, sizeof(tenant), rm_tenant_name(cfg, rm_tenant_of_slot(slot))), host);
		idp[nt] = ids + (size_t)nt * ID;
		up[nt] = &s->tenants[slot].departed;
		slots[nt++] = slot;
	}
	usage(&b, "tenant", nt, idp, up);
	for (int i = 0; i < nt; i++)
		v[i] = (uint64_t)(s->tenants[slots[i]].clients > 0 ? s->tenants[slots[i]].clients : 0);
	gauge_rows(&b, "remora_tenant_clients", "The tenant's clients connected now.", nt, idp, v);
	family(&b, "remora_tenant_sessions_total", "counter", "The tenant's clients ever admitted.");
	for (int i = 0; i < nt; i++)
		put(&b, "remora_tenant_sessions_total{%s} %llu\n", idp[i], (unsigned long long)s->tenants[slots[i]].sessions);
	for (int i = 0; i < nt; i++)
		v[i] = s->tenants[slots[i]].mem_bytes;
	gauge_rows(&b, "remora_tenant_fb_used_bytes", "Device memory the tenant's clients hold.", nt, idp, v);
	for (int i = 0; i < nt; i++)
		v[i] = rm_tenant_limit(cfg, rm_tenant_of_slot(slots[i]));
	gauge_rows(&b, "remora_tenant_fb_limit_bytes", "The tenant's quota of device memory (0: none).", nt, idp, v);
	if (b.failed)
		goto fail;
	free(v);
	free(up);
	free(idp);
	free(ids);
	*len = b.len;
	return b.p;
fail:
	free(b.p);
	free(v);
	free(up);
	free(idp);
	free(ids);
	return NULL;
}

/* ---- the requests ---- */

int rm_metrics_request_status(const char *req, size_t len, int *head_only)
{
	const char *eol = memchr(req, '\n', len);
	if (!eol)
		return 400;
	size_t line = (size_t)(eol - req);
	if (line && req[line - 1] == '\r')
		line--;
	char first[256];
	if (line >= sizeof(first))
		return 400;
	memcpy(first, req, line);
	first[line] = 0;
	char *sp1 = strchr(first, ' '), *sp2 = sp1 ? strchr(sp1 + 1, ' ') : NULL;
	if (!sp1 || !sp2 || strchr(sp2 + 1, ' ') || strncmp(sp2 + 1, "HTTP/1.", 7))
		return 400;
	*sp1 = *sp2 = 0;
	const char *path = sp1 + 1;
	*head_only = !strcmp(first, "HEAD");
	if (strcmp(first, "GET") && !*head_only)
		return 405;
	size_t plen = strcspn(path, "?");
	return plen == 8 && !strncmp(path, "/metrics", 8) ? 200 : 404;
}

struct conn {
	int fd;                    /* -1: a free slot */
	char req[RM_METRICS_MAX_REQUEST];
	size_t len;
	char *out;                 /* the response, once the request is whole */
	size_t out_len, out_off;
	size_t drained;            /* after the response: bytes of the request read and dropped */
	int64_t deadline_ms;       /* the request's, then the whole connection's */
	int64_t since_ms;          /* accepted */
};
#define DRAIN_MAX 65536 /* what a closing connection reads and drops at most (a lingering close) */

static const struct rm_daemon_config *config;
static int listen_fd = -1;
static struct conn conns[RM_METRICS_MAX_CONNS];
static char hostname[128];

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void conn_close(struct conn *c)
{
	close(c->fd);
	free(c->out);
	c->fd = -1;
	c->out = NULL;
}

static void respond(struct conn *c, int status, int head_only)
{
	const char *reason = status == 200 ? "OK" : status == 404 ? "Not Found" : status == 405 ? "Method Not Allowed"
			   : status == 431 ? "Request Header Fields Too Large" : status == 503 ? "Service Unavailable"
			   : "Bad Request";
	char *body = NULL;
	size_t blen = 0;
	if (status == 200) {
		struct rm_snapshot *s = malloc(sizeof(*s));
		if (s) {
			rm_snapshot_take(s);
			body = rm_metrics_render(s, rm_server_config(), hostname, &blen); /* SIGHUP's, if any */
			free(s);
		}
		if (!body)
			status = 503, reason = "Service Unavailable";
	}
	if (!body) {
		char text[64];
		blen = (size_t)snprintf(text, sizeof(text), "%d %s\n", status, reason);
		body = strdup(text);
		if (!body) {
			conn_close(c);
			return;
		}
	}
	char head[256];
	int hlen = snprintf(head, sizeof(head),
			    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%sConnection: close\r\n\r\n",
			    status, reason, status == 200 ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain",
			    blen, status == 405 ? "Allow: GET, HEAD\r\n" : "");
	size_t total = (size_t)hlen + (head_only ? 0 : blen);
	c->out = malloc(total);
	if (!c->out) {
		free(body);
		conn_close(c);
		return;
	}
	memcpy(c->out, head, (size_t)hlen);
	if (!head_only)
		memcpy(c->out + hlen, body, blen);
	free(body);
	c->out_len = total;
	c->out_off = 0;
}

/* After the response: reads what the peer still sends until it closes, so that closing
 * with unread bytes does not reset the connection before the peer has read the response. */
static void on_drain(struct conn *c)
{
	char sink[4096];
	ssize_t n = recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0 || (c->drained += (size_t)n) > DRAIN_MAX)
		conn_close(c);
}

static void on_readable(struct conn *c)
{
	ssize_t n = recv(c->fd, c->req + c->len, sizeof(c->req) - c->len, 0);
	if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
		conn_close(c);
		return;
	}
	if (n < 0)
		return;
	c->len += (size_t)n;
	for (size_t i = 0; i + 1 < c->len; i++)
		if (c->req[i] == '\n' && (c->req[i + 1] == '\n' || (c->req[i + 1] == '\r' && i + 2 < c->len && c->req[i + 2] == '\n'))) {
			int head_only = 0;
			int status = rm_metrics_request_status(c->req, i + 1, &head_only);
			c->deadline_ms = c->since_ms + RM_METRICS_TIMEOUT_MS;
			respond(c, status, head_only);
			return;
		}
	if (c->len == sizeof(c->req)) {
		c->deadline_ms = c->since_ms + RM_METRICS_TIMEOUT_MS;
		respond(c, 431, 0);
	}
}

static void on_writable(struct conn *c)
{
	ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		conn_close(c);
		return;
	}
	c->out_off += (size_t)n;
	if (c->out_off == c->out_len)
		shutdown(c->fd, SHUT_WR); /* then on_drain until the peer closes */
}

static void accept_all(void)
{
	for (;;) {
		int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return; /* EAGAIN, or out of descriptors: the next poll tries again */
		struct conn *c = NULL, *waiting = NULL;
		for (int i = 0; i < RM_METRICS_MAX_CONNS && !c; i++)
			if (conns[i].fd < 0)
				c = &conns[i];
			else if (!conns[i].out && (!waiting || conns[i].since_ms < waiting->since_ms))
				waiting = &conns[i];
		if (!c && waiting) {
			conn_close(waiting); /* the oldest still waiting for its request makes way */
			c = waiting;
		}
		if (!c) {
			close(fd); /* every slot answering: this scraper tries again later */
			continue;
		}
		c->fd = fd;
		c->len = 0;
		c->drained = 0;
		c->out = NULL;
		c->since_ms = now_ms();
		c->deadline_ms = c->since_ms + RM_METRICS_REQUEST_MS;
	}
}

static void *responder(void *arg)
{
	struct pollfd p[RM_METRICS_MAX_CONNS + 1];
	int idx[RM_METRICS_MAX_CONNS + 1];
	for (;;) {
		int np = 0;
		int64_t now = now_ms(), wait = -1;
		p[np++] = (struct pollfd){.fd = listen_fd, .events = POLLIN};
		for (int i = 0; i < RM_METRICS_MAX_CONNS; i++) {
			struct conn *c = &conns[i];
			if (c->fd < 0)
				continue;
			if (now >= c->deadline_ms) {
				conn_close(c);
				continue;
			}
			if (wait < 0 || c->deadline_ms - now < wait)
				wait = c->deadline_ms - now;
			idx[np] = i;
			int sending = c->out && c->out_off < c->out_len;
			p[np++] = (struct pollfd){.fd = c->fd, .events = sending ? POLLOUT : POLLIN};
		}
		if (poll(p, (nfds_t)np, (int)wait) < 0 && errno != EINTR) {
			rm_log(RM_LOG_ERROR, "metrics: poll: %s; metrics stop", strerror(errno));
			return arg;
		}
		for (int k = 1; k < np; k++) {
			struct conn *c = &conns[idx[k]];
			if (c->fd < 0 || !p[k].revents)
				continue;
			if (p[k].revents & (POLLERR | POLLNVAL))
				conn_close(c);
			else if (c->out && c->out_off == c->out_len)
				on_drain(c);
			else if (c->out)
				on_writable(c);
			else
				on_readable(c);
		}
		if (p[0].revents & POLLIN)
			accept_all();
	}
}

/* "[tcp://|http://]HOST:PORT" into host and port. */
static int split(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
	const char *a = strstr(addr, "://");
	a = a ? a + 3 : addr;
	const char *colon = strrchr(a, ':');
	if (!colon || strlen(colon + 1) >= pcap || (size_t)(colon - a) >= hcap)
		return -1;
	size_t hl = (size_t)(colon - a);
	if (hl >= 2 && a[0] == '[' && a[hl - 1] == ']') {
		a++;
		hl -= 2;
	}
	memcpy(host, a, hl);
	host[hl] = 0;
	snprintf(port, pcap, "%s", colon + 1);
	return 0;
}

int rm_metrics_start(const struct rm_daemon_config *cfg)
{
	if (!cfg->metrics_listen[0])
		return 0;
	config = cfg;
	if (cfg->host_name[0])
		snprintf(hostname, sizeof(hostname), "%s", cfg->host_name);
	else if (gethostname(hostname, sizeof(hostname)))
		snprintf(hostname, sizeof(hostname), "unknown");
	hostname[sizeof(hostname) - 1] = 0;
	for (int i = 0; i < RM_METRICS_MAX_CONNS; i++)
		conns[i].fd = -1;
	char host[256], port[16];
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
	if (split(cfg->metrics_listen, host, sizeof(host), port, sizeof(port)) ||
	    getaddrinfo(host[0] ? host : NULL, port, &hints, &res)) {
		rm_log(RM_LOG_ERROR, "metrics_listen %s: not a HOST:PORT this host can listen on", cfg->metrics_listen);
		return -EINVAL;
	}
	int err = 0, one = 1;
	listen_fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (listen_fd < 0 || setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(listen_fd, res->ai_addr, res->ai_addrlen) || listen(listen_fd, 64))
		err = -errno;
	freeaddrinfo(res);
	struct sockaddr_storage sa;
	socklen_t salen = sizeof(sa);
	char h[NI_MAXHOST], p[NI_MAXSERV];
	if (!err && (getsockname(listen_fd, (struct sockaddr *)&sa, &salen) ||
		     getnameinfo((struct sockaddr *)&sa, salen, h, sizeof(h), p, sizeof(p), NI_NUMERICHOST | NI_NUMERICSERV)))
		err = -EINVAL;
	pthread_t t;
	if (!err)
		err = -pthread_create(&t, NULL, responder, NULL);
	if (err) {
		rm_log(RM_LOG_ERROR, "cannot serve metrics on %s: %s", cfg->metrics_listen, strerror(-err));
		if (listen_fd >= 0)
			close(listen_fd);
		listen_fd = -1;
		return err;
	}
	pthread_detach(t);
	rm_log(RM_LOG_INFO, "serving metrics on http://%s%s%s:%s/metrics", strchr(h, ':') ? "[" : "", h,
	       strchr(h, ':') ? "]" : "", p);
	return 0;
}
