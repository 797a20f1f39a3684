/* Fuzz target `json` (pool/json.c), over what etcd's gateway and the pool's records
 * hold. What parses is read through the accessors, written back with the writer and
 * parsed again: the second tree must equal the first. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static void write_value(struct rm_buf *b, const struct rm_json *j)
{
	switch (j->type) {
	case RM_JSON_NULL: rm_buf_printf(b, "null"); break;
	case RM_JSON_BOOL: rm_buf_printf(b, "%s", j->boolean ? "true" : "false"); break;
	case RM_JSON_NUMBER: rm_buf_printf(b, "%s", j->text); break;
	case RM_JSON_STRING: rm_buf_json_string(b, j->text); break;
	case RM_JSON_ARRAY:
	case RM_JSON_OBJECT:
		rm_buf_printf(b, "%c", j->type == RM_JSON_ARRAY ? '[' : '{');
		for (const struct rm_json *c = j->child; c; c = c->next) {
			if (c != j->child)
				rm_buf_printf(b, ",");
			if (j->type == RM_JSON_OBJECT) {
				rm_buf_json_string(b, c->key);
				rm_buf_printf(b, ":");
			}
			write_value(b, c);
		}
		rm_buf_printf(b, "%c", j->type == RM_JSON_ARRAY ? ']' : '}');
		break;
	}
}

static int same_text(const char *a, const char *b)
{
	return a == b || (a && b && !strcmp(a, b));
}

static int same_tree(const struct rm_json *a, const struct rm_json *b)
{
	for (; a && b; a = a->next, b = b->next)
		if (a->type != b->type || !same_text(a->key, b->key) || !same_text(a->text, b->text) ||
		    a->boolean != b->boolean || !same_tree(a->child, b->child))
			return 0;
	return !a && !b;
}

/* Every member through the accessors, as the pool's readers use them. */
static void read_members(const struct rm_json *j)
{
	for (const struct rm_json *c = j->child; c; c = c->next) {
		if (j->type == RM_JSON_OBJECT) {
			if (rm_json_get(j, c->key) == NULL)
				abort();
			rm_json_str(j, c->key);
			rm_json_int(j, c->key, -1);
		}
		read_members(c);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rm_json *j = rm_json_parse((const char *)data, size);
	if (!j)
		return 0;
	read_members(j);
	struct rm_buf b = {0};
	write_value(&b, j);
	size_t len = b.len;
	char *text = rm_buf_take(&b);
	if (!text)
		abort();
	struct rm_json *again = rm_json_parse(text, len);
	if (!again || !same_tree(j, again))
		abort();
	rm_json_free(again);
	free(text);
	rm_json_free(j);
	return 0;
}
