/* The fake rdma-core's own check, built against the real libraries and run on the fake
 * (LD_LIBRARY_PATH, REMORA_FAKE_RDMA_DIR): listen, connect with private data, accept;
 * SENDs of several sizes both ways, one with immediate data, some before their receive
 * is posted; sleep on the completion channel; disconnect with a flushed receive; 16
 * connections at once; a refused connect; a peer killed with SIGKILL. */
#include <arpa/inet.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define CHECK(cond)                                                                 \
	do {                                                                        \
		if (!(cond)) {                                                      \
			fprintf(stderr, "fake_rdma_selftest:%d: %s failed\n", __LINE__, #cond); \
			exit(1);                                                    \
		}                                                                   \
	} while (0)

#define SLOT (1u << 20)
#define SLOTS 6
static const uint32_t sizes[] = {1, 100, 4096, 65536, SLOT, 0};

/* The verbs objects of one end of a connection. */
struct end {
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	char *buf; /* SLOTS receive slots, then SLOTS send slots */
};

static void wait_fd(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	CHECK(poll(&p, 1, 10000) == 1); /* a hang fails the test */
}

/* The next event, which must be of type want; acked, its private data copied to pdata. */
static struct rdma_cm_id *expect(struct rdma_event_channel *ch, enum rdma_cm_event_type want, void *pdata,
				 struct rdma_cm_id **listen_id)
{
	struct rdma_cm_event *ev;
	wait_fd(ch->fd);
	CHECK(rdma_get_cm_event(ch, &ev) == 0);
	if (ev->event != want)
		fprintf(stderr, "got %s, want %s\n", rdma_event_str(ev->event), rdma_event_str(want));
	CHECK(ev->event == want);
	if (pdata) {
		CHECK(ev->param.conn.private_data_len >= 16);
		memcpy(pdata, ev->param.conn.private_data, 16);
	}
	if (listen_id)
		*listen_id = ev->listen_id;
	struct rdma_cm_id *id = ev->id;
	CHECK(rdma_ack_cm_event(ev) == 0);
	return id;
}

static void end_init(struct end *e, struct rdma_cm_id *id)
{
	e->id = id;
	CHECK(id->verbs);
	CHECK((e->pd = ibv_alloc_pd(id->verbs)));
	CHECK((e->cc = ibv_create_comp_channel(id->verbs)));
	CHECK((e->cq = ibv_create_cq(id->verbs, 64, e, e->cc, 0)));
	CHECK(ibv_req_notify_cq(e->cq, 0) == 0);
	CHECK((e->buf = calloc(2 * SLOTS, SLOT)));
	CHECK((e->mr = ibv_reg_mr(e->pd, e->buf, 2 * SLOTS * SLOT, IBV_ACCESS_LOCAL_WRITE)));
	struct ibv_qp_init_attr qa = {.send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 2, .max_recv_sge = 2}};
	CHECK(rdma_create_qp(id, e->pd, &qa) == 0);
}

static void end_fini(struct end *e)
{
	rdma_destroy_qp(e->id);
	CHECK(rdma_destroy_id(e->id) == 0);
	CHECK(ibv_dereg_mr(e->mr) == 0);
	CHECK(ibv_destroy_cq(e->cq) == 0);
	CHECK(ibv_destroy_comp_channel(e->cc) == 0);
	CHECK(ibv_dealloc_pd(e->pd) == 0);
	free(e->buf);
}

/* The next completion: poll, and sleep on the channel when there is none. */
static struct ibv_wc next_wc(struct end *e)
{
	struct ibv_wc wc;
	while (ibv_poll_cq(e->cq, 1, &wc) == 0) {
		struct ibv_cq *cq;
		void *ctx;
		wait_fd(e->cc->fd);
		CHECK(ibv_get_cq_event(e->cc, &cq, &ctx) == 0);
		CHECK(cq == e->cq && ctx == e);
		ibv_ack_cq_events(cq, 1);
		CHECK(ibv_req_notify_cq(cq, 0) == 0);
	}
	return wc;
}

static void post_recv(struct end *e, int slot)
{
	/* Two pieces: the scatter list is filled in order. */
	struct ibv_sge sg[2] = {{(uintptr_t)e->buf + slot * SLOT, 100, e->mr->lkey},
				{(uintptr_t)e->buf + slot * SLOT + 100, SLOT - 100, e->mr->lkey}};
	struct ibv_recv_wr wr = {.wr_id = 100 + slot, .sg_list = sg, .num_sge = 2}, *bad;
	CHECK(ibv_post_recv(e->id->qp, &wr, &bad) == 0);
}

static void post_send(struct end *e, int slot, uint32_t len, int seed)
{
	char *p = e->buf + (SLOTS + slot) * SLOT;
	for (uint32_t i = 0; i < len; i++)
		p[i] = (char)(i * 7 + seed);
	struct ibv_sge sg = {(uintptr_t)p, len, e->mr->lkey};
	struct ibv_send_wr wr = {.wr_id = 200 + slot, .sg_list = &sg, .num_sge = 1, .send_flags = IBV_SEND_SIGNALED,
				 .opcode = slot == 2 ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND, .imm_data = htonl(0xabcd)};
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(e->id->qp, &wr, &bad) == 0);
}

/* n SENDs a->b of sizes[], a's send completions in order, b's receives in order and exact.
 * Receives are posted after the sends when late (they wait, as under RNR retry). */
static void exchange(struct end *a, struct end *b, int n, int seed, int late)
{
	for (int i = 0; i < n && !late; i++)
		post_recv(b, i);
	for (int i = 0; i < n; i++)
		post_send(a, i, sizes[i], seed + i);
	for (int i = 0; i < n && late; i++)
		post_recv(b, i);
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc = next_wc(a);
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 200u + i);
	}
	for (int i = 0; i < n; i++) {
		struct ibv_wc wc = next_wc(b);
		if (wc.status != IBV_WC_SUCCESS)
			fprintf(stderr, "receive %d: %s\n", i, ibv_wc_status_str(wc.status));
		CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 100u + i);
		CHECK(wc.byte_len == sizes[i] && wc.qp_num == b->id->qp->qp_num);
		CHECK(i == 2 ? (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0xabcd)
			     : !(wc.wc_flags & IBV_WC_WITH_IMM));
		for (uint32_t k = 0; k < sizes[i]; k++)
			CHECK(b->buf[i * SLOT + k] == (char)(k * 7 + seed + i));
	}
}

static struct sockaddr_in loopback(uint16_t port_be)
{
	struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = port_be};
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	return sin;
}

/* A connector's id, its QP made, its connect sent; the request seen by the listener when lch. */
static struct rdma_cm_id *dial(struct rdma_event_channel *ch, uint16_t port_be, struct end *e, const char *hello)
{
	struct rdma_cm_id *id;
	CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0);
	struct sockaddr_in dst = loopback(port_be);
	CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0);
	CHECK(expect(ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL) == id);
	CHECK(rdma_resolve_route(id, 2000) == 0);
	CHECK(expect(ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL) == id);
	if (e)
		end_init(e, id);
	struct rdma_conn_param cp = {.private_data = hello, .private_data_len = 16, .retry_count = 7};
	CHECK(rdma_connect(id, &cp) == 0);
	return id;
}

/* The listener's side of a dial: the request with its private data, accepted. */
static void answer(struct rdma_event_channel *lch, struct rdma_cm_id *listener, struct end *s, const char *hello)
{
	char got[16];
	struct rdma_cm_id *lid;
	struct rdma_cm_id *id = expect(lch, RDMA_CM_EVENT_CONNECT_REQUEST, got, &lid);
	CHECK(lid == listener && id->context == listener->context && memcmp(got, hello, 16) == 0);
	end_init(s, id);
	struct rdma_conn_param cp = {.private_data = "welcome, peer!!", .private_data_len = 16};
	CHECK(rdma_accept(id, &cp) == 0);
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	struct rdma_event_channel *lch = rdma_create_event_channel(), *ch = rdma_create_event_channel();
	CHECK(lch && ch);
	struct rdma_cm_id *listener;
	static int marker;
	CHECK(rdma_create_id(lch, &listener, &marker, RDMA_PS_TCP) == 0);
	struct sockaddr_in any = {.sin_family = AF_INET};
	CHECK(rdma_bind_addr(listener, (struct sockaddr *)&any) == 0);
	CHECK(rdma_listen(listener, 64) == 0);
	uint16_t port = rdma_get_src_port(listener);
	CHECK(ntohs(port) >= 20000);

	/* One connection, both ends in this thread. */
	struct end c, s;
	dial(ch, port, &c, "hello, listener");
	answer(lch, listener, &s, "hello, listener");
	char welcome[16];
	CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, welcome, NULL) == c.id);
	CHECK(strcmp(welcome, "welcome, peer!!") == 0);
	CHECK(expect(lch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == s.id);
	CHECK(rdma_get_dst_port(c.id) == port && rdma_get_src_port(s.id) == port);
	exchange(&c, &s, 5, 1, 0);
	exchange(&s, &c, 5, 2, 1);
	exchange(&c, &s, 6, 3, 1);
	post_recv(&s, 5);
	post_recv(&c, 5);
	CHECK(rdma_disconnect(c.id) == 0);
	CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == c.id);
	CHECK(expect(lch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == s.id);
	struct ibv_wc wc = next_wc(&s);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 105);
	wc = next_wc(&c);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 105);
	post_send(&c, 0, 10, 0); /* after the error: flushed too */
	wc = next_wc(&c);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 200);
	end_fini(&c);
	end_fini(&s);

	/* 16 connections at once, each with its own message. */
	enum { N = 16 };
	static struct end cs[N], ss[N];
	for (int i = 0; i < N; i++) {
		dial(ch, port, &cs[i], "hello, listener");
		answer(lch, listener, &ss[i], "hello, listener");
		CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == cs[i].id);
		CHECK(expect(lch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == ss[i].id);
	}
	for (int i = 0; i < N; i++)
		exchange(&cs[i], &ss[i], 3, 10 + i, i & 1);
	for (int i = 0; i < N; i++) {
		CHECK(rdma_disconnect(ss[i].id) == 0);
		CHECK(expect(lch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == ss[i].id);
		CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == cs[i].id);
		end_fini(&cs[i]);
		end_fini(&ss[i]);
	}

	/* Nobody listens on port 1: refused. */
	struct rdma_cm_id *lone = dial(ch, htons(1), NULL, "anyone there?..");
	CHECK(expect(ch, RDMA_CM_EVENT_REJECTED, NULL, NULL) == lone);
	CHECK(rdma_destroy_id(lone) == 0);

	/* A child connects, sends, and is killed: DISCONNECTED and a flushed receive here. */
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rdma_event_channel *cch = rdma_create_event_channel();
		CHECK(cch);
		dial(cch, port, &c, "hello from child");
		CHECK(expect(cch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == c.id);
		post_send(&c, 0, 4096, 9);
		for (;;)
			pause();
	}
	answer(lch, listener, &s, "hello from child");
	post_recv(&s, 0);
	post_recv(&s, 1);
	CHECK(expect(lch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == s.id);
	wc = next_wc(&s);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 4096 && s.buf[4095] == (char)(4095 * 7 + 9));
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, NULL, 0) == pid);
	CHECK(expect(lch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == s.id);
	wc = next_wc(&s);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 101);
	end_fini(&s);

	CHECK(rdma_destroy_id(listener) == 0);
	rdma_destroy_event_channel(ch);
	rdma_destroy_event_channel(lch);
	printf("fake rdma selftest: ok\n");
	return 0;
}
