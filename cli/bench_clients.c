/* remora bench: the sections of many clients at once: concurrency (gated clients each
 * spinning a kernel), tenants (those clients a tenant each), latency (launch + synchronize of
 * busy clients and threads) and sharing (ResNet-50 processes) (bench.h). */
#include "bench.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MOST_TENANTS 62 /* tenants t0..t61 of the section's remorad (at most 64 a configuration) */

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
		bench_run_native(run, key, argv, n, true, outs);
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

int bench_section_concurrency(struct bench_run *run)
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
	return bench_finish_section(run, "concurrency", reason[0] ? -1 : 0, reason);
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
		bench_run_native(run, key, argv, n, true, outs);
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
		bench_run_native(run, "latency-threads", argv, 1, false, &out);
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
int bench_section_latency(struct bench_run *run)
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
	return bench_finish_section(run, "latency", ok ? 0 : -1, reason);
}

/* Whether NVIDIA's MPS control program is on the PATH. */
static bool have_mps_control(void)
{
	const char *path = getenv("PATH");
	char dir[PATH_MAX];
	for (const char *p = path ? path : ""; *p;) {
		size_t len = strcspn(p, ":");
		snprintf(dir, sizeof dir, "%.*s/nvidia-cuda-mps-control", (int)len, p);
		if (len && access(dir, X_OK) == 0)
			return true;
		p += len + (p[len] == ':');
	}
	return false;
}

/* Runs "nvidia-cuda-mps-control" with the pipe and log directories under dir, reading
 * command (NULL: started as a daemon, -d) on its standard input; its exit status. */
static int mps_control(const char *dir, const char *command)
{
	char pipe_dir[PATH_MAX], log_dir[PATH_MAX];
	snprintf(pipe_dir, sizeof pipe_dir, "%s/pipe", dir);
	snprintf(log_dir, sizeof log_dir, "%s/log", dir);
	mkdir(dir, 0700), mkdir(pipe_dir, 0700), mkdir(log_dir, 0700);
	int in[2];
	if (pipe(in))
		return -1;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(in[0], STDIN_FILENO);
		close(in[0]), close(in[1]);
		setenv("CUDA_MPS_PIPE_DIRECTORY", pipe_dir, 1);
		setenv("CUDA_MPS_LOG_DIRECTORY", log_dir, 1);
		execlp("nvidia-cuda-mps-control", "nvidia-cuda-mps-control", command ? NULL : "-d", (char *)NULL);
		_exit(127);
	}
	close(in[0]);
	if (command && write(in[1], command, strlen(command)) < 0)
		command = NULL;
	close(in[1]);
	int status = -1;
	if (pid > 0)
		waitpid(pid, &status, 0);
	if (command)
		sleep(1); /* its server ends once asked */
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* Starts a remorad of tenants t0..t<ntenants-1> (tokens tok0..) with tenant_isolation = mode,
 * its files in dir; 0, or -1 with reason set. */
static int tenant_daemon(struct bench_run *run, const char *dir, const char *mode, int ntenants,
			 struct bench_daemon *d, char *reason, size_t len)
{
	static char conf[PATH_MAX]; /* d->config points here until the daemon has started */
	snprintf(conf, sizeof conf, "%s/remorad.conf", dir);
	FILE *f = fopen(conf, "we");
	if (!f) {
		snprintf(reason, len, "cannot write remorad.conf in %.200s", dir);
		return -1;
	}
	fprintf(f, "tenant_isolation = %s\nmps_directory = %s/mps\n", mode, dir);
	for (int t = 0; t < ntenants; t++)
		fprintf(f, "[tenant t%d]\ntoken = tok%d\n", t, t);
	fclose(f);
	*d = (struct bench_daemon){.config = conf};
	if (bench_daemon_start(d, run->cfg->remorad, run->cfg->driver, dir, BENCH_TCP, NULL)) {
		snprintf(reason, len, "remorad with tenant_isolation = %s did not start", mode);
		return -1;
	}
	return 0;
}

/* Tenants (issue 35): the MPS experiment with each client in a tenant of its own, natively
 * (contexts time-slice), natively under NVIDIA MPS, and through a remorad with
 * tenant_isolation = process and = mps (those two with MPS only where its control program is
 * on the PATH). Rows: each N's mean kernel time over one client's, native against each. */
int bench_section_tenants(struct bench_run *run)
{
	const struct bench_config *cfg = run->cfg;
	if (run->transport != cfg->transports[0]) {
		bench_set_section(&run->results, "tenants", "skipped", "measured over the first transport only");
		return 0;
	}
	int most = 1; /* client counts above MOST_TENANTS are left out */
	for (int i = 0; i < cfg->nclients; i++)
		most = cfg->clients[i] > most && cfg->clients[i] <= MOST_TENANTS ? cfg->clients[i] : most;
	bool mps = have_mps_control();
	char reason[320] = "", failure[320];
	double native[sizeof cfg->clients / sizeof cfg->clients[0]];
	for (int i = 0; i < cfg->nclients; i++) {
		failure[0] = 0;
		native[i] = cfg->clients[i] > MOST_TENANTS ? NAN
			    : spin_clients(run, &run->native, cfg->clients[i], failure, sizeof failure).kernel_ms;
	}
	const char *modes[] = {"native MPS", "process", "mps"};
	for (size_t m = 0; m < sizeof modes / sizeof modes[0]; m++) {
		if (m != 1 && !mps)
			continue;
		char dir[PATH_MAX - 64];
		snprintf(dir, sizeof dir, "%s/tenants-%zu", run->tmpdir, m);
		mkdir(dir, 0700);
		struct bench_daemon d = {0};
		struct bench_side side = run->native;
		char pipe_dir[PATH_MAX + 8];
		if (m == 0) {
			snprintf(pipe_dir, sizeof pipe_dir, "%s/pipe", dir);
			side.mps_pipe = pipe_dir;
			if (mps_control(dir, NULL)) {
				snprintf(reason, sizeof reason, "nvidia-cuda-mps-control -d failed");
				continue;
			}
		} else {
			if (tenant_daemon(run, dir, modes[m], most, &d, reason, sizeof reason))
				continue;
			side = run->remote;
			side.server = d.addr, side.tls_ca = NULL, side.token_prefix = "tok";
		}
		double base = NAN;
		for (int i = 0; i < cfg->nclients; i++) {
			int n = cfg->clients[i];
			if (n > MOST_TENANTS)
				continue;
			failure[0] = 0;
			double ms = spin_clients(run, &side, n, failure, sizeof failure).kernel_ms;
			if (failure[0] && !reason[0])
				snprintf(reason, sizeof reason, "%s: %s", modes[m], failure);
			base = n == 1 ? ms : base;
			remote_is_ratio(bench_add_row(&run->results, "tenants", "x", native[i] / native[0], ms / base,
						      "N=%d a tenant each, %s: mean kernel / 1 client", n,
						      m ? modes[m] : "natively under MPS"));
		}
		if (m == 0)
			mps_control(dir, "quit\n");
		else
			bench_daemon_stop(&d);
	}
	return bench_finish_section(run, "tenants", reason[0] ? -1 : 0, reason);
}

#define MOST_SHARING 16 /* ResNet-50 processes at most (each holds a context and a model) */

/* The images per second of n ResNet-50 processes started together on side (their sum), NAN
 * where one failed (reason says why); *unsupported set where PyTorch cannot run here. */
static double resnet_clients(struct bench_run *run, const struct bench_side *side, const char *label, int n,
			     bool *unsupported, char *reason, size_t len)
{
	char iters[16];
	snprintf(iters, sizeof iters, "%d", run->cfg->quick ? 30 : 300);
	char *argv[] = { "/usr/bin/env", "python3", run->torch, "resnet50_share", iters, NULL };
	struct bench_output *outs = calloc((size_t)n, sizeof *outs);
	double sum = 0;
	if (!outs) {
		snprintf(reason, len, "out of memory");
		return NAN;
	}
	fprintf(stderr, "remora bench: sharing %d %s\n", n, label);
	bench_run_workers(side, argv, n, true, WORKER_TIMEOUT_S, run->tmpdir, outs);
	for (int i = 0; i < n; i++) {
		double v;
		const char *why = bench_output_get(&outs[i], "unsupported");
		if (outs[i].exit_status == 3 && why) {
			*unsupported = true;
			snprintf(reason, len, "%s", why);
			sum = NAN;
		} else if (outs[i].exit_status == 0 && bench_output_number(&outs[i], "images_per_s", &v)) {
			sum += v;
		} else if (isfinite(sum)) {
			snprintf(reason, len, "N=%d %s client %d: %s", n, label, i,
				 outs[i].reason[0] ? outs[i].reason : "no images_per_s reported");
			sum = NAN;
		}
		bench_output_free(&outs[i]);
	}
	free(outs);
	return sum;
}

/* Sharing (issue 35): N processes of ResNet-50 fp16 inference at batch 1 started together
 * (the --concurrency counts up to MOST_SHARING), their images per second summed: natively
 * (contexts time-slice) against Remora with every process in one tenant, and natively under
 * NVIDIA MPS against Remora with a tenant each under tenant_isolation = mps (those two where
 * nvidia-cuda-mps-control is on the PATH). Target: at 16 processes Remora's tenants at least
 * MPS's aggregate. Skipped where PyTorch cannot run. */
int bench_section_sharing(struct bench_run *run)
{
	const struct bench_config *cfg = run->cfg;
	if (run->transport != cfg->transports[0]) {
		bench_set_section(&run->results, "sharing", "skipped", "measured over the first transport only");
		return 0;
	}
	bool mps = have_mps_control(), unsupported = false;
	char reason[320] = "", failure[320];
	for (int i = 0; i < cfg->nclients && !unsupported; i++) {
		int n = cfg->clients[i];
		if (n > MOST_SHARING)
			continue;
		failure[0] = 0;
		double nat = resnet_clients(run, &run->native, "native", n, &unsupported, failure, sizeof failure);
		if (unsupported) {
			snprintf(reason, sizeof reason, "%s", failure);
			break;
		}
		double rem = resnet_clients(run, &run->remote, "remote, one tenant", n, &unsupported, failure,
					    sizeof failure);
		if (failure[0] && !reason[0])
			snprintf(reason, sizeof reason, "%s", failure);
		bench_add_row(&run->results, "sharing", "images/s", nat, rem,
			      "N=%d ResNet-50 b1 processes, native (contexts) / Remora one tenant", n);
		if (!mps)
			continue;
		char dir[PATH_MAX - 64], pipe_dir[PATH_MAX + 8];
		snprintf(dir, sizeof dir, "%s/sharing-mps-%d", run->tmpdir, n);
		mkdir(dir, 0700);
		struct bench_side native_mps = run->native;
		snprintf(pipe_dir, sizeof pipe_dir, "%s/pipe", dir);
		native_mps.mps_pipe = pipe_dir;
		double under_mps = NAN, tenants = NAN;
		failure[0] = 0;
		if (mps_control(dir, NULL)) {
			snprintf(failure, sizeof failure, "nvidia-cuda-mps-control -d failed");
		} else {
			under_mps = resnet_clients(run, &native_mps, "native MPS", n, &unsupported, failure, sizeof failure);
			mps_control(dir, "quit\n");
		}
		char ddir[PATH_MAX];
		snprintf(ddir, sizeof ddir, "%s/daemon", dir);
		mkdir(ddir, 0700);
		struct bench_daemon d;
		if (!failure[0] && !tenant_daemon(run, ddir, "mps", n, &d, failure, sizeof failure)) {
			struct bench_side side = run->remote;
			side.server = d.addr, side.tls_ca = NULL, side.token_prefix = "tok";
			tenants = resnet_clients(run, &side, "remote, a tenant each (mps)", n, &unsupported, failure,
						 sizeof failure);
			bench_daemon_stop(&d);
		}
		if (failure[0] && !reason[0])
			snprintf(reason, sizeof reason, "%s", failure);
		struct bench_row *row = bench_add_row(&run->results, "sharing", "images/s", under_mps, tenants,
						      "N=%d ResNet-50 b1 processes, native MPS / Remora a tenant each (mps)", n);
		if (row && n == 16) {
			row->goal = BENCH_AT_LEAST;
			row->limit = 1.0;
		}
	}
	if (unsupported) {
		bench_set_section(&run->results, "sharing", "skipped", reason);
		return 0;
	}
	return bench_finish_section(run, "sharing", reason[0] ? -1 : 0, reason);
}
