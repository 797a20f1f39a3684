/* remora status: a snapshot of the registry (GPUs, clients, memory per client), taken
 * under its lock and sent after it is released. */
#include "admin.h"

#include <cuda.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_table.h"
#include "pool_member.h"
#include "registry.h"
#include "remora.pb-c.h"

struct snapshot {
	int ngpus, nclients, draining;
	struct rm_gpu_record gpus[RM_MAX_GPUS];
	struct rm_client_record clients[RM_MAX_CLIENTS];
};

static void take(struct snapshot *s)
{
	struct rm_registry *reg = rm_registry();
	rm_registry_lock();
	s->ngpus = reg->ngpus;
	s->draining = reg->draining;
	memcpy(s->gpus, reg->gpus, sizeof(s->gpus));
	s->nclients = 0;
	for (int i = 0; i < RM_MAX_CLIENTS; i++)
		if (reg->clients[i].in_use)
			s->clients[s->nclients++] = reg->clients[i];
	rm_registry_unlock();
}

static const char *tenant_name(const struct rm_daemon_config *cfg, int t)
{
	return t >= 0 && t < cfg->ntenants ? cfg->tenants[t].name : cfg->anonymous.name;
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
	struct snapshot *s = malloc(sizeof(*s));
	Remora__StatusReply__Gpu *gpus = calloc(RM_MAX_GPUS, sizeof(*gpus));
	Remora__StatusReply__Gpu **gpu_ptrs = calloc(RM_MAX_GPUS, sizeof(*gpu_ptrs));
	Remora__StatusReply__Client *clients = calloc(RM_MAX_CLIENTS, sizeof(*clients));
	Remora__StatusReply__Client **client_ptrs = calloc(RM_MAX_CLIENTS, sizeof(*client_ptrs));
	uint8_t *buf = NULL;
	err = -ENOMEM;
	if (!s || !gpus || !gpu_ptrs || !clients || !client_ptrs)
		goto out;
	take(s);
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
	rm_drv.cuDriverGetVersion(&rep.driver_version);
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
		c->tenant = (char *)tenant_name(cfg, r->tenant);
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

	size_t len = remora__status_reply__get_packed_size(&rep);
	if (len > RM_MAX_MSG_LEN || !(buf = malloc(len ? len : 1)))
		goto out;
	remora__status_reply__pack(&rep, buf);
	struct rm_frame reply = {.magic = RM_WIRE_MAGIC, .op = RM_OP_STATUS, .seq = f->seq,
				 .msg_len = (uint32_t)len, .flags = RM_F_REPLY};
	err = rm_link_send(l, &reply, buf, NULL, 0);
out:
	free(buf);
	free(client_ptrs);
	free(clients);
	free(gpu_ptrs);
	free(gpus);
	free(s);
	return err;
}
