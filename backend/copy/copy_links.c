/* Striped copies over a session's copy links (copy_links.h). */
#include "copy_links.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "copy_profile.h"
#include "link.h"
#include "log.h"
#include "stream_wait.h"

#define LINK_STAGING_SIZE (4u << 20)

/* One link's part of a striped copy. */
struct stripe_job {
	int to_host;
	uint64_t dev, n;
	uint32_t links, index;
	CUstream stream;
	CUcontext ctx;
	CUresult result;  /* in: a failure already known (then bytes in are dropped); out: the first failure */
	int link_failed;  /* out: the link broke or fell out of step */
};

struct rm_copy_link {
	struct rm_link link;
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t changed;
	struct stripe_job *job; /* set: to do; cleared by the thread when done */
	int stop;
	struct rm_staging staging;
	size_t held; /* charged to the client's host account, beside the staging */
};

/* Where a share's bytes go through: a link and its staging. */
struct share {
	struct rm_link *link;
	uint64_t *bulk_left;  /* the request's unread bulk, for link 0; else NULL */
	/* Link 0 of a copy to the host: the reply it sends once its first piece is ready, so
	 * that the reply follows the work the copy waits for (heartbeats cover the wait). */
	struct rm_session *reply_s;
	struct rm_request *reply_rq;
	uint64_t reply_bulk;
	struct rm_staging *staging;
	struct rm_session *session; /* link 0's: the session whose thread runs it; else NULL */
	/* Link 0 of a copy in one piece that waits for its stream (a blocking one to the
	 * device, any to the host): no event is recorded for its staging buffer, since the
	 * stream is synchronized next (rm_copy_in, share_out). unrecorded: it was. */
	int sync_after, unrecorded;
	const struct rm_copy_profile *prof; /* link 0's, else an inactive one */
	struct rm_time_tally *wait, *dma;   /* where its waits and copy calls are counted */
};

static struct rm_copy_profile no_profile;

static CUresult staging(struct share *sh, int b, void **buf)
{
	uint64_t mark = rm_copy_profile_mark(sh->prof);
	CUresult r = rm_staging_wait(sh->staging, b, buf);
	rm_copy_profile_add(sh->prof, sh->wait, mark);
	return r;
}

/* Copies one piece between staging buffer b and the device, and records b's event. */
static CUresult piece_dma(struct share *sh, int b, void *buf, struct stripe_job *j, uint64_t off, size_t len)
{
	uint64_t mark = rm_copy_profile_mark(sh->prof);
	sh->staging->idle[b] = 0;
	CUresult r = j->to_host ? rm_drv.cuMemcpyDtoHAsync_v2(buf, j->dev + off, len, j->stream)
				: rm_drv.cuMemcpyHtoDAsync_v2(j->dev + off, buf, len, j->stream);
	if (r == CUDA_SUCCESS && sh->sync_after)
		sh->unrecorded = 1;
	else if (r == CUDA_SUCCESS)
		r = rm_drv.cuEventRecord(sh->staging->done[b], j->stream);
	rm_copy_profile_add(sh->prof, sh->dma, mark);
	return r;
}

/* Walks a link's pieces of a striped copy: each chunk of the link, cut to the staging size. */
struct cursor {
	uint64_t chunk, chunks, k, pos, end;
};

static void cursor_start(struct cursor *c, const struct stripe_job *j)
{
	c->chunk = j->links > 1 ? rm_stripe_chunk(j->n, j->links) : j->n ? j->n : 1;
	c->chunks = (j->n + c->chunk - 1) / c->chunk;
	c->k = j->index;
	c->pos = c->end = 0;
}

/* The next piece's offset and length, at most max (> 0) bytes; 0 when there is none. */
static int cursor_next(struct cursor *c, const struct stripe_job *j, size_t max, uint64_t *off, size_t *len)
{
	if (c->pos == c->end) {
		if (c->k >= c->chunks)
			return 0;
		c->pos = c->k * c->chunk;
		c->end = c->pos + c->chunk < j->n ? c->pos + c->chunk : j->n;
		c->k += j->links;
	}
	*off = c->pos;
	*len = c->end - c->pos < max ? (size_t)(c->end - c->pos) : max;
	c->pos += *len;
	return 1;
}

static int read_bytes(struct share *sh, void *buf, size_t len)
{
	if (sh->bulk_left) {
		if (len > *sh->bulk_left)
			return -EPROTO;
		*sh->bulk_left -= len;
	}
	return buf ? rm_link_read(sh->link, buf, len) : rm_link_skip(sh->link, len);
}

/* Host to device: each piece is read into a staging buffer while the one before is copied. */
static void share_in(struct share *sh, struct stripe_job *j)
{
	struct cursor c;
	cursor_start(&c, j);
	uint64_t off;
	size_t len;
	for (int b = 0; cursor_next(&c, j, sh->staging->size, &off, &len); b ^= 1) {
		void *buf = NULL;
		if (j->result == CUDA_SUCCESS)
			j->result = staging(sh, b, &buf);
		if (j->result != CUDA_SUCCESS)
			buf = NULL; /* read and dropped, so that the link stays in step */
		if (read_bytes(sh, buf, len)) {
			j->link_failed = 1;
			return;
		}
		if (buf)
			j->result = piece_dma(sh, b, buf, j, off, len);
	}
}

/* Device to host: each piece is copied to a staging buffer while the one before is sent. */
static void share_out(struct share *sh, struct stripe_job *j)
{
	struct cursor issue, send;
	cursor_start(&issue, j);
	cursor_start(&send, j);
	uint64_t off;
	size_t len;
	void *buf[2] = {NULL, NULL};
	for (int b = 0; b < 2 && j->result == CUDA_SUCCESS && cursor_next(&issue, j, sh->staging->size, &off, &len); b++) {
		j->result = staging(sh, b, &buf[b]);
		if (j->result == CUDA_SUCCESS)
			j->result = piece_dma(sh, b, buf[b], j, off, len);
	}
	if (sh->unrecorded) { /* one piece: the stream's wait covers the work before it and the copy */
		uint64_t mark = rm_copy_profile_mark(sh->prof);
		CUresult synced = rm_stream_wait(sh->session, j->stream);
		rm_copy_profile_add(sh->prof, sh->wait, mark);
		rm_staging_idle(sh->staging, 0);
		if (j->result == CUDA_SUCCESS)
			j->result = synced;
	}
	int begun = !sh->reply_rq; /* bytes of the share may have gone: an error can only close */
	for (int b = 0; j->result == CUDA_SUCCESS && cursor_next(&send, j, sh->staging->size, &off, &len); b ^= 1) {
		void *ready;
		j->result = staging(sh, b, &ready);
		if (j->result != CUDA_SUCCESS)
			break;
		if (!begun && rm_request_reply_bulk(sh->reply_s, sh->reply_rq, sh->reply_bulk)) {
			j->link_failed = 1;
			return;
		}
		begun = 1;
		struct iovec v = {ready, len};
		if (rm_conn_sendv(sh->link->conn, &v, 1)) {
			j->link_failed = 1;
			return;
		}
		if (cursor_next(&issue, j, sh->staging->size, &off, &len))
			j->result = piece_dma(sh, b, buf[b], j, off, len);
	}
	if (j->result != CUDA_SUCCESS && begun)
		j->link_failed = 1; /* the reply has begun: the client cannot be told but by closing */
}

static void run_share(struct share *sh, struct stripe_job *j)
{
	/* Opened first: its size, which cuts the pieces, is known once open (staging.h). */
	if (j->result == CUDA_SUCCESS)
		j->result = rm_staging_open_for(sh->staging, j->links > 1 ? rm_stripe_chunk(j->n, j->links) : j->n);
	if (j->to_host)
		share_out(sh, j);
	else
		share_in(sh, j);
}

static void *link_main(void *arg)
{
	struct rm_copy_link *l = arg;
	CUcontext current = NULL;
	struct rm_time_tally unused;
	struct share sh = {.link = &l->link, .staging = &l->staging, .prof = &no_profile, .wait = &unused, .dma = &unused};
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
		struct stripe_job *j = l->job;
		pthread_mutex_unlock(&l->lock);
		if (j->ctx != current && rm_drv.cuCtxSetCurrent(j->ctx) == CUDA_SUCCESS)
			current = j->ctx;
		run_share(&sh, j);
		pthread_mutex_lock(&l->lock);
		l->job = NULL;
		pthread_cond_broadcast(&l->changed);
	}
	pthread_mutex_unlock(&l->lock);
	rm_staging_close(&l->staging);
	return NULL;
}

int rm_copy_link_attach(struct rm_session *s, struct rm_conn *conn, uint32_t index, const struct iovec *ok)
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
	else if ((err = -pthread_create(&l->thread, NULL, link_main, l)) == 0)
		s->sh->copy_links[++s->sh->ncopy_links] = l;
	pthread_mutex_unlock(&s->sh->copy_lock);
	if (err) {
		l->link.conn = NULL; /* the caller still owns conn */
		rm_link_close(&l->link);
		free(l);
		rm_host_account_give(&s->sh->host, held);
	}
	return err;
}

void rm_copy_links_close(struct rm_session *s)
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
static void run_striped(struct rm_session *s, struct share *sh0, struct stripe_job *jobs, uint32_t links)
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
	run_share(sh0, &jobs[0]);
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

/* Link 0's share goes through the session's own staging buffers, profiled in prof. */
static CUresult session_share(struct rm_session *s, struct rm_request *rq, struct rm_copy_profile *prof,
			      struct share *sh, uint64_t n)
{
	uint64_t mark = rm_copy_profile_mark(prof);
	CUresult r = rm_staging_open_for(&s->staging, n);
	rm_copy_profile_add(prof, &prof->wait, mark);
	*sh = (struct share){.link = &s->link, .bulk_left = rq ? &rq->bulk_left : NULL, .staging = &s->staging,
			     .session = s, .prof = prof, .wait = &prof->wait, .dma = &prof->dma};
	return r;
}

static int links_ready(struct rm_session *s, struct rm_request *rq, uint32_t links)
{
	if (links >= 1 && links <= RM_MAX_COPY_LINKS && links - 1 <= (uint32_t)s->sh->ncopy_links)
		return 1;
	rm_session_log(s, RM_LOG_WARN, "a copy striped over %u links, %d attached; closing", links, s->sh->ncopy_links);
	rq->fatal = 1;
	return 0;
}

CUresult rm_copy_in(struct rm_session *s, struct rm_request *rq, CUresult r, CUstream stream, uint64_t dst,
		    uint64_t n, uint32_t links, int waited, int pageable, struct rm_copy_profile *prof)
{
	if (!links_ready(s, rq, links))
		return r;
	if (rq->frame.bulk_len != rm_stripe_share(n, links, 0)) {
		rm_session_log(s, RM_LOG_WARN, "striped copy's first share is %llu bytes, not %llu; closing",
		               (unsigned long long)rq->frame.bulk_len,
		               (unsigned long long)rm_stripe_share(n, links, 0));
		rq->fatal = 1;
		return r;
	}
	if (waited && links == 1 && n <= RM_SMALL_HTOD) {
		if (rm_link_read(&s->link, s->small_in, n)) {
			rq->fatal = 1;
			return r;
		}
		rq->bulk_left -= n; /* == n: checked above */
		/* CUDA: from pageable memory, the stream's earlier work is waited for before the
		 * copy, which then returns once its bytes are staged; from page-locked memory the
		 * copy has reached the device when it returns. */
		prof->host = pageable ? "small-pageable" : "small";
		if (r == CUDA_SUCCESS && pageable) {
			uint64_t mark = rm_copy_profile_mark(prof);
			r = rm_stream_wait(s, stream);
			rm_copy_profile_add(prof, &prof->wait, mark);
		}
		uint64_t mark = rm_copy_profile_mark(prof);
		if (r == CUDA_SUCCESS)
			r = rm_drv.cuMemcpyHtoDAsync_v2(dst, s->small_in, n, stream);
		rm_copy_profile_add(prof, &prof->dma, mark);
		if (r == CUDA_SUCCESS && !pageable) {
			mark = rm_copy_profile_mark(prof);
			r = rm_stream_wait(s, stream);
			rm_copy_profile_add(prof, &prof->wait, mark);
		}
		return r;
	}
	struct share sh0;
	CUresult staged = session_share(s, rq, prof, &sh0, n);
	struct stripe_job jobs[RM_MAX_COPY_LINKS];
	for (uint32_t i = 0; i < links; i++)
		jobs[i] = (struct stripe_job){.dev = dst, .n = n, .links = links, .index = i, .stream = stream,
					      .ctx = s->thread_ctx, .result = r};
	if (staged != CUDA_SUCCESS && jobs[0].result == CUDA_SUCCESS)
		jobs[0].result = staged;
	sh0.sync_after = waited && links == 1 && n <= sh0.staging->size;
	run_striped(s, &sh0, jobs, links);
	for (uint32_t i = 0; i < links; i++) {
		if (jobs[i].link_failed)
			rq->fatal = 1;
		if (r == CUDA_SUCCESS)
			r = jobs[i].result;
	}
	/* An unrecorded piece is always waited for: its buffer is free only after. */
	if ((waited && r == CUDA_SUCCESS && !rq->fatal) || sh0.unrecorded) {
		uint64_t mark = rm_copy_profile_mark(prof);
		CUresult synced = rm_stream_wait(s, stream);
		rm_copy_profile_add(prof, &prof->wait, mark);
		if (sh0.unrecorded)
			rm_staging_idle(sh0.staging, 0);
		if (r == CUDA_SUCCESS)
			r = synced;
	}
	return r;
}

void rm_copy_out(struct rm_session *s, struct rm_request *rq, CUstream stream, uint64_t src, uint64_t n,
		 uint32_t links, struct rm_copy_profile *prof)
{
	if (!links_ready(s, rq, links))
		return;
	struct share sh0;
	CUresult r = session_share(s, NULL, prof, &sh0, n);
	/* The stream's earlier work is waited for first, so that its error is the answer
	 * before any byte goes; a copy in one piece waits once, after it is queued. */
	sh0.sync_after = links == 1 && n <= sh0.staging->size;
	if (r == CUDA_SUCCESS && !sh0.sync_after) {
		uint64_t mark = rm_copy_profile_mark(prof);
		r = rm_stream_wait(s, stream);
		rm_copy_profile_add(prof, &prof->wait, mark);
	}
	if (r != CUDA_SUCCESS) {
		rm_request_finish(s, rq, r, NULL);
		return;
	}
	sh0.reply_s = s;
	sh0.reply_rq = rq;
	sh0.reply_bulk = rm_stripe_share(n, links, 0);
	struct stripe_job jobs[RM_MAX_COPY_LINKS];
	for (uint32_t i = 0; i < links; i++)
		jobs[i] = (struct stripe_job){.to_host = 1, .dev = src, .n = n, .links = links, .index = i,
					      .stream = stream, .ctx = s->thread_ctx};
	run_striped(s, &sh0, jobs, links);
	if (!rq->replied) { /* link 0 failed before its first byte */
		if (links > 1)
			rq->fatal = 1; /* the other links' shares may be on their way: out of step */
		else
			rm_request_finish(s, rq, jobs[0].result != CUDA_SUCCESS ? jobs[0].result : CUDA_ERROR_UNKNOWN, NULL);
		return;
	}
	for (uint32_t i = 0; i < links; i++)
		if (jobs[i].link_failed) {
			rm_session_log(s, RM_LOG_ERROR,
			               "copy from the GPU failed on link %u (%d) after the reply began; closing", i,
			               jobs[i].result);
			rq->fatal = 1;
		}
}
