/* Checked reads of JSON through json-c (json_read.h). */
#include "json_read.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

struct json_object *rm_json_parse(const char *text, size_t len)
{
	if (len > INT_MAX - 1)
		return NULL;
	struct json_tokener *tok = json_tokener_new_ex(RM_JSON_MAX_DEPTH);
	if (!tok)
		return NULL;
	json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
	struct json_object *j = json_tokener_parse_ex(tok, text, (int)len);
	if (j && json_tokener_get_error(tok) == json_tokener_success) {
		for (size_t i = json_tokener_get_parse_end(tok); i < len && j; i++)
			if (!strchr(" \t\r\n", text[i]) || !text[i]) {
				json_object_put(j);
				j = NULL;
			}
	} else if (j) {
		json_object_put(j);
		j = NULL;
	}
	json_tokener_free(tok);
	return j;
}

struct json_object *rm_json_member(struct json_object *j, const char *key, enum json_type type)
{
	struct json_object *m = NULL;
	if (!j || !json_object_is_type(j, json_type_object) || !json_object_object_get_ex(j, key, &m) ||
	    !json_object_is_type(m, type))
		return NULL;
	return m;
}

const char *rm_json_string(struct json_object *j, const char *key, size_t max)
{
	struct json_object *m = rm_json_member(j, key, json_type_string);
	if (!m)
		return NULL;
	const char *s = json_object_get_string(m);
	size_t len = (size_t)json_object_get_string_len(m);
	return s && len <= max && strlen(s) == len ? s : NULL;
}

int64_t rm_json_int(struct json_object *j, const char *key, int64_t dflt)
{
	struct json_object *m = rm_json_member(j, key, json_type_int);
	if (m) {
		/* json-c keeps integers past INT64_MAX as uint64 and clamps them here. */
		int64_t v = json_object_get_int64(m);
		return v == INT64_MAX && json_object_get_uint64(m) != (uint64_t)INT64_MAX ? dflt : v;
	}
	const char *s = rm_json_string(j, key, 32);
	if (!s || !*s || !strchr("-0123456789", *s))
		return dflt;
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	return *end || errno ? dflt : (int64_t)v;
}
