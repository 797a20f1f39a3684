/* cuLinkComplete: the client's gathered link (frontend/link.c) done by the driver in one
 * call: its inputs arrive as bulk, the cubin and logs go back in the reply. Typed body of a
 * hand call (proto/api.spec; messages LinkComplete, LinkCompleteReply of proto/remora.proto). */
#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "host_memory.h"
#include "log.h"
#include "remora.pb-c.h"

#define MAX_INPUTS 256               /* inputs of one link */
#define MAX_OPTIONS 32               /* options passed by value */
#define LOG_BYTES 16384              /* of each log kept for the reply */
#define MAX_CUBIN (RM_MAX_MSG_LEN - 2 * LOG_BYTES - 4096) /* what fits in a reply */

/* Options whose value is the value itself (cuda.h: CUjit_option): others carry pointers
 * into the client, which keeps them (logs, wall time). */
static int by_value(uint32_t o)
{
	switch (o) {
	case CU_JIT_MAX_REGISTERS: case CU_JIT_OPTIMIZATION_LEVEL: case CU_JIT_TARGET_FROM_CUCONTEXT:
	case CU_JIT_TARGET: case CU_JIT_FALLBACK_STRATEGY: case CU_JIT_GENERATE_DEBUG_INFO: case CU_JIT_LOG_VERBOSE:
	case CU_JIT_GENERATE_LINE_INFO: case CU_JIT_CACHE_MODE: case CU_JIT_POSITION_INDEPENDENT_CODE:
	case CU_JIT_MIN_CTA_PER_SM: case CU_JIT_MAX_THREADS_PER_BLOCK: case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
		return 1;
	default:
		return 0;
	}
}

/* Reads the inputs' bytes, each into memory of its own (the driver reads them at add). */
static CUresult add_inputs(struct rm_channel *s, struct rm_request *rq, const Remora__LinkComplete *req,
			   CUlinkState link)
{
	CUresult r = CUDA_SUCCESS;
	for (size_t i = 0; i < req->n_inputs; i++) {
		const Remora__LinkInput *in = req->inputs[i];
		uint8_t *data = in->size && in->size <= RM_MAX_IMAGE_LEN ? calloc(1, in->size + 64) : NULL;
		if (!data) /* the server drops the bulk left */
			return in->size && in->size <= RM_MAX_IMAGE_LEN ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_ERROR_INVALID_VALUE;
		if (rm_request_read_bulk(s, rq, data, in->size)) {
			free(data);
			return CUDA_ERROR_UNKNOWN; /* the connection fails (rq->fatal) */
		}
		if (r == CUDA_SUCCESS)
			r = rm_drv_cuLinkAddData_v2(link, (CUjitInputType)in->type, data, in->size, in->name, 0, NULL, NULL);
		free(data);
	}
	return r;
}

/* An input being read is host memory the daemon holds for the client, as an image being
 * loaded is: charged to its memory quota and the worker's host-memory bound meanwhile. */
static CUresult hold(struct rm_channel *s, uint64_t n)
{
	CUresult r = rm_session_charge(s, n);
	if (r == CUDA_SUCCESS && rm_host_account_take(&s->sh->host, n)) {
		rm_session_log(s, RM_LOG_WARN, "a link input of %llu bytes refused: over a host-memory limit",
			       (unsigned long long)n);
		rm_session_uncharge(s, n);
		r = CUDA_ERROR_OUT_OF_MEMORY;
	}
	return r;
}

CUresult rm_body_cuLinkComplete(struct rm_channel *s, struct rm_request *rq, const Remora__LinkComplete *req,
				Remora__LinkCompleteReply *rep)
{
	uint64_t total = 0, largest = 0;
	for (size_t i = 0; i < req->n_inputs && total <= RM_MAX_IMAGE_LEN; i++) {
		total += req->inputs[i]->size;
		largest = req->inputs[i]->size > largest ? req->inputs[i]->size : largest;
	}
	if (!s->cur || req->n_inputs > MAX_INPUTS || req->n_options > MAX_OPTIONS ||
	    req->n_options != req->n_values || total != rq->frame.bulk_len || total > RM_MAX_IMAGE_LEN)
		return s->cur ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_CONTEXT; /* the server drops the bulk */
	for (size_t i = 0; i < req->n_options; i++)
		if (!by_value(req->options[i]))
			return CUDA_ERROR_INVALID_VALUE;
	/* Options, then the logs and the wall time the reply carries. */
	CUjit_option opts[MAX_OPTIONS + 5];
	void *vals[MAX_OPTIONS + 5];
	char *logs = calloc(2, LOG_BYTES);
	if (!logs)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t n = 0;
	for (; n < req->n_options; n++) {
		opts[n] = (CUjit_option)req->options[n];
		vals[n] = (void *)(uintptr_t)req->values[n];
	}
	size_t wall = n;
	opts[n] = CU_JIT_WALL_TIME, vals[n++] = NULL;
	opts[n] = CU_JIT_INFO_LOG_BUFFER, vals[n++] = logs;
	opts[n] = CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, vals[n++] = (void *)(uintptr_t)(LOG_BYTES - 1);
	opts[n] = CU_JIT_ERROR_LOG_BUFFER, vals[n++] = logs + LOG_BYTES;
	opts[n] = CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, vals[n++] = (void *)(uintptr_t)(LOG_BYTES - 1);

	CUlinkState link = NULL;
	CUresult r = hold(s, largest); /* inputs are read one at a time */
	int held = r == CUDA_SUCCESS;
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuLinkCreate_v2((unsigned)n, opts, vals, &link);
	if (r == CUDA_SUCCESS)
		r = add_inputs(s, rq, req, link);
	if (held) {
		rm_host_account_give(&s->sh->host, largest);
		rm_session_uncharge(s, largest);
	}
	void *cubin = NULL;
	size_t size = 0;
	if (r == CUDA_SUCCESS)
		r = rm_drv_cuLinkComplete(link, &cubin, &size);
	if (r == CUDA_SUCCESS && size > MAX_CUBIN) {
		rm_session_log(s, RM_LOG_WARN, "a linked cubin of %zu bytes: more than a reply carries (%zu)", size,
			       (size_t)MAX_CUBIN);
		r = rm_unsupported_use("cuLinkComplete of a cubin larger than a reply");
	}
	/* The reply's memory outlives the link: a copy, freed once the reply is sent. */
	uint8_t *out = r == CUDA_SUCCESS ? malloc(size + 2 * LOG_BYTES) : NULL;
	if (r == CUDA_SUCCESS && !out)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	if (out) {
		memcpy(out, cubin, size);
		rep->cubin.data = out;
		rep->cubin.len = size;
	}
	if (link) { /* the logs, whatever the result */
		char *info = out ? (char *)out + size : logs, *err = out ? info + LOG_BYTES : logs + LOG_BYTES;
		if (out) {
			memcpy(info, logs, LOG_BYTES);
			memcpy(err, logs + LOG_BYTES, LOG_BYTES);
		}
		info[LOG_BYTES - 1] = err[LOG_BYTES - 1] = 0;
		rep->info_log = info;
		rep->error_log = err;
		float ms;
		uint32_t bits = (uint32_t)(uintptr_t)vals[wall];
		memcpy(&ms, &bits, sizeof(ms));
		rep->wall_time = ms;
		rep->info_log_size = (uint32_t)(uintptr_t)vals[wall + 2];
		rep->error_log_size = (uint32_t)(uintptr_t)vals[wall + 4];
		rm_drv_cuLinkDestroy(link);
	}
	rq->reply_mem = out ? (void *)out : (void *)logs; /* freed once the reply is sent */
	if (out)
		free(logs);
	return r;
}
