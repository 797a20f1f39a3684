/* A share's staging pipeline (stripe.h): each link moves its pieces through two pinned
 * staging buffers, the network overlapping the DMA. */
#include "stripe.h"

#include "link.h"
#include "stream_wait.h"

static CUresult staging(struct rm_share *sh, int b, void **buf)
{
	uint64_t mark = rm_copy_profile_mark(sh->prof);
	CUresult r = rm_staging_wait(sh->staging, b, buf);
	rm_copy_profile_add(sh->prof, sh->wait, mark);
	return r;
}

/* Copies one piece between staging buffer b and the device, and records b's event; last
 * 0: a part of the piece, whose event the piece's last part records. */
static CUresult part_dma(struct rm_share *sh, int b, void *buf, struct rm_stripe_job *j, uint64_t off, size_t len,
			 int last)
{
	uint64_t mark = rm_copy_profile_mark(sh->prof);
	sh->staging->idle[b] = 0;
	CUresult r = j->to_host ? rm_drv_cuMemcpyDtoHAsync_v2(buf, j->dev + off, len, j->stream)
				: rm_drv_cuMemcpyHtoDAsync_v2(j->dev + off, buf, len, j->stream);
	if (r == CUDA_SUCCESS && last && sh->sync_after)
		sh->unrecorded = 1;
	else if (r == CUDA_SUCCESS && last)
		r = rm_staging_record(sh->staging, b, j->stream);
	rm_copy_profile_add(sh->prof, sh->dma, mark);
	return r;
}

static CUresult piece_dma(struct rm_share *sh, int b, void *buf, struct rm_stripe_job *j, uint64_t off, size_t len)
{
	return part_dma(sh, b, buf, j, off, len, 1);
}

size_t rm_share_piece(size_t staging_size, uint64_t chunk_len)
{
	uint64_t q = rm_share_quarter(chunk_len, RM_SHARE_PIECE_MIN);
	return q < staging_size ? (size_t)q : staging_size;
}

/* Walks a link's pieces of a striped copy: each chunk of the link, cut to the staging size. */
struct cursor {
	uint64_t chunk, chunks, k, pos, end;
};

static uint64_t chunk_of(const struct rm_stripe_job *j)
{
	return j->links > 1 ? rm_stripe_chunk_of(j->n, j->links, j->chunk) : j->n ? j->n : 1;
}

static void cursor_start(struct cursor *c, const struct rm_stripe_job *j)
{
	c->chunk = chunk_of(j);
	c->chunks = (j->n + c->chunk - 1) / c->chunk;
	c->k = j->index;
	c->pos = c->end = 0;
}

/* The next piece's offset and length, at most max (> 0) bytes; 0 when there is none. */
static int cursor_next(struct cursor *c, const struct rm_stripe_job *j, size_t max, uint64_t *off, size_t *len)
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

/* Reads (buf NULL: drops) len bytes of the share: link 0's are the request's own bulk. */
static int read_bytes(struct rm_share *sh, void *buf, size_t len)
{
	if (sh->bulk_rq)
		return rm_request_read_bulk(sh->session, sh->bulk_rq, buf, len);
	return buf ? rm_link_read(sh->link, buf, len) : rm_link_skip(sh->link, len);
}

/* Host to device: each piece is read into a staging buffer while the one before is copied,
 * and within a piece each part is copied once read, while the next is read (a piece that
 * is the whole copy gets its DMA under way before its last byte arrives). */
static void share_in(struct rm_share *sh, struct rm_stripe_job *j)
{
	struct cursor c;
	cursor_start(&c, j);
	uint64_t off;
	size_t len;
	for (int b = 0; cursor_next(&c, j, sh->piece, &off, &len); b ^= 1) {
		void *buf = NULL;
		if (j->result == CUDA_SUCCESS)
			j->result = staging(sh, b, &buf);
		if (j->result != CUDA_SUCCESS)
			buf = NULL; /* read and dropped, so that the link stays in step */
		size_t part = sh->parts ? (size_t)rm_share_part(len) : len;
		int queued = 0; /* parts of the piece handed to the driver */
		for (size_t at = 0; at < len; at += part) {
			size_t n = len - at < part ? len - at : part;
			if (read_bytes(sh, buf ? (uint8_t *)buf + at : NULL, n)) {
				j->link_failed = 1;
				return;
			}
			if (buf && j->result == CUDA_SUCCESS)
				j->result = part_dma(sh, b, (uint8_t *)buf + at, j, off + at, n, at + n == len);
			queued += buf && j->result == CUDA_SUCCESS;
		}
		/* A later part failed after earlier ones were queued: the buffer is still waited
		 * for before its next use (its event, or the stream's wait). */
		if (queued && j->result != CUDA_SUCCESS) {
			if (sh->sync_after)
				sh->unrecorded = 1;
			else
				rm_staging_record(sh->staging, b, j->stream);
		}
	}
}

/* Device to host: each piece (rm_share_piece) is copied to a staging buffer while the one
 * before is sent. */
static void share_out(struct rm_share *sh, struct rm_stripe_job *j)
{
	struct cursor issue, send;
	cursor_start(&issue, j);
	cursor_start(&send, j);
	uint64_t off;
	size_t len;
	void *buf[2] = {NULL, NULL};
	for (int b = 0; b < 2 && j->result == CUDA_SUCCESS && cursor_next(&issue, j, sh->piece, &off, &len); b++) {
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
	for (int b = 0; j->result == CUDA_SUCCESS && cursor_next(&send, j, sh->piece, &off, &len); b ^= 1) {
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
		if (cursor_next(&issue, j, sh->piece, &off, &len))
			j->result = piece_dma(sh, b, buf[b], j, off, len);
	}
	if (j->result != CUDA_SUCCESS && begun)
		j->link_failed = 1; /* the reply has begun: the client cannot be told but by closing */
}

void rm_share_run(struct rm_share *sh, struct rm_stripe_job *j)
{
	/* Opened first: its size, which cuts the pieces, is known once open (staging.h). */
	if (j->result == CUDA_SUCCESS)
		j->result = rm_staging_open_for(sh->staging, chunk_of(j));
	sh->parts = rm_share_in_parts(sh->link);
	sh->piece = rm_share_piece(sh->staging->size, chunk_of(j));
	if (j->to_host)
		share_out(sh, j);
	else
		share_in(sh, j);
}
