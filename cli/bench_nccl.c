/* remora bench: the nccl section, NCCL's all-reduce across 2 GPUs natively and through
 * Remora (bench.h; docs/architecture.md, "NCCL"). */
#include "bench.h"

#include <stdio.h>
#include <unistd.h>

/* All-reduce bus bandwidth for 1 MiB to 1 GiB (16 MiB with --quick): remote at least 0.9 of
 * native from 16 MiB on. Groups of collectives on the worker's blocking twins are sent
 * without waiting, so what remains below that is the worker's handling of each group's four
 * calls beside a 1 MiB all-reduce of about 20 µs. A host with fewer than 2 GPUs, or without
 * NCCL, skips the section with the worker's reason. */
int bench_section_nccl(struct bench_run *run)
{
	size_t max = run->cfg->quick ? 16 * MIB : (size_t)1 << 30;
	char max_arg[32], reason[600];
	if (access(run->nccl, X_OK)) {
		bench_set_section(&run->results, "nccl", "skipped", "bench_nccl was not built (the toolkit has no nccl.h)");
		return 0;
	}
	snprintf(max_arg, sizeof max_arg, "%zu", max);
	char *argv[] = { run->nccl, max_arg, NULL };
	struct bench_output nat, rem;
	int rc = bench_run_both(run, "nccl", argv, &nat, &rem, reason, sizeof reason);
	const char *why_nat = bench_output_get(&nat, "unsupported"), *why_rem = bench_output_get(&rem, "unsupported");
	if (nat.exit_status == 3 && why_nat) {
		snprintf(reason, sizeof reason, "NCCL cannot run here: %s", why_nat);
		bench_set_section(&run->results, "nccl", "skipped", reason);
		rc = 0;
	} else {
		for (size_t bytes = MIB; bytes <= max; bytes *= 4) {
			char key[64], metric[80], size[32];
			bench_size_name(size, sizeof size, bytes);
			snprintf(key, sizeof key, "allreduce.%zu.busbw", bytes);
			snprintf(metric, sizeof metric, "all-reduce %s, 2 GPUs, bus bandwidth", size);
			struct bench_row *row = bench_pair_row(run, "nccl", &nat, &rem, key, "GB/s", metric);
			if (row && bytes >= 16 * MIB) {
				row->goal = BENCH_AT_LEAST;
				row->limit = 0.9;
			}
		}
		if (rc && rem.exit_status == 3 && why_rem)
			snprintf(reason, sizeof reason, "remote: %s", why_rem);
		bench_finish_section(run, "nccl", rc, reason);
	}
	bench_output_free(&nat);
	bench_output_free(&rem);
	return rc;
}
