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

/* The native side's outputs of n copies of argv under key: run on the first pass, the
 * copies kept for the passes of the other transports. Returns the number that failed. */
int bench_run_native(struct bench_run *run, const char *key, char *const argv[], int n, bool gate,
		     struct bench_output *outs)
{
	int first = -1;
	for (int i = 0; i < run->ncached && first < 0; i++)
		if (!strcmp(run->cached[i].key, key))
			first = i;
	if (first >= 0 && first + n <= run->ncached) {
		int failed = 0;
		for (int i = 0; i < n; i++) {
			if (bench_output_copy(&outs[i], &run->cached[first + i].out))
				outs[i].exit_status = -1, snprintf(outs[i].reason, sizeof outs[i].reason, "out of memory");
			failed += outs[i].exit_status != 0;
		}
		return failed;
	}
	int failed = bench_run_workers(&run->native, argv, n, gate, WORKER_TIMEOUT_S, run->tmpdir, outs);
	if (run->cfg->ntransports > 1 && run->ncached + n <= MAX_CACHED)
		for (int i = 0; i < n; i++) {
			struct native_result *c = &run->cached[run->ncached];
			snprintf(c->key, sizeof c->key, "%s", key);
			if (!bench_output_copy(&c->out, &outs[i]))
				run->ncached++;
		}
	return failed;
}

/* Runs argv natively (once, for the first transport; section is its key) and then remotely;
 * 0 when both succeeded, else -1 with the reasons in reason. */
int bench_run_both(struct bench_run *run, const char *section, char *const argv[], struct bench_output *nat,
		   struct bench_output *rem, char *reason, size_t len)
{
	fprintf(stderr, "remora bench: %s native\n", section);
	bench_run_native(run, section, argv, 1, false, nat);
	fprintf(stderr, "remora bench: %s %s\n", section, run->remote.name);
	bench_run_workers(&run->remote, argv, 1, false, WORKER_TIMEOUT_S, run->tmpdir, rem);
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
