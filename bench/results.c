/* Results of `remora bench`: the table and the JSON document. */
#include "results.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

struct bench_row *bench_add_row(struct bench_results *r, const char *section, const char *unit, double native,
				double remote, const char *metric_fmt, ...)
{
	if (r->nrows == r->cap_rows) {
		int cap = r->cap_rows ? r->cap_rows * 2 : 64;
		struct bench_row *rows = realloc(r->rows, (size_t)cap * sizeof *rows);
		if (!rows)
			return NULL;
		r->rows = rows;
		r->cap_rows = cap;
	}
	struct bench_row *row = &r->rows[r->nrows++];
	*row = (struct bench_row){ .section = section, .unit = unit, .native = native, .remote = remote,
				   .ratio = remote / native, .ratio_of = "remote/native" };
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
		if (!strcmp(r->sections[i].name, name))
			s = &r->sections[i];
	if (!s && r->nsections < (int)(sizeof r->sections / sizeof r->sections[0]))
		s = &r->sections[r->nsections++];
	if (!s)
		return;
	s->name = name;
	s->status = status;
	snprintf(s->reason, sizeof s->reason, "%s", reason ? reason : "");
}

void bench_add_fact(struct bench_results *r, const char *key, bool is_number, const char *fmt, ...)
{
	if (r->nfacts == (int)(sizeof r->facts / sizeof r->facts[0]))
		return;
	struct bench_fact *fact = &r->facts[r->nfacts++];
	fact->key = key;
	fact->is_number = is_number;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(fact->value, sizeof fact->value, fmt, ap);
	va_end(ap);
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

void bench_print_table(const struct bench_results *r, FILE *f)
{
	int width = 22;
	for (int i = 0; i < r->nfacts; i++)
		if ((int)strlen(r->facts[i].key) > width)
			width = (int)strlen(r->facts[i].key);
	for (int i = 0; i < r->nfacts; i++)
		fprintf(f, "%-*s %s\n", width, r->facts[i].key, r->facts[i].value);
	fprintf(f, "\n%-12s %-40s %-8s %10s %10s %7s  %-30s %s\n", "section", "metric", "unit", "native", "remote",
		"ratio", "ratio of", "target");
	for (int i = 0; i < r->nrows; i++) {
		const struct bench_row *row = &r->rows[i];
		char nat[32], rem[32], ratio[32], target[48] = "";
		format_number(nat, sizeof nat, row->native);
		format_number(rem, sizeof rem, row->remote);
		format_number(ratio, sizeof ratio, row->ratio);
		int met = bench_row_met(row);
		if (row->goal != BENCH_NO_TARGET)
			snprintf(target, sizeof target, "%s %.2f %s", row->goal == BENCH_AT_MOST ? "<=" : ">=", row->limit,
				 met < 0 ? "n/a" : met ? "met" : "MISSED");
		fprintf(f, "%-12s %-40s %-8s %10s %10s %7s  %-30s %s\n", row->section, row->metric, row->unit, nat, rem,
			ratio, row->ratio_of, target);
	}
	fprintf(f, "\n");
	for (int i = 0; i < r->nsections; i++)
		if (strcmp(r->sections[i].status, "ok"))
			fprintf(f, "section %s %s%s%s\n", r->sections[i].name, r->sections[i].status,
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

static void json_number(FILE *f, double v)
{
	if (isfinite(v))
		fprintf(f, "%.6g", v);
	else
		fputs("null", f);
}

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
		fputs(", \"reason\": ", f);
		if (r->sections[i].reason[0])
			json_string(f, r->sections[i].reason);
		else
			fputs("null", f);
		fputc('}', f);
	}
	fprintf(f, "\n  ],\n  \"figures\": [");
	for (int i = 0; i < r->nrows; i++) {
		const struct bench_row *row = &r->rows[i];
		fprintf(f, "%s\n    {\"section\": ", i ? "," : "");
		json_string(f, row->section);
		fputs(", \"metric\": ", f);
		json_string(f, row->metric);
		fputs(", \"unit\": ", f);
		json_string(f, row->unit);
		fputs(", \"native\": ", f);
		json_number(f, row->native);
		fputs(", \"remote\": ", f);
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
	fprintf(f, "\n  ]\n}\n");
}

void bench_results_free(struct bench_results *r)
{
	free(r->rows);
	r->rows = NULL;
	r->nrows = r->cap_rows = 0;
}
