/* remora bench: on a GPU host, starts a private remorad and measures each
 * section natively and through Remora in one run, with loopback TCP as the
 * bound of any TCP transport; prints a table, or JSON with --json.
 * The measuring is done by worker programs (bench/), run once with the
 * native libcuda.so.1 and once with Remora's. */
#include "commit.h"
#include "loopback.h"
#include "results.h"
#include "workers.h"
#ifdef RM_HAVE_TLS
#include "selfsigned.h"
#include "tls.h"
#include "transport.h"
#endif

#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define WORKER_TIMEOUT_S 600
#define MAX_CONCURRENCY 1024
#define MAX_TRANSPORTS 4
#define MAX_CACHED 64

struct bench_config {
	const char *remorad, *driver, *native_lib, *client_lib, *workers;
	const char *rdma_host; /* --rdma-host: where remorad listens for rdma */
	bool quick, json;
	enum bench_transport transports[MAX_TRANSPORTS]; /* the first is the baseline of comparisons */
	int ntransports;
	const char *only;
	int clients[32], nclients;
	long long spin_iters;
};

/* A native run's output, kept for the next transport's pass (one native run a key). */
struct native_result {
	char key[48];
	struct bench_output out;
};

struct bench_run {
	const struct bench_config *cfg;
	struct bench_results results;
	struct bench_side native, remote; /* remote: the transport of this pass */
	char worker[PATH_MAX], image[PATH_MAX], cublas[PATH_MAX], torch[PATH_MAX], tmpdir[64];
	enum bench_transport transport; /* this pass's */
	double tcp_gbps, tcp_rtt_us;
	struct native_result cached[MAX_CACHED];
	int ncached;
};

static int section_launch(struct bench_run *run);
static int section_memcpy(struct bench_run *run);
static int section_memset(struct bench_run *run);
static int section_event(struct bench_run *run);
static int section_graph(struct bench_run *run);
static int section_concurrency(struct bench_run *run);
static int section_cublas(struct bench_run *run);
static int section_torch(struct bench_run *run);
static int section_latency(struct bench_run *run);

/* Each returns 0 when its section ran (ok or skipped) and -1 when it failed. */
static const struct {
	const char *name;
	int (*run)(struct bench_run *run);
} sections[] = {
	{ "launch", section_launch },         { "memcpy", section_memcpy },
	{ "memset", section_memset },         { "event", section_event },
	{ "graph", section_graph },
	{ "concurrency", section_concurrency }, { "latency", section_latency },
	{ "cublas", section_cublas },         { "torch", section_torch },
};
#define NSECTIONS (sizeof sections / sizeof sections[0])

static const char usage_text[] =
	"usage: remora bench [--json] [--quick] [--only SECTION[,SECTION...]] [--concurrency N,N,...]\n"
	"                    [--spin-iters N] [--remorad PATH] [--driver PATH] [--native-lib DIR]\n"
	"                    [--client-lib DIR] [--workers DIR] [--transport T[,T...]] [--rdma-host ADDR]\n"
	"--json prints one JSON document on stdout and the table on stderr.\n"
	"Sections: launch, memcpy, memset, event, graph, concurrency, latency, cublas, torch (loopback TCP is\n"
	"always measured); torch runs PyTorch steps with the python3 on the PATH, and is skipped\n"
	"without one.\n"
	"Native runs use the libcuda.so.1 the loader finds (or the one in --native-lib DIR); remote runs\n"
	"use Remora's, against a remorad this command starts (with --driver PATH when given), over\n"
	"loopback TCP (tcp, the default), shared memory (shm: unix:PATH, for clients on the GPU host) or\n"
	"loopback TLS 1.3 (tls: a throwaway self-signed certificate) or RDMA (rdma: on --rdma-host ADDR, an\n"
	"address of this host that an RDMA device serves, 127.0.0.1 by default). Several, e.g.\n"
	"--transport tcp,tls, run the remote side once over each (natively once) and compare each with\n"
	"the first.\n";

static void size_name(char *out, size_t len, size_t bytes)
{
	if (bytes >= ((size_t)1 << 30))
		snprintf(out, len, "%zu GiB", bytes >> 30);
	else if (bytes >= MIB)
		snprintf(out, len, "%zu MiB", bytes >> 20);
	else
		snprintf(out, len, "%zu KiB", bytes >> 10);
}

static bool selected(const struct bench_config *cfg, const char *name)
{
	if (!cfg->only)
		return true;
	size_t n = strlen(name);
	for (const char *p = cfg->only; *p;) {
		size_t len = strcspn(p, ",");
		if (len == n && !strncmp(p, name, n))
			return true;
		p += len + (p[len] == ',');
	}
	return false;
}

/* The native side's outputs of n copies of argv under key: run on the first pass, the
 * copies kept for the passes of the other transports. Returns the number that failed. */
static int run_native(struct bench_run *run, const char *key, char *const argv[], int n, bool gate,
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
static int run_both(struct bench_run *run, const char *section, char *const argv[], struct bench_output *nat,
		    struct bench_output *rem, char *reason, size_t len)
{
	fprintf(stderr, "remora bench: %s native\n", section);
	run_native(run, section, argv, 1, false, nat);
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

static double number_or_nan(const struct bench_output *out, const char *key)
{
	double v;
	return bench_output_number(out, key, &v) ? v : NAN;
}

/* A row of one key of both outputs, ratio remote/native. */
static struct bench_row *pair_row(struct bench_run *run, const char *section, const struct bench_output *nat,
				  const struct bench_output *rem, const char *key, const char *unit, const char *metric)
{
	return bench_add_row(&run->results, section, unit, number_or_nan(nat, key), number_or_nan(rem, key), "%s",
			     metric);
}

static int finish_section(struct bench_run *run, const char *name, int rc, const char *reason)
{
	bench_set_section(&run->results, name, rc ? "failed" : "ok", rc ? reason : NULL);
	return rc;
}

static int section_launch(struct bench_run *run)
{
	const char *async_n = run->cfg->quick ? "2000" : "100000", *sync_n = run->cfg->quick ? "500" : "20000";
	char *argv[] = { run->worker, run->image, "launch", (char *)async_n, (char *)sync_n, NULL };
	struct bench_output nat, rem;
	char reason[600], metric[80];
	int rc = run_both(run, "launch", argv, &nat, &rem, reason, sizeof reason);
	snprintf(metric, sizeof metric, "async launch, %s in a row", async_n);
	struct bench_row *row = pair_row(run, "launch", &nat, &rem, "async_launch_us", "us", metric);
	if (row) {
		row->goal = BENCH_AT_MOST;
		row->limit = 1.5;
	}
	snprintf(metric, sizeof metric, "async launch, until the last has run");
	pair_row(run, "launch", &nat, &rem, "async_launch_drain_us", "us", metric);
	snprintf(metric, sizeof metric, "launch + synchronize, %s in a row", sync_n);
	row = pair_row(run, "launch", &nat, &rem, "launch_sync_us", "us", metric);
	if (row) { /* issue 15: native + 1 loopback round trip over TCP, 1.3x native over shared memory */
		if (run->transport == BENCH_SHM) {
			row->limit = 1.3;
		} else {
			row->ratio = row->remote / (row->native + run->tcp_rtt_us);
			row->ratio_of = "remote/(native+1 TCP RTT)";
			row->limit = 1.0;
		}
		row->goal = BENCH_AT_MOST;
		/* Against another transport (issue 17: TLS within +3 us of plaintext). */
		row->cmp_difference = true;
		row->cmp_goal = BENCH_AT_MOST;
		row->cmp_limit = 3.0;
	}
	bench_output_free(&nat);
	bench_output_free(&rem);
	return finish_section(run, "launch", rc, reason);
}

static int section_memcpy(struct bench_run *run)
{
	size_t max = run->cfg->quick ? MIB : (size_t)1 << 30;
	char max_arg[32], reason[600];
	snprintf(max_arg, sizeof max_arg, "%zu", max);
	char *argv[] = { run->worker, run->image, "memcpy", max_arg, NULL };
	struct bench_output nat, rem;
	int rc = run_both(run, "memcpy", argv, &nat, &rem, reason, sizeof reason);
	static const char *const kinds[] = { "pageable", "pinned" }, *const dirs[] = { "h2d", "d2h" };
	for (size_t bytes = 4096; bytes <= max; bytes *= 4)
		for (int k = 0; k < 2; k++)
			for (int d = 0; d < 2; d++) {
				char key[96], metric[80], size[32];
				bool small = bytes < MIB;
				size_name(size, sizeof size, bytes);
				snprintf(key, sizeof key, "memcpy.%s.%s.%zu.%s", dirs[d], kinds[k], bytes,
					 small ? "us" : "gbps");
				snprintf(metric, sizeof metric, "%s %s %s", d ? "D2H" : "H2D", kinds[k], size);
				struct bench_row *row =
					pair_row(run, "memcpy", &nat, &rem, key, small ? "us" : "GB/s", metric);
				if (row && k == 0 && bytes >= 256 * MIB) {
					row->ratio = row->remote / run->tcp_gbps;
					row->ratio_of = "remote/loopback TCP";
					row->goal = BENCH_AT_LEAST;
					row->limit = 0.85;
					/* Against another transport (issue 17: TLS at least 0.8 of plaintext). */
					row->cmp_goal = BENCH_AT_LEAST;
					row->cmp_limit = 0.8;
				}
			}
	bench_output_free(&nat);
	bench_output_free(&rem);
	return finish_section(run, "memcpy", rc, reason);
}

static int section_memset(struct bench_run *run)
{
	size_t max = run->cfg->quick ? MIB : 256 * MIB;
	char max_arg[32], reason[600];
	snprintf(max_arg, sizeof max_arg, "%zu", max);
	char *argv[] = { run->worker, run->image, "memset", max_arg, NULL };
	struct bench_output nat, rem;
	int rc = run_both(run, "memset", argv, &nat, &rem, reason, sizeof reason);
	for (size_t bytes = 4096; bytes <= max; bytes *= 16) {
		char key[64], metric[80], size[32];
		bool small = bytes < MIB;
		size_name(size, sizeof size, bytes);
		snprintf(key, sizeof key, "memset.%zu.%s", bytes, small ? "us" : "gbps");
		snprintf(metric, sizeof metric, "cuMemsetD32 %s", size);
		pair_row(run, "memset", &nat, &rem, key, small ? "us" : "GB/s", metric);
	}
	bench_output_free(&nat);
	bench_output_free(&rem);
	return finish_section(run, "memset", rc, reason);
}

static int section_event(struct bench_run *run)
{
	char *argv[] = { run->worker, run->image, "event", run->cfg->quick ? "500" : "10000", NULL };
	struct bench_output nat, rem;
	char reason[600];
	int rc = run_both(run, "event", argv, &nat, &rem, reason, sizeof reason);
	pair_row(run, "event", &nat, &rem, "event_record_sync_us", "us", "event record + synchronize");
	bench_output_free(&nat);
	bench_output_free(&rem);
	return finish_section(run, "event", rc, reason);
}

/* A graph of 100 empty kernels launched over and over: per launch, issued and until
 * the last has run. Issue 14's target: the remote launch of the whole graph costs at
 * most 1.5x a native graph launch plus one native asynchronous launch. */
static int section_graph(struct bench_run *run)
{
	const char *launches = run->cfg->quick ? "50" : "1000";
	char *argv[] = { run->worker, run->image, "graph", "100", (char *)launches, NULL };
	struct bench_output nat, rem;
	char reason[600], metric[80];
	int rc = run_both(run, "graph", argv, &nat, &rem, reason, sizeof reason);
	double async_us = number_or_nan(&nat, "graph_async_launch_us");
	snprintf(metric, sizeof metric, "graph of 100 kernels, %s launches in a row", launches);
	pair_row(run, "graph", &nat, &rem, "graph_launch_us", "us", metric);
	snprintf(metric, sizeof metric, "graph of 100 kernels, until the last has run");
	struct bench_row *row = pair_row(run, "graph", &nat, &rem, "graph_launch_drain_us", "us", metric);
	if (row) {
		row->ratio = row->remote / (row->native + async_us);
		row->ratio_of = "remote/(native+1 native async launch)";
		row->goal = BENCH_AT_MOST;
		row->limit = 1.5;
	}
	pair_row(run, "graph", &nat, &rem, "graph_async_launch_us", "us", "one async kernel launch beside it");
	bench_output_free(&nat);
	bench_output_free(&rem);
	return finish_section(run, "graph", rc, reason);
}

/* N gated clients on one side; their mean kernel time, or NAN with the first failure in reason. */
/* What N clients started together saw, each averaged over them: the kernel's time by
 * its events, and the wall time from a client's first call to its stop event's end
 * (which also counts any time its work waited behind other clients'). */
struct spin_result {
	double kernel_ms, wall_ms, slowest_wall_ms;
};

static struct spin_result spin_clients(struct bench_run *run, const struct bench_side *side, int n, char *reason,
				       size_t len)
{
	char iters[32];
	snprintf(iters, sizeof iters, "%lld", run->cfg->spin_iters);
	char *argv[] = { run->worker, run->image, "spin", iters, NULL };
	struct bench_output *outs = calloc((size_t)n, sizeof *outs);
	double sum = 0, wall_sum = 0, slowest = 0;
	if (!outs) {
		snprintf(reason, len, "out of memory");
		return (struct spin_result){NAN, NAN, NAN};
	}
	fprintf(stderr, "remora bench: concurrency %d %s\n", n, side->name);
	char key[48];
	snprintf(key, sizeof key, "spin %d", n);
	if (side == &run->native)
		run_native(run, key, argv, n, true, outs);
	else
		bench_run_workers(side, argv, n, true, WORKER_TIMEOUT_S, run->tmpdir, outs);
	for (int i = 0; i < n; i++) {
		double ms, wall;
		if (outs[i].exit_status == 0 && bench_output_number(&outs[i], "spin_ms", &ms) &&
		    bench_output_number(&outs[i], "spin_wall_ms", &wall)) {
			sum += ms;
			wall_sum += wall;
			slowest = wall > slowest ? wall : slowest;
		} else if (isfinite(sum)) {
			snprintf(reason, len, "N=%d %s client %d: %s", n, side->name, i,
				 outs[i].reason[0] ? outs[i].reason : "no spin_ms or spin_wall_ms reported");
			sum = NAN;
		}
		bench_output_free(&outs[i]);
	}
	free(outs);
	if (!isfinite(sum))
		return (struct spin_result){NAN, NAN, NAN};
	return (struct spin_result){sum / n, wall_sum / n, slowest};
}

/* A row whose ratio column is its remote figure (already a ratio to one client). */
static struct bench_row *remote_is_ratio(struct bench_row *row)
{
	if (row) {
		row->ratio = row->remote;
		row->ratio_of = "remote";
	}
	return row;
}

static int section_concurrency(struct bench_run *run)
{
	const struct bench_config *cfg = run->cfg;
	struct spin_result base_nat = {NAN, NAN, NAN}, base_rem = {NAN, NAN, NAN};
	int native_failed = 0;
	char reason[320] = "", failure[320];
	for (int i = 0; i < cfg->nclients; i++) {
		int n = cfg->clients[i];
		failure[0] = 0;
		struct spin_result nat = spin_clients(run, &run->native, n, failure, sizeof failure);
		/* Natively each client is a context of its own: many of them may not fit on the
		 * GPU (H200: 128 do not). That is the comparison's point, not a failure of the run. */
		if (failure[0]) {
			fprintf(stderr, "remora bench: natively, %s\n", failure);
			if (!native_failed++)
				bench_add_fact(&run->results, "concurrency_native_failure", false, "%s", failure);
		}
		failure[0] = 0;
		struct spin_result rem = spin_clients(run, &run->remote, n, failure, sizeof failure);
		if (failure[0] && !reason[0])
			snprintf(reason, sizeof reason, "%s", failure);
		if (n == 1) {
			base_nat = nat;
			base_rem = rem;
		}
		bench_add_row(&run->results, "concurrency", "ms", nat.kernel_ms, rem.kernel_ms, "N=%d mean kernel time", n);
		remote_is_ratio(bench_add_row(&run->results, "concurrency", "x", nat.wall_ms / base_nat.wall_ms,
					      rem.wall_ms / base_rem.wall_ms, "N=%d mean client wall / 1 client", n));
		remote_is_ratio(bench_add_row(&run->results, "concurrency", "x", nat.slowest_wall_ms / base_nat.wall_ms,
					      rem.slowest_wall_ms / base_rem.wall_ms,
					      "N=%d slowest client wall / 1 client", n));
		struct bench_row *row = bench_add_row(&run->results, "concurrency", "x", nat.kernel_ms / base_nat.kernel_ms,
						      rem.kernel_ms / base_rem.kernel_ms, "N=%d mean kernel / 1 client", n);
		if (remote_is_ratio(row)) {
			if (n == 16 || n == 128) {
				row->goal = BENCH_AT_MOST;
				row->limit = n == 16 ? 1.05 : 1.10;
			}
		}
	}
	return finish_section(run, "concurrency", reason[0] ? -1 : 0, reason);
}

static int section_cublas(struct bench_run *run)
{
	int n = run->cfg->quick ? 256 : 4096;
	char n_arg[16], metric[80], reason[600];
	snprintf(n_arg, sizeof n_arg, "%d", n);
	char *argv[] = { run->cublas, n_arg, run->cfg->quick ? "10" : "200", NULL };
	struct bench_output nat, rem;
	int rc = run_both(run, "cublas", argv, &nat, &rem, reason, sizeof reason);
	snprintf(metric, sizeof metric, "sgemm %d^3 in a loop, throughput", n);
	struct bench_row *row = pair_row(run, "cublas", &nat, &rem, "sgemm_tflops", "TFLOP/s", metric);
	if (row) {
		row->goal = BENCH_AT_LEAST;
		row->limit = 0.97;
	}
	snprintf(metric, sizeof metric, "sgemm %d^3, time per call", n);
	pair_row(run, "cublas", &nat, &rem, "sgemm_ms", "ms", metric);
	/* Exit status 3: cuBLAS cannot run on that driver at all (the CPU test driver). */
	const char *why_nat = bench_output_get(&nat, "unsupported"), *why_rem = bench_output_get(&rem, "unsupported");
	bool unsupported = (nat.exit_status == 0 || nat.exit_status == 3) &&
			   (rem.exit_status == 0 || rem.exit_status == 3) && rc;
	if (unsupported) {
		snprintf(reason, sizeof reason, "cuBLAS cannot run on this driver: native %s; remote %s",
			 why_nat ? why_nat : "ran", why_rem ? why_rem : "ran");
		bench_set_section(&run->results, "cublas", "skipped", reason);
		rc = 0;
	} else {
		finish_section(run, "cublas", rc, reason);
	}
	bench_output_free(&nat);
	bench_output_free(&rem);
	return rc;
}

#define LATENCY_CLIENTS 16

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* The median of the clients' medians, the largest of their 99th percentiles and the median
 * of those (p99_median, may be NULL) of launch + synchronize, n busy clients at once on one
 * side; NAN where one failed. key names the native runs, kept for the other transports'
 * passes. */
static void latency_clients(struct bench_run *run, const struct bench_side *side, const char *key, int n, double *p50,
			    double *p99, double *p99_median, char *reason, size_t len)
{
	char iters[16];
	snprintf(iters, sizeof iters, "%d", run->cfg->quick ? 200 : 5000);
	char *argv[] = { run->worker, run->image, "latency", iters, NULL };
	struct bench_output outs[LATENCY_CLIENTS];
	double medians[LATENCY_CLIENTS], p99s[LATENCY_CLIENTS];
	fprintf(stderr, "remora bench: latency %d %s\n", n, side->name);
	if (side == &run->native)
		run_native(run, key, argv, n, true, outs);
	else
		bench_run_workers(side, argv, n, true, WORKER_TIMEOUT_S, run->tmpdir, outs);
	*p50 = *p99 = 0;
	for (int i = 0; i < n; i++) {
		double a, b;
		if (outs[i].exit_status == 0 && bench_output_number(&outs[i], "latency_p50_us", &a) &&
		    bench_output_number(&outs[i], "latency_p99_us", &b)) {
			medians[i] = a;
			p99s[i] = b;
			*p99 = b > *p99 ? b : *p99;
		} else if (isfinite(*p50)) {
			snprintf(reason, len, "%s client %d: %s", side->name, i,
				 outs[i].reason[0] ? outs[i].reason : "no latency_p50_us or latency_p99_us reported");
			*p50 = *p99 = NAN;
		}
		bench_output_free(&outs[i]);
	}
	if (isfinite(*p50)) {
		qsort(medians, (size_t)n, sizeof(*medians), compare_doubles);
		qsort(p99s, (size_t)n, sizeof(*p99s), compare_doubles);
		*p50 = medians[n / 2];
	}
	if (p99_median)
		*p99_median = isfinite(*p50) ? p99s[n / 2] : NAN;
}

/* Launch + synchronize of LATENCY_CLIENTS threads of one program on one side, each on a
 * stream of its own: the median of the threads' medians and the largest of their 99th
 * percentiles, NAN where it failed. Natively the threads share one context, as remorad's
 * sessions do: the floor under the 16 clients' figures. */
static void latency_threads(struct bench_run *run, const struct bench_side *side, double *p50, double *p99,
			    char *reason, size_t len)
{
	char threads[16], iters[16];
	snprintf(threads, sizeof threads, "%d", LATENCY_CLIENTS);
	snprintf(iters, sizeof iters, "%d", run->cfg->quick ? 200 : 5000);
	char *argv[] = { run->worker, run->image, "latency_threads", threads, iters, NULL };
	struct bench_output out;
	fprintf(stderr, "remora bench: latency %d threads %s\n", LATENCY_CLIENTS, side->name);
	if (side == &run->native)
		run_native(run, "latency-threads", argv, 1, false, &out);
	else
		bench_run_workers(side, argv, 1, false, WORKER_TIMEOUT_S, run->tmpdir, &out);
	if (out.exit_status != 0 || !bench_output_number(&out, "threads_p50_us", p50) ||
	    !bench_output_number(&out, "threads_p99_max_us", p99)) {
		snprintf(reason, len, "%s, %d threads: %s", side->name, LATENCY_CLIENTS,
			 out.reason[0] ? out.reason : "no threads_p50_us or threads_p99_max_us reported");
		*p50 = *p99 = NAN;
	}
	bench_output_free(&out);
}

/* Launch + synchronize, its median and 99th percentile, for one client alone; then issue
 * 15's tail target: with 16 busy clients, each one's 99th percentile at most twice the
 * median; then 16 threads of one program, which natively share one context as remorad's
 * clients do. */
static int section_latency(struct bench_run *run)
{
	double np50, np99, rp50, rp99, np99m, rp99m;
	char reason[320] = "";
	latency_clients(run, &run->native, "latency-alone", 1, &np50, &np99, NULL, reason, sizeof reason);
	latency_clients(run, &run->remote, "latency-alone", 1, &rp50, &rp99, NULL, reason, sizeof reason);
	bench_add_row(&run->results, "latency", "us", np50, rp50, "launch + synchronize p50, one client alone");
	bench_add_row(&run->results, "latency", "us", np99, rp99, "launch + synchronize p99, one client alone");
	int alone_ok = isfinite(np50) && isfinite(rp50);
	latency_clients(run, &run->native, "latency", LATENCY_CLIENTS, &np50, &np99, &np99m, reason, sizeof reason);
	latency_clients(run, &run->remote, "latency", LATENCY_CLIENTS, &rp50, &rp99, &rp99m, reason, sizeof reason);
	bench_add_row(&run->results, "latency", "us", np50, rp50, "launch + synchronize p50, %d clients at once",
		      LATENCY_CLIENTS);
	bench_add_row(&run->results, "latency", "us", np99m, rp99m, "launch + synchronize p99 (the median client's)");
	bench_add_row(&run->results, "latency", "us", np99, rp99, "launch + synchronize p99 (the slowest client's)");
	struct bench_row *row = bench_add_row(&run->results, "latency", "x", np99 / np50, rp99 / rp50,
					      "launch + synchronize p99 / p50, %d clients", LATENCY_CLIENTS);
	if (row) {
		row->ratio = row->remote;
		row->ratio_of = "remote p99/p50";
		row->goal = BENCH_AT_MOST;
		row->limit = 2.0;
	}
	int clients_ok = isfinite(np50) && isfinite(rp50);
	latency_threads(run, &run->native, &np50, &np99, reason, sizeof reason);
	latency_threads(run, &run->remote, &rp50, &rp99, reason, sizeof reason);
	bench_add_row(&run->results, "latency", "us", np50, rp50, "launch + synchronize p50, %d threads of one program",
		      LATENCY_CLIENTS);
	bench_add_row(&run->results, "latency", "us", np99, rp99, "launch + synchronize p99 (the slowest thread's)");
	bench_add_row(&run->results, "latency", "x", np99 / np50, rp99 / rp50, "launch + synchronize p99 / p50, %d threads",
		      LATENCY_CLIENTS);
	int ok = alone_ok && clients_ok && isfinite(np50) && isfinite(rp50);
	return finish_section(run, "latency", ok ? 0 : -1, reason);
}

/* One PyTorch step of bench/torch_worker.py, native and remote: its time per step, remote
 * over native (at most limit), and whether both computed the same bits (the fact named
 * fact, a string that outlives the run). Returns what run_both does, or 1 when PyTorch
 * cannot run here (*why says so). */
static int torch_part(struct bench_run *run, const char *part, const char *fact, const char *steps,
		      const char *metric, double limit, char *why, size_t why_len)
{
	char *argv[] = { "/usr/bin/env", "python3", run->torch, (char *)part, (char *)steps, NULL };
	struct bench_output nat, rem;
	char reason[600];
	int rc = run_both(run, part, argv, &nat, &rem, reason, sizeof reason);
	const char *unsupported = bench_output_get(&nat, "unsupported");
	if (nat.exit_status == 3 && unsupported) {
		snprintf(why, why_len, "%s", unsupported);
		rc = 1;
	} else {
		struct bench_row *row = pair_row(run, "torch", &nat, &rem, "ms_per_step", "ms", metric);
		if (row && limit > 0) {
			row->goal = BENCH_AT_MOST;
			row->limit = limit;
		}
		const char *a = bench_output_get(&nat, "result_hex"), *b = bench_output_get(&rem, "result_hex");
		bench_add_fact(&run->results, fact, false, "%s", a && b && !strcmp(a, b) ? "yes" : "no");
		if (rc)
			snprintf(why, why_len, "%s", reason);
		else if (!a || !b || strcmp(a, b))
			rc = -1, snprintf(why, why_len, "%s: native and remote results differ (%s, %s)", part,
					  a ? a : "none", b ? b : "none");
	}
	bench_output_free(&nat);
	bench_output_free(&rem);
	return rc;
}

/* Launch-bound PyTorch (issue 15's targets): a small CNN's training step, 1.15x native over
 * shared memory and 1.5x over TCP at most; ResNet-50 batch-1 inference at least 0.9 of
 * native over shared memory (time at most 1/0.9). */
static int section_torch(struct bench_run *run)
{
	char why[600];
	bool quick = run->cfg->quick, shm = run->transport == BENCH_SHM;
	int rc = torch_part(run, "cnn_train", "torch_cnn_train_same_result", quick ? "20" : "300", "CNN training step (batch 32, 32x32)",
			    shm ? 1.15 : 1.5, why, sizeof why);
	if (rc == 1) {
		bench_set_section(&run->results, "torch", "skipped", why);
		return 0;
	}
	if (rc == 0)
		rc = torch_part(run, "resnet50_b1", "torch_resnet50_b1_same_result", quick ? "10" : "200", "ResNet-50 fp16 inference, batch 1",
				shm ? 1.0 / 0.9 : 0, why, sizeof why);
	if (rc == 0 && !quick)
		rc = torch_part(run, "gpt_train", "torch_gpt_train_same_result", "50", "GPT-style training step (4 layers, d=256)", 0, why, sizeof why);
	return finish_section(run, "torch", rc ? -1 : 0, why);
}

/* Context for the copy targets, which stay against loopback_tcp_gbps: the same
 * writes moving a buffer that is not cache resident into another, as a large
 * copy does, over 1, 2 and 4 streams at once (what striping a copy over several
 * connections could give). */
static int measure_tcp_cold(struct bench_run *run)
{
	static const int streams[] = { 1, 2, 4 };
	static const char *const keys[] = { "loopback_tcp_cold_gbps", "loopback_tcp_cold_2_streams_gbps",
					    "loopback_tcp_cold_4_streams_gbps" };
	bool quick = run->cfg->quick;
	struct bench_tcp_cold b;
	size_t span = quick ? 64 * MIB : (size_t)1 << 30;
	int rc = bench_tcp_cold_init(&b, span);
	bench_add_fact(&run->results, "loopback_tcp_cold_mib", true, "%zu", span / MIB);
	for (size_t i = 0; i < sizeof streams / sizeof streams[0]; i++) {
		double gbps = NAN, seconds = quick ? 0.2 : streams[i] == 1 ? 1.0 : 0.5;
		if (!rc)
			rc = bench_tcp_throughput_cold(&b, streams[i], seconds, 4 * MIB, &gbps);
		if (isfinite(gbps))
			bench_add_fact(&run->results, keys[i], true, "%.4f", gbps);
		else
			bench_add_fact(&run->results, keys[i], true, "null");
	}
	bench_tcp_cold_free(&b);
	if (rc)
		fprintf(stderr, "remora bench: loopback TCP, cold buffers: %s\n", strerror(-rc));
	return rc;
}

static int measure_tcp(struct bench_run *run)
{
	bool quick = run->cfg->quick;
	int rc;
	fprintf(stderr, "remora bench: loopback TCP\n");
	if ((rc = bench_tcp_throughput(quick ? 0.2 : 1.0, 4 * MIB, &run->tcp_gbps)) ||
	    (rc = bench_tcp_round_trip(quick ? 2000 : 10000, 64, &run->tcp_rtt_us))) {
		fprintf(stderr, "remora bench: loopback TCP: %s\n", strerror(-rc));
		bench_set_section(&run->results, "tcp", "failed", strerror(-rc));
		run->tcp_gbps = run->tcp_rtt_us = NAN;
		return -1;
	}
	bench_add_fact(&run->results, "loopback_tcp_gbps", true, "%.4f", run->tcp_gbps);
	bench_add_fact(&run->results, "loopback_tcp_rtt_us", true, "%.4f", run->tcp_rtt_us);
	rc = measure_tcp_cold(run);
	bench_set_section(&run->results, "tcp", rc ? "failed" : "ok", rc ? strerror(-rc) : NULL);
	return rc ? -1 : 0;
}

/* The run's facts: date, host, commit, the GPU as seen natively and remotely. */
static void record_facts(struct bench_run *run)
{
	char buf[128], stamp[32];
	time_t t = time(NULL);
	strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", gmtime(&t));
	bench_add_fact(&run->results, "date", false, "%s", stamp);
	bench_commit_id(buf, sizeof buf);
	bench_add_fact(&run->results, "git_commit", false, "%s", buf);
	if (gethostname(buf, sizeof buf) == 0)
		bench_add_fact(&run->results, "host", false, "%.*s", (int)sizeof buf, buf);
	char *argv[] = { run->worker, run->image, "info", NULL };
	const struct bench_side *sides[] = { &run->native, &run->remote };
	for (int i = 0; i < 2; i++) {
		struct bench_output out;
		bench_run_workers(sides[i], argv, 1, false, 60, run->tmpdir, &out);
		const char *name = bench_output_get(&out, "gpu_name"), *version = bench_output_get(&out, "driver_version");
		bench_add_fact(&run->results, i ? "remote_gpu_name" : "gpu_name", false, "%s%s%s",
			       name ? name : "unknown", name || !out.reason[0] ? "" : ": ", name ? "" : out.reason);
		if (version)
			bench_add_fact(&run->results, i ? "remote_driver_version" : "driver_version", true, "%s", version);
		bench_output_free(&out);
	}
	bench_add_fact(&run->results, "quick", true, "%s", run->cfg->quick ? "true" : "false");
	bench_add_fact(&run->results, "native_lib", false, "%s", run->cfg->native_lib ? run->cfg->native_lib : "system");
	bench_add_fact(&run->results, "remorad_driver", false, "%s", run->cfg->driver ? run->cfg->driver : "system");
}

/* Parses N,N,...; 1 first (the base of the ratios), each N once. */
static int parse_clients(struct bench_config *cfg, const char *list)
{
	cfg->clients[0] = 1;
	cfg->nclients = 1;
	for (const char *p = list; *p;) {
		char *end;
		long n = strtol(p, &end, 10);
		if (end == p || n < 1 || n > MAX_CONCURRENCY || (*end && *end != ','))
			return -1;
		bool seen = false;
		for (int i = 0; i < cfg->nclients; i++)
			seen |= cfg->clients[i] == n;
		if (!seen && cfg->nclients == (int)(sizeof cfg->clients / sizeof cfg->clients[0]))
			return -1;
		if (!seen)
			cfg->clients[cfg->nclients++] = (int)n;
		p = *end ? end + 1 : end;
	}
	return 0;
}

/* Parses T[,T...] of tcp, shm, tls and rdma, each once; 0, or -1. */
static int parse_transports(struct bench_config *cfg, const char *list)
{
	cfg->ntransports = 0;
	for (const char *p = list; *p;) {
		size_t len = strcspn(p, ",");
		int t = -1;
		for (int k = BENCH_TCP; k <= BENCH_RDMA; k++)
			if (strlen(bench_transport_names[k]) == len && !strncmp(p, bench_transport_names[k], len))
				t = k;
		for (int i = 0; i < cfg->ntransports; i++)
			if ((int)cfg->transports[i] == t)
				t = -1;
		if (t < 0 || cfg->ntransports == MAX_TRANSPORTS)
			return -1;
		cfg->transports[cfg->ntransports++] = (enum bench_transport)t;
		p += len + (p[len] == ',');
	}
	return cfg->ntransports ? 0 : -1;
}

/* path = this program's folder + "/" + rel, when it exists. */
static bool beside_self(char *path, size_t len, const char *rel)
{
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
	if (n < 0)
		return false;
	self[n] = 0;
	snprintf(path, len, "%s/%s", dirname(self), rel);
	return access(path, F_OK) == 0;
}

static int parse_args(struct bench_config *cfg, int argc, char **argv)
{
	const char *clients = NULL;
	char *end;
	int i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "--json"))
			cfg->json = true;
		else if (!strcmp(a, "--quick"))
			cfg->quick = true;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return 1;
		else if (!v)
			goto bad;
		else if (!strcmp(a, "--transport") && !parse_transports(cfg, v))
			i++;
		else if (!strcmp(a, "--only"))
			cfg->only = v, i++;
		else if (!strcmp(a, "--concurrency"))
			clients = v, i++;
		else if (!strcmp(a, "--spin-iters") && (cfg->spin_iters = strtoll(v, &end, 10)) > 0 && !*end)
			i++;
		else if (!strcmp(a, "--remorad"))
			cfg->remorad = v, i++;
		else if (!strcmp(a, "--driver"))
			cfg->driver = v, i++;
		else if (!strcmp(a, "--native-lib"))
			cfg->native_lib = v, i++;
		else if (!strcmp(a, "--client-lib"))
			cfg->client_lib = v, i++;
		else if (!strcmp(a, "--workers"))
			cfg->workers = v, i++;
		else if (!strcmp(a, "--rdma-host"))
			cfg->rdma_host = v, i++;
		else
			goto bad;
	}
	if (!cfg->ntransports)
		cfg->transports[cfg->ntransports++] = BENCH_TCP;
#ifndef RM_HAVE_TLS
	for (int t = 0; t < cfg->ntransports; t++)
		if (cfg->transports[t] == BENCH_TLS) {
			fprintf(stderr, "remora bench: --transport tls: this build has no TLS (meson option tls)\n");
			return -1;
		}
#endif
#ifndef RM_HAVE_RDMA
	for (int t = 0; t < cfg->ntransports; t++)
		if (cfg->transports[t] == BENCH_RDMA) {
			fprintf(stderr, "remora bench: --transport rdma: this build has no RDMA (meson option rdma)\n");
			return -1;
		}
#endif
	if (!cfg->rdma_host)
		cfg->rdma_host = "127.0.0.1";
	if (!cfg->spin_iters)
		/* About 170 ms per kernel on an H200 (docs/status.md: 1e8 take 846 ms). */
		cfg->spin_iters = cfg->quick ? 200000 : 20000000;
	if (parse_clients(cfg, clients ? clients : cfg->quick ? "1,2" : "1,2,4,8,16,64,128")) {
		fprintf(stderr, "remora bench: --concurrency wants a list of client counts, 1 to %d\n", MAX_CONCURRENCY);
		return -1;
	}
	for (const char *p = cfg->only; p && *p;) {
		size_t len = strcspn(p, ",");
		bool known = len == 3 && !strncmp(p, "tcp", 3);
		for (size_t s = 0; s < NSECTIONS; s++)
			known |= strlen(sections[s].name) == len && !strncmp(p, sections[s].name, len);
		if (!known) {
			fprintf(stderr, "remora bench: unknown section %.*s\n", (int)len, p);
			return -1;
		}
		p += len + (p[len] == ',');
	}
	return 0;
bad:
	fprintf(stderr, "remora bench: bad option, or one without its value: %s\n", argv[i]);
	return -1;
}

/* Fills in the default paths beside this program in the build tree; -1 when one is missing. */
static int find_paths(struct bench_run *run, struct bench_config *cfg)
{
	static char remorad[PATH_MAX], client[PATH_MAX], workers[PATH_MAX];
	const char *env = getenv("REMORA_CLIENT_LIB");
	if (!cfg->remorad && beside_self(remorad, sizeof remorad, "../backend/remorad"))
		cfg->remorad = remorad;
	if (!cfg->client_lib && env && *env)
		cfg->client_lib = env;
	if (!cfg->client_lib && beside_self(client, sizeof client, "../frontend/libcuda.so.1"))
		cfg->client_lib = dirname(client);
	if (!cfg->workers && beside_self(workers, sizeof workers, "../bench/bench_worker"))
		cfg->workers = dirname(workers);
	if (!cfg->remorad || !cfg->client_lib || !cfg->workers) {
		fprintf(stderr, "remora bench: cannot find %s beside this program; run the build tree's remora or "
				"name it (--remorad, --client-lib, --workers)\n",
			!cfg->remorad ? "remorad" : !cfg->client_lib ? "the client library" : "the workers");
		return -1;
	}
	/* Absolute, since remorad and the workers may run elsewhere than here. */
	static char resolved[5][PATH_MAX];
	const char **paths[] = { &cfg->remorad, &cfg->client_lib, &cfg->workers, &cfg->driver, &cfg->native_lib };
	for (size_t i = 0; i < 5; i++) {
		if (*paths[i] && !realpath(*paths[i], resolved[i])) {
			fprintf(stderr, "remora bench: %s: %s\n", *paths[i], strerror(errno));
			return -1;
		}
		if (*paths[i])
			*paths[i] = resolved[i];
	}
	snprintf(run->worker, sizeof run->worker, "%s/bench_worker", cfg->workers);
	snprintf(run->image, sizeof run->image, "%s/bench_kernels.fatbin", cfg->workers);
	snprintf(run->cublas, sizeof run->cublas, "%s/bench_cublas", cfg->workers);
	snprintf(run->torch, sizeof run->torch, "%s/torch_worker.py", cfg->workers);
	const char *need[] = { run->worker, run->image, run->cublas, run->torch, cfg->remorad };
	for (size_t i = 0; i < 5; i++)
		if (access(need[i], R_OK)) {
			fprintf(stderr, "remora bench: %s: %s\n", need[i], strerror(errno));
			return -1;
		}
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st, (void)type, (void)ftw;
	return remove(path);
}

#ifdef RM_HAVE_TLS
/* Whether kernel TLS offload (kTLS) carries the records of a connection like the clients':
 * one dialled here to the daemon with the same CA, then closed. The daemon's side of the
 * same host does what its kernel allows, as this one does. */
static void record_ktls(struct bench_run *run, const char *addr, const char *ca)
{
	char why[300] = "";
	const char *hostport;
	const struct rm_transport *tp = rm_transport_for(addr, &hostport);
	struct rm_conn *c = NULL;
	int err = -EINVAL;
	if (tp && !rm_tls_client_configure(ca, NULL, NULL, why, sizeof why) && !(err = tp->dial(hostport, 5000, &c))) {
		int k = rm_tls_last_ktls();
		rm_conn_close(c);
		bench_add_fact(&run->results, "tls_ktls_tx", true, "%s", k & 1 ? "true" : "false");
		bench_add_fact(&run->results, "tls_ktls_rx", true, "%s", k & 2 ? "true" : "false");
		return;
	}
	fprintf(stderr, "remora bench: kTLS probe: %s\n", why[0] ? why : rm_transport_why(err));
	bench_add_fact(&run->results, "tls_ktls_tx", true, "null");
	bench_add_fact(&run->results, "tls_ktls_rx", true, "null");
}
#endif

/* Makes dir (private) and, for TLS, its certificate; 0 or -1 after a line. */
static int prepare_transport(enum bench_transport t, const char *dir)
{
	if (mkdir(dir, 0700)) {
		fprintf(stderr, "remora bench: mkdir %s: %s\n", dir, strerror(errno));
		return -1;
	}
#ifdef RM_HAVE_TLS
	char why[300];
	if (t == BENCH_TLS && bench_selfsigned_write(dir, why, sizeof why)) {
		fprintf(stderr, "remora bench: %s\n", why);
		return -1;
	}
#else
	(void)t;
#endif
	return 0;
}

/* Every selected section over one transport: remorad started for it, stopped after.
 * Returns the number of sections that failed (the daemon not starting counts one). */
static int run_pass(struct bench_run *run, enum bench_transport t, bool first)
{
	const struct bench_config *cfg = run->cfg;
	const char *name = bench_transport_names[t];
	static char remote_name[MAX_TRANSPORTS][16];
	char dir[PATH_MAX], ca[PATH_MAX + 16];
	struct bench_daemon daemon = { 0 };
	int failed = 0;
	snprintf(dir, sizeof dir, "%s/%s", run->tmpdir, name);
	snprintf(ca, sizeof ca, "%s/cert.pem", dir);
	if (prepare_transport(t, dir) || bench_daemon_start(&daemon, cfg->remorad, cfg->driver, dir, t, cfg->rdma_host))
		return 1;
	snprintf(remote_name[t], sizeof remote_name[t], cfg->ntransports > 1 ? "remote-%s" : "remote", name);
	run->remote = (struct bench_side){ remote_name[t], cfg->client_lib, daemon.addr, t == BENCH_TLS ? ca : NULL };
	run->results.transport = NULL; /* facts and the loopback figures belong to no transport */
	if (first) {
		record_facts(run);
		failed += measure_tcp(run) != 0;
	}
#ifdef RM_HAVE_TLS
	if (t == BENCH_TLS)
		record_ktls(run, daemon.addr, ca);
#endif
	run->results.transport = name;
	run->transport = t;
	for (size_t s = 0; s < NSECTIONS; s++) {
		if (!selected(cfg, sections[s].name))
			bench_set_section(&run->results, sections[s].name, "not selected", NULL);
		else
			failed += sections[s].run(run) != 0;
	}
	bench_daemon_stop(&daemon);
	run->remote.server = NULL;
	return failed;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_config cfg = { 0 };
	struct bench_run run = { .cfg = &cfg };
	int rc = parse_args(&cfg, argc, argv), failed = 0;
	if (rc) {
		fputs(usage_text, rc > 0 ? stdout : stderr);
		return rc > 0 ? 0 : 2;
	}
	if (find_paths(&run, &cfg))
		return 1;
	snprintf(run.tmpdir, sizeof run.tmpdir, "/tmp/remora-bench.XXXXXX");
	if (!mkdtemp(run.tmpdir)) {
		fprintf(stderr, "remora bench: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	run.native = (struct bench_side){ "native", cfg.native_lib, NULL, NULL };
	char list[256] = "";
	for (int t = 0; t < cfg.ntransports; t++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", t ? "," : "",
			 bench_transport_names[cfg.transports[t]]);
	bench_add_fact(&run.results, "transport", false, "%s", list);
	bench_add_fact(&run.results, "spin_iters", true, "%lld", cfg.spin_iters);
	list[0] = 0;
	for (int i = 0; i < cfg.nclients; i++)
		snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? "," : "", cfg.clients[i]);
	bench_add_fact(&run.results, "concurrency", false, "%s", list);
	for (int t = 0; t < cfg.ntransports; t++)
		failed += run_pass(&run, cfg.transports[t], t == 0);
	if (cfg.ntransports > 1)
		bench_compare_transports(&run.results, bench_transport_names[cfg.transports[0]]);
	for (int i = 0; i < run.ncached; i++)
		bench_output_free(&run.cached[i].out);

	/* With --json the table goes to stderr, so one run gives both. */
	bench_print_table(&run.results, cfg.json ? stderr : stdout);
	if (cfg.json)
		bench_print_json(&run.results, stdout);
	bench_results_free(&run.results);
	if (failed) {
		fprintf(stderr, "remora bench: %d section(s) failed; worker and remorad logs kept in %s\n", failed,
			run.tmpdir);
	} else if (nftw(run.tmpdir, remove_entry, 8, FTW_DEPTH | FTW_PHYS)) {
		fprintf(stderr, "remora bench: could not remove %s\n", run.tmpdir);
	}
	return failed ? 1 : 0;
}
