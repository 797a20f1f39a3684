/* A session's life (session.h): rm_session_new acquires in one order, each step undone
 * by the ladder below it where a later one fails, and rm_session_destroy releases in
 * exactly the reverse order, after what the client acquired while it was served:
 *   1. the session and its main channel, their locks
 *   2. the main connection's link
 *   3. its buffers, charged to the client's host memory
 *   -  the contexts: made by the client's first calls, they hold what 4 and 5 fill
 *   4. the main channel's staging (its buffers opened by copies)
 *   5. the kernel watch (its events made by launches)
 *   6. the host functions' hub
 * A client thread's channel is made and closed here too. */
#include "session.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "copy_links.h"
#include "driver_table.h"
#include "gpus.h"
#include "host_functions.h"
#include "kernel_timing.h"
#include "kernel_watch.h"
#include "log.h"
#include "migrate.h"
#include "registry.h"
#include "server.h"
#include "shared_host.h"
#include "spin.h"
#include "stream_pool.h"
#include "stream_wait.h"

#define STAGING_SIZE (8u << 20)

/* Who the client is, as the accepting process admitted it: no resource. */
static void set_identity(struct rm_session *sh, const struct rm_daemon_config *cfg,
			 const struct rm_handoff *h)
{
	sh->id = rm_registry()->clients[h->slot].session_id;
	sh->slot = h->slot;
	sh->tenant = h->tenant;
	snprintf(sh->tenant_name, sizeof(sh->tenant_name), "%s", h->tenant_name);
	snprintf(sh->name, sizeof(sh->name), "%s", h->name);
	sh->pid = h->pid;
	sh->hello_seq = h->hello_seq;
	uint32_t ours = (uint32_t)cfg->peer_timeout_s * 1000 / 6;
	sh->heartbeat_ms = h->heartbeat_ms && h->heartbeat_ms < ours ? h->heartbeat_ms : ours;
	if (sh->heartbeat_ms < RM_MIN_HEARTBEAT_MS)
		sh->heartbeat_ms = RM_MIN_HEARTBEAT_MS;
	sh->ndevices = h->ndevices;
	memcpy(sh->devices, h->devices, sizeof(sh->devices));
	memcpy(sh->attach_key, h->key, sizeof(sh->attach_key)); /* made by the accepting process (attach_keys.h) */
	sh->max_channels = cfg->max_channels;
	sh->shared_limit = cfg->shared_pinned_limit;
	sh->host.limit = cfg->client_host_memory_limit;
	sh->host.owner = sh->id;
}

/* Step 1: the session and its main channel, their locks. */
static struct rm_channel *alloc_session(void)
{
	struct rm_channel *s = calloc(1, sizeof(*s));
	struct rm_session *sh = calloc(1, sizeof(*sh));
	if (!s || !sh) {
		free(sh);
		free(s);
		return NULL;
	}
	s->sh = sh;
	sh->channels[0] = s;
	pthread_mutex_init(&sh->lock, NULL);
	pthread_mutex_init(&sh->copy_lock, NULL);
	pthread_rwlock_init(&sh->shared_lock, NULL);
	pthread_cond_init(&sh->channel_gone, NULL);
	pthread_cond_init(&sh->progress, NULL);
	pthread_cond_init(&sh->resumed, NULL);
	pthread_mutex_init(&s->send_lock, NULL);
	return s;
}

static void free_session(struct rm_channel *s)
{
	struct rm_session *sh = s->sh;
	free(sh->ranges);
	free(sh->streams);
	rm_migrate_drop_preloaded(sh); /* a move whose state never came */
	rm_migrate_session_free(sh);
	pthread_cond_destroy(&sh->resumed);
	pthread_mutex_destroy(&s->send_lock);
	pthread_cond_destroy(&sh->progress);
	pthread_cond_destroy(&sh->channel_gone);
	pthread_rwlock_destroy(&sh->shared_lock);
	pthread_mutex_destroy(&sh->copy_lock);
	pthread_mutex_destroy(&sh->lock);
	free(sh);
	free(s);
}

struct rm_channel *rm_session_new(struct rm_conn *conn, const struct rm_daemon_config *cfg,
				  const struct rm_handoff *h)
{
	struct rm_channel *s = alloc_session();
	if (!s)
		return NULL;
	struct rm_session *sh = s->sh;
	set_identity(sh, cfg, h);
	if (rm_link_init(&s->link, conn))
		goto fail_link;
	snprintf(s->peer, sizeof(s->peer), "%s", rm_conn_peer(conn));
	/* Its connection's read buffer and ring (unix:), of the client's choosing. */
	s->ring_bytes = RM_LINK_RBUF + rm_conn_held(conn);
	if (rm_host_account_take_essential(&sh->host, s->ring_bytes)) {
		rm_log(RM_LOG_WARN, "client %s: refused: its connection's buffers of %llu bytes pass its "
		       "client_host_memory_limit", h->name, (unsigned long long)s->ring_bytes);
		goto fail_ring;
	}
	rm_staging_init(&s->staging, STAGING_SIZE, &sh->host);
	const struct rm_tenant_config *tenant = h->tenant >= 0 && h->tenant < cfg->ntenants ? &cfg->tenants[h->tenant]
										 : &cfg->anonymous;
	int kernel_s = tenant->kernel_time_limit_s ? tenant->kernel_time_limit_s : cfg->kernel_time_limit_s;
	sh->kernel_watch = rm_kernel_watch_new((uint32_t)kernel_s * 1000u); /* NULL: none */
	sh->hostfn = rm_hostfn_hub_new(s, cfg->peer_timeout_s);          /* NULL: none */
	return s;

fail_ring:
	s->link.conn = NULL; /* the caller's still */
	rm_link_close(&s->link);
fail_link:
	free_session(s);
	return NULL;
}

/* Releases what the client acquired while it was served but its contexts and copy
 * links: its handles (its work drained first), its shared pinned regions and its stream
 * waits' words. Returns how many handles it released, with their bytes in *bytes. */
static size_t release_served(struct rm_channel *s, size_t *bytes, int *shared, uint64_t *shared_bytes)
{
	*bytes = s->sh->mem_bytes;
	size_t freed = rm_session_release_all(s);
	if (s->sh->nctx)
		rm_drv_cuCtxSetCurrent(s->sh->ctxs[0].ctx);
	*shared = rm_shared_host_release_all(s, shared_bytes); /* its work drained above */
	rm_stream_wait_release(s);
	return freed;
}

/* The contexts and what the client kept in each: timing, ordering, its streams. */
static void release_contexts(struct rm_channel *s)
{
	for (int i = 0; i < s->sh->nctx; i++) {
		struct rm_session_ctx *c = &s->sh->ctxs[i];
		rm_drv_cuCtxSetCurrent(c->ctx);
		rm_kernel_timing_release(s, c);
		rm_ctx_events_release(c);
		rm_stream_order_release(c);
		for (int k = 0; k <= RM_MAX_CHANNELS; k++)
			if (c->per_thread[k])
				rm_stream_pool_give(c->per_thread[k]);
		pthread_mutex_destroy(&c->order_lock);
		if (c->default_stream) /* else destroyed (cuCtxDestroy), its streams given back */
			rm_stream_pool_give(c->default_stream);
		rm_gpu_release(c->dev);
	}
	rm_drv_cuCtxSetCurrent(NULL);
}

void rm_session_destroy(struct rm_channel *s)
{
	rm_copy_links_close(s);
	/* Host functions still queued on its streams return at once from now on; the hub's
	 * records for host nodes go once no graph can run them (6). */
	struct rm_hostfn_hub *hostfn = s->sh->hostfn;
	rm_hostfn_hub_close(hostfn);
	s->sh->hostfn = NULL;
	size_t bytes;
	int shared;
	uint64_t shared_bytes;
	size_t freed = release_served(s, &bytes, &shared, &shared_bytes);
	rm_hostfn_hub_release(hostfn);
	rm_kernel_watch_free(s->sh->kernel_watch); /* 5 */
	s->sh->kernel_watch = NULL;
	rm_staging_close(&s->staging); /* 4 */
	release_contexts(s);
	unsigned long long spun, gated;
	rm_spin_counts(&spun, &gated);
	rm_log(RM_LOG_INFO, "session %llu (%s, %s) closed: released %zu handles, %zu bytes of device memory, "
	       "%d shared pinned regions (%llu bytes); stream waits: %llu idle, %llu by word, %llu by the driver; "
	       "this worker's waits so far: %llu spun, %llu kept from spinning by CPU pressure",
	       (unsigned long long)s->sh->id, s->sh->name, s->peer, freed, bytes, shared, (unsigned long long)shared_bytes,
	       s->sh->waits_idle, s->sh->waits_word, s->sh->waits_driver, spun, gated);
	rm_host_account_give(&s->sh->host, s->ring_bytes); /* 3 */
	rm_link_close(&s->link);                            /* 2 */
	free_session(s);                                    /* 1 */
}

/* A channel acquires, in order: its host memory (the channel and its connection's ring,
 * charged as its staging is), itself, its link, its lock and staging;
 * rm_session_channel_close releases them in reverse, after its per-thread streams. */
struct rm_channel *rm_session_channel_new(struct rm_channel *s, struct rm_conn *conn, int chan)
{
	size_t held = sizeof(struct rm_channel) + RM_LINK_RBUF + rm_conn_held(conn);
	if (rm_host_account_take(&s->sh->host, held)) {
		rm_session_log(s, RM_LOG_WARN,
		               "channel %d refused: the client or the worker holds its limit of host "
		               "memory (client_host_memory_limit, worker_host_memory_limit)",
		               chan);
		return NULL;
	}
	struct rm_channel *ch = calloc(1, sizeof(*ch));
	if (!ch)
		goto fail_alloc;
	if (rm_link_init(&ch->link, conn))
		goto fail_link;
	ch->sh = s->sh;
	ch->chan = chan;
	ch->ring_bytes = held - sizeof(*ch);
	snprintf(ch->peer, sizeof(ch->peer), "%s", rm_conn_peer(conn));
	pthread_mutex_init(&ch->send_lock, NULL);
	rm_staging_init(&ch->staging, STAGING_SIZE, &s->sh->host);
	return ch;

fail_link:
	free(ch);
fail_alloc:
	rm_host_account_give(&s->sh->host, held);
	return NULL;
}

void rm_session_channel_close(struct rm_channel *ch)
{
	struct rm_session *sh = ch->sh;
	/* Its per-thread streams: drained, forgotten and given back. */
	for (int i = 0; i < __atomic_load_n(&sh->nctx, __ATOMIC_ACQUIRE); i++) {
		struct rm_session_ctx *c = &sh->ctxs[i];
		pthread_mutex_lock(&c->order_lock);
		CUstream st = c->per_thread[ch->chan];
		c->per_thread[ch->chan] = NULL;
		c->nper_thread -= st != NULL;
		pthread_mutex_unlock(&c->order_lock);
		if (!st)
			continue;
		rm_drv_cuStreamSynchronize(st);
		rm_stream_order_remove(ch, st);
		rm_stream_pool_give(st);
	}
	rm_staging_close(&ch->staging);
	rm_drv_cuCtxSetCurrent(NULL);
	pthread_mutex_destroy(&ch->send_lock);
	rm_link_close(&ch->link);
	size_t held = sizeof(*ch) + ch->ring_bytes;
	free(ch);
	rm_host_account_give(&sh->host, held);
}

void rm_session_progress(struct rm_channel *s, uint64_t seq)
{
	__atomic_store_n(&s->done_seq, seq, __ATOMIC_RELEASE);
	if (!__atomic_load_n(&s->sh->fence_waiters, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&s->sh->lock);
	pthread_cond_broadcast(&s->sh->progress);
	pthread_mutex_unlock(&s->sh->lock);
}

void rm_session_fence(struct rm_channel *s, uint32_t chan, uint64_t seq)
{
	struct rm_session *sh = s->sh;
	if (chan > RM_MAX_CHANNELS || chan == (uint32_t)s->chan)
		return;
	pthread_mutex_lock(&sh->lock);
	__atomic_add_fetch(&sh->fence_waiters, 1, __ATOMIC_SEQ_CST);
	for (;;) {
		struct rm_channel *other = sh->channels[chan];
		if (!other || sh->closing || __atomic_load_n(&other->done_seq, __ATOMIC_ACQUIRE) >= seq)
			break;
		pthread_cond_wait(&sh->progress, &sh->lock);
	}
	__atomic_sub_fetch(&sh->fence_waiters, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&sh->lock);
}
