/* query_cache.c - answers to fixed queries kept in the client (query_cache.h).
 *
 * A hash table of (opcode, packed request) -> packed reply under one lock. It holds at most
 * MAX_ENTRIES answers; past that it starts again empty, which costs round trips, never a wrong
 * answer. A hit unpacks a fresh reply, so callers free it as they free the daemon's. */
#include "query_cache.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"

#define BUCKETS 4096
#define MAX_ENTRIES 65536
#define MAX_KEY 1024 /* bytes of packed request: larger ones are not kept */

struct entry {
	struct entry *next;
	uint32_t op;
	uint32_t key_len, value_len;
	uint8_t *value;  /* packed reply */
	uint8_t key[];   /* packed request */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry *buckets[BUCKETS];
static size_t entries;

static uint32_t hash(uint32_t op, const uint8_t *key, size_t len)
{
	uint32_t h = 2166136261u ^ op;
	for (size_t i = 0; i < len; i++)
		h = (h ^ key[i]) * 16777619u;
	return h % BUCKETS;
}

static void forget_where(int (*match)(const struct entry *, uint32_t), uint32_t op)
{
	for (size_t b = 0; b < BUCKETS; b++) {
		struct entry **link = &buckets[b];
		while (*link) {
			struct entry *e = *link;
			if (match(e, op)) {
				*link = e->next;
				free(e->value);
				free(e);
				entries--;
			} else {
				link = &e->next;
			}
		}
	}
}

static int of_op(const struct entry *e, uint32_t op) { return e->op == op; }
static int any(const struct entry *e, uint32_t op) { return (void)e, (void)op, 1; }

void rm_query_cache_forget(uint32_t op)
{
	pthread_mutex_lock(&lock);
	if (entries)
		forget_where(of_op, op);
	pthread_mutex_unlock(&lock);
}

/* A copy of the kept reply for (op, key), unpacked; NULL if none. */
static ProtobufCMessage *lookup(uint32_t op, const uint8_t *key, size_t len, const ProtobufCMessageDescriptor *desc,
				int *found)
{
	ProtobufCMessage *rep = NULL;
	*found = 0;
	pthread_mutex_lock(&lock);
	for (struct entry *e = buckets[hash(op, key, len)]; e; e = e->next) {
		if (e->op == op && e->key_len == len && memcmp(e->key, key, len) == 0) {
			*found = 1;
			if (desc)
				rep = protobuf_c_message_unpack(desc, NULL, e->value_len, e->value);
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return rep;
}

static void keep(uint32_t op, const uint8_t *key, size_t len, const ProtobufCMessage *rep)
{
	size_t value_len = rep ? protobuf_c_message_get_packed_size(rep) : 0;
	struct entry *e = malloc(sizeof *e + len);
	uint8_t *value = malloc(value_len ? value_len : 1);
	if (!e || !value) {
		free(e);
		free(value);
		return;
	}
	e->op = op;
	e->key_len = (uint32_t)len;
	e->value_len = (uint32_t)value_len;
	memcpy(e->key, key, len);
	if (rep)
		protobuf_c_message_pack(rep, value);
	e->value = value;
	pthread_mutex_lock(&lock);
	if (entries >= MAX_ENTRIES)
		forget_where(any, 0);
	uint32_t b = hash(op, key, len);
	e->next = buckets[b];
	buckets[b] = e;
	entries++;
	pthread_mutex_unlock(&lock);
}

CUresult rm_rpc_cached(uint32_t op, const ProtobufCMessage *req, const ProtobufCMessageDescriptor *rep_desc,
		       ProtobufCMessage **rep)
{
	uint8_t key[MAX_KEY];
	size_t len = protobuf_c_message_get_packed_size(req);
	if (len > sizeof key)
		return rm_rpc_simple(op, req, rep_desc, rep);
	protobuf_c_message_pack(req, key);
	int found;
	ProtobufCMessage *kept = lookup(op, key, len, rep_desc, &found);
	if (found && (kept || !rep_desc)) {
		if (rep)
			*rep = kept;
		else
			rm_rpc_free(kept);
		return CUDA_SUCCESS;
	}
	ProtobufCMessage *fresh = NULL;
	CUresult r = rm_rpc_simple(op, req, rep_desc, &fresh);
	if (r == CUDA_SUCCESS)
		keep(op, key, len, fresh);
	if (rep)
		*rep = fresh;
	else
		rm_rpc_free(fresh);
	return r;
}
