/* A session's copy links (copy_links.h): each with a thread of its own that runs its
 * shares of striped copies. */
#include "copy_links.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "link.h"
#include "stripe.h"

#define LINK_STAGING_SIZE (4u << 20)

struct rm_copy_link {
	struct rm_link link;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	struct rm_stripe_job *job; /* set: to do; cleared by the thread when done */
	int stop;
	struct rm_staging staging;
	size_t held; /* charged to the client's host account, beside the staging */
};

static void *link_main(void *arg)
{
	struct rm_copy_link *l = arg;
	CUcontext current = NULL;
	struct rm_time_tally unused;
	static struct rm_copy_profile no_profile;
	struct rm_share sh = {.link = &l->link, .staging = &l->staging, .prof = &no_profile, .wait = &unused, .dma = &unused};
	pthread_mutex_lock(&l->lock);
	for (;;) {
		while (!l->job && !l->stop) {
			if (!l->staging.open) {
				pthread_cond_wait(&l->changed, &l->lock);
				continue;
			}
			/* Idle with its staging open: it goes back RM_STAGING_IDLE_MS after the last copy. */
			struct timespec until;
			clock_gettime(CLOCK_REALTIME, &until);
			until.tv_sec += RM_STAGING_IDLE_MS / 1000;
			until.tv_nsec += (RM_STAGING_IDLE_MS % 1000) * 1000000L;
			if (until.tv_nsec >= 1000000000L)
				until.tv_sec++, until.tv_nsec -= 1000000000L;
			if (pthread_cond_timedwait(&l->changed, &l->lock, &until) == ETIMEDOUT && !l->job && !l->stop)
				rm_staging_release_idle(&l->staging);
		}
		if (l->stop)
			break;
		struct rm_stripe_job *j = l->job;
		pthread_mutex_unlock(&l->lock);
		if (j->ctx != current && rm_drv_cuCtxSetCurrent(j->ctx) == CUDA_SUCCESS)
			current = j->ctx;
		rm_share_run(&sh, j);
		pthread_mutex_lock(&l->lock);
		l->job = NULL;
		pthread_cond_broadcast(&l->changed);
	}
	pthread_mutex_unlock(&l->lock);
	rm_staging_close(&l->staging);
	return NULL;
}

int rm_copy_link_attach(struct rm_channel *s, struct rm_conn *conn, uint32_t index, const struct iovec *ok)
{
	/* The link, its read buffer and its connection's ring are the client's host memory. */
	size_t held = sizeof(struct rm_copy_link) + RM_LINK_RBUF + rm_conn_held(conn);
	if (rm_host_account_take(&s->sh->host, held))
		return -EDQUOT;
	struct rm_copy_link *l = calloc(1, sizeof(*l));
	int err = l ? rm_link_init(&l->link, conn) : -ENOMEM;
	if (err) {
		free(l);
		rm_host_account_give(&s->sh->host, held);
		return err;
	}
	l->held = held;
	pthread_mutex_init(&l->lock, NULL);
	pthread_cond_init(&l->changed, NULL);
	rm_staging_init(&l->staging, LINK_STAGING_SIZE, &s->sh->host);
	pthread_mutex_lock(&s->sh->copy_lock);
	if (index != (uint32_t)s->sh->ncopy_links + 1 || index >= RM_MAX_COPY_LINKS)
		err = -EPROTO; /* links are attached one after another, from 1 */
	else if (rm_conn_sendv(conn, ok, 1))
		err = -EPIPE; /* answered only once it is sure to be taken */
	else if ((err = -pthread_create(&l->thread, NULL, link_main, l)) == 0) {
		s->sh->copy_links[s->sh->ncopy_links + 1] = l;
		__atomic_store_n(&s->sh->ncopy_links, s->sh->ncopy_links + 1, __ATOMIC_RELEASE); /* copy.c reads it unlocked */
	}
	pthread_mutex_unlock(&s->sh->copy_lock);
	if (err) {
		l->link.conn = NULL; /* the caller still owns conn */
		rm_link_close(&l->link);
		free(l);
		rm_host_account_give(&s->sh->host, held);
	}
	return err;
}

void rm_copy_links_close(struct rm_channel *s)
{
	for (int i = 1; i <= s->sh->ncopy_links; i++) {
		struct rm_copy_link *l = s->sh->copy_links[i];
		pthread_mutex_lock(&l->lock);
		l->stop = 1;
		pthread_cond_broadcast(&l->changed);
		pthread_mutex_unlock(&l->lock);
		pthread_join(l->thread, NULL);
		rm_link_close(&l->link);
		rm_host_account_give(&s->sh->host, l->held);
		free(l);
		s->sh->copy_links[i] = NULL;
	}
	s->sh->ncopy_links = 0;
}

/* Runs links 1..links-1's jobs on their threads and link 0's share here (sh0). */

void rm_copy_links_run(struct rm_channel *s, struct rm_share *sh0, struct rm_stripe_job *jobs, uint32_t links)
{
	if (links > 1) /* one striped copy at a time, whichever channel it comes on */
		pthread_mutex_lock(&s->sh->copy_lock);
	for (uint32_t i = 1; i < links; i++) {
		struct rm_copy_link *l = s->sh->copy_links[i];
		pthread_mutex_lock(&l->lock);
		l->job = &jobs[i];
		pthread_cond_broadcast(&l->changed);
		pthread_mutex_unlock(&l->lock);
	}
	rm_share_run(sh0, &jobs[0]);
	for (uint32_t i = 1; i < links; i++) {
		struct rm_copy_link *l = s->sh->copy_links[i];
		pthread_mutex_lock(&l->lock);
		while (l->job)
			pthread_cond_wait(&l->changed, &l->lock);
		pthread_mutex_unlock(&l->lock);
	}
	if (links > 1)
		pthread_mutex_unlock(&s->sh->copy_lock);
}
