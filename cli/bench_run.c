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

/* The want outputs kept in a row under key in cache (ncache entries) copied into outs: true,
 * or false when not kept (a failed copy is an output that failed). */
static bool kept(const struct native_result *cache, int ncache, const char *key, int want, struct bench_output *outs)
{
	int first = 0;
	while (first < ncache && strcmp(cache[first].key, key))
		first++;
	if (first + want > ncache)
		return false;
	for (int i = 0; i < want; i++)
		if (bench_output_copy(&outs[i], &cache[first + i].out))
			outs[i].exit_status = -1, snprintf(outs[i].reason, sizeof outs[i].reason, "out of memory");
	return true;
}

/* Keeps a copy of out under key in cache (at most MAX_CACHED). */
static void keep(struct native_result *cache, int *n, const char *key, const struct bench_output *out)
{
	if (*n == MAX_CACHED)
		return;
	snprintf(cache[*n].key, sizeof cache[*n].key, "%s", key);
	if (!bench_output_copy(&cache[*n].out, out))
		(*n)++;
}

/* The native side's outputs of n copies of argv under key: run on the first pass, the
 * copies kept for the passes of the other transports. Returns the number that failed. */
int bench_run_native(struct bench_run *run, const char *key, char *const argv[], int n, bool gate,
		     struct bench_output *outs)
{
	int failed = 0;
	if (kept(run->cached, run->ncached, key, n, outs)) {
		for (int i = 0; i < n; i++)
			failed += outs[i].exit_status != 0;
		return failed;
	}
	failed = bench_run_workers(&run->native, argv, n, gate, WORKER_TIMEOUT_S, run->tmpdir, outs);
	if (run->cfg->ntransports > 1 && run->ncached + n <= MAX_CACHED)
		for (int i = 0; i < n; i++)
			keep(run->cached, &run->ncached, key, &outs[i]);
	return failed;
}

/* The median of n runs into out (an output that failed when out of memory). */
static void median_into(struct bench_output *out, const struct bench_output *runs, int n)
{
	if (bench_output_median(out, runs, n))
		*out = (struct bench_output){.exit_status = -1, .reason = "out of memory"};
}

/* Prints run i's numbers on stderr as it ends, so that a bench cut short keeps what it
 * measured. */
static void print_run(const char *section, const char *side, int i, const struct bench_output *out)
{
	char line[512] = "";
	size_t at = 0;
	for (int k = 0; k < out->count && !out->exit_status; k++) {
		double v;
		if (!bench_output_number(out, out->kv[k].key, &v))
			continue;
		int w = snprintf(line + at, sizeof(line) - at, " %s=%s", out->kv[k].key, out->kv[k].value);
		if (w < 0 || (size_t)w >= sizeof(line) - at) {
			line[at] = 0;
			break;
		}
		at += (size_t)w;
	}
	fprintf(stderr, "remora bench: %s %s, run %d:%s\n", section, side, i + 1, out->exit_status ? " failed" : line);
}

int bench_run_both(struct bench_run *run, const char *section, char *const argv[], struct bench_output *nat,
		   struct bench_output *rem, char *reason, size_t len)
{
	const struct bench_config *cfg = run->cfg;
	int n = cfg->repeat > 1 ? cfg->repeat : 1;
	char key[48];
	snprintf(key, sizeof key, "%s/%s", section, bench_transport_names[run->transport]);
	bool have_native = kept(run->cached, run->ncached, section, 1, nat);
	bool have_remote = have_native && kept(run->remote_cached, run->nremote_cached, key, 1, rem);
	if (!have_remote) {
		/* In turns: native (unless kept), then this transport, then (on the first pass, with
		 * --repeat) every later one, whose medians are kept for their passes. */
		int sides = !have_native && n > 1 ? cfg->ntransports : 1;
		struct bench_output nats[BENCH_MAX_REPEAT] = {0}, rems[MAX_TRANSPORTS][BENCH_MAX_REPEAT] = {0};
		for (int i = 0; i < n; i++) {
			if (!have_native) {
				fprintf(stderr, "remora bench: %s native (%d of %d)\n", section, i + 1, n);
				bench_run_workers(&run->native, argv, 1, false, WORKER_TIMEOUT_S, run->tmpdir, &nats[i]);
				print_run(section, "native", i, &nats[i]);
			}
			for (int t = 0; t < sides; t++) {
				const struct bench_side *side = sides > 1 ? &run->sides[t] : &run->remote;
				if (!side->server) { /* its remorad did not start: its pass fails */
					rems[t][i] = (struct bench_output){.exit_status = -1, .reason = "remorad did not start"};
					continue;
				}
				fprintf(stderr, "remora bench: %s %s (%d of %d)\n", section, side->name, i + 1, n);
				bench_run_workers(side, argv, 1, false, WORKER_TIMEOUT_S, run->tmpdir, &rems[t][i]);
				print_run(section, side->name, i, &rems[t][i]);
			}
		}
		if (!have_native) {
			median_into(nat, nats, n);
			if (cfg->ntransports > 1)
				keep(run->cached, &run->ncached, section, nat);
		}
		median_into(rem, rems[0], n);
		for (int t = 1; t < sides; t++) {
			struct bench_output later;
			median_into(&later, rems[t], n);
			snprintf(key, sizeof key, "%s/%s", section, bench_transport_names[cfg->transports[t]]);
			keep(run->remote_cached, &run->nremote_cached, key, &later);
			bench_output_free(&later);
		}
		for (int i = 0; i < n; i++) {
			bench_output_free(&nats[i]);
			for (int t = 0; t < sides; t++)
				bench_output_free(&rems[t][i]);
		}
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
