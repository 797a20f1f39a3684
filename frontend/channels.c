/* Channels (client_object.h, docs/protocol.md "Channels"): the thread that opened the
 * client uses the main connection; each other thread, at its first call, attaches a
 * connection of its own to the session, so that its calls run on a daemon thread of their
 * own and wait for no other thread's. The daemon bounds them (max_channels): a thread it
 * refuses shares the main connection. A thread's channel closes when the thread exits.
 * A spare channel (the callback channel, host_functions.c) is made the same way and
 * used by no thread's calls. */
#include "client_object.h"

#include <stdlib.h>

#include "api.pb-c.h"

static __thread struct rm_client_conn *thread_conn; /* NULL until the thread's first call */

/* A channel number no other channel uses, taken; 0 when none is free. */
static uint32_t number_take(struct rm_channels *ch)
{
	uint32_t chan = 0;
	pthread_rwlock_wrlock(&ch->lock);
	for (uint32_t i = 1; i <= RM_MAX_CHANNELS && !chan; i++)
		if (!ch->taken[i])
			chan = i;
	if (chan)
		ch->taken[chan] = 1;
	pthread_rwlock_unlock(&ch->lock);
	return chan;
}

/* A channel attached under a number of its own (reader: another thread reads its link,
 * host_functions.c); NULL when the daemon offers none or refused it. */
static struct rm_client_conn *channel_make(struct rm_client *cl, int reader)
{
	if (!cl->main.attach.keylen)
		return NULL;
	uint32_t chan = number_take(&cl->channels);
	struct rm_client_conn *c = chan ? calloc(1, sizeof(*c)) : NULL;
	if (c) {
		pthread_mutex_init(&c->lock, NULL);
		pthread_mutex_init(&c->flusher_lock, NULL);
		pthread_cond_init(&c->flusher_cond, NULL);
		c->reader = reader;
		if (rm_client_channel_open(c, &cl->main, chan) == CUDA_SUCCESS)
			return c;
		pthread_cond_destroy(&c->flusher_cond);
		pthread_mutex_destroy(&c->flusher_lock);
		pthread_mutex_destroy(&c->lock);
		free(c);
	}
	if (chan) {
		pthread_rwlock_wrlock(&cl->channels.lock);
		cl->channels.taken[chan] = 0;
		pthread_rwlock_unlock(&cl->channels.lock);
	}
	return NULL;
}

/* Closes channel c made by channel_make, and gives its number back. */
static void channel_free(struct rm_client *cl, struct rm_client_conn *c)
{
	pthread_rwlock_wrlock(&cl->channels.lock);
	if (cl->channels.tab[c->chan] == c)
		cl->channels.tab[c->chan] = NULL;
	cl->channels.taken[c->chan] = 0;
	pthread_rwlock_unlock(&cl->channels.lock);
	rm_client_conn_close(c);
	pthread_cond_destroy(&c->flusher_cond);
	pthread_mutex_destroy(&c->flusher_lock);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* At a thread's exit: what it queued is run (one round trip, so that nothing is left
 * in flight when the connection closes), then its channel closes. The daemon then
 * drains and gives back the thread's per-thread streams. */
static void channel_end(void *arg)
{
	struct rm_client_conn *c = arg;
	thread_conn = &rm_process_client.main; /* a later destructor's calls share the main connection */
	if (__atomic_load_n(&c->last_async_seq, __ATOMIC_ACQUIRE) > __atomic_load_n(&c->synced_seq, __ATOMIC_ACQUIRE)) {
		Remora__CuDeviceGetCountReq req = REMORA__CU_DEVICE_GET_COUNT__REQ__INIT;
		struct rm_rpc_call call = {.op = RM_OP_cuDeviceGetCount, .req = &req.base,
					   .rep_desc = &remora__cu_device_get_count__rep__descriptor};
		rm_client_call(c, &call);
		rm_rpc_free(call.rep);
	}
	channel_free(&rm_process_client, c);
}

static void key_create(void)
{
	struct rm_channels *ch = &rm_process_client.channels;
	if (pthread_key_create(&ch->key, channel_end))
		ch->key_failed = 1;
}

/* A channel for the calling thread, or NULL: it shares the main connection. */
static struct rm_client_conn *thread_channel_open(struct rm_client *cl)
{
	struct rm_channels *ch = &cl->channels;
	pthread_once(&ch->key_once, key_create);
	struct rm_client_conn *c = ch->key_failed ? NULL : channel_make(cl, 0);
	if (!c)
		return NULL;
	if (pthread_setspecific(ch->key, c)) {
		channel_free(cl, c);
		return NULL;
	}
	pthread_rwlock_wrlock(&ch->lock);
	ch->tab[c->chan] = c;
	if ((int)c->chan > ch->hi)
		__atomic_store_n(&ch->hi, (int)c->chan, __ATOMIC_RELEASE);
	pthread_rwlock_unlock(&ch->lock);
	rm_log(RM_LOG_DEBUG, "thread channel %u attached", c->chan);
	return c;
}

struct rm_client_conn *rm_client_thread_conn(struct rm_client *cl)
{
	struct rm_client_conn *c = thread_conn;
	if (c)
		return c;
	thread_conn = &cl->main;
	if (pthread_equal(pthread_self(), cl->opener))
		return thread_conn;
	if ((c = thread_channel_open(cl)))
		thread_conn = c;
	else
		__atomic_add_fetch(&cl->channels.sharers, 1, __ATOMIC_SEQ_CST);
	return thread_conn;
}

int rm_channels_none(struct rm_client *cl)
{
	struct rm_channels *ch = &cl->channels;
	int none = !__atomic_load_n(&ch->sharers, __ATOMIC_SEQ_CST);
	if (pthread_rwlock_tryrdlock(&ch->lock))
		return 0; /* a channel opening or closing right now */
	for (int i = 1; i <= ch->hi && none; i++)
		none = !ch->tab[i];
	pthread_rwlock_unlock(&ch->lock);
	return none;
}

struct rm_client_conn *rm_channel_open_spare(void)
{
	return rm_connect_once() == CUDA_SUCCESS ? channel_make(&rm_process_client, 1) : NULL;
}

void rm_channel_close_spare(struct rm_client_conn *c)
{
	channel_free(&rm_process_client, c);
}
