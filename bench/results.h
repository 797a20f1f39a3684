/* The figures of one `remora bench` run: sections with their status, rows of
 * native and remote figures with a ratio and an optional target, and facts
 * about the run; printed as a table or as one JSON document. */
#ifndef REMORA_BENCH_RESULTS_H
#define REMORA_BENCH_RESULTS_H

#include <stdbool.h>
#include <stdio.h>

enum bench_goal { BENCH_NO_TARGET, BENCH_AT_MOST, BENCH_AT_LEAST };

struct bench_row {
	const char *section;
	char metric[80];
	const char *unit;
	double native, remote; /* NAN when not measured */
	double ratio;          /* NAN when there is none */
	const char *ratio_of;  /* what the ratio divides, e.g. "remote/native" */
	enum bench_goal goal;  /* the target applies to the ratio */
	double limit;
	const char *transport; /* how the remote figure was reached: "tcp", "shm", "tls" */
	/* Against another transport's same row (bench_compare_transports): the target the
	 * comparison has, and whether its ratio is a difference (other - baseline) instead. */
	enum bench_goal cmp_goal;
	double cmp_limit;
	bool cmp_difference;
	const char *baseline;  /* comparison rows: the transport compared against */
};

struct bench_section {
	const char *name;
	const char *transport;
	const char *status; /* "ok", "failed", "skipped" or "not selected" */
	char reason[320];
};

struct bench_fact {
	char key[96];
	char value[192];
	bool is_number;
};

struct bench_results {
	struct bench_row *rows;
	int nrows, cap_rows;
	struct bench_section sections[32];
	int nsections;
	struct bench_fact facts[64];
	int nfacts;
	const char *transport; /* rows and sections added from now on are this transport's */
	/* One transport against another (bench_compare_transports): native holds the
	 * baseline transport's remote figure, remote the other's. */
	struct bench_row *compare;
	int ncompare, cap_compare;
};

/* Adds a row with ratio remote/native and no target; the caller changes those
 * through the pointer, valid until the next row is added.  NULL when out of memory. */
struct bench_row *bench_add_row(struct bench_results *r, const char *section, const char *unit, double native,
				double remote, const char *metric_fmt, ...) __attribute__((format(printf, 6, 7)));
void bench_set_section(struct bench_results *r, const char *name, const char *status, const char *reason);
void bench_add_fact(struct bench_results *r, const char *key, bool is_number, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
/* For every row of a transport other than baseline, a comparison row against baseline's
 * row of the same section and metric: ratio other/baseline, or other - baseline where
 * the row says so, with the row's comparison target. */
void bench_compare_transports(struct bench_results *r, const char *baseline);
/* 1 met, 0 missed, -1 no target or nothing to judge. */
int bench_row_met(const struct bench_row *row);
void bench_print_table(const struct bench_results *r, FILE *f);
void bench_print_json(const struct bench_results *r, FILE *f);
void bench_results_free(struct bench_results *r);

#endif
