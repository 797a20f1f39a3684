/* The fake librdmacm.so.1 (tests only): the RDMA CM over Unix stream sockets in
 * $REMORA_FAKE_RDMA_DIR. A port, on any IP address, is the socket DIR/port.N; a
 * connection is one link (fake_rdma.h) whose first frames are the CM's handshake:
 * REQ (connector) -> ACCEPT or REJECT (listener) -> RTU (connector), then SENDs, then
 * DISCONNECT or EOF. Events go to an eventfd semaphore: readable while one is queued. */
#include "fake_rdma.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

/* Private data as IB carries it: a fixed size, zero-padded (the consumer's own length is
 * not delivered, as on real hardware). */
#define REQ_PDATA 56
#define REP_PDATA 196
#define REJ_PDATA 148
#define REJ_CONSUMER 28 /* IB_CM_REJ_CONSUMER_DEFINED */

struct fake_ev {
	struct rdma_cm_event ev;
	struct fake_ev *next;
	uint8_t pdata[REP_PDATA];
};

struct fake_chan {
	struct rdma_event_channel ch;
	struct fake_ev *head, **tail;
};

enum id_state {
	ID_IDLE,
	ID_BOUND,
	ID_LISTEN,
	ID_ADDR,
	ID_ROUTE,
	ID_CONNECTING, /* REQ sent */
	ID_REQ_WAIT,   /* accepted socket, its REQ not yet read */
	ID_REQ,        /* CONNECT_REQUEST queued */
	ID_ACCEPTING,  /* ACCEPT sent */
	ID_CONNECTED,
	ID_DISCONNECTED,
	ID_DEAD, /* refused, rejected, or the peer went before it was connected */
};

struct fake_id {
	struct rdma_cm_id id;
	struct fake_id *next; /* all ids */
	enum id_state state;
	int sock;          /* bound socket, -1 */
	char path[108];    /* its name, to unlink */
	struct fake_watch *watch;
	struct fake_link *link;
	struct fake_id *listener; /* a passive side's, until the app has its CONNECT_REQUEST */
	struct ibv_pd *own_pd;    /* rdma_create_qp's when given none */
};

struct fake_req { /* the REQ frame */
	struct sockaddr_storage src, dst;
	struct rdma_conn_param param; /* private_data unused */
	uint8_t pdata[REQ_PDATA];
};

static struct fake_id *all_ids;
static unsigned rand_state;

static int fail(int e)
{
	errno = e;
	return -1;
}

/* ---- events ---- */

static struct fake_ev *queue_event(struct fake_id *f, enum rdma_cm_event_type type, int status, struct fake_id *listen,
			const void *pdata, size_t len, size_t padded)
{
	struct fake_chan *c = (struct fake_chan *)f->id.channel;
	struct fake_ev *e = calloc(1, sizeof(*e));
	if (!e)
		abort(); /* a test double: out of memory is fatal */
	e->ev.id = &f->id;
	e->ev.listen_id = listen ? &listen->id : NULL;
	e->ev.event = type;
	e->ev.status = status;
	if (padded) {
		if (len)
			memcpy(e->pdata, pdata, len < padded ? len : padded);
		e->ev.param.conn.private_data = e->pdata;
		e->ev.param.conn.private_data_len = (uint8_t)padded;
	}
	*c->tail = e;
	c->tail = &e->next;
	uint64_t one = 1;
	if (write(c->ch.fd, &one, sizeof(one)) < 0)
		abort();
	return e;
}

struct rdma_event_channel *rdma_create_event_channel(void)
{
	if (!fake_context())
		return NULL;
	struct fake_chan *c = calloc(1, sizeof(*c));
	if (!c) {
		errno = ENOMEM;
		return NULL;
	}
	if ((c->ch.fd = eventfd(0, EFD_CLOEXEC | EFD_SEMAPHORE)) < 0) {
		free(c);
		return NULL;
	}
	c->tail = &c->head;
	return &c->ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *channel)
{
	struct fake_chan *c = (struct fake_chan *)channel;
	while (c->head) {
		struct fake_ev *e = c->head;
		c->head = e->next;
		free(e);
	}
	close(channel->fd);
	free(c);
}

int rdma_get_cm_event(struct rdma_event_channel *channel, struct rdma_cm_event **event)
{
	struct fake_chan *c = (struct fake_chan *)channel;
	for (;;) {
		uint64_t one;
		if (read(channel->fd, &one, sizeof(one)) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		fake_lock();
		struct fake_ev *e = c->head;
		if (e && !(c->head = e->next))
			c->tail = &c->head;
		if (e)
			e->ev.id->event = &e->ev;
		fake_unlock();
		if (e) { /* else the count of an event withdrawn by rdma_destroy_id */
			*event = &e->ev;
			return 0;
		}
	}
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	free(event); /* the first member of struct fake_ev */
	return 0;
}

const char *rdma_event_str(enum rdma_cm_event_type event)
{
	static const char *const names[] = {
		[RDMA_CM_EVENT_ADDR_RESOLVED] = "RDMA_CM_EVENT_ADDR_RESOLVED",
		[RDMA_CM_EVENT_ADDR_ERROR] = "RDMA_CM_EVENT_ADDR_ERROR",
		[RDMA_CM_EVENT_ROUTE_RESOLVED] = "RDMA_CM_EVENT_ROUTE_RESOLVED",
		[RDMA_CM_EVENT_ROUTE_ERROR] = "RDMA_CM_EVENT_ROUTE_ERROR",
		[RDMA_CM_EVENT_CONNECT_REQUEST] = "RDMA_CM_EVENT_CONNECT_REQUEST",
		[RDMA_CM_EVENT_CONNECT_RESPONSE] = "RDMA_CM_EVENT_CONNECT_RESPONSE",
		[RDMA_CM_EVENT_CONNECT_ERROR] = "RDMA_CM_EVENT_CONNECT_ERROR",
		[RDMA_CM_EVENT_UNREACHABLE] = "RDMA_CM_EVENT_UNREACHABLE",
		[RDMA_CM_EVENT_REJECTED] = "RDMA_CM_EVENT_REJECTED",
		[RDMA_CM_EVENT_ESTABLISHED] = "RDMA_CM_EVENT_ESTABLISHED",
		[RDMA_CM_EVENT_DISCONNECTED] = "RDMA_CM_EVENT_DISCONNECTED",
		[RDMA_CM_EVENT_DEVICE_REMOVAL] = "RDMA_CM_EVENT_DEVICE_REMOVAL",
		[RDMA_CM_EVENT_MULTICAST_JOIN] = "RDMA_CM_EVENT_MULTICAST_JOIN",
		[RDMA_CM_EVENT_MULTICAST_ERROR] = "RDMA_CM_EVENT_MULTICAST_ERROR",
		[RDMA_CM_EVENT_ADDR_CHANGE] = "RDMA_CM_EVENT_ADDR_CHANGE",
		[RDMA_CM_EVENT_TIMEWAIT_EXIT] = "RDMA_CM_EVENT_TIMEWAIT_EXIT",
	};
	if ((unsigned)event < sizeof(names) / sizeof(names[0]))
		return names[event];
	return "UNKNOWN EVENT";
}

/* ---- addresses ---- */

static int addr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET ? (int)sizeof(struct sockaddr_in)
	       : sa->sa_family == AF_INET6 ? (int)sizeof(struct sockaddr_in6)
					   : 0;
}

static uint16_t *port_of(struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? &((struct sockaddr_in6 *)sa)->sin6_port
					 : &((struct sockaddr_in *)sa)->sin_port;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id) { return *port_of(&id->route.addr.src_addr); }
__be16 rdma_get_dst_port(struct rdma_cm_id *id) { return *port_of(&id->route.addr.dst_addr); }

static int port_path(struct sockaddr_un *un, unsigned port)
{
	un->sun_family = AF_UNIX;
	int n = snprintf(un->sun_path, sizeof(un->sun_path), "%s/port.%u", fake_dir(), port);
	return n < 0 || (size_t)n >= sizeof(un->sun_path) ? -1 : 0;
}

static unsigned random_port(unsigned lo, unsigned span)
{
	fake_lock();
	if (!rand_state)
		rand_state = (unsigned)getpid() ^ (unsigned)time(NULL) ^ (unsigned)(uintptr_t)&rand_state;
	unsigned r = (unsigned)rand_r(&rand_state);
	fake_unlock();
	return lo + r % span;
}

/* Binds s to port's name; a name left by a dead process is taken over. */
static int bind_port(int s, unsigned port, struct sockaddr_un *un)
{
	if (port_path(un, port) < 0)
		return fail(ENAMETOOLONG);
	if (bind(s, (struct sockaddr *)un, sizeof(*un)) == 0)
		return 0;
	if (errno != EADDRINUSE)
		return -1;
	int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int stale = probe >= 0 && connect(probe, (struct sockaddr *)un, sizeof(*un)) < 0 && errno == ECONNREFUSED;
	if (probe >= 0)
		close(probe);
	if (!stale)
		return fail(EADDRINUSE);
	unlink(un->sun_path);
	return bind(s, (struct sockaddr *)un, sizeof(*un));
}

/* ---- ids ---- */

int rdma_create_id(struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context,
		   enum rdma_port_space ps)
{
	if (!fake_context())
		return -1;
	if (!channel) /* synchronous ids are not emulated */
		return fail(EINVAL);
	struct fake_id *f = calloc(1, sizeof(*f));
	if (!f)
		return fail(ENOMEM);
	f->id.channel = channel;
	f->id.context = context;
	f->id.ps = ps;
	f->id.qp_type = IBV_QPT_RC;
	f->sock = -1;
	fake_lock();
	f->next = all_ids;
	all_ids = f;
	fake_unlock();
	*id = &f->id;
	return 0;
}

/* The link has gone: what the app hears depends on how far the connection got. */
static void id_link_lost(struct fake_id *f, int local);

static void id_free(struct fake_id *f)
{
	for (struct fake_id **p = &all_ids; *p; p = &(*p)->next)
		if (*p == f) {
			*p = f->next;
			break;
		}
	if (f->link)
		fake_link_close(f->link);
	if (f->watch)
		fake_watch_del(f->watch); /* closes f->sock */
	else if (f->sock >= 0)
		close(f->sock);
	if (f->path[0])
		unlink(f->path);
	free(f);
}

/* Withdraws f's undelivered events (their eventfd counts are skipped by rdma_get_cm_event);
 * a listener's undelivered connection requests go with it. */
static void id_withdraw_events(struct fake_id *f)
{
	struct fake_chan *c = (struct fake_chan *)f->id.channel;
	for (struct fake_ev **p = &c->head; *p;) {
		struct fake_ev *e = *p;
		if (e->ev.id != &f->id && e->ev.listen_id != &f->id) {
			p = &e->next;
			continue;
		}
		*p = e->next;
		if (e->ev.listen_id == &f->id && e->ev.id != &f->id)
			id_free((struct fake_id *)e->ev.id);
		free(e);
	}
	c->tail = &c->head;
	while (*c->tail)
		c->tail = &(*c->tail)->next;
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	struct fake_id *f = (struct fake_id *)id;
	fake_lock();
	id_withdraw_events(f);
	for (struct fake_id *o = all_ids, *next; o; o = next) {
		next = o->next;
		if (o->listener != f)
			continue;
		if (o->state == ID_REQ_WAIT)
			id_free(o);
		else
			o->listener = NULL;
	}
	struct ibv_pd *pd = f->own_pd;
	if (f->link && id->qp) /* the app should have destroyed it: it stays, in error */
		fake_qp_error(id->qp);
	id_free(f);
	fake_unlock();
	if (pd)
		ibv_dealloc_pd(pd); /* EBUSY, and left, while that QP stays */
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	struct fake_id *f = (struct fake_id *)id;
	int len = addr_len(addr);
	if (!len)
		return fail(EAFNOSUPPORT);
	if (f->state != ID_IDLE)
		return fail(EINVAL);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -1;
	unsigned port = ntohs(*port_of(addr));
	struct sockaddr_un un;
	int rc = -1;
	if (port) {
		rc = bind_port(s, port, &un);
	} else {
		for (int i = 0; i < 1000 && rc < 0; i++) {
			port = random_port(20000, 40000);
			rc = bind_port(s, port, &un);
			if (rc < 0 && errno != EADDRINUSE)
				break;
		}
	}
	if (rc < 0) {
		int e = errno;
		close(s);
		return fail(e);
	}
	fake_lock();
	memcpy(&id->route.addr.src_storage, addr, (size_t)len);
	*port_of(&id->route.addr.src_addr) = htons((uint16_t)port);
	snprintf(f->path, sizeof(f->path), "%s", un.sun_path);
	f->sock = s;
	f->state = ID_BOUND;
	id->verbs = fake_context();
	id->port_num = 1;
	fake_unlock();
	return 0;
}

static void id_link_event(void *arg, int type, const void *data, size_t len);

static void listener_readable(void *arg)
{
	struct fake_id *l = arg;
	for (;;) {
		int s = accept4(l->sock, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (s < 0)
			return;
		struct fake_id *f = calloc(1, sizeof(*f));
		if (!f) {
			close(s);
			return;
		}
		f->id.verbs = fake_context();
		f->id.channel = l->id.channel;
		f->id.context = l->id.context;
		f->id.ps = l->id.ps;
		f->id.port_num = 1;
		f->id.qp_type = IBV_QPT_RC;
		f->sock = -1;
		f->state = ID_REQ_WAIT;
		f->listener = l;
		if (!(f->link = fake_link_open(s, id_link_event, f))) {
			free(f);
			continue;
		}
		f->next = all_ids;
		all_ids = f;
	}
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	struct fake_id *f = (struct fake_id *)id;
	if (f->state == ID_IDLE) {
		struct sockaddr_in any = {.sin_family = AF_INET};
		if (rdma_bind_addr(id, (struct sockaddr *)&any) < 0)
			return -1;
	}
	if (f->state != ID_BOUND)
		return fail(EINVAL);
	if (listen(f->sock, SOMAXCONN) < 0)
		return -1;
	fake_lock();
	f->watch = fake_watch_add(f->sock, listener_readable, f);
	if (f->watch)
		f->state = ID_LISTEN;
	fake_unlock();
	return f->watch ? 0 : -1;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src, struct sockaddr *dst, int timeout_ms)
{
	struct fake_id *f = (struct fake_id *)id;
	int dlen = addr_len(dst);
	if (!dlen || (src && addr_len(src) != dlen))
		return fail(EAFNOSUPPORT);
	unsigned port = random_port(32768, 28232);
	fake_lock();
	if (f->state != ID_IDLE && f->state != ID_BOUND) {
		fake_unlock();
		return fail(EINVAL);
	}
	memcpy(&id->route.addr.dst_storage, dst, (size_t)dlen);
	if (f->state == ID_IDLE) { /* the device is on every address: the source is the destination's */
		memcpy(&id->route.addr.src_storage, src ? src : dst, (size_t)dlen);
		*port_of(&id->route.addr.src_addr) = htons((uint16_t)port);
	}
	id->verbs = fake_context();
	id->port_num = 1;
	f->state = ID_ADDR;
	queue_event(f, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, NULL, 0, 0);
	fake_unlock();
	return 0;
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	struct fake_id *f = (struct fake_id *)id;
	fake_lock();
	if (f->state != ID_ADDR) {
		fake_unlock();
		return fail(EINVAL);
	}
	f->state = ID_ROUTE;
	id->route.num_paths = 1;
	queue_event(f, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, NULL, 0, 0);
	fake_unlock();
	return 0;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct fake_id *f = (struct fake_id *)id;
	if (!id->verbs || id->qp)
		return fail(EINVAL);
	if (!pd && !f->own_pd && !(f->own_pd = ibv_alloc_pd(id->verbs)))
		return -1;
	if (!pd)
		pd = f->own_pd;
	struct ibv_qp *qp = ibv_create_qp(pd, attr);
	if (!qp)
		return -1;
	fake_lock();
	id->qp = qp;
	id->send_cq = attr->send_cq;
	id->recv_cq = attr->recv_cq;
	if (f->link)
		fake_link_attach_qp(f->link, qp);
	if (f->state == ID_CONNECTED || f->state == ID_ACCEPTING)
		fake_qp_set_state(qp, IBV_QPS_RTS);
	else if (f->state == ID_DISCONNECTED || f->state == ID_DEAD)
		fake_qp_error(qp);
	fake_unlock();
	return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	if (!id->qp)
		return;
	ibv_destroy_qp(id->qp); /* detaches it from the link */
	id->qp = NULL;
}

/* ---- connections ---- */

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct fake_id *f = (struct fake_id *)id;
	struct fake_req req = {0};
	if (param) {
		if (param->private_data_len > REQ_PDATA)
			return fail(EINVAL);
		req.param = *param;
		req.param.private_data = NULL;
		if (param->private_data_len)
			memcpy(req.pdata, param->private_data, param->private_data_len);
	}
	if (f->state != ID_ROUTE)
		return fail(EINVAL);
	struct sockaddr_un un;
	if (port_path(&un, ntohs(rdma_get_dst_port(id))) < 0)
		return fail(ENAMETOOLONG);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	/* Outside the lock: a listener in this process accepts on the progress thread. */
	int rc = connect(s, (struct sockaddr *)&un, sizeof(un));
	int e = errno;
	fake_lock();
	memcpy(&req.src, &id->route.addr.src_storage, sizeof(req.src));
	memcpy(&req.dst, &id->route.addr.dst_storage, sizeof(req.dst));
	if (rc < 0) {
		close(s);
		f->state = ID_DEAD;
		if (e == ENOENT || e == ECONNREFUSED)
			queue_event(f, RDMA_CM_EVENT_REJECTED, ECONNREFUSED, NULL, NULL, 0, REJ_PDATA);
		else
			queue_event(f, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT, NULL, NULL, 0, 0);
		fake_unlock();
		return 0;
	}
	fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
	if (!(f->link = fake_link_open(s, id_link_event, f))) {
		fake_unlock();
		return -1;
	}
	if (id->qp)
		fake_link_attach_qp(f->link, id->qp);
	f->state = ID_CONNECTING;
	fake_link_ctl(f->link, FAKE_REQ, &req, sizeof(req)); /* a broken link reports itself */
	fake_unlock();
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *param)
{
	struct fake_id *f = (struct fake_id *)id;
	uint8_t pdata[REP_PDATA] = {0};
	size_t len = 0;
	if (param && param->private_data_len) {
		if (param->private_data_len > REP_PDATA)
			return fail(EINVAL);
		len = param->private_data_len;
		memcpy(pdata, param->private_data, len);
	}
	fake_lock();
	int rc = 0;
	if (f->state == ID_DEAD) { /* the connector went away meanwhile */
		queue_event(f, RDMA_CM_EVENT_CONNECT_ERROR, -ECONNRESET, NULL, NULL, 0, 0);
	} else if (f->state != ID_REQ) {
		rc = fail(EINVAL);
	} else {
		f->state = ID_ACCEPTING;
		if (id->qp)
			fake_qp_set_state(id->qp, IBV_QPS_RTS);
		fake_link_ctl(f->link, FAKE_ACCEPT, pdata, len);
	}
	fake_unlock();
	return rc;
}

int rdma_reject(struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len)
{
	struct fake_id *f = (struct fake_id *)id;
	if (private_data_len > REJ_PDATA)
		return fail(EINVAL);
	fake_lock();
	int rc = 0;
	if (f->state == ID_REQ) {
		fake_link_ctl(f->link, FAKE_REJECT, private_data, private_data_len);
		fake_link_close(f->link);
		f->link = NULL;
		f->state = ID_DEAD;
	} else if (f->state != ID_DEAD) {
		rc = fail(EINVAL);
	}
	fake_unlock();
	return rc;
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	struct fake_id *f = (struct fake_id *)id;
	fake_lock();
	int rc = 0;
	if (f->state == ID_CONNECTED || f->state == ID_ACCEPTING || f->state == ID_CONNECTING) {
		if (id->qp)
			fake_qp_error(id->qp);
		fake_link_ctl(f->link, FAKE_DISCONNECT, NULL, 0);
		id_link_lost(f, 1);
	} else if (f->state != ID_DISCONNECTED && f->state != ID_DEAD) {
		rc = fail(EINVAL);
	}
	fake_unlock();
	return rc;
}

static void id_link_lost(struct fake_id *f, int local)
{
	if (f->link) {
		fake_link_close(f->link);
		f->link = NULL;
	}
	if (f->id.qp)
		fake_qp_error(f->id.qp);
	switch (f->state) {
	case ID_REQ_WAIT: /* the app never saw it */
		id_free(f);
		return;
	case ID_CONNECTING:
		queue_event(f, local ? RDMA_CM_EVENT_DISCONNECTED : RDMA_CM_EVENT_REJECTED, local ? 0 : ECONNREFUSED,
			    NULL, NULL, 0, local ? 0 : REJ_PDATA);
		break;
	case ID_ACCEPTING:
		queue_event(f, local ? RDMA_CM_EVENT_DISCONNECTED : RDMA_CM_EVENT_CONNECT_ERROR,
			    local ? 0 : -ECONNRESET, NULL, NULL, 0, 0);
		break;
	case ID_CONNECTED:
		queue_event(f, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, NULL, 0, 0);
		break;
	default: /* ID_REQ: rdma_accept reports it */
		break;
	}
	f->state = f->state == ID_CONNECTED || local ? ID_DISCONNECTED : ID_DEAD;
}

/* Frames from the peer, with the lock held (on the progress thread). */
static void id_link_event(void *arg, int type, const void *data, size_t len)
{
	struct fake_id *f = arg;
	if (type == FAKE_REQ && f->state == ID_REQ_WAIT && len == sizeof(struct fake_req)) {
		const struct fake_req *req = data;
		struct fake_id *l = f->listener;
		if (!l) {
			id_free(f);
			return;
		}
		memcpy(&f->id.route.addr.dst_storage, &req->src, sizeof(req->src));
		memcpy(&f->id.route.addr.src_storage, &req->dst, sizeof(req->dst));
		f->id.route.num_paths = 1;
		f->state = ID_REQ;
		struct fake_ev *e = queue_event(f, RDMA_CM_EVENT_CONNECT_REQUEST, 0, l, req->pdata, REQ_PDATA, REQ_PDATA);
		struct rdma_conn_param *p = &e->ev.param.conn;
		p->responder_resources = req->param.initiator_depth;
		p->initiator_depth = req->param.responder_resources;
		p->flow_control = req->param.flow_control;
		p->retry_count = req->param.retry_count;
		p->rnr_retry_count = req->param.rnr_retry_count;
		p->srq = req->param.srq;
		p->qp_num = req->param.qp_num;
		f->listener = NULL;
	} else if (type == FAKE_ACCEPT && f->state == ID_CONNECTING) {
		f->state = ID_CONNECTED;
		if (f->id.qp)
			fake_qp_set_state(f->id.qp, IBV_QPS_RTS);
		fake_link_ctl(f->link, FAKE_RTU, NULL, 0);
		queue_event(f, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, data, len, REP_PDATA);
	} else if (type == FAKE_REJECT && f->state == ID_CONNECTING) {
		fake_link_close(f->link);
		f->link = NULL;
		f->state = ID_DEAD;
		if (f->id.qp)
			fake_qp_error(f->id.qp);
		queue_event(f, RDMA_CM_EVENT_REJECTED, REJ_CONSUMER, NULL, data, len, REJ_PDATA);
	} else if (type == FAKE_RTU && f->state == ID_ACCEPTING) {
		f->state = ID_CONNECTED;
		queue_event(f, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, NULL, 0, 0);
	} else { /* DISCONNECT, BROKEN, or out of turn */
		id_link_lost(f, 0);
	}
}

/* ---- the rest of the API a transport may reach for ---- */

int rdma_set_option(struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen) { return 0; }

struct ibv_context **rdma_get_devices(int *num_devices)
{
	struct ibv_context **list = calloc(2, sizeof(*list));
	if (!list) {
		errno = ENOMEM;
		return NULL;
	}
	list[0] = fake_context();
	if (num_devices)
		*num_devices = list[0] ? 1 : 0;
	return list;
}

void rdma_free_devices(struct ibv_context **list) { free(list); }
