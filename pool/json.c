/* JSON: a recursive-descent reader with a nesting bound, and a text writer. */
#include "json.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32

struct reader {
	const char *p, *end;
};

static void skip_space(struct reader *r)
{
	while (r->p < r->end && (*r->p == ' ' || *r->p == '\t' || *r->p == '\n' || *r->p == '\r'))
		r->p++;
}

static int literal(struct reader *r, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(r->end - r->p) < n || memcmp(r->p, word, n))
		return -1;
	r->p += n;
	return 0;
}

static int hex4(const char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		char c = p[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= (unsigned)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v |= (unsigned)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F')
			v |= (unsigned)(c - 'A' + 10);
		else
			return -1;
	}
	*out = v;
	return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (char)(0xc0 | cp >> 6);
		o[1] = (char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (char)(0xe0 | cp >> 12);
		o[1] = (char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (char)(0xf0 | cp >> 18);
	o[1] = (char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Reads a string literal at r->p (on its opening quote); the decoded text is malloc'd. */
static char *read_string(struct reader *r)
{
	if (r->p >= r->end || *r->p != '"')
		return NULL;
	const char *s = ++r->p;
	while (r->p < r->end && *r->p != '"')
		r->p += *r->p == '\\' && r->end - r->p > 1 ? 2 : 1;
	if (r->p >= r->end)
		return NULL;
	char *out = malloc((size_t)(r->p - s) + 1), *o = out;
	if (!out)
		return NULL;
	for (const char *q = s; q < r->p; q++) {
		if ((unsigned char)*q < 0x20)
			goto bad;
		if (*q != '\\') {
			*o++ = *q;
			continue;
		}
		q++;
		switch (*q) {
		case '"': case '\\': case '/': *o++ = *q; break;
		case 'b': *o++ = '\b'; break;
		case 'f': *o++ = '\f'; break;
		case 'n': *o++ = '\n'; break;
		case 'r': *o++ = '\r'; break;
		case 't': *o++ = '\t'; break;
		case 'u': {
			unsigned cp, lo;
			if (r->p - q < 5 || hex4(q + 1, &cp))
				goto bad;
			q += 4;
			if (cp >= 0xd800 && cp < 0xdc00 && r->p - q >= 7 && q[1] == '\\' && q[2] == 'u' &&
			    !hex4(q + 3, &lo) && lo >= 0xdc00 && lo < 0xe000) {
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
				q += 6;
			}
			o += put_utf8(o, cp); /* never longer than the escape it replaces */
			break;
		}
		default: goto bad;
		}
	}
	*o = 0;
	r->p++;
	return out;
bad:
	free(out);
	return NULL;
}

static struct rm_json *read_value(struct reader *r, int depth);

static struct rm_json *read_container(struct reader *r, int depth, struct rm_json *j)
{
	char close = j->type == RM_JSON_OBJECT ? '}' : ']';
	struct rm_json **tail = &j->child;
	r->p++;
	skip_space(r);
	if (r->p < r->end && *r->p == close) {
		r->p++;
		return j;
	}
	for (;;) {
		char *key = NULL;
		skip_space(r);
		if (j->type == RM_JSON_OBJECT) {
			if (!(key = read_string(r)))
				return NULL;
			skip_space(r);
			if (r->p >= r->end || *r->p != ':') {
				free(key);
				return NULL;
			}
			r->p++;
		}
		struct rm_json *v = read_value(r, depth + 1);
		if (!v) {
			free(key);
			return NULL;
		}
		v->key = key;
		*tail = v;
		tail = &v->next;
		skip_space(r);
		if (r->p < r->end && *r->p == ',') {
			r->p++;
			continue;
		}
		if (r->p < r->end && *r->p == close) {
			r->p++;
			return j;
		}
		return NULL;
	}
}

static struct rm_json *read_value(struct reader *r, int depth)
{
	if (depth > MAX_DEPTH)
		return NULL;
	skip_space(r);
	if (r->p >= r->end)
		return NULL;
	struct rm_json *j = calloc(1, sizeof(*j));
	if (!j)
		return NULL;
	char c = *r->p;
	int ok = 0;
	if (c == '{' || c == '[') {
		j->type = c == '{' ? RM_JSON_OBJECT : RM_JSON_ARRAY;
		ok = read_container(r, depth, j) != NULL;
	} else if (c == '"') {
		j->type = RM_JSON_STRING;
		ok = (j->text = read_string(r)) != NULL;
	} else if (c == 't' || c == 'f') {
		j->type = RM_JSON_BOOL;
		j->boolean = c == 't';
		ok = !literal(r, c == 't' ? "true" : "false");
	} else if (c == 'n') {
		ok = !literal(r, "null");
	} else if (c == '-' || (c >= '0' && c <= '9')) {
		const char *s = r->p;
		while (r->p < r->end && strchr("0123456789+-.eE", *r->p))
			r->p++;
		j->type = RM_JSON_NUMBER;
		j->text = strndup(s, (size_t)(r->p - s));
		char *end;
		ok = j->text && (strtod(j->text, &end), *end == 0);
	}
	if (!ok) {
		rm_json_free(j);
		return NULL;
	}
	return j;
}

struct rm_json *rm_json_parse(const char *text, size_t len)
{
	struct reader r = {text, text + len};
	struct rm_json *j = read_value(&r, 0);
	skip_space(&r);
	if (j && r.p != r.end) {
		rm_json_free(j);
		return NULL;
	}
	return j;
}

void rm_json_free(struct rm_json *j)
{
	while (j) {
		struct rm_json *next = j->next;
		rm_json_free(j->child);
		free(j->key);
		free(j->text);
		free(j);
		j = next;
	}
}

const struct rm_json *rm_json_get(const struct rm_json *j, const char *key)
{
	if (!j || j->type != RM_JSON_OBJECT)
		return NULL;
	for (const struct rm_json *m = j->child; m; m = m->next)
		if (!strcmp(m->key, key))
			return m;
	return NULL;
}

const char *rm_json_str(const struct rm_json *j, const char *key)
{
	const struct rm_json *m = rm_json_get(j, key);
	return m && m->type == RM_JSON_STRING ? m->text : NULL;
}

int64_t rm_json_int(const struct rm_json *j, const char *key, int64_t dflt)
{
	const struct rm_json *m = rm_json_get(j, key);
	if (!m || (m->type != RM_JSON_NUMBER && m->type != RM_JSON_STRING) || !m->text[0])
		return dflt;
	char *end;
	errno = 0;
	long long v = strtoll(m->text, &end, 10);
	return *end || errno ? dflt : (int64_t)v;
}

static int grow(struct rm_buf *b, size_t more)
{
	if (b->failed)
		return -1;
	if (b->len + more + 1 <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + more + 1)
		cap *= 2;
	char *p = realloc(b->p, cap);
	if (!p) {
		b->failed = 1;
		return -1;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

void rm_buf_printf(struct rm_buf *b, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || grow(b, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(b->p + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
}

void rm_buf_json_string(struct rm_buf *b, const char *s)
{
	rm_buf_printf(b, "\"");
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			rm_buf_printf(b, "\\%c", c);
		else if (c < 0x20)
			rm_buf_printf(b, "\\u%04x", c);
		else
			rm_buf_printf(b, "%c", c);
	}
	rm_buf_printf(b, "\"");
}

char *rm_buf_take(struct rm_buf *b)
{
	char *p = b->failed ? NULL : b->p ? b->p : strdup("");
	if (b->failed)
		free(b->p);
	*b = (struct rm_buf){0};
	return p;
}
