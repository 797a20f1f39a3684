/* Results of `remora bench`: the table and the JSON document. */
#include "results.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* A new row at the end of *rows; NULL when out of memory. */
static struct bench_row *grow(struct bench_row **rows, int *n, int *cap)
{
	if (*n == *cap) {
		int c = *cap ? *cap * 2 : 64;
		struct bench_row *p = realloc(*rows, (size_t)c * sizeof *p);
		if (!p)
			return NULL;
		*rows = p;
		*cap = c;
	}
	return &(*rows)[(*n)++];
}

struct bench_row *bench_add_row(struct bench_results *r, const char *section, const char *unit, double native,
				double remote, const char *metric_fmt, ...)
{
	struct bench_row *row = grow(&r->rows, &r->nrows, &r->cap_rows);
	if (!row)
		return NULL;
	*row = (struct bench_row){ .section = section, .unit = unit, .native = native, .remote = remote,
				   .ratio = remote / native, .ratio_of = "remote/native", .transport = r->transport };
	va_list ap;
	va_start(ap, metric_fmt);
	vsnprintf(row->metric, sizeof row->metric, metric_fmt, ap);
	va_end(ap);
	return row;
}

void bench_set_section(struct bench_results *r, const char *name, const char *status, const char *reason)
{
	struct bench_section *s = NULL;
	for (int i = 0; i < r->nsections; i++)
		if (!strcmp(r->sections[i].name, name) && r->sections[i].transport == r->transport)
			s = &r->sections[i];
	if (!s && r->nsections < (int)(sizeof r->sections / sizeof r->sections[0]))
		s = &r->sections[r->nsections++];
	if (!s)
		return;
	s->name = name;
	s->transport = r->transport;
	s->status = status;
	snprintf(s->reason, sizeof s->reason, "%s", reason ? reason : "");
}

void bench_add_fact(struct bench_results *r, const char *key, bool is_number, const char *fmt, ...)
{
	if (r->nfacts == (int)(sizeof r->facts / sizeof r->facts[0]))
		return;
	struct bench_fact *fact = &r->facts[r->nfacts++];
	snprintf(fact->key, sizeof fact->key, "%s", key);
	fact->is_number = is_number;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(fact->value, sizeof fact->value, fmt, ap);
	va_end(ap);
}

void bench_compare_transports(struct bench_results *r, const char *baseline)
{
	for (int i = 0; i < r->nrows; i++) {
		const struct bench_row *other = &r->rows[i];
		if (!other->transport || !strcmp(other->transport, baseline))
			continue;
		const struct bench_row *base = NULL;
		for (int j = 0; j < r->nrows && !base; j++)
			if (r->rows[j].transport && !strcmp(r->rows[j].transport, baseline) &&
			    !strcmp(r->rows[j].section, other->section) && !strcmp(r->rows[j].metric, other->metric))
				base = &r->rows[j];
		if (!base)
			continue;
		struct bench_row *c = grow(&r->compare, &r->ncompare, &r->cap_compare);
		if (!c)
			return;
		*c = *other;
		c->native = base->remote;
		c->baseline = base->transport;
		c->ratio = other->cmp_difference ? other->remote - base->remote : other->remote / base->remote;
		c->ratio_of = other->cmp_difference ? "transport-baseline" : "transport/baseline";
		c->goal = other->cmp_goal;
		c->limit = other->cmp_limit;
	}
}

int bench_row_met(const struct bench_row *row)
{
	if (row->goal == BENCH_NO_TARGET || !isfinite(row->ratio))
		return -1;
	return row->goal == BENCH_AT_MOST ? row->ratio <= row->limit : row->ratio >= row->limit;
}

static void format_number(char *out, size_t len, double v)
{
	if (!isfinite(v))
		snprintf(out, len, "-");
	else if (fabs(v) >= 1000)
		snprintf(out, len, "%.0f", v);
	else if (fabs(v) >= 10)
		snprintf(out, len, "%.2f", v);
	else
		snprintf(out, len, "%.3f", v);
}

static void print_rows(FILE *f, const char *left, const char *right, const struct bench_row *rows, int n)
{
	fprintf(f, "\n%-12s %-4s %-40s %-8s %10s %10s %7s  %-30s %s\n", "section", "via", "metric", "unit", left, right,
		"ratio", "ratio of", "target");
	for (int i = 0; i < n; i++) {
		const struct bench_row *row = &rows[i];
		char nat[32], rem[32], ratio[32], target[48] = "";
		format_number(nat, sizeof nat, row->native);
		format_number(rem, sizeof rem, row->remote);
		format_number(ratio, sizeof ratio, row->ratio);
		int met = bench_row_met(row);
		if (row->goal != BENCH_NO_TARGET)
			snprintf(target, sizeof target, "%s %.2f %s", row->goal == BENCH_AT_MOST ? "<=" : ">=", row->limit,
				 met < 0 ? "n/a" : met ? "met" : "MISSED");
		fprintf(f, "%-12s %-4s %-40s %-8s %10s %10s %7s  %-30s %s\n", row->section,
			row->transport ? row->transport : "-", row->metric, row->unit, nat, rem, ratio, row->ratio_of, target);
	}
}

void bench_print_table(const struct bench_results *r, FILE *f)
{
	int width = 22;
	for (int i = 0; i < r->nfacts; i++)
		if ((int)strlen(r->facts[i].key) > width)
			width = (int)strlen(r->facts[i].key);
	for (int i = 0; i < r->nfacts; i++)
		fprintf(f, "%-*s %s\n", width, r->facts[i].key, r->facts[i].value);
	print_rows(f, "native", "remote", r->rows, r->nrows);
	if (r->ncompare) {
		fprintf(f, "\n%s against %s, through Remora:", r->compare[0].transport, r->compare[0].baseline);
		print_rows(f, r->compare[0].baseline, r->compare[0].transport, r->compare, r->ncompare);
	}
	fprintf(f, "\n");
	for (int i = 0; i < r->nsections; i++)
		if (strcmp(r->sections[i].status, "ok"))
			fprintf(f, "section %s (%s) %s%s%s\n", r->sections[i].name,
				r->sections[i].transport ? r->sections[i].transport : "-", r->sections[i].status,
				r->sections[i].reason[0] ? ": " : "", r->sections[i].reason);
}

static void json_string(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void json_string_or_null(FILE *f, const char *s)
{
	if (s)
		json_string(f, s);
	else
		fputs("null", f);
}

static void json_number(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.6g", v);
	else
		fputs("null", f);
}

static void print_json_rows(FILE *f, const struct bench_row *rows, int n, const char *left, const char *right);

void bench_print_json(const struct bench_results *r, FILE *f)
{
	fprintf(f, "{\n  \"benchmark\": \"remora bench\",\n  \"run\": {");
	for (int i = 0; i < r->nfacts; i++) {
		fprintf(f, "%s\n    ", i ? "," : "");
		json_string(f, r->facts[i].key);
		fputs(": ", f);
		if (r->facts[i].is_number)
			fputs(r->facts[i].value, f);
		else
			json_string(f, r->facts[i].value);
	}
	fprintf(f, "\n  },\n  \"sections\": [");
	for (int i = 0; i < r->nsections; i++) {
		fprintf(f, "%s\n    {\"name\": ", i ? "," : "");
		json_string(f, r->sections[i].name);
		fputs(", \"status\": ", f);
		json_string(f, r->sections[i].status);
		fputs(", \"transport\": ", f);
		json_string_or_null(f, r->sections[i].transport);
		fputs(", \"reason\": ", f);
		if (r->sections[i].reason[0])
			json_string(f, r->sections[i].reason);
		else
			fputs("null", f);
		fputc('}', f);
	}
	fprintf(f, "\n  ],\n  \"figures\": [");
	print_json_rows(f, r->rows, r->nrows, "native", "remote");
	fprintf(f, "\n  ],\n  \"comparison\": [");
	print_json_rows(f, r->compare, r->ncompare, "baseline_value", "value");
	fprintf(f, "\n  ]\n}\n");
}

static void print_json_rows(FILE *f, const struct bench_row *rows, int n, const char *left, const char *right)
{
	for (int i = 0; i < n; i++) {
		const struct bench_row *row = &rows[i];
		fprintf(f, "%s\n    {\"section\": ", i ? "," : "");
		json_string(f, row->section);
		fputs(", \"metric\": ", f);
		json_string(f, row->metric);
		fputs(", \"unit\": ", f);
		json_string(f, row->unit);
		fputs(", \"transport\": ", f);
		json_string_or_null(f, row->transport);
		if (row->baseline) {
			fputs(", \"baseline\": ", f);
			json_string(f, row->baseline);
		}
		fprintf(f, ", \"%s\": ", left);
		json_number(f, row->native);
		fprintf(f, ", \"%s\": ", right);
		json_number(f, row->remote);
		fputs(", \"ratio\": ", f);
		json_number(f, row->ratio);
		fputs(", \"ratio_of\": ", f);
		json_string(f, row->ratio_of);
		fputs(", \"target\": ", f);
		if (row->goal == BENCH_NO_TARGET) {
			fputs("null", f);
		} else {
			int met = bench_row_met(row);
			fprintf(f, "{\"op\": \"%s\", \"limit\": ", row->goal == BENCH_AT_MOST ? "<=" : ">=");
			json_number(f, row->limit);
			fprintf(f, ", \"met\": %s}", met < 0 ? "null" : met ? "true" : "false");
		}
		fputc('}', f);
	}
}

void bench_results_free(struct bench_results *r)
{
	free(r->rows);
	r->rows = NULL;
	r->nrows = r->cap_rows = 0;
	free(r->compare);
	r->compare = NULL;
	r->ncompare = r->cap_compare = 0;
}
