/* remora bench: the sections of libraries on top of the driver API: cuBLAS and PyTorch
 * (bench.h). */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int bench_section_cublas(struct bench_run *run)
{
	int n = run->cfg->quick ? 256 : 4096;
	char n_arg[16], metric[80], reason[600];
	snprintf(n_arg, sizeof n_arg, "%d", n);
	char *argv[] = { run->cublas, n_arg, run->cfg->quick ? "10" : "200", NULL };
	struct bench_output nat, rem;
	int rc = bench_run_both(run, "cublas", argv, &nat, &rem, reason, sizeof reason);
	snprintf(metric, sizeof metric, "sgemm %d^3 in a loop, throughput", n);
	struct bench_row *row = bench_pair_row(run, "cublas", &nat, &rem, "sgemm_tflops", "TFLOP/s", metric);
	if (row) {
		row->goal = BENCH_AT_LEAST;
		row->limit = 0.97;
	}
	snprintf(metric, sizeof metric, "sgemm %d^3, time per call", n);
	bench_pair_row(run, "cublas", &nat, &rem, "sgemm_ms", "ms", metric);
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
		bench_finish_section(run, "cublas", rc, reason);
	}
	bench_output_free(&nat);
	bench_output_free(&rem);
	return rc;
}

/* The remote step's round-trip budget as facts torch_PART_KEY (null where not counted):
 * what scripts/link-budget.sh puts beside the link's limit; _TRANSPORT after the name
 * where several ran. */
static void budget_facts(struct bench_run *run, const char *part, const struct bench_output *rem)
{
	static const char *const keys[] = { "round_trips_per_step", "calls_per_step", "bytes_sent_per_step",
					    "bytes_received_per_step", "sends_per_step" };
	for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
		char name[96];
		const char *v = bench_output_get(rem, keys[i]);
		snprintf(name, sizeof name, "torch_%s_%s%s%s", part, keys[i], run->cfg->ntransports > 1 ? "_" : "",
			 run->cfg->ntransports > 1 ? bench_transport_names[run->transport] : "");
		bench_add_fact(&run->results, name, true, "%s", v && *v ? v : "null");
	}
}

/* One PyTorch step of bench/torch_worker.py, native and remote: its time per step, remote
 * over native (at most limit), and whether both computed the same bits (the fact named
 * fact, a string that outlives the run). Returns what bench_run_both does, or 1 when PyTorch
 * cannot run here (*why says so). */
static int torch_part(struct bench_run *run, const char *part, const char *fact, const char *steps,
		      const char *metric, double limit, char *why, size_t why_len)
{
	char *argv[] = { "/usr/bin/env", "python3", run->torch, (char *)part, (char *)steps, NULL };
	struct bench_output nat, rem;
	char reason[600], stats[PATH_MAX];
	/* The client's counters over the timed steps (frontend/stats.h): the round-trip budget. */
	snprintf(stats, sizeof stats, "%s/torch-stats-%%p", run->tmpdir);
	setenv("REMORA_STATS", stats, 1);
	int rc = bench_run_both(run, part, argv, &nat, &rem, reason, sizeof reason);
	unsetenv("REMORA_STATS");
	budget_facts(run, part, &rem);
	const char *unsupported = bench_output_get(&nat, "unsupported");
	if (nat.exit_status == 3 && unsupported) {
		snprintf(why, why_len, "%s", unsupported);
		rc = 1;
	} else {
		struct bench_row *row = bench_pair_row(run, "torch", &nat, &rem, "ms_per_step", "ms", metric);
		if (row && limit > 0) {
			row->goal = BENCH_AT_MOST;
			row->limit = limit;
		}
		/* The program's own CPU a step: where it is near the step's time, the program is
		 * CPU-bound, and the host's CPU speed (docs/performance.md, noise) sets the step. */
		char cpu_metric[160];
		snprintf(cpu_metric, sizeof cpu_metric, "%s, the program's CPU", metric);
		bench_pair_row(run, "torch", &nat, &rem, "cpu_ms_per_step", "ms", cpu_metric);
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
int bench_section_torch(struct bench_run *run)
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
		rc = torch_part(run, "cnn_train_loss", "torch_cnn_train_loss_same_result", quick ? "20" : "300",
				"CNN training step reading its loss", 0, why, sizeof why);
	if (rc == 0)
		rc = torch_part(run, "resnet50_b1", "torch_resnet50_b1_same_result", quick ? "10" : "200", "ResNet-50 fp16 inference, batch 1",
				shm ? 1.0 / 0.9 : 0, why, sizeof why);
	if (rc == 0 && !quick)
		rc = torch_part(run, "gpt_train", "torch_gpt_train_same_result", "50", "GPT-style training step (4 layers, d=256)", 0, why, sizeof why);
	return bench_finish_section(run, "torch", rc ? -1 : 0, why);
}
