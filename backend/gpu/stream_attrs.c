/* Pool streams' attributes saved and restored (see stream_attrs.h). */
#include "stream_attrs.h"

#include <pthread.h>
#include <stdlib.h>

#include "driver_table.h"
#include "log.h"

/* The attributes a stream carries (cuda.h: "Valid for streams") that can be put back as
 * they were. Not the synchronization policy: a fresh stream's reads as unset (-1), which
 * the driver refuses to set, so a pool stream could not be given back as it came. */
static const CUstreamAttrID known[] = {
	CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW,
	CU_LAUNCH_ATTRIBUTE_PRIORITY,             CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP,
	CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN,      CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING,
};
#define NKNOWN (sizeof(known) / sizeof(known[0]))
#define GENERATION_SHIFT 40

struct saved {
	CUstream stream;
	uint64_t generation;          /* times given back */
	unsigned mask;                /* bit i: known[i] saved */
	CUstreamAttrValue value[NKNOWN];
	struct saved *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct saved *streams; /* one per pool stream ever changed or given back */

static int index_of(CUstreamAttrID a)
{
	for (size_t i = 0; i < NKNOWN; i++)
		if (known[i] == a)
			return (int)i;
	return -1;
}

int rm_stream_attrs_known(CUstreamAttrID a)
{
	return index_of(a) >= 0;
}

/* st's record, made if absent; under lock. NULL only when out of memory. */
static struct saved *record_of(CUstream st)
{
	for (struct saved *e = streams; e; e = e->next)
		if (e->stream == st)
			return e;
	struct saved *e = calloc(1, sizeof(*e));
	if (e) {
		e->stream = st;
		e->next = streams;
		streams = e;
	}
	return e;
}

CUresult rm_stream_attrs_save(CUstream st, CUstreamAttrID a)
{
	int i = index_of(a);
	if (i < 0)
		return CUDA_ERROR_INVALID_VALUE;
	CUresult r = CUDA_SUCCESS;
	pthread_mutex_lock(&lock);
	struct saved *e = record_of(st);
	if (!e)
		r = CUDA_ERROR_OUT_OF_MEMORY;
	else if (!(e->mask & 1u << i) && (r = rm_drv_cuStreamGetAttribute(st, a, &e->value[i])) == CUDA_SUCCESS)
		e->mask |= 1u << i;
	pthread_mutex_unlock(&lock);
	return r;
}

void rm_stream_attrs_given(CUstream st)
{
	pthread_mutex_lock(&lock);
	struct saved *e = record_of(st);
	if (e) {
		for (size_t i = 0; i < NKNOWN; i++) {
			if (!(e->mask & 1u << i))
				continue;
			CUresult r = rm_drv_cuStreamSetAttribute(st, known[i], &e->value[i]);
			if (r != CUDA_SUCCESS)
				rm_log(RM_LOG_WARN, "stream pool: attribute %d of stream %p not restored (%d)", (int)known[i],
				       (void *)st, (int)r);
		}
		e->mask = 0;
		e->generation++;
	}
	pthread_mutex_unlock(&lock);
}

CUresult rm_stream_attrs_id(CUstream st, unsigned long long *id)
{
	unsigned long long driver_id = 0;
	CUresult r = rm_drv_cuStreamGetId(st, &driver_id);
	if (r != CUDA_SUCCESS)
		return r;
	uint64_t generation = 0;
	pthread_mutex_lock(&lock);
	for (struct saved *e = streams; e; e = e->next)
		if (e->stream == st)
			generation = e->generation;
	pthread_mutex_unlock(&lock);
	*id = driver_id + (generation << GENERATION_SHIFT);
	return CUDA_SUCCESS;
}
