/* Compressed copies (compressed.h). */
#include "compressed.h"

#include <stdlib.h>

#include "driver_table.h"
#include "log.h"
#include "session.h"
#include "stream_wait.h"
#include "transport.h"
#include "zchunk.h"

/* Ends a malformed compressed copy: the session closes. */
static CUresult malformed(struct rm_channel *s, struct rm_request *rq, const char *what, uint64_t at)
{
	rm_session_log(s, RM_LOG_WARN, "a compressed copy's chunk at byte %llu: %s; closing",
		       (unsigned long long)at, what);
	rq->fatal = 1;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult rm_copy_in_compressed(struct rm_channel *s, struct rm_request *rq, CUresult r, CUstream stream,
			       uint64_t dst, uint64_t n, int waited)
{
	if (r != CUDA_SUCCESS) {
		if (rm_request_read_bulk(s, rq, NULL, rq->bulk_left))
			rq->fatal = 1;
		return r;
	}
	uint8_t *stored = malloc(RM_ZCHUNK_STORED_MAX), *raw = malloc(RM_ZCHUNK_MAX);
	uint64_t done = 0;
	while (r == CUDA_SUCCESS && done < n) {
		uint8_t hdr[RM_ZCHUNK_HEADER_LEN];
		struct rm_zchunk h;
		if (rq->bulk_left < sizeof(hdr) || rm_request_read_bulk(s, rq, hdr, sizeof(hdr))) {
			r = malformed(s, rq, "the bulk ends", done);
			break;
		}
		if (rm_zchunk_header(hdr, n - done, rq->bulk_left, &h)) {
			r = malformed(s, rq, "header out of bounds", done);
			break;
		}
		if (!stored || !raw) { /* the copy fails; the session, in step, goes on */
			if (rm_request_read_bulk(s, rq, NULL, rq->bulk_left))
				rq->fatal = 1;
			r = CUDA_ERROR_OUT_OF_MEMORY;
			break;
		}
		if (rm_request_read_bulk(s, rq, stored, h.stored)) {
			rq->fatal = 1;
			r = CUDA_ERROR_INVALID_VALUE;
			break;
		}
		if (rm_zchunk_decode(&h, stored, raw)) {
			r = malformed(s, rq, "does not decode to its length", done);
			break;
		}
		/* From pageable memory the driver has taken the bytes when it returns. */
		r = rm_drv_cuMemcpyHtoDAsync_v2(dst + done, raw, h.raw, stream);
		done += h.raw;
	}
	if (!rq->fatal && rq->bulk_left) {
		if (r == CUDA_SUCCESS)
			r = malformed(s, rq, "bytes past the copy's end", done);
		else if (rm_request_read_bulk(s, rq, NULL, rq->bulk_left))
			rq->fatal = 1;
	}
	if (r == CUDA_SUCCESS && waited)
		r = rm_stream_wait(s, stream);
	free(raw);
	free(stored);
	return r;
}

int rm_copy_out_compressed(struct rm_channel *s, struct rm_request *rq, CUstream stream, uint64_t src, uint64_t n,
			   double plain_bps)
{
	if (n > RM_COMPRESSED_OUT_MAX)
		return -1;
	uint64_t chunks = (n + RM_ZCHUNK_MAX - 1) / RM_ZCHUNK_MAX;
	size_t cap = chunks * rm_zchunk_bound(RM_ZCHUNK_MAX);
	uint8_t *host = malloc(n), *out = malloc(cap);
	if (!host || !out) {
		free(out);
		free(host);
		return -1;
	}
	CUresult r = rm_stream_wait(s, stream); /* the earlier work's error is the answer */
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuMemcpyDtoHAsync_v2(host, src, n, stream);
	if (r == CUDA_SUCCESS)
		r = rm_stream_wait(s, stream);
	if (r != CUDA_SUCCESS) {
		rm_request_finish(s, rq, r, NULL);
		goto out;
	}
	size_t len = 0;
	int pays = 1;
	for (uint64_t off = 0; off < n && pays; off += RM_ZCHUNK_MAX) {
		size_t raw = n - off < RM_ZCHUNK_MAX ? n - off : RM_ZCHUNK_MAX, got;
		uint64_t t0 = rm_transport_now_ns();
		if (rm_zchunk_encode(host + off, raw, out + len, cap - len, 0, &got)) {
			pays = 0;
			break;
		}
		if (off == 0 && !rm_zchunk_pays_at(raw, got, (double)(rm_transport_now_ns() - t0) * 1e-9, plain_bps))
			pays = 0; /* the sample: the copy goes raw */
		len += got;
	}
	if (!pays || len >= n) { /* raw: a bulk of exactly n bytes says so */
		rm_session_log(s, RM_LOG_DEBUG, "a copy of %llu bytes from the device goes uncompressed",
		               (unsigned long long)n);
		if (rm_request_reply_bulk(s, rq, n) || rm_request_send_bulk(s, host, n))
			rq->fatal = 1;
	} else {
		rm_session_log(s, RM_LOG_DEBUG, "a copy of %llu bytes from the device goes compressed in %zu",
		               (unsigned long long)n, len);
		if (rm_request_reply_bulk(s, rq, len) || rm_request_send_bulk(s, out, len))
			rq->fatal = 1;
	}
out:
	free(out);
	free(host);
	return 0;
}
