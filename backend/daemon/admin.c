/* remora status: a snapshot of the registry (GPUs, clients, memory per client), taken
 * under its lock and sent after it is released. */
#include "admin.h"

#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "driver_table.h"
#include "handshakes.h"
#include "log.h"
#include "pool_member.h"
#include "registry.h"
#include "snapshot.h"
#include "remora.pb-c.h"

static void fill_usage(Remora__StatusReply__Usage *m, const struct rm_usage *u)
{
	remora__status_reply__usage__init(m);
	m->n_calls = RM_CALL_KINDS;
	m->calls = (uint64_t *)u->calls;
	m->errors = u->errors;
	m->bytes_htod = u->bytes_htod;
	m->bytes_dtoh = u->bytes_dtoh;
	m->gpu_ns = u->gpu_ns;
	m->peak_bytes = u->peak_mem_bytes;
	m->queue_wait_ns = u->queue_wait_ns;
}

int rm_admin_status_view(struct rm_link *l, const struct rm_frame *f, const struct rm_daemon_config *cfg)
{
	uint8_t msg[512];
	Remora__StatusRequest *req = NULL;
	if (f->bulk_len || f->msg_len > sizeof(msg) || rm_link_read(l, msg, f->msg_len) ||
	    !(req = remora__status_request__unpack(NULL, f->msg_len, msg)))
		return RM_VIEW_MALFORMED;
	int view, admin;
	char why[200];
	if (!req->credential.len && rm_auth_admin_certificate(cfg, l->conn)) {
		view = RM_VIEW_ALL;
	} else {
		/* The admin token is checked as every credential is: one hash, in turn (auth.h). */
		const struct rm_tenant_config *t = rm_auth_tenant(cfg, l->conn, req->credential.data,
								  req->credential.len, why, sizeof(why), &admin);
		view = admin ? RM_VIEW_ALL : !t ? RM_VIEW_NONE : t == &cfg->anonymous ? -1 : (int)(t - cfg->tenants);
		if (!t && !admin && !req->credential.len && !rm_conn_identity(l->conn) && /* else rm_auth_tenant logged it */
		    rm_handshakes_log_allows(RM_REFUSAL_HELLO))
			rm_log(RM_LOG_WARN, "client %s: status refused: %s", rm_conn_peer(l->conn), why);
	}
	if (req->credential.len)
		explicit_bzero(req->credential.data, req->credential.len);
	remora__status_request__free_unpacked(req, NULL);
	explicit_bzero(msg, sizeof(msg));
	return view;
}

int rm_admin_refuse_status(struct rm_link *l, const struct rm_frame *f)
{
	struct rm_frame reply = {.magic = RM_WIRE_MAGIC, .op = RM_OP_STATUS, .seq = f->seq, .flags = RM_F_REPLY,
				 .result = CUDA_ERROR_NOT_PERMITTED};
	return rm_link_send(l, &reply, NULL, NULL, 0);
}

int rm_admin_answer_status(struct rm_link *l, const struct rm_frame *f, const struct rm_daemon_config *cfg,
			   int view)
{
	int err;
	struct rm_snapshot *s = malloc(sizeof(*s));
	Remora__StatusReply__Gpu *gpus = calloc(RM_MAX_GPUS, sizeof(*gpus));
	Remora__StatusReply__Gpu **gpu_ptrs = calloc(RM_MAX_GPUS, sizeof(*gpu_ptrs));
	Remora__StatusReply__Client *clients = calloc(RM_MAX_CLIENTS, sizeof(*clients));
	Remora__StatusReply__Client **client_ptrs = calloc(RM_MAX_CLIENTS, sizeof(*client_ptrs));
	/* Usage: one per client, tenant and finished client. */
	enum { NT = RM_CONFIG_MAX_TENANTS + 1, NU = RM_MAX_CLIENTS + NT + RM_HISTORY };
	Remora__StatusReply__Usage *usages = calloc(NU, sizeof(*usages));
	Remora__StatusReply__Tenant *tenants = calloc(NT, sizeof(*tenants));
	Remora__StatusReply__Tenant **tenant_ptrs = calloc(NT, sizeof(*tenant_ptrs));
	Remora__StatusReply__Finished *fin = calloc(RM_HISTORY, sizeof(*fin));
	Remora__StatusReply__Finished **fin_ptrs = calloc(RM_HISTORY, sizeof(*fin_ptrs));
	int nu = 0;
	uint8_t *buf = NULL;
	err = -ENOMEM;
	if (!s || !gpus || !gpu_ptrs || !clients || !client_ptrs || !usages || !tenants || !tenant_ptrs || !fin ||
	    !fin_ptrs)
		goto out;
	rm_snapshot_take(s);
	if (view != RM_VIEW_ALL) { /* a tenant sees its own clients only */
		int n = 0;
		for (int i = 0; i < s->nclients; i++)
			if (s->clients[i].tenant == view)
				s->clients[n++] = s->clients[i];
		s->nclients = n;
	}

	char host[128], address[256], membership[16];
	rm_pool_member_identity(host, sizeof(host), address, sizeof(address), membership, sizeof(membership));
	Remora__StatusReply rep = REMORA__STATUS_REPLY__INIT;
	rep.host = host;
	rep.address = address;
	rep.pool = membership;
	rep.draining = s->draining != 0;
	rm_drv_cuDriverGetVersion(&rep.driver_version);
	for (int i = 0; i < s->ngpus; i++) {
		Remora__StatusReply__Gpu *g = &gpus[i];
		remora__status_reply__gpu__init(g);
		g->index = (uint32_t)i;
		g->name = s->gpus[i].name;
		g->uuid = s->gpus[i].uuid;
		g->total_bytes = s->gpus[i].total_bytes;
		g->free_bytes = s->gpus[i].free_bytes;
		g->clients = (uint32_t)s->gpus[i].clients;
		gpu_ptrs[i] = g;
	}
	rep.n_gpus = (size_t)s->ngpus;
	rep.gpus = gpu_ptrs;
	for (int i = 0; i < s->nclients; i++) {
		const struct rm_client_record *r = &s->clients[i];
		Remora__StatusReply__Client *c = &clients[i];
		remora__status_reply__client__init(c);
		c->session_id = r->session_id;
		c->tenant = (char *)rm_tenant_name(cfg, r->tenant);
		c->usage = &usages[nu];
		fill_usage(&usages[nu++], &r->usage);
		c->memory_limit = rm_tenant_client_limit(cfg, r->tenant);
		c->name = (char *)r->name;
		c->peer = (char *)r->peer;
		c->pid = r->pid;
		c->gpu_mask = r->devices;
		c->mem_bytes = r->mem_bytes;
		c->since = r->since;
		client_ptrs[i] = c;
	}
	rep.n_clients = (size_t)s->nclients;
	rep.clients = client_ptrs;
	rep.n_call_kinds = RM_CALL_KINDS;
	rep.call_kinds = (char **)rm_call_kind_names;
	for (int slot = 0; slot < NT; slot++) {
		const struct rm_tenant_usage *u = &s->tenants[slot];
		if (!u->sessions)
			continue;
		int t = rm_tenant_of_slot(slot);
		if (view != RM_VIEW_ALL && t != view)
			continue;
		Remora__StatusReply__Tenant *m = &tenants[rep.n_tenants];
		remora__status_reply__tenant__init(m);
		m->name = (char *)rm_tenant_name(cfg, t);
		m->clients = (uint32_t)(u->clients > 0 ? u->clients : 0);
		m->sessions = u->sessions;
		m->mem_bytes = u->mem_bytes;
		m->memory_limit = rm_tenant_limit(cfg, t);
		m->usage = &usages[nu];
		fill_usage(&usages[nu++], &u->departed);
		tenant_ptrs[rep.n_tenants++] = m;
	}
	rep.tenants = tenant_ptrs;
	for (int i = 0; i < s->nhistory; i++) {
		const struct rm_client_history *h = &s->history[i];
		if (view != RM_VIEW_ALL && h->tenant != view)
			continue;
		Remora__StatusReply__Finished *m = &fin[rep.n_history];
		remora__status_reply__finished__init(m);
		m->session_id = h->session_id;
		m->tenant = (char *)rm_tenant_name(cfg, h->tenant);
		m->name = (char *)h->name;
		m->pid = h->pid;
		m->since = h->since;
		m->until = h->until;
		m->usage = &usages[nu];
		fill_usage(&usages[nu++], &h->usage);
		fin_ptrs[rep.n_history++] = m;
	}
	rep.history = fin_ptrs;

	size_t len = remora__status_reply__get_packed_size(&rep);
	if (len > RM_MAX_MSG_LEN || !(buf = malloc(len ? len : 1)))
		goto out;
	remora__status_reply__pack(&rep, buf);
	struct rm_frame reply = {.magic = RM_WIRE_MAGIC, .op = RM_OP_STATUS, .seq = f->seq,
				 .msg_len = (uint32_t)len, .flags = RM_F_REPLY};
	err = rm_link_send(l, &reply, buf, NULL, 0);
out:
	free(buf);
	free(fin_ptrs);
	free(fin);
	free(tenant_ptrs);
	free(tenants);
	free(usages);
	free(client_ptrs);
	free(clients);
	free(gpu_ptrs);
	free(gpus);
	free(s);
	return err;
}
