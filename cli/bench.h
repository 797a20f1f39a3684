/* remora bench's parts (cli/bench*.c): the run they share. bench.c parses the command and
 * runs each selected section over each transport; bench_run.c runs a section's workers on
 * both sides and makes its rows; bench_sections.c, bench_clients.c and bench_libraries.c
 * are the sections; bench_host.c records the host's facts and the loopback TCP bound. */
#ifndef REMORA_CLI_BENCH_H
#define REMORA_CLI_BENCH_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "results.h"
#include "workers.h"

#define MIB ((size_t)1 << 20)
#define WORKER_TIMEOUT_S 600
#define MAX_CONCURRENCY 1024
#define MAX_TRANSPORTS 4
#define MAX_CACHED 64

struct bench_config {
	const char *remorad, *driver, *native_lib, *client_lib, *workers;
	const char *rdma_host; /* --rdma-host: where remorad listens for rdma */
	const char *link;      /* --link rtt=T,rate=R: over the emulated link (bench_link.c) */
	bool quick, json;
	enum bench_transport transports[MAX_TRANSPORTS]; /* the first is the baseline of comparisons */
	int ntransports;
	const char *only;
	int clients[32], nclients;
	long long spin_iters;
	int repeat; /* --repeat: runs of each side of a pair, in turns (medians reported) */
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
	char worker[PATH_MAX], image[PATH_MAX], cublas[PATH_MAX], torch[PATH_MAX], nccl[PATH_MAX], tmpdir[64];
	enum bench_transport transport; /* this pass's */
	double tcp_gbps, tcp_rtt_us;
	struct native_result cached[MAX_CACHED];
	int ncached;
	/* Every transport's remote side, in --transport's order, their daemons up for the whole
	 * run; and the remote outputs the first pass took for the later ones (bench_run_both). */
	struct bench_side sides[MAX_TRANSPORTS];
	struct native_result remote_cached[MAX_CACHED];
	int nremote_cached;
};

/* Sections: each returns 0 when it ran (ok or skipped) and -1 when it failed. */
int bench_section_launch(struct bench_run *run);   /* bench_sections.c */
int bench_section_memcpy(struct bench_run *run);
int bench_section_memset(struct bench_run *run);
int bench_section_event(struct bench_run *run);
int bench_section_graph(struct bench_run *run);
int bench_section_concurrency(struct bench_run *run); /* bench_clients.c */
int bench_section_latency(struct bench_run *run);
int bench_section_tenants(struct bench_run *run);
int bench_section_cublas(struct bench_run *run);   /* bench_libraries.c */
int bench_section_torch(struct bench_run *run);
int bench_section_sharing(struct bench_run *run);
int bench_section_nccl(struct bench_run *run);     /* bench_nccl.c */

/* bench_run.c */
void bench_size_name(char *out, size_t len, size_t bytes);
/* The native side's outputs of n copies of argv under key: run on the first pass, the
 * copies kept for the passes of the other transports. Returns the number that failed. */
int bench_run_native(struct bench_run *run, const char *key, char *const argv[], int n, bool gate,
		     struct bench_output *outs);
/* Runs argv natively (once, for the first transport; section is its key) and then remotely,
 * --repeat times in turns, each side's figures the median of its runs; with several
 * transports and --repeat, the first pass takes every transport's runs in each turn (native,
 * then each transport) and the later passes use them, so that the transports are compared
 * on runs made at the same times. 0 when both succeeded, else -1 with the reasons in reason. */
int bench_run_both(struct bench_run *run, const char *section, char *const argv[], struct bench_output *nat,
		   struct bench_output *rem, char *reason, size_t len);
double bench_number_or_nan(const struct bench_output *out, const char *key);
/* A row of one key of both outputs, ratio remote/native. */
struct bench_row *bench_pair_row(struct bench_run *run, const char *section, const struct bench_output *nat,
				 const struct bench_output *rem, const char *key, const char *unit, const char *metric);
/* Records the section's state, ok or failed with reason; returns rc. */
int bench_finish_section(struct bench_run *run, const char *name, int rc, const char *reason);

/* bench_link.c: --link's spec checked (0, or -1 after a line); the bench run again inside
 * the emulated link unless it already is (0 there; -1 after a line when it cannot be);
 * the link's facts recorded and printed (nothing without --link). */
int bench_link_check(const char *spec);
int bench_link_enter(const struct bench_config *cfg, int argc, char **argv);
void bench_link_facts(struct bench_run *run);

/* bench_host.c: the loopback TCP figures (0, or -1 after a line and the section "tcp" failed);
 * the run's facts; whether kTLS carries a connection to the daemon at addr (with RM_HAVE_TLS). */
int bench_measure_tcp(struct bench_run *run);
void bench_record_facts(struct bench_run *run);
void bench_record_ktls(struct bench_run *run, const char *addr, const char *ca);

#endif
