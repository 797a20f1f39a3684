/* Fuzz target `status_request`: a status request as remorad's accepting process takes it
 * (backend/daemon/admission.c, answer_status): the message after an RM_OP_STATUS header, read and
 * judged by rm_admin_status_view, then answered by rm_admin_answer_status or refused, on
 * a connection of this file's that reads the input and keeps what is sent.
 *
 * The daemon here has tenants alpha (token "alpha-token") and beta (certificate only),
 * the admin token "admin-token" and the admin certificate "ops", and a registry holding
 * two clients of alpha, one of beta, one anonymous and one of beta's finished. Input:
 * byte 0 picks the daemon and the connection (bit 0: allow_anonymous; bits 1-2: the
 * certificate the connection verified: none, "beta", "ops" or "gamma", a name of no
 * tenant); the rest is the request's message. Who asks must be what the credential, or
 * else the certificate, says, and nothing else; a request that does not unpack is
 * malformed; a refusal is CUDA_ERROR_NOT_PERMITTED with nothing after it; an answer's
 * StatusReply holds exactly the clients and finished clients that one may see. */
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin.h"
#include "config.h"
#include "driver_table.h"
#include "link.h"
#include "log.h"
#include "registry.h"
#include "remora.pb-c.h"
#include "wire.h"

/* ---- A connection that reads the input and keeps what is sent ---- */

struct input_conn {
	struct rm_conn base;
	const uint8_t *in;
	size_t in_len, in_pos;
	uint8_t *out;
	size_t out_len, out_cap;
	char peer[32];
	const char *identity;
};

static int input_sendv(struct rm_conn *c, const struct iovec *iov, int iovcnt)
{
	struct input_conn *ic = (struct input_conn *)c;
	for (int i = 0; i < iovcnt; i++) {
		if (ic->out_len + iov[i].iov_len > ic->out_cap) {
			size_t cap = (ic->out_len + iov[i].iov_len) * 2;
			uint8_t *p = realloc(ic->out, cap);
			if (!p)
				abort();
			ic->out = p;
			ic->out_cap = cap;
		}
		memcpy(ic->out + ic->out_len, iov[i].iov_base, iov[i].iov_len);
		ic->out_len += iov[i].iov_len;
	}
	return 0;
}

static ssize_t input_recv_some(struct rm_conn *c, void *buf, size_t len)
{
	struct input_conn *ic = (struct input_conn *)c;
	size_t n = ic->in_len - ic->in_pos < len ? ic->in_len - ic->in_pos : len;
	if (!n)
		return -ECONNRESET;
	memcpy(buf, ic->in + ic->in_pos, n);
	ic->in_pos += n;
	return (ssize_t)n;
}

static void input_shutdown(struct rm_conn *c) { (void)c; }
static const char *input_peer(struct rm_conn *c) { return ((struct input_conn *)c)->peer; }
static void input_close(struct rm_conn *c) { (void)c; }
static const char *input_identity(struct rm_conn *c) { return ((struct input_conn *)c)->identity; }

static const struct rm_transport input_transport = {
	.scheme = "fuzz",
	.sendv = input_sendv,
	.recv_some = input_recv_some,
	.shutdown = input_shutdown,
	.peer = input_peer,
	.close = input_close,
	.identity = input_identity,
};

/* ---- The daemon ---- */

#define ALPHA 0
#define BETA 1
#define ANONYMOUS (-1)

static struct rm_daemon_config configs[2]; /* [allow_anonymous] */
static const char *const certificates[4] = {NULL, "beta", "ops", "gamma"};

static CUresult driver_version(int *v)
{
	*v = 13000;
	return CUDA_SUCCESS;
}

static void admit(int tenant, const char *name)
{
	char why[200];
	int slot = rm_registry_admit(tenant, 1, 0, why, sizeof(why));
	if (slot < 0)
		abort();
	snprintf(rm_registry()->clients[slot].name, sizeof(rm_registry()->clients[slot].name), "%s", name);
	if (!strcmp(name, "finished"))
		rm_registry_leave(slot);
}

static void setup(void)
{
	if (!getenv("REMORA_LOG")) /* a refusal's line, for most inputs: quiet unless asked */
		rm_log_level = -1;
	for (int anon = 0; anon < 2; anon++) {
		struct rm_daemon_config *c = &configs[anon];
		rm_config_defaults(c);
		c->allow_anonymous = anon;
		c->ntenants = 2;
		snprintf(c->tenants[ALPHA].name, sizeof(c->tenants[ALPHA].name), "alpha");
		snprintf(c->tenants[ALPHA].token, sizeof(c->tenants[ALPHA].token), "alpha-token");
		snprintf(c->tenants[BETA].name, sizeof(c->tenants[BETA].name), "beta");
		snprintf(c->admin_token, sizeof(c->admin_token), "admin-token");
		snprintf(c->admin_cn, sizeof(c->admin_cn), "ops");
	}
	if (rm_registry_create() < 0)
		abort();
	rm_registry()->ngpus = 1;
	snprintf(rm_registry()->gpus[0].name, sizeof(rm_registry()->gpus[0].name), "test GPU");
	admit(ALPHA, "alpha-1");
	admit(ALPHA, "alpha-2");
	admit(BETA, "beta-1");
	admit(BETA, "finished");
	admit(ANONYMOUS, "anonymous-1");
	rm_drv.cuDriverGetVersion = driver_version;
}

/* Who asks, as docs/security.md says: the credential if one came, else the certificate. */
static int expected_view(const struct rm_daemon_config *c, const ProtobufCBinaryData *cred, const char *cert)
{
	if (cred->len)
		return cred->len == 11 && !memcmp(cred->data, "admin-token", 11) ? RM_VIEW_ALL
		       : cred->len == 11 && !memcmp(cred->data, "alpha-token", 11) ? ALPHA
										   : RM_VIEW_NONE;
	if (cert)
		return !strcmp(cert, "ops") ? RM_VIEW_ALL : !strcmp(cert, "beta") ? BETA : RM_VIEW_NONE;
	return c->allow_anonymous ? ANONYMOUS : RM_VIEW_NONE;
}

/* How many of the registry's clients (finished: its history) view may see. */
static size_t visible(int view, int finished)
{
	static const int live[] = {ALPHA, ALPHA, BETA, ANONYMOUS}, gone[] = {BETA};
	const int *t = finished ? gone : live;
	size_t n = finished ? 1 : 4, k = 0;
	for (size_t i = 0; i < n; i++)
		k += view == RM_VIEW_ALL || t[i] == view;
	return k;
}

static void check_tenant(const struct rm_daemon_config *c, int view, const char *name)
{
	if (view != RM_VIEW_ALL && strcmp(name, view == ANONYMOUS ? "anonymous" : c->tenants[view].name))
		abort();
}

static void check_answer(const struct rm_daemon_config *c, int view, const uint8_t *out, size_t len)
{
	struct rm_frame f;
	if (len < RM_FRAME_LEN || rm_frame_decode(out, &f) || f.op != RM_OP_STATUS || !(f.flags & RM_F_REPLY) ||
	    f.seq != 7 || f.bulk_len || RM_FRAME_LEN + (size_t)f.msg_len != len)
		abort();
	if (view == RM_VIEW_NONE) {
		if (f.result != CUDA_ERROR_NOT_PERMITTED || f.msg_len)
			abort();
		return;
	}
	Remora__StatusReply *r = remora__status_reply__unpack(NULL, f.msg_len, out + RM_FRAME_LEN);
	if (f.result != CUDA_SUCCESS || !r || r->n_clients != visible(view, 0) || r->n_history != visible(view, 1) ||
	    r->n_gpus != 1 || r->driver_version != 13000)
		abort();
	for (size_t i = 0; i < r->n_clients; i++)
		check_tenant(c, view, r->clients[i]->tenant);
	for (size_t i = 0; i < r->n_history; i++)
		check_tenant(c, view, r->history[i]->tenant);
	for (size_t i = 0; i < r->n_tenants; i++)
		check_tenant(c, view, r->tenants[i]->name);
	remora__status_reply__free_unpacked(r, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static unsigned calls;
	if (!calls++)
		setup();
	if (!size)
		return 0;
	const struct rm_daemon_config *c = &configs[data[0] & 1];
	const char *cert = certificates[data[0] >> 1 & 3];
	struct input_conn ic = {.base = {.tp = &input_transport}, .in = data + 1, .in_len = size - 1, .identity = cert};
	/* An address of its own each time: a refusal slows its address down (auth.h). */
	snprintf(ic.peer, sizeof(ic.peer), "10.%u.%u.%u:7700", calls >> 16 & 255, calls >> 8 & 255, calls & 255);
	struct rm_link link;
	if (rm_link_init(&link, &ic.base))
		abort();
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_STATUS, .seq = 7, .msg_len = (uint32_t)(size - 1)};
	int view = rm_admin_status_view(&link, &f, c);

	Remora__StatusRequest *req = size - 1 <= 512 ? remora__status_request__unpack(NULL, size - 1, data + 1) : NULL;
	if (!req) {
		if (view != RM_VIEW_MALFORMED)
			abort();
	} else {
		if (view != expected_view(c, &req->credential, cert))
			abort();
		if (view == RM_VIEW_NONE)
			rm_admin_refuse_status(&link, &f);
		else
			rm_admin_answer_status(&link, &f, c, view);
		check_answer(c, view, ic.out, ic.out_len);
		remora__status_request__free_unpacked(req, NULL);
	}
	rm_link_close(&link);
	free(ic.out);
	return 0;
}
