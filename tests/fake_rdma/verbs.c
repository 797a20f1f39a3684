/* The fake libibverbs.so.1 (tests only): one device, "fake_rdma0", present while
 * $REMORA_FAKE_RDMA_DIR is set. Its context, protection domains, memory regions (the
 * table a peer's RDMA READs and WRITEs are checked against), and CQs with completion
 * channels. The RC QPs are qp.c's, their READs and WRITEs rdma_ops.c's; the links they
 * travel over and the progress thread that reads them, link.c's (verbs_private.h). */
#include "verbs_private.h"

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header's macros of these names route to the symbols defined here. */
#undef ibv_query_port
#undef ibv_reg_mr
#undef ibv_reg_mr_iova

static struct {
	struct fake_mr *mrs;
	uint32_t next_key;
	uint64_t locked; /* bytes registered, for REMORA_FAKE_RDMA_MEMLOCK */
} st = {.next_key = 0x100};

/* With REMORA_FAKE_RDMA_MEMLOCK set, registrations count against RLIMIT_MEMLOCK as the
 * kernel counts them for a process without CAP_IPC_LOCK: ENOMEM past it. */
static int over_memlock(size_t length)
{
	struct rlimit lim;
	return getenv("REMORA_FAKE_RDMA_MEMLOCK") && !getrlimit(RLIMIT_MEMLOCK, &lim) && lim.rlim_cur != RLIM_INFINITY &&
	       (length > lim.rlim_cur || st.locked > lim.rlim_cur - length);
}

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
			.post_send = qp_post_send,
			.post_recv = qp_post_recv,
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
	attr->max_sge_rd = 32;
	attr->max_qp_rd_atom = 16; /* advertised for rdma_conn_param; outstanding READs are not limited */
	attr->max_qp_init_rd_atom = 16;
	attr->max_res_rd_atom = 16 << 16;
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
		.max_msg_sz = FAKE_MAX_MSG,
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

/* ---- PDs, MRs ---- */

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
	/* As the verbs contract has it: a peer may write only where this process may. */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
		errno = EINVAL;
		return NULL;
	}
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
	if (over_memlock(length)) {
		fake_unlock();
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	st.locked += length;
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
	st.locked -= mr->length;
	((struct fake_pd *)mr->pd)->refs--;
	fake_unlock();
	free(mr);
	return 0;
}

/* Where [addr, addr + len) under key (an lkey, or the rkey: the same here) is in this
 * process, or NULL when it is not inside one MR of pd with access. Written without
 * addr + len, so that a range wrapping past 2^64 is refused rather than wrapped. */
char *mr_bytes(uint32_t key, uint64_t addr, uint64_t len, struct ibv_pd *pd, int access)
{
	for (struct fake_mr *m = st.mrs; m; m = m->next)
		if (m->mr.lkey == key) {
			if (m->mr.pd != pd || (m->access & access) != access || addr < m->iova ||
			    addr - m->iova > m->mr.length || len > m->mr.length - (addr - m->iova))
				return NULL;
			return (char *)m->mr.addr + (addr - m->iova);
		}
	return NULL;
}

char *sge_bytes(const struct ibv_sge *sge, struct ibv_pd *pd, int access)
{
	return mr_bytes(sge->lkey, sge->addr, sge->length, pd, access);
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
void cq_push(struct fake_cq *c, const struct ibv_wc *wc)
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
