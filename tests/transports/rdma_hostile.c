/* rdma-hostile: the upgrade of an rdma:// connection (transport/rdma/rdma.c) against
 * clients that do not play along, on the emulated fabric (tests/fake_rdma):
 *   - a stranger who connects to the offered port with a wrong nonce is rejected, and the
 *     right client, connecting after it, gets in;
 *   - a malformed chunk on TCP after the upgrade fails the worker's next read at once,
 *     with -EPROTO;
 *   - a client that never connects fails it with -ETIMEDOUT within the upgrade's bound,
 *     while another connection upgrades beside it;
 *   - over RDMA, a read done with no offer out, a read offer of length 0, a read offer on a
 *     connection that did not agree to reads (-EPROTO each), and a read offer whose key
 *     names nothing (the worker's read fails: -ECONNRESET), each failing the worker's next
 *     read at once.
 * The misbehaving clients speak the transport's bytes themselves (rdma_wire.h) over TCP,
 * and over RDMA with a queue pair of their own.
 * Exits 0 when every case went as said. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rdma_wire.h"
#include "transport.h"
#include "verbs_api.h"

static const struct rm_transport *rdma;
static struct rm_listener *listener;
static char addr[96];
static int failures;

static void check(int ok, const char *what)
{
	printf("%s %s\n", ok ? "ok  " : "FAIL", what);
	if (!ok)
		failures++;
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* The server's side of one connection: accepted, handed over, adopted (the upgrade). */
struct server {
	pthread_t thread;
	struct rm_conn *conn;
	int err;
	double took_s;
};

static void *serve_one(void *arg)
{
	struct server *s = arg;
	struct rm_conn *c;
	if ((s->err = rdma->accept(listener, &c)))
		return NULL;
	uint8_t state[RM_TRANSPORT_STATE_MAX];
	size_t len = 0;
	int fd = rm_conn_export_fd(c, state, &len, NULL);
	if (fd < 0) {
		s->err = fd;
		rm_conn_close(c);
		return NULL;
	}
	int mine = dup(fd);
	rm_conn_close(c);
	double t0 = now_s();
	s->err = rdma->adopt_fd(mine, -1, state, len, &s->conn);
	s->took_s = now_s() - t0;
	if (s->err)
		close(mine);
	return NULL;
}

/* A client speaking TCP itself: dialled, and the offer read. */
static int raw_client(struct rm_conn **c, struct rm_rdma_offer *offer)
{
	int err = rm_transport_tcp.dial(addr, 2000, c);
	if (err)
		return err;
	uint8_t hdr[RM_RDMA_CHUNK_HEADER_LEN], raw[RM_RDMA_OFFER_LEN];
	struct rm_rdma_chunk ch;
	for (size_t got = 0; got < sizeof(hdr);) {
		ssize_t n = rm_conn_recv_some(*c, hdr + got, sizeof(hdr) - got);
		if (n < 0)
			return (int)n;
		got += (size_t)n;
	}
	if (rm_rdma_chunk_decode(hdr, &ch) || ch.type != RM_RDMA_UPGRADE)
		return -EPROTO;
	for (size_t got = 0; got < sizeof(raw);) {
		ssize_t n = rm_conn_recv_some(*c, raw + got, sizeof(raw) - got);
		if (n < 0)
			return (int)n;
		got += (size_t)n;
	}
	return rm_rdma_offer_decode(raw, sizeof(raw), offer);
}

/* Connects to the offered port with nonce; the CM event that ends the attempt. */
static int stranger_connect(const struct rm_verbs_api *v, uint16_t port, const uint8_t *nonce)
{
	struct rdma_event_channel *ch = v->create_event_channel();
	struct rdma_cm_id *id = NULL;
	int result = -1;
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(port)};
	inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
	struct rdma_cm_event *e;
	if (!ch || v->create_id(ch, &id, NULL, RDMA_PS_TCP) || v->resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) ||
	    v->get_cm_event(ch, &e))
		goto out;
	v->ack_cm_event(e);
	if (v->resolve_route(id, 2000) || v->get_cm_event(ch, &e))
		goto out;
	v->ack_cm_event(e);
	struct ibv_pd *pd = v->alloc_pd(id->verbs);
	struct ibv_cq *cq = pd ? v->create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
	struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .cap = {1, 1, 1, 1, 0}, .qp_type = IBV_QPT_RC};
	uint8_t pdata[RM_RDMA_ANSWER_LEN];
	struct rm_rdma_answer a = {.geometry = {16, 65536}};
	memcpy(a.nonce, nonce, RM_RDMA_NONCE_LEN);
	rm_rdma_answer_encode(pdata, &a);
	struct rdma_conn_param param = {.private_data = pdata, .private_data_len = sizeof(pdata)};
	if (cq && !v->create_qp(id, pd, &qa) && !v->connect(id, &param) && !v->get_cm_event(ch, &e)) {
		result = e->event;
		v->ack_cm_event(e);
	}
	if (id->qp)
		v->destroy_qp(id);
	if (cq)
		v->destroy_cq(cq);
	if (pd)
		v->dealloc_pd(pd);
out:
	if (id)
		v->destroy_id(id);
	if (ch)
		v->destroy_event_channel(ch);
	return result;
}

/* A client with a queue pair of its own, connected with the nonce (its answer naming
 * features), its SWITCH sent on TCP; then one message of its making over RDMA. The worker's
 * next read must fail at once with want (what the worker said is checked by the caller). */
static void hostile_message(const struct rm_verbs_api *v, uint32_t features, const struct rm_rdma_msg *m,
			    const struct rm_rdma_read_offer *ro, int want, const char *what)
{
	struct server s = {0};
	pthread_create(&s.thread, NULL, serve_one, &s);
	struct rm_conn *c;
	struct rm_rdma_offer offer;
	int err = raw_client(&c, &offer);
	struct rdma_event_channel *ch = err ? NULL : v->create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct ibv_pd *pd = NULL;
	struct ibv_cq *cq = NULL;
	struct ibv_mr *mr = NULL;
	static uint8_t buf[64];
	struct sockaddr_in dst = {.sin_family = AF_INET, .sin_port = htons(offer.port)};
	inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
	struct rdma_cm_event *e;
	int connected = 0;
	if (ch && !v->create_id(ch, &id, NULL, RDMA_PS_TCP) && !v->resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) &&
	    !v->get_cm_event(ch, &e)) {
		v->ack_cm_event(e);
		if (!v->resolve_route(id, 2000) && !v->get_cm_event(ch, &e)) {
			v->ack_cm_event(e);
			pd = v->alloc_pd(id->verbs);
			cq = pd ? v->create_cq(id->verbs, 4, NULL, NULL, 0) : NULL;
			mr = pd ? v->reg_mr(pd, buf, sizeof(buf), IBV_ACCESS_LOCAL_WRITE) : NULL;
			struct ibv_qp_init_attr qa = {.send_cq = cq, .recv_cq = cq, .cap = {2, 2, 1, 1, 0}, .qp_type = IBV_QPT_RC};
			uint8_t pdata[RM_RDMA_ANSWER_LEN];
			struct rm_rdma_answer a = {.geometry = {16, 65536}, .features = features};
			memcpy(a.nonce, offer.nonce, RM_RDMA_NONCE_LEN);
			rm_rdma_answer_encode(pdata, &a);
			struct rdma_conn_param param = {.private_data = pdata, .private_data_len = sizeof(pdata),
							.initiator_depth = 1, .responder_resources = 1};
			if (mr && cq && !v->create_qp(id, pd, &qa) && !v->connect(id, &param) && !v->get_cm_event(ch, &e)) {
				connected = e->event == RDMA_CM_EVENT_ESTABLISHED;
				v->ack_cm_event(e);
			}
		}
	}
	pthread_join(s.thread, NULL);
	ssize_t n = 1;
	double took = 0;
	if (connected && !s.err) {
		uint8_t sw[RM_RDMA_CHUNK_HEADER_LEN];
		rm_rdma_chunk_encode(sw, RM_RDMA_SWITCH, 0);
		struct iovec iv = {sw, sizeof(sw)};
		rm_conn_sendv(c, &iv, 1);
		rm_rdma_msg_encode(buf, m);
		if (ro)
			rm_rdma_read_offer_encode(buf + RM_RDMA_MSG_HEADER_LEN, ro);
		struct ibv_sge sge = {(uintptr_t)buf, RM_RDMA_MSG_HEADER_LEN + m->len, mr->lkey};
		struct ibv_send_wr wr = {.sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
				   *bad;
		ibv_post_send(id->qp, &wr, &bad);
		uint8_t byte;
		double t0 = now_s();
		rm_conn_set_liveness(s.conn, 3000, 0); /* a message let through: -ETIMEDOUT, not a hang */
		n = rm_conn_recv_some(s.conn, &byte, 1);
		took = now_s() - t0;
	}
	check(connected && !s.err && n == want && took < 5, what);
	if (s.conn)
		rm_conn_close(s.conn);
	if (id && id->qp)
		v->destroy_qp(id);
	if (mr)
		v->dereg_mr(mr);
	if (cq)
		v->destroy_cq(cq);
	if (pd)
		v->dealloc_pd(pd);
	if (id)
		v->destroy_id(id);
	if (ch)
		v->destroy_event_channel(ch);
	if (!err)
		rm_conn_close(c);
}

static void *send_42_once_adopted(void *arg)
{
	struct server *s = arg;
	serve_one(s);
	uint8_t byte = 42;
	struct iovec v = {&byte, 1};
	if (!s->err)
		s->err = rm_conn_sendv(s->conn, &v, 1);
	return NULL;
}

int main(void)
{
	char why[300];
	const struct rm_verbs_api *v = rm_verbs_api(why, sizeof(why));
	const char *a;
	rdma = rm_transport_for("rdma://127.0.0.1:0", &a);
	if (!v || !rdma || rdma->listen(a, &listener) || rdma->listener_addr(listener, addr, sizeof(addr))) {
		fprintf(stderr, "rdma-hostile: no rdma transport to test: %s\n", v ? rm_transport_last_why() : why);
		return 1;
	}

	/* A stranger with a wrong nonce, then the client with the right one. */
	struct server s = {0};
	pthread_create(&s.thread, NULL, serve_one, &s);
	struct rm_conn *c;
	struct rm_rdma_offer offer;
	int err = raw_client(&c, &offer);
	check(!err, "the offer comes first, well-formed");
	uint8_t wrong[RM_RDMA_NONCE_LEN];
	memcpy(wrong, offer.nonce, sizeof(wrong));
	wrong[3] ^= 1;
	check(!err && stranger_connect(v, offer.port, wrong) == RDMA_CM_EVENT_REJECTED,
	      "a connect with a wrong nonce is rejected");
	check(!err && stranger_connect(v, offer.port, offer.nonce) == RDMA_CM_EVENT_ESTABLISHED,
	      "the connect with the right nonce is accepted after it");
	pthread_join(s.thread, NULL);
	check(s.err == 0, "and the upgrade completes");
	if (!err && !s.err) { /* a malformed chunk where the worker reads the client's TCP bytes */
		uint8_t bad[RM_RDMA_CHUNK_HEADER_LEN] = {9, 0, 0, 0, 1, 0, 0, 0};
		struct iovec iv = {bad, sizeof(bad)};
		rm_conn_sendv(c, &iv, 1);
		uint8_t byte;
		double t0 = now_s();
		ssize_t n = rm_conn_recv_some(s.conn, &byte, 1);
		check(n == -EPROTO && now_s() - t0 < 5, "a malformed chunk fails the worker's read at once (-EPROTO)");
	}
	if (s.conn)
		rm_conn_close(s.conn);
	if (!err)
		rm_conn_close(c);

	/* A client that never connects, and a proper one beside it. */
	memset(&s, 0, sizeof(s));
	pthread_create(&s.thread, NULL, serve_one, &s);
	err = raw_client(&c, &offer);
	struct server other = {0};
	pthread_create(&other.thread, NULL, send_42_once_adopted, &other);
	struct rm_conn *good;
	int gerr = rdma->dial(addr, 2000, &good);
	uint8_t byte = 0;
	ssize_t n = gerr ? gerr : rm_conn_recv_some(good, &byte, 1);
	pthread_join(other.thread, NULL);
	check(!gerr && n == 1 && byte == 42 && !other.err, "another client upgrades while one stalls");
	if (!gerr)
		rm_conn_close(good);
	if (other.conn)
		rm_conn_close(other.conn);
	pthread_join(s.thread, NULL);
	check(!err && s.err == -ETIMEDOUT && s.took_s < 15, "a client that never connects is given up (-ETIMEDOUT)");
	printf("  (given up after %.1f s)\n", s.took_s);
	if (!err)
		rm_conn_close(c);

	/* Messages over RDMA that the worker must refuse. */
	struct rm_rdma_msg done = {.kind = RM_RDMA_MSG_READ_DONE};
	hostile_message(v, RM_RDMA_FEATURE_READS, &done, NULL, -EPROTO, "a read done with no offer out: -EPROTO");
	struct rm_rdma_msg offer_msg = {.len = RM_RDMA_READ_OFFER_LEN, .kind = RM_RDMA_MSG_READ_OFFER};
	struct rm_rdma_read_offer empty = {.addr = 4096, .rkey = 1, .len = 0};
	hostile_message(v, RM_RDMA_FEATURE_READS, &offer_msg, &empty, -EPROTO, "a read offer of length 0: -EPROTO");
	struct rm_rdma_read_offer nowhere = {.addr = 4096, .rkey = 0xdead, .len = 4096};
	hostile_message(v, 0, &offer_msg, &nowhere, -EPROTO, "a read offer without the feature agreed: -EPROTO");
	hostile_message(v, RM_RDMA_FEATURE_READS, &offer_msg, &nowhere, -ECONNRESET,
			"a read offer whose key names nothing: the worker's read fails (-ECONNRESET)");

	rdma->listener_close(listener);
	return failures ? 1 : 0;
}
