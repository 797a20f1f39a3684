/* remora bench: a section's workers run natively and through Remora, and the rows of
 * what they report (bench.h). */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void bench_size_name(char *out, size_t len, size_t bytes)
{
	if (bytes >= ((size_t)1 << 30))
		snprintf(out, len, "%zu GiB", bytes >> 30);
	else if (bytes >= MIB)
		snprintf(out, len, "%zu MiB", bytes >> 20);
	else
		snprintf(out, len, "%zu KiB", bytes >> 10);
}

/* The cached native outputs of key (n of them) copied into outs: true, or false when not
 * cached (a failed copy is an output that failed). */
static bool native_cached(struct bench_run *run, const char *key, int n, struct bench_output *outs)
{
	int first = -1;
	for (int i = 0; i < run->ncached && first < 0; i++)
		if (!strcmp(run->cached[i].key, key))
			first = i;
	if (first < 0 || first + n > run->ncached)
		return false;
	for (int i = 0; i < n; i++)
		if (bench_output_copy(&outs[i], &run->cached[first + i].out))
			outs[i].exit_status = -1, snprintf(outs[i].reason, sizeof outs[i].reason, "out of memory");
	return true;
}

/* Keeps n native outputs under key for the passes of the other transports. */
static void native_keep(struct bench_run *run, const char *key, int n, const struct bench_output *outs)
{
	if (run->cfg->ntransports < 2 || run->ncached + n > MAX_CACHED)
		return;
	for (int i = 0; i < n; i++) {
		struct native_result *c = &run->cached[run->ncached];
		snprintf(c->key, sizeof c->key, "%s", key);
		if (!bench_output_copy(&c->out, &outs[i]))
			run->ncached++;
	}
}

/* The native side's outputs of n copies of argv under key: run on the first pass, the
 * copies kept for the passes of the other transports. Returns the number that failed. */
int bench_run_native(struct bench_run *run, const char *key, char *const argv[], int n, bool gate,
		     struct bench_output *outs)
{
	int failed = 0;
	if (native_cached(run, key, n, outs)) {
		for (int i = 0; i < n; i++)
			failed += outs[i].exit_status != 0;
		return failed;
	}
	failed = bench_run_workers(&run->native, argv, n, gate, WORKER_TIMEOUT_S, run->tmpdir, outs);
	native_keep(run, key, n, outs);
	return failed;
}

/* Runs argv natively (once, for the first transport; section is its key) and then remotely,
 * --repeat times in turns, each side's figures the median of its runs; 0 when both
 * succeeded, else -1 with the reasons in reason. */
int bench_run_both(struct bench_run *run, const char *section, char *const argv[], struct bench_output *nat,
		   struct bench_output *rem, char *reason, size_t len)
{
	int n = run->cfg->repeat > 1 ? run->cfg->repeat : 1;
	struct bench_output nats[BENCH_MAX_REPEAT] = {0}, rems[BENCH_MAX_REPEAT] = {0};
	bool cached = native_cached(run, section, 1, nat);
	for (int i = 0; i < n; i++) {
		if (!cached) {
			fprintf(stderr, "remora bench: %s native (%d of %d)\n", section, i + 1, n);
			bench_run_workers(&run->native, argv, 1, false, WORKER_TIMEOUT_S, run->tmpdir, &nats[i]);
		}
		fprintf(stderr, "remora bench: %s %s (%d of %d)\n", section, run->remote.name, i + 1, n);
		bench_run_workers(&run->remote, argv, 1, false, WORKER_TIMEOUT_S, run->tmpdir, &rems[i]);
	}
	if (!cached) {
		if (bench_output_median(nat, nats, n))
			*nat = (struct bench_output){.exit_status = -1, .reason = "out of memory"};
		native_keep(run, section, 1, nat);
	}
	if (bench_output_median(rem, rems, n))
		*rem = (struct bench_output){.exit_status = -1, .reason = "out of memory"};
	for (int i = 0; i < n; i++) {
		bench_output_free(&nats[i]);
		bench_output_free(&rems[i]);
	}
	reason[0] = 0;
	if (nat->exit_status)
		snprintf(reason, len, "native: %s", nat->reason);
	if (rem->exit_status)
		snprintf(reason + strlen(reason), len - strlen(reason), "%sremote: %s", reason[0] ? "; " : "",
			 rem->reason);
	return nat->exit_status || rem->exit_status ? -1 : 0;
}

double bench_number_or_nan(const struct bench_output *out, const char *key)
{
	double v;
	return bench_output_number(out, key, &v) ? v : NAN;
}

/* A row of one key of both outputs, ratio remote/native. */
struct bench_row *bench_pair_row(struct bench_run *run, const char *section, const struct bench_output *nat,
				 const struct bench_output *rem, const char *key, const char *unit, const char *metric)
{
	return bench_add_row(&run->results, section, unit, bench_number_or_nan(nat, key), bench_number_or_nan(rem, key),
			     "%s", metric);
}

int bench_finish_section(struct bench_run *run, const char *name, int rc, const char *reason)
{
	bench_set_section(&run->results, name, rc ? "failed" : "ok", rc ? reason : NULL);
	return rc;
}
