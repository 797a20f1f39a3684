/* A small JSON reader and writer for the pool's records and etcd's gateway replies.
 * The reader builds a tree with a depth bound; the writer appends to a growing buffer. */
#ifndef REMORA_POOL_JSON_H
#define REMORA_POOL_JSON_H

#include <stddef.h>
#include <stdint.h>

enum rm_json_type { RM_JSON_NULL, RM_JSON_BOOL, RM_JSON_NUMBER, RM_JSON_STRING, RM_JSON_ARRAY, RM_JSON_OBJECT };

struct rm_json {
	enum rm_json_type type;
	char *key;              /* its name inside an object; NULL elsewhere */
	char *text;             /* a string's value, or a number's digits as written */
	int boolean;
	struct rm_json *child;  /* first element or member */
	struct rm_json *next;   /* next sibling */
};

/* Parses len bytes of text; NULL when it is not one well-formed JSON value. */
struct rm_json *rm_json_parse(const char *text, size_t len);
void rm_json_free(struct rm_json *j);

/* The member key of object j, or NULL (also when j is not an object). */
const struct rm_json *rm_json_get(const struct rm_json *j, const char *key);
/* Member key as a string, or NULL when missing or not a string. */
const char *rm_json_str(const struct rm_json *j, const char *key);
/* Member key as an integer: a number, or a string of digits (etcd writes int64s so);
 * dflt when missing or not integral. */
int64_t rm_json_int(const struct rm_json *j, const char *key, int64_t dflt);

/* A growing text buffer; after a failed allocation it stays failed and rm_buf_take gives NULL. */
struct rm_buf {
	char *p;
	size_t len, cap;
	int failed;
};

void rm_buf_printf(struct rm_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string literal, quotes and escapes included. */
void rm_buf_json_string(struct rm_buf *b, const char *s);
/* Returns the text (the caller frees it) and empties b; NULL if any append failed. */
char *rm_buf_take(struct rm_buf *b);

#endif
