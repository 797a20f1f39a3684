/* Admission of a new connection (admission.h). */
#include "admission.h"

#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "attach_keys.h"
#include "auth.h"
#include "link.h"
#include "log.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "server.h"
#include "supervisor.h"
#include "text.h"

/* Answers a hello the accepting process refuses. */
static void refuse(struct rm_link *l, uint64_t seq, CUresult r, const char *why)
{
	Remora__HelloReply rep = REMORA__HELLO_REPLY__INIT;
	rep.protocol_version = RM_PROTOCOL_VERSION;
	rep.error = (char *)why;
	uint8_t buf[512];
	size_t len = remora__hello_reply__get_packed_size(&rep);
	if (len > sizeof(buf))
		return;
	remora__hello_reply__pack(&rep, buf);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HELLO, .seq = seq, .msg_len = (uint32_t)len,
			     .flags = RM_F_REPLY, .result = (int32_t)r};
	rm_link_send(l, &f, buf, NULL, 0);
}

struct greeting {
	struct rm_conn *conn;
	struct rm_handshake *handshake; /* until the hello (or a copy link's attach) is read */
	int ended;                      /* what rm_handshake_end said */
};

/* Ends the handshake's deadline: 0, or -ETIMEDOUT or -ESHUTDOWN when the connection has
 * been shut down (a timeout is logged by handshakes.c). */
static int settle(struct greeting *g)
{
	if (g->handshake) {
		g->ended = rm_handshake_end(g->handshake);
		g->handshake = NULL;
	}
	return g->ended;
}

/* The devices a hello asks for, checked: none means all the host's GPUs. */
static int visible_devices(const Remora__Hello *h, struct rm_handoff *out, uint64_t *mask, char *why, size_t n)
{
	int ngpus = rm_registry()->ngpus;
	*mask = 0;
	out->ndevices = 0;
	if (!h->n_devices) {
		for (int g = 0; g < ngpus && g < 64; g++) {
			out->devices[out->ndevices++] = g;
			*mask |= 1ull << g;
		}
		return 0;
	}
	for (size_t i = 0; i < h->n_devices; i++) {
		int g = h->devices[i];
		if (g < 0 || g >= ngpus || g >= 64 || (*mask >> g & 1)) {
			snprintf(why, n, "REMORA_VISIBLE_DEVICES names GPU %d, which this host (%d GPUs) cannot give", g,
				 ngpus);
			return -1;
		}
		out->devices[out->ndevices++] = g;
		*mask |= 1ull << g;
	}
	return 0;
}

/* A copy link's Attach: checked here against the key made at the session's admission
 * (attach_keys.h), then handed to the worker serving that session, which checks it
 * again and answers; anything else is refused here, with one answer for a wrong key
 * and an unknown session. */
static void attach_link(struct rm_link *link, const struct rm_frame *f, struct greeting *g)
{
	const char *peer = rm_conn_peer(g->conn);
	uint8_t msg[256];
	Remora__Attach *a = NULL;
	if (f->bulk_len || f->msg_len > sizeof(msg) || rm_link_read(link, msg, f->msg_len) ||
	    !(a = remora__attach__unpack(NULL, f->msg_len, msg)) || a->key.len != RM_ATTACH_KEY_LEN ||
	    link->rpos != link->rlen) {
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: malformed copy link attach; closing", peer);
		goto out;
	}
	if (settle(g))
		goto out;
	struct rm_handoff h = {.attach = 1, .channel = a->channel, .link_index = a->index, .session_id = a->session_id,
			       .slot = -1};
	memcpy(h.key, a->key.data, RM_ATTACH_KEY_LEN);
	pid_t pid = 0;
	int slot = -1;
	rm_registry_lock();
	for (int i = 0; i < RM_MAX_CLIENTS && slot < 0; i++) {
		const struct rm_client_record *c = &rm_registry()->clients[i];
		if (c->in_use && c->session_id == a->session_id)
			pid = c->worker, slot = i;
	}
	rm_registry_unlock();
	int key_ok = rm_attach_key_matches(slot, a->session_id, h.key); /* compared even for no slot */
	int err = !key_ok ? (slot < 0 ? -ESRCH : -EACCES) : rm_workers_attach(pid, g->conn, &h);
	if (err) {
		const char *why = err == -ESRCH ? "no such session" : err == -EACCES ? "wrong key"
				: err == -ESHUTDOWN ? "the daemon is stopping" : strerror(-err);
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: copy link for session %llu refused (%s)", peer,
			       (unsigned long long)a->session_id, why);
		/* A wrong key of a live session is a guess; an unknown session is most often one
		 * that just ended (its links attach late, or its worker refused it), and slowing
		 * its address down would slow every client behind it (a NAT, one host). */
		if (err == -EACCES)
			rm_auth_failed(g->conn, "an attach with a wrong key");
		struct rm_frame rf = {.magic = RM_WIRE_MAGIC, .op = RM_OP_ATTACH, .seq = f->seq, .flags = RM_F_REPLY,
				      .result = CUDA_ERROR_NOT_PERMITTED};
		rm_link_send(link, &rf, NULL, NULL, 0);
	}
out:
	if (a)
		remora__attach__free_unpacked(a, NULL);
}

/* remora status: who asks decides what it sees (admin.h); a request without an
 * acceptable credential is refused. */
static void answer_status(struct rm_link *link, const struct rm_frame *f, struct greeting *g)
{
	const struct rm_daemon_config *cfg = rm_server_config(); /* one configuration for the whole request */
	int view = rm_admin_status_view(link, f, cfg);
	if (settle(g))
		return;
	if (view == RM_VIEW_MALFORMED && rm_handshakes_log_allows(RM_REFUSAL_HELLO))
		rm_log(RM_LOG_WARN, "client %s: malformed status request; closing", rm_conn_peer(g->conn));
	else if (view == RM_VIEW_NONE)
		rm_admin_refuse_status(link, f);
	else
		rm_admin_answer_status(link, f, cfg, view);
}

/* The tenant a client moving in belongs to: asked for by the admin (its token, or its
 * certificate) on the source remorad's behalf, by the tenant's name. */
static const struct rm_tenant_config *migrating_tenant(const struct rm_daemon_config *cfg, struct rm_conn *conn,
						       const Remora__Hello *hello, int admin, char *why, size_t n)
{
	if (!admin && !(hello->credential.len == 0 && rm_auth_admin_certificate(cfg, conn))) {
		snprintf(why, n, "a client moving in must be brought with the admin's credential");
		return NULL;
	}
	const char *name = hello->tenant ? hello->tenant : "";
	for (int i = 0; i < cfg->ntenants; i++)
		if (!strcmp(cfg->tenants[i].name, name))
			return &cfg->tenants[i];
	if (!strcmp(name, cfg->anonymous.name) && cfg->allow_anonymous)
		return &cfg->anonymous;
	snprintf(why, n, "no tenant named %.64s here", name);
	return NULL;
}

/* Answers a move this process refuses (the worker answers one it tries). */
static void refuse_move(struct rm_link *link, uint64_t seq, CUresult r, const char *why)
{
	Remora__MigrateReply rep = REMORA__MIGRATE_REPLY__INIT;
	rep.error = (char *)why;
	uint8_t buf[512];
	size_t len = remora__migrate_reply__get_packed_size(&rep);
	if (len > sizeof(buf))
		return;
	remora__migrate_reply__pack(&rep, buf);
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_MIGRATE, .seq = seq, .msg_len = (uint32_t)len,
			     .flags = RM_F_REPLY, .result = (int32_t)r};
	rm_link_send(link, &f, buf, NULL, 0);
}

/* remora migrate (docs/pool.md, "Live migration"): the admin's alone; handed to the worker
 * of the client's session, which answers once the client has moved or why not. */
static void migrate_client(struct rm_link *link, const struct rm_frame *f, struct greeting *g)
{
	const struct rm_daemon_config *cfg = rm_server_config();
	uint8_t msg[1024];
	char why[200] = "";
	int admin = 0;
	Remora__MigrateRequest *m = NULL;
	if (f->bulk_len || f->msg_len > sizeof(msg) || rm_link_read(link, msg, f->msg_len) ||
	    !(m = remora__migrate_request__unpack(NULL, f->msg_len, msg))) {
		if (!settle(g) && rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: malformed migrate request; closing", rm_conn_peer(g->conn));
		goto out;
	}
	if (m->credential.len)
		rm_auth_tenant(cfg, g->conn, m->credential.data, m->credential.len, why, sizeof(why), &admin);
	else
		admin = rm_auth_admin_certificate(cfg, g->conn);
	if (settle(g))
		goto out;
	if (!admin) {
		refuse_move(link, f->seq, CUDA_ERROR_NOT_PERMITTED, "moving a client is the admin's");
		goto out;
	}
	if (!m->target || !*m->target || strlen(m->target) >= sizeof(((struct rm_handoff *)0)->migrate_to) ||
	    m->credential.len > sizeof(((struct rm_handoff *)0)->credential)) {
		refuse_move(link, f->seq, CUDA_ERROR_INVALID_VALUE, "no target, or one too long");
		goto out;
	}
	struct rm_handoff h = {.attach = 1, .migrate = 1, .slot = -1, .wait_s = m->wait_s > 3600 ? 3600 : m->wait_s,
			       .credential_len = (uint32_t)m->credential.len};
	snprintf(h.migrate_to, sizeof(h.migrate_to), "%s", m->target);
	memcpy(h.credential, m->credential.data, m->credential.len);
	pid_t worker = 0;
	rm_registry_lock();
	for (int i = 0; i < RM_MAX_CLIENTS && !worker; i++) {
		const struct rm_client_record *c = &rm_registry()->clients[i];
		if (c->in_use && c->worker && (m->session_id ? c->session_id == m->session_id : c->pid == m->pid))
			worker = c->worker, h.session_id = c->session_id;
	}
	rm_registry_unlock();
	int err = worker ? rm_workers_attach(worker, g->conn, &h) : -ESRCH;
	explicit_bzero(h.credential, sizeof(h.credential));
	if (err)
		refuse_move(link, f->seq, CUDA_ERROR_NOT_FOUND,
			    err == -ESRCH ? "no such client here" : err == -ESHUTDOWN ? "the daemon is stopping" : strerror(-err));
out:
	if (m) {
		if (m->credential.len)
			explicit_bzero(m->credential.data, m->credential.len);
		remora__migrate_request__free_unpacked(m, NULL);
	}
	explicit_bzero(msg, sizeof(msg));
}

static void *greet(void *arg)
{
	struct greeting *g = arg;
	struct rm_link link;
	if (rm_link_init(&link, g->conn)) {
		rm_conn_close(g->conn);
		free(g);
		return NULL;
	}
	const char *peer = rm_conn_peer(g->conn);
	struct rm_frame f;
	uint8_t *msg = NULL;
	Remora__Hello *hello = NULL;
	/* Reads end at the handshake's deadline (handshakes.h); what this thread writes (a
	 * refusal, a status) ends within as long, also once the handshake is settled: a peer
	 * that reads nothing (over unix:, a reply ring that looks full) holds it no longer. */
	int err = rm_conn_set_liveness(g->conn, 0, rm_server_config()->hello_timeout_s * 1000);
	if (!err)
		err = rm_link_read_frame(&link, &f);
	if (!err && f.op == RM_OP_STATUS) {
		answer_status(&link, &f, g);
		goto out;
	}
	if (!err && f.op == RM_OP_MIGRATE) {
		migrate_client(&link, &f, g);
		goto out;
	}
	if (!err && f.op == RM_OP_ATTACH) {
		attach_link(&link, &f, g);
		goto out;
	}
	if (err || f.op != RM_OP_HELLO || f.bulk_len) {
		if (!settle(g) && rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: no valid hello (%s); closing", peer,
			       err ? rm_transport_why(err) : "unexpected frame");
		goto out;
	}
	msg = malloc(f.msg_len ? f.msg_len : 1);
	if (!msg || rm_link_read(&link, msg, f.msg_len))
		goto out;
	hello = remora__hello__unpack(NULL, f.msg_len, msg);
	if (!hello) {
		settle(g);
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: malformed hello; closing", peer);
		goto out;
	}
	char cred_why[200] = "";
	/* Checked while the handshake's bounds still hold: a sender slowed down for failed
	 * credentials waits within them. */
	const struct rm_daemon_config *cfg = rm_server_config(); /* one configuration for the whole hello */
	int admin = 0;
	const struct rm_tenant_config *t = rm_auth_tenant(cfg, g->conn, hello->credential.data,
							  hello->credential.len, cred_why, sizeof(cred_why), &admin);
	if (hello->migrate_in) /* a client moving in (docs/pool.md): the admin, for a tenant of its naming */
		t = migrating_tenant(cfg, g->conn, hello, admin, cred_why, sizeof(cred_why));
	if (settle(g))
		goto out;
	char why[200] = "";
	CUresult r = CUDA_SUCCESS;
	struct rm_handoff h = {.tenant = -1, .hello_seq = (uint32_t)f.seq, .pid = hello->pid,
			       .heartbeat_ms = hello->heartbeat_ms, .migrate = hello->migrate_in};
	rm_text_escape(h.name, sizeof(h.name), hello->client_name ? hello->client_name : "?");
	uint64_t mask = 0;
	if (hello->protocol_version != RM_PROTOCOL_VERSION) {
		snprintf(why, sizeof(why), "protocol version mismatch (client %u, daemon %u)", hello->protocol_version,
			 RM_PROTOCOL_VERSION);
		r = CUDA_ERROR_NOT_SUPPORTED;
	} else if (!t) {
		snprintf(why, sizeof(why), "%s", cred_why);
		r = CUDA_ERROR_NOT_PERMITTED;
	} else if (link.rpos != link.rlen) {
		snprintf(why, sizeof(why), "requests sent before the hello was answered");
		r = CUDA_ERROR_INVALID_VALUE;
	} else if (visible_devices(hello, &h, &mask, why, sizeof(why))) {
		r = CUDA_ERROR_INVALID_DEVICE;
	} else {
		h.tenant = t == &cfg->anonymous ? -1 : (int)(t - cfg->tenants);
		snprintf(h.tenant_name, sizeof(h.tenant_name), "%s", t->name);
		h.slot = rm_registry_admit(h.tenant, mask, cfg->max_clients_per_gpu, why, sizeof(why));
		if (h.slot < 0) {
			r = CUDA_ERROR_DEVICE_UNAVAILABLE;
		} else if ((err = rm_attach_key_issue(h.slot, rm_registry()->clients[h.slot].session_id, h.key))) {
			snprintf(why, sizeof(why), "no attach key could be made: %s", strerror(-err));
			r = CUDA_ERROR_OPERATING_SYSTEM;
			rm_registry_leave(h.slot);
		}
	}
	if (r != CUDA_SUCCESS) {
		if (rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s (%s, pid %u) refused: %s", peer, h.name, h.pid, why);
		refuse(&link, f.seq, r, why);
		goto out;
	}
	struct rm_client_record *c = &rm_registry()->clients[h.slot];
	rm_registry_lock();
	snprintf(c->name, sizeof(c->name), "%s", h.name);
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->pid = h.pid;
	rm_registry_unlock();

	err = rm_workers_admit(g->conn, &h, t->name);
	if (err == -ESHUTDOWN) {
		rm_log(RM_LOG_INFO, "client %s (%s, pid %u) refused: the daemon is stopping", peer, h.name, h.pid);
		refuse(&link, f.seq, CUDA_ERROR_DEVICE_UNAVAILABLE, "the daemon is stopping");
		rm_registry_leave(h.slot);
	} else if (err == -EAGAIN) {
		rm_log(RM_LOG_ERROR, "client %s (%s, pid %u) refused: %d faulted workers still serve their clients",
		       peer, h.name, h.pid, RM_MAX_RETIRED_WORKERS);
		refuse(&link, f.seq, CUDA_ERROR_DEVICE_UNAVAILABLE,
		       "the tenant's worker faulted and too many faulted workers still serve their clients");
		rm_registry_leave(h.slot);
	} else if (err) {
		rm_log(RM_LOG_ERROR, "client %s: cannot hand it to a worker: %s", peer, strerror(-err));
		refuse(&link, f.seq, CUDA_ERROR_OPERATING_SYSTEM, "the daemon could not start serving it");
		rm_registry_leave(h.slot);
	}
out:
	settle(g);
	if (hello) {
		if (hello->credential.len)
			explicit_bzero(hello->credential.data, hello->credential.len);
		remora__hello__free_unpacked(hello, NULL);
	}
	if (msg && f.msg_len)
		explicit_bzero(msg, f.msg_len); /* the credential, as sent */
	free(msg);
	rm_link_close(&link); /* our copy only: the worker has its own descriptor */
	free(g);
	return NULL;
}

int rm_admission_begin(struct rm_conn *conn, struct rm_handshake *hs)
{
	struct greeting *g = malloc(sizeof(*g));
	if (!g)
		return -ENOMEM;
	*g = (struct greeting){conn, hs, 0};
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_t t;
	int err = -pthread_create(&t, &attr, greet, g);
	pthread_attr_destroy(&attr);
	if (err)
		free(g);
	return err;
}
