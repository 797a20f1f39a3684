/* The fake libibverbs.so.1's process side (tests only): the one lock; the progress thread
 * that reads every link and listening socket of the process, and what a fork's child does
 * with them; and the links (fake_rdma.h), which write the frames queued on them and hand
 * those they read to their owner (cm.c's control frames), their QP (qp.c's SENDs) or the
 * RDMA responder and requester (rdma_ops.c's READs, WRITEs and answers), in the order
 * they came. */
#include "verbs_private.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

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
} st = {.epfd = -1};

void fake_lock(void) { pthread_mutex_lock(&big); }
void fake_unlock(void) { pthread_mutex_unlock(&big); }

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

/* ---- links ---- */

struct fake_out { /* a frame not yet written */
	struct fake_out *next;
	char *buf;
	size_t len, off;
	struct fake_swr *swr; /* a work request of the attached QP (a SEND's is done when written) */
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
	while (l->ohead) { /* control frames and answers; the QP's were dropped above */
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

/* Writes what it can; the SENDs written are done. */
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
		if (o->swr && o->swr->op == IBV_WC_SEND) /* a READ or WRITE waits for its answer */
			sq_done(l->qp, o->swr, IBV_WC_SUCCESS, 0);
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
int link_queue(struct fake_link *l, const struct fake_frame *f, const struct iovec *pieces, int n,
	       struct fake_swr *swr)
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
	*o = (struct fake_out){.buf = buf, .len = off, .swr = swr};
	*l->otail = o;
	l->otail = &o->next;
	if (l->ohead == o)
		link_flush(l);
	return 0;
}

int fake_link_ctl(struct fake_link *l, int type, const void *data, size_t len)
{
	struct fake_frame f = {.type = (uint32_t)type, .len = (uint32_t)len};
	struct iovec v = {(void *)data, len};
	return link_queue(l, &f, &v, 1, NULL);
}

/* On error: q's frames not yet written are dropped (the one being written still goes out
 * whole, to keep the stream in frames); their work requests flush in q's send queue. */
void link_unqueue(struct fake_qp *q)
{
	struct fake_link *l = q->link;
	if (!l)
		return;
	for (struct fake_out **p = &l->ohead; *p;) {
		struct fake_out *o = *p;
		if (!o->swr) {
			p = &o->next;
			continue;
		}
		if (o == l->ohead && o->off) {
			o->swr = NULL;
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
	if (l->qp) { /* its frames still go out; its send queue stays with it */
		for (struct fake_out *o = l->ohead; o; o = o->next)
			o->swr = NULL;
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
	int bad = 0;
	l->in_buf = NULL;
	l->in_got = 0;
	if (l->closing) {
		free(buf);
	} else if (f.type == FAKE_DATA) {
		qp_arrived(l->qp, buf, f.len, f.imm, f.flags & FAKE_WITH_IMM);
	} else if (f.type == FAKE_READ_REQ || f.type == FAKE_WRITE) {
		bad = rdma_serve(l, l->qp, buf, &f) < 0;
		free(buf);
	} else if (f.type == FAKE_READ_RESP || f.type == FAKE_ACK) {
		bad = rdma_answered(l->qp, buf, &f) < 0;
		free(buf);
	} else {
		if (l->fn)
			l->fn(l->arg, (int)f.type, buf, f.len);
		free(buf);
	}
	if (bad) /* a malformed READ, WRITE or answer: the stream is not to be trusted */
		link_broken(l);
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
