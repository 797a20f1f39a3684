/* Host functions through the client's callback channel (host_functions.h).
 *
 * Locking: hub->lock guards the hub; a call sends under it, taking the channel's
 * send_lock inside it (nothing takes them the other way round), so the channel cannot be
 * freed while a frame goes out: rm_hostfn_channel_gone takes hub->lock first. */
#include "host_functions.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dispatch.h"
#include "log.h"
#include "remora.pb-c.h"

struct waiting {
	uint64_t id;
	int done;
	struct waiting *next;
};

/* What the driver's host function gets: one per cuLaunchHostFunc, or one per host node
 * id (kept: it runs at every launch of a graph holding the node, until the hub goes). */
struct call {
	struct rm_hostfn_hub *hub;
	uint64_t id;
	int kept;
	struct call *next; /* in hub->kept */
};

struct rm_hostfn_hub {
	pthread_mutex_t lock;
	pthread_cond_t answered; /* a call was answered, or the channel went */
	int refs;                /* the session's, and one per one-shot call the driver holds */
	int closed;              /* the session is gone: nothing more is sent */
	struct rm_channel *ch;   /* the callback channel; NULL: none (yet, or any more) */
	struct waiting *waiting; /* calls sent and not answered, newest first */
	struct call *kept;       /* host nodes' calls, freed with the hub */
	size_t nkept;
	int timeout_s;
	uint64_t session_id;
	char name[64];
};

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

struct rm_hostfn_hub *rm_hostfn_hub_new(const struct rm_channel *s, int timeout_s)
{
	struct rm_hostfn_hub *hub = calloc(1, sizeof(*hub));
	pthread_condattr_t attr;
	if (!hub)
		return NULL;
	pthread_mutex_init(&hub->lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&hub->answered, &attr);
	pthread_condattr_destroy(&attr);
	hub->refs = 1;
	hub->timeout_s = timeout_s > 0 ? timeout_s : 30;
	hub->session_id = s->sh->id;
	snprintf(hub->name, sizeof(hub->name), "%s", s->sh->name);
	return hub;
}

static void hub_unref_locked(struct rm_hostfn_hub *hub)
{
	if (--hub->refs) {
		pthread_mutex_unlock(&hub->lock);
		return;
	}
	pthread_mutex_unlock(&hub->lock);
	while (hub->kept) {
		struct call *c = hub->kept;
		hub->kept = c->next;
		free(c);
	}
	pthread_cond_destroy(&hub->answered);
	pthread_mutex_destroy(&hub->lock);
	free(hub);
}

void rm_hostfn_hub_close(struct rm_hostfn_hub *hub)
{
	if (!hub)
		return;
	pthread_mutex_lock(&hub->lock);
	hub->closed = 1;
	hub->ch = NULL;
	pthread_cond_broadcast(&hub->answered);
	pthread_mutex_unlock(&hub->lock);
}

void rm_hostfn_hub_release(struct rm_hostfn_hub *hub)
{
	if (!hub)
		return;
	rm_hostfn_hub_close(hub);
	pthread_mutex_lock(&hub->lock);
	hub_unref_locked(hub);
}

int rm_hostfn_listen(struct rm_channel *ch)
{
	struct rm_hostfn_hub *hub = ch->sh->hostfn;
	struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = RM_OP_HOST_LISTEN, .flags = RM_F_REPLY};
	int err = 0;
	if (!hub)
		return -ENOMEM;
	pthread_mutex_lock(&hub->lock);
	if (hub->ch || hub->closed || ch->chan == 0)
		err = -EBUSY; /* one per session, and never the main connection */
	pthread_mutex_lock(&ch->send_lock);
	if (err) {
		f.result = CUDA_ERROR_NOT_PERMITTED;
		rm_link_send(&ch->link, &f, NULL, NULL, 0);
	} else if (rm_link_send(&ch->link, &f, NULL, NULL, 0)) {
		err = -EPIPE;
	} else {
		/* From now on the channel is "in a call" for the liveness thread: heartbeats keep
		 * the client's callback thread, which only reads, from taking us for frozen. */
		uint64_t now = now_ns();
		__atomic_store_n(&ch->reply_begun, 0, __ATOMIC_RELAXED);
		__atomic_store_n(&ch->heartbeat_ns, now, __ATOMIC_RELAXED);
		__atomic_store_n(&ch->call_since_ns, now, __ATOMIC_RELEASE);
		ch->callbacks = 1;
		hub->ch = ch;
	}
	pthread_mutex_unlock(&ch->send_lock);
	pthread_mutex_unlock(&hub->lock);
	if (!err)
		rm_session_log(ch, RM_LOG_INFO, "channel %d is its callback channel (host functions)", ch->chan);
	return err;
}

/* A host node's id may wait more than once (two executable graphs of one graph): the
 * client answers in the order the calls went, so the oldest wait of id is the one answered. */
void rm_hostfn_done(struct rm_channel *ch, uint64_t id)
{
	struct rm_hostfn_hub *hub = ch->sh->hostfn;
	struct waiting *oldest = NULL;
	pthread_mutex_lock(&hub->lock);
	for (struct waiting *w = hub->waiting; w; w = w->next)
		if (w->id == id && !w->done)
			oldest = w;
	if (oldest)
		oldest->done = 1;
	pthread_cond_broadcast(&hub->answered);
	pthread_mutex_unlock(&hub->lock);
}

void rm_hostfn_channel_gone(struct rm_channel *ch)
{
	struct rm_hostfn_hub *hub = ch->sh->hostfn;
	if (!hub || !ch->callbacks)
		return;
	pthread_mutex_lock(&hub->lock);
	if (hub->ch == ch)
		hub->ch = NULL;
	pthread_cond_broadcast(&hub->answered);
	pthread_mutex_unlock(&hub->lock);
}

/* The driver's host function: sends the call and waits for its answer, the channel's end,
 * or the peer timeout. It runs on a thread of the driver's that other clients' host
 * functions may wait for, so it never waits longer. */
static void CUDA_CB run_call(void *arg)
{
	struct call *c = arg;
	struct rm_hostfn_hub *hub = c->hub;
	struct waiting w = {.id = c->id};
	pthread_mutex_lock(&hub->lock);
	struct rm_channel *ch = hub->ch;
	int err = -ENOTCONN;
	if (ch && !hub->closed) {
		struct rm_frame f = {.magic = RM_WIRE_MAGIC, .op = c->kept ? RM_OP_HOST_NODE_CALL : RM_OP_HOST_CALL,
				     .flags = RM_F_REPLY, .seq = c->id};
		pthread_mutex_lock(&ch->send_lock);
		err = rm_link_send(&ch->link, &f, NULL, NULL, 0);
		pthread_mutex_unlock(&ch->send_lock);
	}
	if (!err) {
		w.next = hub->waiting;
		hub->waiting = &w;
		uint64_t until = now_ns() + (uint64_t)hub->timeout_s * 1000000000u;
		struct timespec ts = {(time_t)(until / 1000000000u), (long)(until % 1000000000u)};
		while (!w.done && hub->ch == ch && !hub->closed)
			if (pthread_cond_timedwait(&hub->answered, &hub->lock, &ts) == ETIMEDOUT)
				break;
		struct waiting **p = &hub->waiting;
		while (*p != &w)
			p = &(*p)->next;
		*p = w.next;
		if (!w.done && hub->ch == ch && !hub->closed)
			rm_log(RM_LOG_WARN, "session %llu (%s): host function %llu unanswered after %d s; the stream "
			       "goes on without it", (unsigned long long)hub->session_id, hub->name,
			       (unsigned long long)c->id, hub->timeout_s);
	}
	if (!w.done)
		rm_log(RM_LOG_DEBUG, "session %llu (%s): host function %llu not run by the client",
		       (unsigned long long)hub->session_id, hub->name, (unsigned long long)c->id);
	if (c->kept) {
		pthread_mutex_unlock(&hub->lock);
		return;
	}
	free(c);
	hub_unref_locked(hub);
}

/* The hub's kept call for id, made at its first use; caller holds hub->lock. */
static struct call *kept_call_locked(struct rm_hostfn_hub *hub, uint64_t id)
{
	struct call *c = hub->kept;
	while (c && c->id != id)
		c = c->next;
	if (c || hub->nkept >= RM_MAX_HOST_NODES || !(c = calloc(1, sizeof(*c))))
		return c;
	*c = (struct call){.hub = hub, .id = id, .kept = 1, .next = hub->kept};
	hub->kept = c;
	hub->nkept++;
	return c;
}

CUresult rm_hostfn_node(struct rm_hostfn_hub *hub, uint64_t id, CUDA_HOST_NODE_PARAMS *out)
{
	CUresult r = CUDA_SUCCESS;
	if (!hub)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&hub->lock);
	struct call *c = hub->ch ? kept_call_locked(hub, id) : NULL;
	if (!hub->ch)
		r = rm_unsupported_use("a host node without a callback channel");
	else if (!c)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_unlock(&hub->lock);
	if (c)
		*out = (CUDA_HOST_NODE_PARAMS){.fn = run_call, .userData = c};
	return r;
}

uint64_t rm_hostfn_node_id(struct rm_hostfn_hub *hub, const CUDA_HOST_NODE_PARAMS *p)
{
	uint64_t id = 0;
	if (!hub || p->fn != run_call)
		return 0;
	pthread_mutex_lock(&hub->lock);
	for (struct call *c = hub->kept; c && !id; c = c->next)
		if (c == p->userData)
			id = c->id;
	pthread_mutex_unlock(&hub->lock);
	return id;
}

CUresult rm_hostfn_once(struct rm_hostfn_hub *hub, uint64_t id, CUhostFn *fn, void **data)
{
	struct call *c = hub ? calloc(1, sizeof(*c)) : NULL;
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&hub->lock);
	int open = hub->ch != NULL;
	if (open) {
		*c = (struct call){.hub = hub, .id = id};
		hub->refs++;
	}
	pthread_mutex_unlock(&hub->lock);
	if (!open) {
		free(c);
		return rm_unsupported_use("a user object without a callback channel");
	}
	*fn = run_call;
	*data = c;
	return CUDA_SUCCESS;
}

void rm_hostfn_forget(void *data)
{
	struct call *c = data;
	struct rm_hostfn_hub *hub = c->hub;
	free(c);
	pthread_mutex_lock(&hub->lock);
	hub_unref_locked(hub);
}

CUresult rm_body_cuLaunchHostFunc(struct rm_channel *s, struct rm_request *rq, const Remora__HostFunc *req)
{
	struct rm_hostfn_hub *hub = s->sh->hostfn;
	CUstream st = NULL;
	CUresult r = CUDA_SUCCESS;
	if (!hub)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (r == CUDA_SUCCESS) {
		pthread_mutex_lock(&hub->lock);
		if (!hub->ch)
			r = rm_unsupported_use("cuLaunchHostFunc without a callback channel");
		pthread_mutex_unlock(&hub->lock);
	}
	if (r == CUDA_SUCCESS)
		r = rm_session_stream_submit(s, req->stream, rq->frame.flags, &st);
	/* Captured, it becomes a host node: a kept call, run at every launch of the graph. */
	int captured = r == CUDA_SUCCESS && s->cur && __atomic_load_n(&s->cur->captures, __ATOMIC_ACQUIRE) &&
		       rm_capture_active(st);
	if (captured) {
		CUDA_HOST_NODE_PARAMS node;
		r = rm_hostfn_node(hub, req->id, &node);
		if (r == CUDA_SUCCESS)
			r = rm_drv_cuLaunchHostFunc(st, node.fn, node.userData);
	}
	struct call *c = r == CUDA_SUCCESS && !captured ? calloc(1, sizeof(*c)) : NULL;
	if (r == CUDA_SUCCESS && !captured && !c)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (c) {
		c->hub = hub;
		c->id = req->id;
		pthread_mutex_lock(&hub->lock);
		hub->refs++;
		pthread_mutex_unlock(&hub->lock);
		if ((r = rm_drv_cuLaunchHostFunc(st, run_call, c)) != CUDA_SUCCESS) {
			free(c);
			pthread_mutex_lock(&hub->lock);
			hub_unref_locked(hub);
		}
	}
	return r;
}
