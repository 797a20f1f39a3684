/* Copies between the client and the GPU (copy.h): link 0's share through the session's
 * staging, the others' on the session's copy links (stripe.h). */
#include "copy.h"

#include <unistd.h>

#include "copy_links.h"
#include "copy_profile.h"
#include "log.h"
#include "stream_wait.h"
#include "stripe.h"

/* Link 0's share goes through the session's own staging buffers, profiled in prof. */
static CUresult session_share(struct rm_channel *s, struct rm_request *rq, struct rm_copy_profile *prof,
			      struct rm_share *sh, uint64_t n)
{
	uint64_t mark = rm_copy_profile_mark(prof);
	CUresult r = rm_staging_open_for(&s->staging, n);
	rm_copy_profile_add(prof, &prof->wait, mark);
	*sh = (struct rm_share){.link = &s->link, .bulk_rq = rq, .staging = &s->staging,
			     .session = s, .prof = prof, .wait = &prof->wait, .dma = &prof->dma};
	return r;
}

static int links_ready(struct rm_channel *s, struct rm_request *rq, uint64_t n, uint32_t links, uint64_t chunk)
{
	/* A link's attach answers the client before it counts the link (copy_links.c): a
	 * client that heard the answer may stripe over it at once, so a count short of the
	 * copy's links is looked at again for a while (1 s) before the copy is refused. Not
	 * under copy_lock, which a striped copy holds while it may wait for a host function. */
	int attached = __atomic_load_n(&s->sh->ncopy_links, __ATOMIC_ACQUIRE);
	for (int i = 0; i < 1000 && links >= 1 && links <= RM_MAX_COPY_LINKS && (int)links - 1 > attached; i++) {
		usleep(1000);
		attached = __atomic_load_n(&s->sh->ncopy_links, __ATOMIC_ACQUIRE);
	}
	if (links >= 1 && links <= RM_MAX_COPY_LINKS && links - 1 <= (uint32_t)attached &&
	    rm_stripe_chunk_ok(n, links, chunk))
		return 1;
	rm_session_log(s, RM_LOG_WARN, "a copy striped over %u links (%d attached) in chunks of %llu bytes; closing",
		       links, attached, (unsigned long long)chunk);
	rq->fatal = 1;
	return 0;
}

CUresult rm_copy_in(struct rm_channel *s, struct rm_request *rq, CUresult r, CUstream stream, uint64_t dst,
		    uint64_t n, uint32_t links, uint64_t chunk, int waited, int pageable, struct rm_copy_profile *prof)
{
	if (links == 1)
		chunk = 0;
	if (!links_ready(s, rq, n, links, chunk))
		return r;
	if (rq->frame.bulk_len != rm_stripe_share(n, links, chunk, 0)) {
		rm_session_log(s, RM_LOG_WARN, "striped copy's first share is %llu bytes, not %llu; closing",
		               (unsigned long long)rq->frame.bulk_len,
		               (unsigned long long)rm_stripe_share(n, links, chunk, 0));
		rq->fatal = 1;
		return r;
	}
	if (waited && links == 1 && n <= RM_SMALL_HTOD) {
		if (rm_request_read_bulk(s, rq, s->small_in, n)) { /* all of it: checked above */
			rq->fatal = 1;
			return r;
		}
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
			r = rm_drv_cuMemcpyHtoDAsync_v2(dst, s->small_in, n, stream);
		rm_copy_profile_add(prof, &prof->dma, mark);
		if (r == CUDA_SUCCESS && !pageable) {
			mark = rm_copy_profile_mark(prof);
			r = rm_stream_wait(s, stream);
			rm_copy_profile_add(prof, &prof->wait, mark);
		}
		return r;
	}
	struct rm_share sh0;
	CUresult staged = session_share(s, rq, prof, &sh0, n);
	struct rm_stripe_job jobs[RM_MAX_COPY_LINKS];
	for (uint32_t i = 0; i < links; i++)
		jobs[i] = (struct rm_stripe_job){.dev = dst, .n = n, .chunk = chunk, .links = links, .index = i, .stream = stream,
					      .ctx = s->thread_ctx, .result = r};
	if (staged != CUDA_SUCCESS && jobs[0].result == CUDA_SUCCESS)
		jobs[0].result = staged;
	sh0.sync_after = waited && links == 1 && n <= rm_share_piece(sh0.staging->size, n);
	rm_copy_links_run(s, &sh0, jobs, links);
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

void rm_copy_out(struct rm_channel *s, struct rm_request *rq, CUstream stream, uint64_t src, uint64_t n,
		 uint32_t links, uint64_t chunk, struct rm_copy_profile *prof)
{
	if (links == 1)
		chunk = 0;
	if (!links_ready(s, rq, n, links, chunk))
		return;
	struct rm_share sh0;
	CUresult r = session_share(s, NULL, prof, &sh0, n);
	/* The stream's earlier work is waited for first, so that its error is the answer
	 * before any byte goes; a copy in one piece waits once, after it is queued. */
	sh0.sync_after = links == 1 && n <= rm_share_piece(sh0.staging->size, n);
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
	sh0.reply_bulk = rm_stripe_share(n, links, chunk, 0);
	struct rm_stripe_job jobs[RM_MAX_COPY_LINKS];
	for (uint32_t i = 0; i < links; i++)
		jobs[i] = (struct rm_stripe_job){.to_host = 1, .dev = src, .n = n, .chunk = chunk, .links = links, .index = i,
					      .stream = stream, .ctx = s->thread_ctx};
	rm_copy_links_run(s, &sh0, jobs, links);
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
