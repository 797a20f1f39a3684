/* The fake rdma-core's own check, built against the real libraries and run on the fake
 * (LD_LIBRARY_PATH, REMORA_FAKE_RDMA_DIR): listen, connect with private data, accept;
 * SENDs of several sizes both ways, one with immediate data, some before their receive
 * is posted; sleep on the completion channel; disconnect with a flushed receive; 16
 * connections at once; RDMA READ and WRITE (rdma_checks); a refused connect; a child
 * process's buffer, advertised in a SEND, read from here; a peer killed with SIGKILL. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
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
				      .cap = {.max_send_wr = 16, .max_recv_wr = 16, .max_send_sge = 3, .max_recv_sge = 2}};
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

/* ---- RDMA READ and WRITE ---- */

#define RLEN (4u << 20) /* a responder's buffer, which its peer reads or writes */
#define GAP 100         /* between the pieces of a scatter/gather list */

static char pat(uint64_t i, int seed) { return (char)(((i * 2654435761u) >> 11) + (uint64_t)seed); }

static void fill(char *p, uint64_t from, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = pat(from + i, seed);
}

/* Do p's n bytes hold the pattern from offset from? */
static int holds(const char *p, uint64_t from, size_t n, int seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != pat(from + i, seed))
			return 0;
	return 1;
}

static int all(const char *p, size_t n, char c)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != c)
			return 0;
	return 1;
}

/* len bytes as three pieces at base, GAP bytes apart (the first two empty when len < 3). */
static void split3(struct ibv_sge *sg, char *base, uint32_t len, uint32_t lkey)
{
	uint32_t sizes[3] = {len / 3, len / 3, len - 2 * (len / 3)};
	for (int j = 0; j < 3; j++) {
		sg[j] = (struct ibv_sge){(uintptr_t)base, sizes[j], lkey};
		base += sizes[j] + GAP;
	}
}

/* One READ or WRITE of e's (WITH_IMM: immediate 0x1234): the n local pieces sg, the
 * peer's range at raddr under rkey. */
static void post_rdma(struct end *e, enum ibv_wr_opcode opcode, uint64_t wr_id, int signaled, struct ibv_sge *sg,
		      int n, uint64_t raddr, uint32_t rkey)
{
	struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = sg, .num_sge = n, .opcode = opcode,
				 .send_flags = signaled ? IBV_SEND_SIGNALED : 0, .imm_data = htonl(0x1234),
				 .wr.rdma = {.remote_addr = raddr, .rkey = rkey}};
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(e->id->qp, &wr, &bad) == 0);
}

/* e's next completion, which must be a success of wr_id and op. */
static struct ibv_wc next_ok(struct end *e, uint64_t wr_id, enum ibv_wc_opcode op)
{
	struct ibv_wc wc = next_wc(e);
	if (wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id)
		fprintf(stderr, "wr %llu: %s, want wr %llu\n", (unsigned long long)wc.wr_id,
			ibv_wc_status_str(wc.status), (unsigned long long)wr_id);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id && wc.opcode == op && wc.qp_num == e->id->qp->qp_num);
	return wc;
}

/* READs of s's buffer by c, of 1 B, 4 KiB, 3 MiB (each scattered over three pieces) and 0 B;
 * a SEND behind the 3 MiB one completes after it. s's application sees only the SEND. */
static void rdma_reads(struct end *c, struct end *s)
{
	char *rbuf = malloc(RLEN);
	CHECK(rbuf);
	fill(rbuf, 0, RLEN, 5);
	struct ibv_mr *rmr = ibv_reg_mr(s->pd, rbuf, RLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	CHECK(rmr);
	memset(c->buf, 0x5a, SLOTS * SLOT); /* the receive half: where the READs land */
	static const uint32_t lens[] = {1, 4096, 3u << 20, 0};
	static const uint32_t roffs[] = {777, 8191, 12345, 99};
	static const uint32_t bases[] = {0, 65536, SLOT, 0};
	struct ibv_sge sg[4][3];
	post_recv(s, 0);
	for (int i = 0; i < 4; i++) {
		split3(sg[i], c->buf + bases[i], lens[i], c->mr->lkey);
		uint64_t raddr = (uintptr_t)rbuf + roffs[i];
		post_rdma(c, IBV_WR_RDMA_READ, 300 + i, 1, sg[i], lens[i] ? 3 : 0, raddr, rmr->rkey);
		if (i == 2)
			post_send(c, 0, 8, 3); /* wr 200 */
	}
	for (int i = 0; i < 4; i++) {
		if (i == 3)
			next_ok(c, 200, IBV_WC_SEND); /* in posting order, after the 3 MiB READ */
		struct ibv_wc wc = next_ok(c, 300 + i, IBV_WC_RDMA_READ);
		CHECK(wc.byte_len == lens[i]);
		uint64_t from = roffs[i];
		for (int j = 0; j < 3 && lens[i]; j++) { /* in place, in order, nothing in the gaps */
			char *p = (char *)(uintptr_t)sg[i][j].addr;
			CHECK(holds(p, from, sg[i][j].length, 5));
			CHECK(all(p + sg[i][j].length, GAP, 0x5a));
			from += sg[i][j].length;
		}
	}
	CHECK(c->buf[SLOT - 1] == 0x5a);
	struct ibv_wc wc = next_ok(s, 100, IBV_WC_RECV);
	CHECK(wc.byte_len == 8 && s->buf[7] == (char)(7 * 7 + 3));
	CHECK(ibv_poll_cq(s->cq, 1, &wc) == 0); /* no completion at the responder */
	CHECK(ibv_dereg_mr(rmr) == 0);
	free(rbuf);
}

/* WRITEs by c into s's buffer (three pieces unsignaled, 3 MiB, 0 B), then a SEND: when s
 * has the SEND the bytes are in place. A WRITE with immediate before s posts a receive:
 * the bytes land at once, the immediate waits for the receive. */
static void rdma_writes(struct end *c, struct end *s)
{
	char *rbuf = calloc(1, RLEN);
	CHECK(rbuf);
	CHECK(!ibv_reg_mr(s->pd, rbuf, RLEN, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL); /* not without LOCAL_WRITE */
	struct ibv_mr *rmr = ibv_reg_mr(s->pd, rbuf, RLEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	CHECK(rmr);
	struct ibv_sge a[3], b = {(uintptr_t)c->buf + SLOT, 3u << 20, c->mr->lkey};
	split3(a, c->buf, 65539, c->mr->lkey);
	for (int j = 0, from = 0; j < 3; from += (int)a[j].length, j++)
		fill((char *)(uintptr_t)a[j].addr, (uint64_t)from, a[j].length, 7);
	fill(c->buf + SLOT, 0, 3u << 20, 8);
	post_recv(s, 0);
	post_rdma(c, IBV_WR_RDMA_WRITE, 500, 0, a, 3, (uintptr_t)rbuf + 1000, rmr->rkey);
	post_rdma(c, IBV_WR_RDMA_WRITE, 501, 1, &b, 1, (uintptr_t)rbuf + 70000, rmr->rkey);
	post_rdma(c, IBV_WR_RDMA_WRITE, 502, 1, NULL, 0, (uintptr_t)rbuf + 5, rmr->rkey);
	post_send(c, 0, 100, 9); /* wr 200 */
	struct ibv_wc wc = next_ok(s, 100, IBV_WC_RECV);
	CHECK(wc.byte_len == 100);
	CHECK(all(rbuf, 1000, 0) && holds(rbuf + 1000, 0, 65539, 7) && all(rbuf + 66539, 70000 - 66539, 0));
	CHECK(holds(rbuf + 70000, 0, 3u << 20, 8) && all(rbuf + 70000 + (3u << 20), RLEN - 70000 - (3u << 20), 0));
	next_ok(c, 501, IBV_WC_RDMA_WRITE); /* 500, unsignaled, has none */
	next_ok(c, 502, IBV_WC_RDMA_WRITE);
	next_ok(c, 200, IBV_WC_SEND);

	char *src = c->buf + 5 * SLOT;
	fill(src, 0, 4096, 10);
	struct ibv_sge one = {(uintptr_t)src, 4096, c->mr->lkey};
	post_rdma(c, IBV_WR_RDMA_WRITE_WITH_IMM, 503, 1, &one, 1, (uintptr_t)rbuf + RLEN - 4096, rmr->rkey);
	next_ok(c, 503, IBV_WC_RDMA_WRITE);
	CHECK(holds(rbuf + RLEN - 4096, 0, 4096, 10));
	CHECK(ibv_poll_cq(s->cq, 1, &wc) == 0); /* the immediate waits for a receive */
	post_recv(s, 1);
	wc = next_ok(s, 101, IBV_WC_RECV_RDMA_WITH_IMM);
	CHECK(wc.byte_len == 4096 && (wc.wc_flags & IBV_WC_WITH_IMM) && wc.imm_data == htonl(0x1234));
	CHECK(ibv_poll_cq(s->cq, 1, &wc) == 0 && ibv_poll_cq(c->cq, 1, &wc) == 0);
	CHECK(ibv_dereg_mr(rmr) == 0);
	free(rbuf);
}

enum bad_op { WRONG_RKEY, FOREIGN_RKEY, NO_REMOTE_READ, NO_REMOTE_WRITE, PAST_END, WRAPS, NO_LOCAL_WRITE, BAD_OPS };

/* One bad READ or WRITE of c's fails; the READ and SEND posted behind it in the same list,
 * and a READ posted after its failure, flush. A remote error puts s's QP in error too (its
 * posted receive flushes); a local one is not sent. */
static void rdma_fails(struct end *c, struct end *s, enum bad_op kind)
{
	enum { LEN = 65536 };
	char *rbuf = calloc(2, LEN);
	CHECK(rbuf);
	const int lw = IBV_ACCESS_LOCAL_WRITE, rr = IBV_ACCESS_REMOTE_READ, rwr = IBV_ACCESS_REMOTE_WRITE;
	struct ibv_mr *rw = ibv_reg_mr(s->pd, rbuf, LEN, lw | rr | rwr);
	struct ibv_mr *ro = ibv_reg_mr(s->pd, rbuf + LEN, LEN / 2, lw | rr);             /* no REMOTE_WRITE */
	struct ibv_mr *wo = ibv_reg_mr(s->pd, rbuf + LEN + LEN / 2, LEN / 2, lw | rwr);  /* no REMOTE_READ */
	struct ibv_mr *cro = ibv_reg_mr(c->pd, c->buf + 2 * SLOT, LEN, 0);               /* c's, not writable */
	struct ibv_mr *crr = ibv_reg_mr(c->pd, c->buf + 3 * SLOT, LEN, lw | rr);         /* c's, readable */
	CHECK(rw && ro && wo && cro && crr);
	struct ibv_sge sg = {(uintptr_t)c->buf, 64, c->mr->lkey}, good = sg;
	struct ibv_sge msg = {(uintptr_t)c->buf + SLOT, 16, c->mr->lkey};
	struct ibv_send_wr w[3] = {
		{.wr_id = 600, .next = &w[1], .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		 .send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = (uintptr_t)rbuf, .rkey = rw->rkey}},
		{.wr_id = 601, .next = &w[2], .sg_list = &good, .num_sge = 1, .opcode = IBV_WR_RDMA_READ,
		 .send_flags = IBV_SEND_SIGNALED, .wr.rdma = {.remote_addr = (uintptr_t)rbuf, .rkey = rw->rkey}},
		{.wr_id = 602, .sg_list = &msg, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED},
	};
	enum ibv_wc_status want = IBV_WC_REM_ACCESS_ERR;
	switch (kind) {
	case WRONG_RKEY: /* no MR has it */
		w[0].wr.rdma.rkey = rw->rkey + 0x10000;
		break;
	case FOREIGN_RKEY: /* c's own, readable MR: of another PD than s's QP's */
		w[0].wr.rdma.remote_addr = (uintptr_t)crr->addr;
		w[0].wr.rdma.rkey = crr->rkey;
		break;
	case NO_REMOTE_READ:
		w[0].wr.rdma.remote_addr = (uintptr_t)wo->addr;
		w[0].wr.rdma.rkey = wo->rkey;
		break;
	case NO_REMOTE_WRITE:
		w[0].opcode = IBV_WR_RDMA_WRITE;
		w[0].wr.rdma.remote_addr = (uintptr_t)ro->addr;
		w[0].wr.rdma.rkey = ro->rkey;
		break;
	case PAST_END: /* starts inside, ends 10 bytes past */
		w[0].wr.rdma.remote_addr = (uintptr_t)rbuf + LEN - 54;
		break;
	case WRAPS: /* remote_addr + 64 wraps to 58: inside, if one added */
		w[0].wr.rdma.remote_addr = UINT64_MAX - 5;
		break;
	case NO_LOCAL_WRITE:
		sg = (struct ibv_sge){(uintptr_t)c->buf + 2 * SLOT, 64, cro->lkey};
		want = IBV_WC_LOC_PROT_ERR;
		break;
	default:
		CHECK(0);
	}
	post_recv(s, 0);
	struct ibv_send_wr *bad;
	CHECK(ibv_post_send(c->id->qp, w, &bad) == 0);
	struct ibv_wc wc = next_wc(c);
	if (wc.status != want)
		fprintf(stderr, "bad op %d: %s, want %s\n", kind, ibv_wc_status_str(wc.status),
			ibv_wc_status_str(want));
	CHECK(wc.wr_id == 600 && wc.status == want);
	for (int i = 1; i < 3; i++) {
		wc = next_wc(c);
		CHECK(wc.wr_id == 600u + i && wc.status == IBV_WC_WR_FLUSH_ERR);
	}
	post_rdma(c, IBV_WR_RDMA_READ, 603, 1, &good, 1, (uintptr_t)rbuf, rw->rkey);
	wc = next_wc(c);
	CHECK(wc.wr_id == 603 && wc.status == IBV_WC_WR_FLUSH_ERR);
	if (want == IBV_WC_LOC_PROT_ERR) {
		CHECK(ibv_poll_cq(s->cq, 1, &wc) == 0);
	} else {
		wc = next_wc(s);
		CHECK(wc.wr_id == 100 && wc.status == IBV_WC_WR_FLUSH_ERR);
	}
	struct ibv_mr *mrs[] = {crr, cro, wo, ro, rw};
	for (int i = 0; i < 5; i++)
		CHECK(ibv_dereg_mr(mrs[i]) == 0);
	free(rbuf);
}

/* s deregisters and frees a buffer c is reading: c gets the bytes as they were, or
 * REM_ACCESS_ERR; the fake never reads the freed memory (ASan would tell). */
static void rdma_dereg_race(struct end *c, struct end *s)
{
	for (int round = 0; round < 32; round++) {
		char *rbuf = malloc(SLOT);
		CHECK(rbuf);
		fill(rbuf, 0, SLOT, round);
		struct ibv_mr *mr = ibv_reg_mr(s->pd, rbuf, SLOT, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
		CHECK(mr);
		struct ibv_sge sg = {(uintptr_t)c->buf, SLOT, c->mr->lkey};
		post_rdma(c, IBV_WR_RDMA_READ, 700 + round, 1, &sg, 1, (uintptr_t)rbuf, mr->rkey);
		if (round & 1)
			usleep(100); /* now and then, let the peer serve it first */
		CHECK(ibv_dereg_mr(mr) == 0);
		memset(rbuf, 0xee, SLOT);
		free(rbuf);
		struct ibv_wc wc = next_wc(c);
		CHECK(wc.wr_id == 700u + round);
		CHECK((wc.status == IBV_WC_SUCCESS && holds(c->buf, 0, SLOT, round)) ||
		      wc.status == IBV_WC_REM_ACCESS_ERR);
		if (wc.status != IBV_WC_SUCCESS)
			break; /* the QP is in error now */
	}
}

/* A connected pair on a listener of lch: c dials, s answers. */
static void pair(struct rdma_event_channel *ch, struct rdma_event_channel *lch, struct rdma_cm_id *listener,
		 uint16_t port, struct end *c, struct end *s)
{
	dial(ch, port, c, "hello, listener");
	answer(lch, listener, s, "hello, listener");
	CHECK(expect(ch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == c->id);
	CHECK(expect(lch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == s->id);
}

static void unpair(struct rdma_event_channel *ch, struct rdma_event_channel *lch, struct end *c, struct end *s)
{
	CHECK(rdma_disconnect(c->id) == 0);
	CHECK(expect(ch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == c->id);
	CHECK(expect(lch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == s->id);
	end_fini(c);
	end_fini(s);
}

static void rdma_checks(struct rdma_event_channel *ch, struct rdma_event_channel *lch, struct rdma_cm_id *listener,
			uint16_t port)
{
	struct end c, s;
	pair(ch, lch, listener, port, &c, &s);
	rdma_reads(&c, &s);
	rdma_writes(&c, &s);
	unpair(ch, lch, &c, &s);
	for (int kind = 0; kind < BAD_OPS; kind++) {
		pair(ch, lch, listener, port, &c, &s);
		rdma_fails(&c, &s, (enum bad_op)kind);
		unpair(ch, lch, &c, &s);
	}
	pair(ch, lch, listener, port, &c, &s);
	rdma_dereg_race(&c, &s);
	unpair(ch, lch, &c, &s);
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

	rdma_checks(ch, lch, listener, port);

	/* Nobody listens on port 1: refused. */
	struct rdma_cm_id *lone = dial(ch, htons(1), NULL, "anyone there?..");
	CHECK(expect(ch, RDMA_CM_EVENT_REJECTED, NULL, NULL) == lone);
	CHECK(rdma_destroy_id(lone) == 0);

	/* A child connects, sends, advertises a buffer of its own in a SEND (a rendezvous),
	 * which is read from here, and is killed: DISCONNECTED and a flushed receive here. */
	struct advert {
		uint64_t addr;
		uint32_t rkey, len;
	} adv;
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		struct rdma_event_channel *cch = rdma_create_event_channel();
		CHECK(cch);
		dial(cch, port, &c, "hello from child");
		CHECK(expect(cch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == c.id);
		post_send(&c, 0, 4096, 9);
		char *mine = malloc(RLEN);
		CHECK(mine);
		fill(mine, 0, RLEN, 11);
		struct ibv_mr *mr = ibv_reg_mr(c.pd, mine, RLEN, IBV_ACCESS_REMOTE_READ);
		CHECK(mr);
		adv = (struct advert){(uintptr_t)mine, mr->rkey, RLEN};
		char *p = c.buf + (SLOTS + 1) * SLOT;
		memcpy(p, &adv, sizeof(adv));
		struct ibv_sge sg = {(uintptr_t)p, sizeof(adv), c.mr->lkey};
		struct ibv_send_wr wr = {.wr_id = 201, .sg_list = &sg, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
		CHECK(ibv_post_send(c.id->qp, &wr, &bad) == 0);
		for (;;)
			pause();
	}
	answer(lch, listener, &s, "hello from child");
	for (int i = 0; i < 3; i++)
		post_recv(&s, i);
	CHECK(expect(lch, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL) == s.id);
	wc = next_wc(&s);
	CHECK(wc.status == IBV_WC_SUCCESS && wc.byte_len == 4096 && s.buf[4095] == (char)(4095 * 7 + 9));
	wc = next_ok(&s, 101, IBV_WC_RECV);
	CHECK(wc.byte_len == sizeof(adv));
	memcpy(&adv, s.buf + SLOT, sizeof(adv));
	struct ibv_sge into = {(uintptr_t)s.buf + 2 * SLOT, adv.len - 5, s.mr->lkey};
	post_rdma(&s, IBV_WR_RDMA_READ, 400, 1, &into, 1, adv.addr + 5, adv.rkey);
	wc = next_ok(&s, 400, IBV_WC_RDMA_READ);
	CHECK(wc.byte_len == adv.len - 5 && holds(s.buf + 2 * SLOT, 5, adv.len - 5, 11));
	kill(pid, SIGKILL);
	CHECK(waitpid(pid, NULL, 0) == pid);
	CHECK(expect(lch, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL) == s.id);
	wc = next_wc(&s);
	CHECK(wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 102);
	end_fini(&s);

	CHECK(rdma_destroy_id(listener) == 0);
	rdma_destroy_event_channel(ch);
	rdma_destroy_event_channel(lch);
	printf("fake rdma selftest: ok\n");
	return 0;
}
