/* The fake libibverbs.so.1 (tests only): one device, "fake_rdma0", present while
 * $REMORA_FAKE_RDMA_DIR is set. Protection domains, memory regions, CQs with completion
 * channels, RC QPs whose SENDs travel over a link (fake_rdma.h), and the progress thread
 * that reads every link and listening socket of the process. */
#include "fake_rdma.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

/* The header's macros of these names route to the symbols defined here. */
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

/* ---- process state ---- */

/* Anything the progress thread polls. dead: freed once the thread is between batches. */
struct item {
	int fd;
	int dead;
	void (*on_event)(struct item *it, uint32_t events);
	struct item *prev, *next; /* all live items, for fork */
	struct item *grave;
};

static pthread_mutex_t big = PTHREAD_MUTEX_INITIALIZER;
static struct {
	int epfd;
	int running; /* the progress thread */
	struct item *items;
	struct item *graveyard;
	struct fake_mr *mrs;
	uint32_t next_key, next_qpn;
} st = {.epfd = -1, .next_key = 0x100, .next_qpn = 0x40};

void fake_lock(void) { pthread_mutex_lock(&big); }
void fake_unlock(void) { pthread_mutex_unlock(&big); }

static pthread_once_t dir_once = PTHREAD_ONCE_INIT;
static char dir_path[PATH_MAX];
static int dir_ok;

static void dir_init(void)
{
	int saved = errno;
	const char *env = getenv("REMORA_FAKE_RDMA_DIR");
	if (!env || !*env || strlen(env) >= sizeof(dir_path))
		return;
	strcpy(dir_path, env);
	for (char *p = dir_path + 1;; p++) /* mkdir -p */
		if (*p == '/' || !*p) {
			char c = *p;
			*p = 0;
			if (mkdir(dir_path, 0700) < 0 && errno != EEXIST)
				return;
			*p = c;
			if (!c)
				break;
		}
	dir_ok = 1;
	errno = saved;
}

const char *fake_dir(void)
{
	pthread_once(&dir_once, dir_init);
	return dir_ok ? dir_path : NULL;
}

/* ---- device and context ---- */

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only);
static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
static int fake_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len);

static struct ibv_device device = {
	.node_type = IBV_NODE_CA,
	.transport_type = IBV_TRANSPORT_IB,
	.name = "fake_rdma0",
	.dev_name = "uverbs0",
	.dev_path = "/sys/class/infiniband_verbs/uverbs0",
	.ibdev_path = "/sys/class/infiniband/fake_rdma0",
};

/* The header's inlines find the extended ops through verbs_get_ctx: an extended context
 * whose unset ops read as "not supported". */
static struct verbs_context vctx = {
	.query_port = fake_query_port,
	.sz = sizeof(struct verbs_context),
	.context = {
		.device = &device,
		.ops = {
			.poll_cq = fake_poll_cq,
			.req_notify_cq = fake_req_notify_cq,
			.post_send = fake_post_send,
			.post_recv = fake_post_recv,
		},
		.cmd_fd = -1,
		.async_fd = -1,
		.num_comp_vectors = 1,
		.mutex = PTHREAD_MUTEX_INITIALIZER,
		.abi_compat = __VERBS_ABI_IS_EXTENDED,
	},
};

struct ibv_context *fake_context(void)
{
	if (!fake_dir()) {
		errno = ENODEV;
		return NULL;
	}
	return &vctx.context;
}

struct ibv_device **ibv_get_device_list(int *num)
{
	struct ibv_device **list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	if (fake_dir())
		list[0] = &device;
	if (num)
		*num = list[0] ? 1 : 0;
	return list;
}

void ibv_free_device_list(struct ibv_device **list) { free(list); }

const char *ibv_get_device_name(struct ibv_device *dev) { return dev->name; }

__be64 ibv_get_device_guid(struct ibv_device *dev) { return htobe64(0xfa4e000000000001ull); }

struct ibv_context *ibv_open_device(struct ibv_device *dev)
{
	if (dev != &device) {
		errno = ENODEV;
		return NULL;
	}
	return fake_context();
}

int ibv_close_device(struct ibv_context *ctx) { return 0; }

int ibv_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	strcpy(attr->fw_ver, "fake");
	attr->node_guid = ibv_get_device_guid(&device);
	attr->max_mr_size = UINT64_MAX;
	attr->max_qp = 1 << 16;
	attr->max_qp_wr = 1 << 15;
	attr->max_sge = 32;
	attr->max_cq = 1 << 16;
	attr->max_cqe = 1 << 22;
	attr->max_mr = 1 << 20;
	attr->max_pd = 1 << 16;
	attr->phys_port_cnt = 1;
	return 0;
}

static int fake_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr, size_t len)
{
	if (port != 1)
		return EINVAL;
	struct ibv_port_attr a = {
		.state = IBV_PORT_ACTIVE,
		.max_mtu = IBV_MTU_4096,
		.active_mtu = IBV_MTU_4096,
		.gid_tbl_len = 1,
		.max_msg_sz = FAKE_MAX_FRAME,
		.pkey_tbl_len = 1,
		.active_width = 2,
		.active_speed = 32,
		.phys_state = 5,
		.link_layer = IBV_LINK_LAYER_ETHERNET,
	};
	memcpy(attr, &a, len < sizeof(a) ? len : sizeof(a));
	return 0;
}

/* The symbol older callers reach (the header routes through query_port above). */
int ibv_query_port(struct ibv_context *ctx, uint8_t port, struct _compat_ibv_port_attr *attr)
{
	return fake_query_port(ctx, port, (struct ibv_port_attr *)attr,
			       offsetof(struct ibv_port_attr, flags));
}

/* ---- progress thread ---- */

static void *progress(void *unused)
{
	struct epoll_event evs[64];
	for (;;) {
		int n = epoll_wait(st.epfd, evs, 64, -1);
		if (n < 0 && errno != EINTR)
			return NULL;
		fake_lock();
		for (int i = 0; i < n; i++) {
			struct item *it = evs[i].data.ptr;
			if (!it->dead && it->fd >= 0)
				it->on_event(it, evs[i].events);
		}
		while (st.graveyard) {
			struct item *it = st.graveyard;
			st.graveyard = it->grave;
			free(it);
		}
		fake_unlock();
	}
}

static int item_add(struct item *it, uint32_t events)
{
	if (!st.running) {
		if (st.epfd < 0 && (st.epfd = epoll_create1(EPOLL_CLOEXEC)) < 0)
			return -1;
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pthread_attr_t attr;
		pthread_attr_init(&attr);
		pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
		pthread_t t;
		int rc = pthread_create(&t, &attr, progress, NULL);
		pthread_attr_destroy(&attr);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
		if (rc) {
			errno = rc;
			return -1;
		}
		st.running = 1;
	}
	struct epoll_event ev = {.events = events, .data.ptr = it};
	if (epoll_ctl(st.epfd, EPOLL_CTL_ADD, it->fd, &ev) < 0)
		return -1;
	it->prev = NULL;
	it->next = st.items;
	if (st.items)
		st.items->prev = it;
	st.items = it;
	return 0;
}

/* Closes the socket; the memory stays. */
static void item_stop(struct item *it)
{
	if (it->fd < 0)
		return;
	epoll_ctl(st.epfd, EPOLL_CTL_DEL, it->fd, NULL);
	close(it->fd);
	it->fd = -1;
}

/* Frees the memory once no event the progress thread holds can name it. */
static void item_free_later(struct item *it)
{
	item_stop(it);
	if (it->prev)
		it->prev->next = it->next;
	else if (st.items == it)
		st.items = it->next;
	if (it->next)
		it->next->prev = it->prev;
	it->dead = 1;
	it->grave = st.graveyard;
	st.graveyard = it;
}

/* A child of fork has no progress thread and must not touch its parent's connections:
 * their sockets close there, their objects are abandoned. */
static void atfork_prepare(void) { fake_lock(); }
static void atfork_parent(void) { fake_unlock(); }
static void atfork_child(void)
{
	for (struct item *it = st.items; it; it = it->next)
		if (it->fd >= 0) {
			close(it->fd);
			it->fd = -1;
		}
	if (st.epfd >= 0)
		close(st.epfd);
	st.epfd = -1;
	st.running = 0;
	st.items = NULL;
	st.graveyard = NULL;
	fake_unlock();
}

__attribute__((constructor)) static void fake_verbs_init(void)
{
	pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* ---- listening sockets ---- */

struct fake_watch {
	struct item it; /* first: freed as an item */
	fake_watch_fn *fn;
	void *arg;
};

static void watch_event(struct item *it, uint32_t events)
{
	struct fake_watch *w = (struct fake_watch *)it;
	w->fn(w->arg);
}

struct fake_watch *fake_watch_add(int fd, fake_watch_fn *fn, void *arg)
{
	struct fake_watch *w = calloc(1, sizeof(*w));
	if (!w)
		return NULL;
	w->it.fd = fd;
	w->it.on_event = watch_event;
	w->fn = fn;
	w->arg = arg;
	if (item_add(&w->it, EPOLLIN) < 0) {
		free(w);
		return NULL;
	}
	return w;
}

void fake_watch_del(struct fake_watch *w) { item_free_later(&w->it); }

/* ---- PDs, MRs ---- */

struct fake_pd {
	struct ibv_pd pd;
	int refs; /* MRs and QPs */
};

struct fake_mr {
	struct ibv_mr mr;
	uint64_t iova;
	int access;
	struct fake_mr *next;
};

struct ibv_pd *ibv_alloc_pd(struct ibv_context *ctx)
{
	struct fake_pd *pd = calloc(1, sizeof(*pd));
	if (!pd) {
		errno = ENOMEM;
		return NULL;
	}
	pd->pd.context = ctx;
	return &pd->pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	struct fake_pd *p = (struct fake_pd *)pd;
	fake_lock();
	int refs = p->refs;
	fake_unlock();
	if (refs)
		return EBUSY;
	free(p);
	return 0;
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, unsigned int access)
{
	struct fake_mr *m = calloc(1, sizeof(*m));
	if (!m) {
		errno = ENOMEM;
		return NULL;
	}
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->iova = iova;
	m->access = (int)access;
	fake_lock();
	m->mr.handle = m->mr.lkey = m->mr.rkey = st.next_key++;
	((struct fake_pd *)pd)->refs++;
	m->next = st.mrs;
	st.mrs = m;
	fake_unlock();
	return &m->mr;
}

struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned int)access);
}

struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova, int access)
{
	return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned int)access);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	fake_lock();
	for (struct fake_mr **p = &st.mrs; *p; p = &(*p)->next)
		if (&(*p)->mr == mr) {
			*p = (*p)->next;
			break;
		}
	((struct fake_pd *)mr->pd)->refs--;
	fake_unlock();
	free(mr);
	return 0;
}

/* Where sge's bytes are in this process, or NULL when no MR of pd with access holds them. */
static char *sge_bytes(const struct ibv_sge *sge, struct ibv_pd *pd, int access)
{
	for (struct fake_mr *m = st.mrs; m; m = m->next)
		if (m->mr.lkey == sge->lkey) {
			if (m->mr.pd != pd || (m->access & access) != access || sge->addr < m->iova ||
			    sge->addr - m->iova > m->mr.length || sge->length > m->mr.length - (sge->addr - m->iova))
				return NULL;
			return (char *)m->mr.addr + (sge->addr - m->iova);
		}
	return NULL;
}

/* ---- completion channels and CQs ---- */

struct fake_note {
	struct fake_note *next;
	struct fake_cq *cq;
};

struct fake_cc {
	struct ibv_comp_channel cc;
	struct fake_note *head, **tail;
};

struct fake_cq {
	struct ibv_cq cq;
	struct ibv_wc *ring;
	size_t cap, first, n;
	int armed;
	int refs; /* QPs */
};

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ctx)
{
	struct fake_cc *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	/* Readable exactly while a notification is queued (or one was withdrawn, see below). */
	c->cc.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE);
	if (c->cc.fd < 0) {
		free(c);
		return NULL;
	}
	c->cc.context = ctx;
	c->tail = &c->head;
	return &c->cc;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *cc)
{
	struct fake_cc *c = (struct fake_cc *)cc;
	fake_lock();
	int refs = cc->refcnt;
	fake_unlock();
	if (refs)
		return EBUSY;
	while (c->head) {
		struct fake_note *n = c->head;
		c->head = n->next;
		free(n);
	}
	close(cc->fd);
	free(c);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *ctx, int cqe, void *cq_context, struct ibv_comp_channel *channel,
			     int vector)
{
	if (cqe < 1 || cqe > (1 << 22)) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_cq *c = calloc(1, sizeof(*c));
	if (!c || !(c->ring = calloc((size_t)cqe, sizeof(*c->ring)))) {
		free(c);
		errno = ENOMEM;
		return NULL;
	}
	c->cap = (size_t)cqe;
	c->cq.context = ctx;
	c->cq.channel = channel;
	c->cq.cq_context = cq_context;
	c->cq.cqe = cqe;
	if (channel) {
		fake_lock();
		channel->refcnt++;
		fake_unlock();
	}
	return &c->cq;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	fake_lock();
	if (c->refs) {
		fake_unlock();
		return EBUSY;
	}
	if (cq->channel) {
		/* Withdraw its notifications; their counts stay in the eventfd and
		 * ibv_get_cq_event skips them. */
		struct fake_cc *cc = (struct fake_cc *)cq->channel;
		for (struct fake_note **p = &cc->head; *p;)
			if ((*p)->cq == c) {
				struct fake_note *n = *p;
				*p = n->next;
				free(n);
			} else {
				p = &(*p)->next;
			}
		cc->tail = &cc->head;
		while (*cc->tail)
			cc->tail = &(*cc->tail)->next;
		cq->channel->refcnt--;
	}
	fake_unlock();
	free(c->ring);
	free(c);
	return 0;
}

/* A completion: in order; the CQ grows rather than overflows. Wakes an armed CQ's channel. */
static void cq_push(struct fake_cq *c, const struct ibv_wc *wc)
{
	if (c->n == c->cap) {
		struct ibv_wc *ring = malloc(2 * c->cap * sizeof(*ring));
		if (!ring)
			abort(); /* a test double: out of memory is fatal */
		for (size_t i = 0; i < c->n; i++)
			ring[i] = c->ring[(c->first + i) % c->cap];
		free(c->ring);
		c->ring = ring;
		c->first = 0;
		c->cap *= 2;
	}
	c->ring[(c->first + c->n++) % c->cap] = *wc;
	if (c->armed && c->cq.channel) {
		struct fake_cc *cc = (struct fake_cc *)c->cq.channel;
		struct fake_note *n = malloc(sizeof(*n));
		if (!n)
			abort();
		n->next = NULL;
		n->cq = c;
		*cc->tail = n;
		cc->tail = &n->next;
		uint64_t one = 1;
		if (write(cc->cc.fd, &one, sizeof(one)) < 0)
			abort();
	}
	c->armed = 0;
}

static int fake_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	struct fake_cq *c = (struct fake_cq *)cq;
	int got = 0;
	fake_lock();
	while (got < n && c->n) {
		wc[got++] = c->ring[c->first];
		c->first = (c->first + 1) % c->cap;
		c->n--;
	}
	fake_unlock();
	return got;
}

static int fake_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	fake_lock();
	((struct fake_cq *)cq)->armed = 1;
	fake_unlock();
	return 0;
}

int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
	struct fake_cc *cc = (struct fake_cc *)channel;
	for (;;) {
		uint64_t one;
		if (read(channel->fd, &one, sizeof(one)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		fake_lock();
		struct fake_note *n = cc->head;
		if (n && !(cc->head = n->next))
			cc->tail = &cc->head;
		fake_unlock();
		if (n) { /* else a withdrawn one's count */
			*cq = &n->cq->cq;
			*cq_context = n->cq->cq.cq_context;
			free(n);
			return 0;
		}
	}
}

void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
	fake_lock();
	cq->comp_events_completed += nevents;
	fake_unlock();
}

/* ---- QPs ---- */

struct fake_rwr { /* a posted receive */
	struct fake_rwr *next;
	uint64_t wr_id;
	int num_sge;
	struct ibv_sge sg[];
};

struct fake_msg { /* an arrived SEND no receive has taken yet */
	struct fake_msg *next;
	char *buf;
	uint32_t len, imm, flags;
};

struct fake_qp {
	struct ibv_qp qp;
	struct fake_link *link;
	int sig_all;
	uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
	uint32_t nrecv, nsend; /* posted receives, sends not yet written */
	struct fake_rwr *rhead, **rtail;
	struct fake_msg *mhead, **mtail;
};

static void wc_push(struct fake_qp *q, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status status,
		    enum ibv_wc_opcode op, uint32_t len, const struct fake_msg *m)
{
	struct ibv_wc wc = {
		.wr_id = wr_id,
		.status = status,
		.opcode = op,
		.vendor_err = status == IBV_WC_SUCCESS ? 0 : 0x99,
		.byte_len = len,
		.qp_num = q->qp.qp_num,
	};
	if (m && (m->flags & FAKE_WITH_IMM)) {
		wc.wc_flags = IBV_WC_WITH_IMM;
		wc.imm_data = m->imm;
	}
	cq_push((struct fake_cq *)cq, &wc);
}

static void qp_flush_sends(struct fake_qp *q);

void fake_qp_set_state(struct ibv_qp *qp, enum ibv_qp_state state)
{
	if (qp->state != IBV_QPS_ERR)
		qp->state = state;
}

void fake_qp_error(struct ibv_qp *qp)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	if (qp->state == IBV_QPS_ERR)
		return;
	qp->state = IBV_QPS_ERR;
	while (q->rhead) {
		struct fake_rwr *r = q->rhead;
		q->rhead = r->next;
		wc_push(q, qp->recv_cq, r->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, NULL);
		free(r);
	}
	q->rtail = &q->rhead;
	q->nrecv = 0;
	while (q->mhead) {
		struct fake_msg *m = q->mhead;
		q->mhead = m->next;
		free(m->buf);
		free(m);
	}
	q->mtail = &q->mhead;
	qp_flush_sends(q);
}

/* Hands arrived SENDs to posted receives, in order. */
static void qp_match(struct fake_qp *q)
{
	while (q->rhead && q->mhead && q->qp.state != IBV_QPS_ERR) {
		struct fake_rwr *r = q->rhead;
		struct fake_msg *m = q->mhead;
		if (!(q->rhead = r->next))
			q->rtail = &q->rhead;
		if (!(q->mhead = m->next))
			q->mtail = &q->mhead;
		q->nrecv--;
		enum ibv_wc_status status = IBV_WC_SUCCESS;
		size_t off = 0;
		for (int i = 0; i < r->num_sge && off < m->len; i++) {
			char *dst = r->sg[i].length ? sge_bytes(&r->sg[i], q->qp.pd, IBV_ACCESS_LOCAL_WRITE) : NULL;
			if (r->sg[i].length && !dst) {
				status = IBV_WC_LOC_PROT_ERR;
				break;
			}
			size_t k = m->len - off < r->sg[i].length ? m->len - off : r->sg[i].length;
			if (k)
				memcpy(dst, m->buf + off, k);
			off += k;
		}
		if (status == IBV_WC_SUCCESS && off < m->len)
			status = IBV_WC_LOC_LEN_ERR;
		wc_push(q, q->qp.recv_cq, r->wr_id, status, IBV_WC_RECV, m->len, status == IBV_WC_SUCCESS ? m : NULL);
		free(r);
		free(m->buf);
		free(m);
		if (status != IBV_WC_SUCCESS)
			fake_qp_error(&q->qp);
	}
}

static void qp_arrived(struct fake_qp *q, char *buf, const struct fake_frame *f)
{
	struct fake_msg *m = malloc(sizeof(*m));
	if (!q || q->qp.state == IBV_QPS_ERR || !m) {
		free(buf);
		free(m);
		return;
	}
	*m = (struct fake_msg){.buf = buf, .len = f->len, .imm = f->imm, .flags = f->flags};
	*q->mtail = m;
	q->mtail = &m->next;
	qp_match(q);
}

struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_cap *cap = &attr->cap;
	if (attr->qp_type != IBV_QPT_RC || !attr->send_cq || !attr->recv_cq || attr->srq || cap->max_send_wr > (1u << 15) ||
	    cap->max_recv_wr > (1u << 15) || cap->max_send_sge > 32 || cap->max_recv_sge > 32) {
		errno = EINVAL;
		return NULL;
	}
	struct fake_qp *q = calloc(1, sizeof(*q));
	if (!q) {
		errno = ENOMEM;
		return NULL;
	}
	q->qp.context = pd->context;
	q->qp.qp_context = attr->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = attr->send_cq;
	q->qp.recv_cq = attr->recv_cq;
	q->qp.state = IBV_QPS_INIT;
	q->qp.qp_type = IBV_QPT_RC;
	q->sig_all = attr->sq_sig_all;
	q->max_send_wr = cap->max_send_wr ? cap->max_send_wr : 1;
	q->max_recv_wr = cap->max_recv_wr ? cap->max_recv_wr : 1;
	q->max_send_sge = cap->max_send_sge ? cap->max_send_sge : 1;
	q->max_recv_sge = cap->max_recv_sge ? cap->max_recv_sge : 1;
	q->max_inline = cap->max_inline_data > 256 ? cap->max_inline_data : 256;
	q->rtail = &q->rhead;
	q->mtail = &q->mhead;
	cap->max_send_wr = q->max_send_wr;
	cap->max_recv_wr = q->max_recv_wr;
	cap->max_send_sge = q->max_send_sge;
	cap->max_recv_sge = q->max_recv_sge;
	cap->max_inline_data = q->max_inline;
	fake_lock();
	q->qp.handle = q->qp.qp_num = st.next_qpn++;
	((struct fake_pd *)pd)->refs++;
	((struct fake_cq *)attr->send_cq)->refs++;
	((struct fake_cq *)attr->recv_cq)->refs++;
	fake_unlock();
	return &q->qp;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	fake_lock();
	if ((mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		fake_qp_error(qp);
	else if (mask & IBV_QP_STATE)
		fake_qp_set_state(qp, attr->qp_state);
	fake_unlock();
	return 0;
}

int ibv_destroy_qp(struct ibv_qp *qp)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	fake_lock();
	if (q->link)
		fake_link_attach_qp(q->link, NULL);
	while (q->rhead) {
		struct fake_rwr *r = q->rhead;
		q->rhead = r->next;
		free(r);
	}
	while (q->mhead) {
		struct fake_msg *m = q->mhead;
		q->mhead = m->next;
		free(m->buf);
		free(m);
	}
	((struct fake_pd *)qp->pd)->refs--;
	((struct fake_cq *)qp->send_cq)->refs--;
	((struct fake_cq *)qp->recv_cq)->refs--;
	fake_unlock();
	free(q);
	return 0;
}

static int fake_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int rc = 0;
	fake_lock();
	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > q->max_recv_sge) {
			rc = EINVAL;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			wc_push(q, qp->recv_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, NULL);
			continue;
		}
		if (q->nrecv >= q->max_recv_wr) {
			rc = ENOMEM;
			break;
		}
		struct fake_rwr *r = malloc(sizeof(*r) + (size_t)wr->num_sge * sizeof(r->sg[0]));
		if (!r) {
			rc = ENOMEM;
			break;
		}
		r->next = NULL;
		r->wr_id = wr->wr_id;
		r->num_sge = wr->num_sge;
		if (wr->num_sge)
			memcpy(r->sg, wr->sg_list, (size_t)wr->num_sge * sizeof(r->sg[0]));
		*q->rtail = r;
		q->rtail = &r->next;
		q->nrecv++;
	}
	if (rc)
		*bad = wr;
	qp_match(q);
	fake_unlock();
	return rc;
}

/* ---- links ---- */

struct fake_out { /* a frame not yet written */
	struct fake_out *next;
	char *buf;
	size_t len, off;
	int data;     /* a SEND of the attached QP */
	int signaled; /* its completion is due when written */
	uint64_t wr_id;
};

struct fake_link {
	struct item it; /* first: freed as an item */
	fake_link_fn *fn;
	void *arg;
	struct fake_qp *qp;
	struct fake_out *ohead, **otail;
	int want_out;
	int closing, broken;
	struct fake_frame in_hdr;
	size_t in_got;
	char *in_buf;
};

static void link_finish(struct fake_link *l)
{
	while (l->ohead) {
		struct fake_out *o = l->ohead;
		l->ohead = o->next;
		free(o->buf);
		free(o);
	}
	free(l->in_buf);
	l->in_buf = NULL;
	item_free_later(&l->it);
}

static void link_broken(struct fake_link *l)
{
	if (l->broken)
		return;
	l->broken = 1;
	item_stop(&l->it);
	if (l->closing) {
		link_finish(l);
		return;
	}
	if (l->qp)
		fake_qp_error(&l->qp->qp);
	while (l->ohead) { /* control frames; the QP's sends were flushed above */
		struct fake_out *o = l->ohead;
		l->ohead = o->next;
		free(o->buf);
		free(o);
	}
	l->otail = &l->ohead;
	if (l->fn)
		l->fn(l->arg, FAKE_BROKEN, NULL, 0);
}

static void link_want_out(struct fake_link *l, int want)
{
	if (l->want_out == want || l->it.fd < 0)
		return;
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | (want ? EPOLLOUT : 0), .data.ptr = &l->it};
	epoll_ctl(st.epfd, EPOLL_CTL_MOD, l->it.fd, &ev);
	l->want_out = want;
}

/* Writes what it can; completes the sends written. */
static void link_flush(struct fake_link *l)
{
	while (l->ohead && !l->broken) {
		struct fake_out *o = l->ohead;
		ssize_t n = send(l->it.fd, o->buf + o->off, o->len - o->off, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			link_want_out(l, 1);
			return;
		}
		if (n < 0) {
			link_broken(l);
			return;
		}
		if ((o->off += (size_t)n) < o->len)
			continue;
		if (!(l->ohead = o->next))
			l->otail = &l->ohead;
		if (o->data && l->qp) {
			l->qp->nsend--;
			if (o->signaled)
				wc_push(l->qp, l->qp->qp.send_cq, o->wr_id, IBV_WC_SUCCESS, IBV_WC_SEND, 0, NULL);
		}
		free(o->buf);
		free(o);
	}
	if (!l->broken) {
		link_want_out(l, 0);
		if (l->closing)
			link_finish(l);
	}
}

/* Queues a frame (header, then the n pieces) and writes what it can. */
static int link_queue(struct fake_link *l, const struct fake_frame *f, const struct iovec *pieces, int n, int data,
		      int signaled, uint64_t wr_id)
{
	if (l->broken || l->closing)
		return -1;
	struct fake_out *o = malloc(sizeof(*o));
	char *buf = malloc(sizeof(*f) + f->len);
	if (!o || !buf)
		abort();
	memcpy(buf, f, sizeof(*f));
	size_t off = sizeof(*f);
	for (int i = 0; i < n; i++) {
		if (pieces[i].iov_len)
			memcpy(buf + off, pieces[i].iov_base, pieces[i].iov_len);
		off += pieces[i].iov_len;
	}
	*o = (struct fake_out){.buf = buf, .len = off, .data = data, .signaled = signaled, .wr_id = wr_id};
	*l->otail = o;
	l->otail = &o->next;
	if (data)
		l->qp->nsend++;
	if (l->ohead == o)
		link_flush(l);
	return 0;
}

int fake_link_ctl(struct fake_link *l, int type, const void *data, size_t len)
{
	struct fake_frame f = {.type = (uint32_t)type, .len = (uint32_t)len};
	struct iovec v = {(void *)data, len};
	return link_queue(l, &f, &v, 1, 0, 0, 0);
}

/* On error: every send not yet written completes with a flush error (the one being written
 * still goes out whole, to keep the stream in frames). */
static void qp_flush_sends(struct fake_qp *q)
{
	struct fake_link *l = q->link;
	if (!l)
		return;
	for (struct fake_out **p = &l->ohead; *p;) {
		struct fake_out *o = *p;
		if (!o->data) {
			p = &o->next;
			continue;
		}
		wc_push(q, q->qp.send_cq, o->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, NULL);
		q->nsend--;
		if (o == l->ohead && o->off) {
			o->data = 0;
			p = &o->next;
			continue;
		}
		*p = o->next;
		free(o->buf);
		free(o);
	}
	l->otail = &l->ohead;
	while (*l->otail)
		l->otail = &(*l->otail)->next;
}

void fake_link_attach_qp(struct fake_link *l, struct ibv_qp *qp)
{
	if (l->qp) {
		for (struct fake_out *o = l->ohead; o; o = o->next)
			o->data = 0;
		l->qp->nsend = 0;
		l->qp->link = NULL;
	}
	l->qp = (struct fake_qp *)qp;
	if (qp)
		l->qp->link = l;
}

void fake_link_close(struct fake_link *l)
{
	fake_link_attach_qp(l, NULL);
	l->fn = NULL;
	l->closing = 1;
	if (l->broken || !l->ohead)
		link_finish(l);
}

static void link_frame(struct fake_link *l)
{
	char *buf = l->in_buf;
	struct fake_frame f = l->in_hdr;
	l->in_buf = NULL;
	l->in_got = 0;
	if (l->closing) {
		free(buf);
	} else if (f.type == FAKE_DATA) {
		qp_arrived(l->qp, buf, &f);
	} else {
		if (l->fn)
			l->fn(l->arg, (int)f.type, buf, f.len);
		free(buf);
	}
}

static void link_event(struct item *it, uint32_t events)
{
	struct fake_link *l = (struct fake_link *)it;
	if (events & EPOLLOUT)
		link_flush(l);
	/* A bounded number of reads per wake-up: level-triggered, the rest comes next round. */
	for (int round = 0; round < 16 && l->it.fd >= 0 && !l->it.dead; round++) {
		ssize_t n;
		if (l->in_got < sizeof(l->in_hdr)) {
			n = recv(l->it.fd, (char *)&l->in_hdr + l->in_got, sizeof(l->in_hdr) - l->in_got, MSG_DONTWAIT);
		} else {
			size_t have = l->in_got - sizeof(l->in_hdr);
			n = recv(l->it.fd, l->in_buf + have, l->in_hdr.len - have, MSG_DONTWAIT);
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n <= 0) {
			link_broken(l);
			return;
		}
		l->in_got += (size_t)n;
		if (l->in_got == sizeof(l->in_hdr)) {
			if (l->in_hdr.len > FAKE_MAX_FRAME || l->in_hdr.type == FAKE_BROKEN) {
				link_broken(l);
				return;
			}
			if (!(l->in_buf = malloc(l->in_hdr.len ? l->in_hdr.len : 1)))
				abort();
		}
		if (l->in_got == sizeof(l->in_hdr) + l->in_hdr.len)
			link_frame(l);
	}
}

struct fake_link *fake_link_open(int fd, fake_link_fn *fn, void *arg)
{
	struct fake_link *l = calloc(1, sizeof(*l));
	if (!l) {
		close(fd);
		errno = ENOMEM;
		return NULL;
	}
	l->it.fd = fd;
	l->it.on_event = link_event;
	l->fn = fn;
	l->arg = arg;
	l->otail = &l->ohead;
	if (item_add(&l->it, EPOLLIN | EPOLLRDHUP) < 0) {
		int e = errno;
		close(fd);
		free(l);
		errno = e;
		return NULL;
	}
	return l;
}

/* ---- sends ---- */

static int fake_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	struct fake_qp *q = (struct fake_qp *)qp;
	int rc = 0;
	fake_lock();
	for (; wr; wr = wr->next) {
		if ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) || wr->num_sge < 0 ||
		    (uint32_t)wr->num_sge > q->max_send_sge || (qp->state != IBV_QPS_ERR && !q->link)) {
			rc = EINVAL;
			break;
		}
		if (q->nsend >= q->max_send_wr) {
			rc = ENOMEM;
			break;
		}
		if (qp->state == IBV_QPS_ERR) {
			wc_push(q, qp->send_cq, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND, 0, NULL);
			continue;
		}
		struct iovec v[32];
		size_t len = 0;
		int ok = 1;
		for (int i = 0; i < wr->num_sge; i++) {
			const struct ibv_sge *s = &wr->sg_list[i];
			v[i].iov_len = s->length;
			if (wr->send_flags & IBV_SEND_INLINE)
				v[i].iov_base = (void *)(uintptr_t)s->addr;
			else if (!s->length)
				v[i].iov_base = NULL;
			else if (!(v[i].iov_base = sge_bytes(s, qp->pd, 0)))
				ok = 0;
			len += s->length;
		}
		if ((wr->send_flags & IBV_SEND_INLINE) && len > q->max_inline) {
			rc = EINVAL;
			break;
		}
		if (!ok || len > FAKE_MAX_FRAME) {
			wc_push(q, qp->send_cq, wr->wr_id, ok ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR, IBV_WC_SEND,
				0, NULL);
			fake_qp_error(qp);
			continue;
		}
		struct fake_frame f = {.type = FAKE_DATA, .len = (uint32_t)len};
		if (wr->opcode == IBV_WR_SEND_WITH_IMM) {
			f.flags = FAKE_WITH_IMM;
			f.imm = wr->imm_data;
		}
		int signaled = q->sig_all || (wr->send_flags & IBV_SEND_SIGNALED);
		link_queue(q->link, &f, v, wr->num_sge, 1, signaled, wr->wr_id);
	}
	if (rc)
		*bad = wr;
	fake_unlock();
	return rc;
}

const char *ibv_wc_status_str(enum ibv_wc_status status)
{
	static const char *const names[] = {
		[IBV_WC_SUCCESS] = "success",
		[IBV_WC_LOC_LEN_ERR] = "local length error",
		[IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
		[IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
		[IBV_WC_LOC_PROT_ERR] = "local protection error",
		[IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
		[IBV_WC_MW_BIND_ERR] = "memory management operation error",
		[IBV_WC_BAD_RESP_ERR] = "bad response error",
		[IBV_WC_LOC_ACCESS_ERR] = "local access error",
		[IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
		[IBV_WC_REM_ACCESS_ERR] = "remote access error",
		[IBV_WC_REM_OP_ERR] = "remote operation error",
		[IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
		[IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
		[IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
		[IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
		[IBV_WC_REM_ABORT_ERR] = "aborted error",
		[IBV_WC_INV_EECN_ERR] = "invalid EE context number",
		[IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
		[IBV_WC_FATAL_ERR] = "fatal error",
		[IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
		[IBV_WC_GENERAL_ERR] = "general error",
		[IBV_WC_TM_ERR] = "TM error",
		[IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
	};
	if ((unsigned)status < sizeof(names) / sizeof(names[0]) && names[status])
		return names[status];
	return "unknown";
}
