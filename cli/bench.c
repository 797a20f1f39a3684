/* remora bench: on a GPU host, starts a private remorad and measures each
 * section natively and through Remora in one run, with loopback TCP as the
 * bound of any TCP transport; prints a table, or JSON with --json.
 * The measuring is done by worker programs (bench/), run once with the
 * native libcuda.so.1 and once with Remora's. */
#include "bench.h"
#ifdef RM_HAVE_TLS
#include "selfsigned.h"
#endif

#include <dlfcn.h>
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The sections, in the order they run and are listed (bench.h). */
static const struct {
	const char *name;
	int (*run)(struct bench_run *run);
} sections[] = {
	{ "launch", bench_section_launch },           { "memcpy", bench_section_memcpy },
	{ "memset", bench_section_memset },           { "event", bench_section_event },
	{ "graph", bench_section_graph },
	{ "concurrency", bench_section_concurrency }, { "tenants", bench_section_tenants },
	{ "latency", bench_section_latency },
	{ "cublas", bench_section_cublas },           { "torch", bench_section_torch },
	{ "nccl", bench_section_nccl },               { "sharing", bench_section_sharing },
};
#define NSECTIONS (sizeof sections / sizeof sections[0])

/* After a usage error, in one line. */
static const char usage_line[] =
	"usage: remora bench [--json] [--quick] [--only SECTIONS] [--driver PATH] [--native-lib DIR] ... "
	"(remora bench --help: every option)\n";

static const char usage_text[] =
	"usage: remora bench [--json] [--quick] [--only SECTION[,SECTION...]] [--concurrency N,N,...]\n"
	"                    [--spin-iters N] [--remorad PATH] [--driver PATH] [--native-lib DIR]\n"
	"                    [--client-lib DIR] [--workers DIR] [--transport T[,T...]] [--rdma-host ADDR]\n"
	"                    [--link rtt=TIME,rate=RATE] [--repeat N]\n"
	"--json prints one JSON document on stdout and the table on stderr.\n"
	"--repeat N runs each native and remote program of the launch, memcpy, memset, event, graph,\n"
	"cublas, torch and nccl sections N times in turns (1 to 9) and reports the medians.\n"
	"Sections: launch, memcpy, memset, event, graph, concurrency, tenants, latency, cublas, torch, nccl,\n"
	"sharing\n"
	"(loopback TCP is always measured); tenants runs the concurrency clients each in a tenant of its\n"
	"own, natively under MPS and with tenant_isolation = mps where nvidia-cuda-mps-control is on the\n"
	"PATH; torch runs PyTorch steps with the python3 on the PATH, and is skipped without one; nccl\n"
	"(all-reduce across 2 GPUs) is skipped on a host with fewer; sharing runs the concurrency counts\n"
	"(up to 16) of ResNet-50 processes at once, natively and under MPS against Remora with one tenant\n"
	"and a tenant each (mps), and is skipped where PyTorch cannot run.\n"
	"Native runs use the libcuda.so.1 the loader finds (or the one in --native-lib DIR); remote runs\n"
	"use Remora's, against a remorad this command starts (with --driver PATH when given), over\n"
	"loopback TCP (tcp, the default), shared memory (shm: unix:PATH, for clients on the GPU host) or\n"
	"loopback TLS 1.3 (tls: a throwaway self-signed certificate) or RDMA (rdma: on --rdma-host ADDR, an\n"
	"address of this host that an RDMA device serves, 127.0.0.1 by default). Several, e.g.\n"
	"--transport tcp,tls, run the remote side once over each (natively once) and compare each with\n"
	"the first. --link rtt=50us,rate=25gbit runs it all with remorad behind an emulated link of that\n"
	"round trip and rate (tcp and tls; as root: network namespaces, bench/link-emu.sh).\n";

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

/* The options that take a value, and where each goes (NULL: parsed below). */
static const char **value_slot(struct bench_config *cfg, const char *opt, const char **clients,
			       const char **transports, const char **spin, const char **repeat)
{
	const struct { const char *name; const char **slot; } opts[] = {
		{ "--only", &cfg->only },         { "--concurrency", clients },    { "--transport", transports },
		{ "--spin-iters", spin },         { "--remorad", &cfg->remorad },   { "--driver", &cfg->driver },
		{ "--native-lib", &cfg->native_lib }, { "--client-lib", &cfg->client_lib },
		{ "--workers", &cfg->workers },   { "--rdma-host", &cfg->rdma_host },
		{ "--link", &cfg->link },         { "--repeat", repeat },
	};
	for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++)
		if (!strcmp(opt, opts[i].name))
			return opts[i].slot;
	return NULL;
}

/* 0: run; 1: --help; -1: a usage error, said in one line. */
static int parse_args(struct bench_config *cfg, int argc, char **argv)
{
	const char *clients = NULL, *transports = NULL, *spin = NULL, *repeat = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char **slot = value_slot(cfg, a, &clients, &transports, &spin, &repeat);
		if (!strcmp(a, "--json"))
			cfg->json = true;
		else if (!strcmp(a, "--quick"))
			cfg->quick = true;
		else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
			return 1;
		else if (slot && i + 1 >= argc) {
			fprintf(stderr, "remora bench: option %s needs a value\n", a);
			return -1;
		} else if (slot) {
			*slot = argv[++i];
		} else {
			fprintf(stderr, a[0] == '-' ? "remora bench: unknown option %s\n"
					: "remora bench: unexpected argument %s (bench takes options only)\n", a);
			return -1;
		}
	}
	if (cfg->link && bench_link_check(cfg->link))
		return -1;
	if (transports && parse_transports(cfg, transports)) {
		fprintf(stderr, "remora bench: --transport wants T[,T...] of tcp, shm, tls, rdma, each once: %s\n",
			transports);
		return -1;
	}
	char *end;
	if (spin && ((cfg->spin_iters = strtoll(spin, &end, 10)) <= 0 || *end)) {
		fprintf(stderr, "remora bench: --spin-iters wants a count above 0: %s\n", spin);
		return -1;
	}
	long times = repeat ? strtol(repeat, &end, 10) : 1;
	if (repeat && (times < 1 || times > BENCH_MAX_REPEAT || *end)) {
		fprintf(stderr, "remora bench: --repeat wants a count from 1 to %d: %s\n", BENCH_MAX_REPEAT, repeat);
		return -1;
	}
	cfg->repeat = (int)times;
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
}

/* The drivers a run loads, the native side's and remorad's, checked before anything
 * starts: on a host without one (no GPU, or a bare `remora bench` on a build machine) one
 * line says so instead of a daemon that cannot start and a table without figures. */
static int check_drivers(const struct bench_config *cfg)
{
	char native[PATH_MAX + 16];
	snprintf(native, sizeof native, "%s%slibcuda.so.1", cfg->native_lib ? cfg->native_lib : "",
		 cfg->native_lib ? "/" : "");
	const char *libs[] = { native, cfg->driver ? cfg->driver : "libcuda.so.1" };
	for (size_t i = 0; i < 2; i++) {
		void *h = dlopen(libs[i], RTLD_LAZY | RTLD_LOCAL);
		if (!h) {
			fprintf(stderr, "remora bench: no CUDA driver to measure (%s): run it on a GPU host, or name the "
				"driver (--driver PATH for remorad, --native-lib DIR for the native side)\n", dlerror());
			return -1;
		}
		dlclose(h);
	}
	return 0;
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
	snprintf(run->nccl, sizeof run->nccl, "%s/bench_nccl", cfg->workers); /* absent: the section is skipped */
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

/* The remorads of every transport (i in --transport's order), started before the first pass
 * and up until the last, so that a pass can run another transport's programs in turns with
 * its own (bench_run_both); their remote sides into run->sides (server NULL where the daemon
 * did not start). Returns the number that did not start. */
static int start_daemons(struct bench_run *run, struct bench_daemon *daemons)
{
	const struct bench_config *cfg = run->cfg;
	static char remote_name[MAX_TRANSPORTS][16], ca[MAX_TRANSPORTS][PATH_MAX + 16];
	int failed = 0;
	for (int i = 0; i < cfg->ntransports; i++) {
		enum bench_transport t = cfg->transports[i];
		const char *name = bench_transport_names[t];
		char dir[PATH_MAX];
		snprintf(dir, sizeof dir, "%s/%s", run->tmpdir, name);
		snprintf(ca[i], sizeof ca[i], "%s/cert.pem", dir);
		snprintf(remote_name[i], sizeof remote_name[i], cfg->ntransports > 1 ? "remote-%s" : "remote", name);
		bool up = !prepare_transport(t, dir) &&
			  !bench_daemon_start(&daemons[i], cfg->remorad, cfg->driver, dir, t, cfg->rdma_host);
		failed += !up;
		run->sides[i] = (struct bench_side){ remote_name[i], cfg->client_lib, up ? daemons[i].addr : NULL,
						     t == BENCH_TLS ? ca[i] : NULL, NULL, NULL };
	}
	return failed;
}

/* Every selected section over the i-th transport, through its remorad. Returns the number of
 * sections that failed (a daemon that did not start counts one). */
static int run_pass(struct bench_run *run, int i)
{
	const struct bench_config *cfg = run->cfg;
	enum bench_transport t = cfg->transports[i];
	int failed = 0;
	if (!run->sides[i].server)
		return 1;
	run->remote = run->sides[i];
	run->results.transport = NULL; /* facts and the loopback figures belong to no transport */
	if (i == 0) {
		bench_record_facts(run);
		bench_link_facts(run);
		failed += bench_measure_tcp(run) != 0;
	}
#ifdef RM_HAVE_TLS
	if (t == BENCH_TLS)
		bench_record_ktls(run, run->remote.server, run->remote.tls_ca);
#endif
	run->results.transport = bench_transport_names[t];
	run->transport = t;
	for (size_t s = 0; s < NSECTIONS; s++) {
		if (!selected(cfg, sections[s].name))
			bench_set_section(&run->results, sections[s].name, "not selected", NULL);
		else
			failed += sections[s].run(run) != 0;
	}
	run->remote.server = NULL;
	return failed;
}

int cmd_bench(int argc, char **argv)
{
	struct bench_config cfg = { 0 };
	struct bench_run run = { .cfg = &cfg };
	int rc = parse_args(&cfg, argc, argv), failed = 0;
	if (rc > 0) {
		fputs(usage_text, stdout);
		return 0;
	}
	if (rc < 0 || check_drivers(&cfg)) {
		fprintf(stderr, "%s", usage_line);
		return 2;
	}
	if (find_paths(&run, &cfg) || (cfg.link && bench_link_enter(&cfg, argc, argv)))
		return 1;
	snprintf(run.tmpdir, sizeof run.tmpdir, "/tmp/remora-bench.XXXXXX");
	if (!mkdtemp(run.tmpdir)) {
		fprintf(stderr, "remora bench: mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	run.native = (struct bench_side){ "native", cfg.native_lib, NULL, NULL, NULL, NULL };
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
	struct bench_daemon daemons[MAX_TRANSPORTS] = { 0 };
	start_daemons(&run, daemons); /* a daemon that did not start fails its pass */
	for (int t = 0; t < cfg.ntransports; t++)
		failed += run_pass(&run, t);
	for (int t = 0; t < cfg.ntransports; t++)
		if (run.sides[t].server)
			bench_daemon_stop(&daemons[t]);
	if (cfg.ntransports > 1)
		bench_compare_transports(&run.results, bench_transport_names[cfg.transports[0]]);
	for (int i = 0; i < run.ncached; i++)
		bench_output_free(&run.cached[i].out);
	for (int i = 0; i < run.nremote_cached; i++)
		bench_output_free(&run.remote_cached[i].out);

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
