/* Reading JSON that came from outside (etcd's answers, the pool's records) with json-c:
 * the parse is bounded in depth and must take the whole text, and every value is
 * checked for its type, length and range before use; one that fails reads as absent. */
#ifndef REMORA_POOL_JSON_READ_H
#define REMORA_POOL_JSON_READ_H

#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#define RM_JSON_MAX_DEPTH 16

/* Parses len bytes as one JSON value, strictly (RFC 8259, valid UTF-8), nested at most
 * RM_JSON_MAX_DEPTH deep, with nothing but white space after it. NULL when it is not.
 * Release with json_object_put. */
struct json_object *rm_json_parse(const char *text, size_t len);

/* Member key of object j, when it is an object of that type; NULL otherwise (also for a
 * j that is NULL or not an object). */
struct json_object *rm_json_member(struct json_object *j, const char *key, enum json_type type);
/* Member key as a string of at most max bytes without a NUL; NULL otherwise. */
const char *rm_json_string(struct json_object *j, const char *key, size_t max);
/* Member key as an int64: a JSON integer in range, or a string of decimal digits (etcd
 * writes int64s so); dflt otherwise. */
int64_t rm_json_int(struct json_object *j, const char *key, int64_t dflt);

#endif
