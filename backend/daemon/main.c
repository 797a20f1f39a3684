/* remorad: serves the GPUs of this host to remote CUDA programs. Run as given it
 * is the accepting process; it starts itself again with --worker-channel for each
 * worker (docs/sharing.md). */
#include <dlfcn.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "nccl_comms.h"
#include "gpus.h"
#include "driver_table.h"
#include "host_nvml.h"
#include "image_cache.h"
#include "log.h"
#include "registry.h"
#include "version.h"
#include "wire.h"
#include "server.h"
#include "stream_pool.h"
#include "stream_wait.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: remorad [--config FILE] [--listen ADDR] [--driver PATH] [--ready-file PATH] [--user NAME]\n"
		"               [--set KEY=VALUE]...\n"
		"       remorad --help | --version\n"
		"  --config FILE      read settings from FILE (docs/configuration.md); flags override it\n"
		"  --listen ADDR      where clients connect (default tcp://0.0.0.0:7700)\n"
		"  --driver PATH      the CUDA driver library to serve (default libcuda.so.1)\n"
		"  --ready-file PATH  write the bound address here once listening\n"
		"  --user NAME        once listening, run on as this user (started as root; docs/security.md)\n"
		"  --tls-cert FILE    serve TLS 1.3 (listen tls://HOST:PORT) with this certificate chain (PEM)\n"
		"  --tls-key FILE     ... and its private key\n"
		"  --tls-client-ca FILE  require client certificates signed by this CA (docs/security.md)\n"
		"  --set KEY=VALUE    any setting of the configuration file's top section\n"
		"Logs go to stderr; REMORA_LOG=error|warn|info|debug sets how much (default info).\n"
		"Exit status: 0 after a clean stop, 1 when serving failed, 2 for a bad flag or setting.\n");
}

static int load_driver(const struct rm_daemon_config *cfg, int *count)
{
	void *lib = dlopen(cfg->driver, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		rm_log(RM_LOG_ERROR, "cannot load the CUDA driver %s: %s", cfg->driver, dlerror());
		return -1;
	}
	int found = rm_driver_table_load(lib);
	if (!rm_drv.cuInit || !rm_drv.cuCtxSetCurrent || !rm_drv.cuStreamCreate) {
		rm_log(RM_LOG_ERROR, "%s is not a usable CUDA driver (%d functions found)", cfg->driver, found);
		return -1;
	}
	CUresult r = rm_drv.cuInit(0);
	*count = 0;
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuDeviceGetCount(count);
	if (r != CUDA_SUCCESS || *count == 0) {
		rm_log(RM_LOG_ERROR, "the driver %s found no usable GPU (error %d)", cfg->driver, r);
		return -1;
	}
	return found;
}

/* Fills the registry's GPU records (accepting process, before any worker runs). */
static void take_inventory(int count)
{
	struct rm_registry *reg = rm_registry();
	reg->ngpus = count < RM_MAX_GPUS ? count : RM_MAX_GPUS;
	for (int i = 0; i < reg->ngpus; i++) {
		struct rm_gpu_record *g = &reg->gpus[i];
		CUuuid u = {{0}};
		size_t total = 0;
		snprintf(g->name, sizeof(g->name), "?");
		rm_drv.cuDeviceGetName(g->name, sizeof(g->name), i);
		rm_drv.cuDeviceTotalMem_v2(&total, i);
		rm_drv.cuDeviceGetUuid(&u, i);
		const unsigned char *b = (const unsigned char *)u.bytes;
		snprintf(g->uuid, sizeof(g->uuid),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
			 b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
		g->total_bytes = g->free_bytes = total;
		rm_log(RM_LOG_INFO, "GPU %d: %s, %s, %zu MiB", i, g->name, g->uuid, total >> 20);
	}
}

static const struct option opts[] = {
	{"config", required_argument, NULL, 'c'},
	{"listen", required_argument, NULL, 'l'},
	{"driver", required_argument, NULL, 'd'},
	{"ready-file", required_argument, NULL, 'r'},
	{"set", required_argument, NULL, 's'},
	{"tls-cert", required_argument, NULL, 'C'},
	{"tls-key", required_argument, NULL, 'K'},
	{"tls-client-ca", required_argument, NULL, 'A'},
	{"user", required_argument, NULL, 'u'},
	{"worker-channel", required_argument, NULL, 'W'},
	{"registry-fd", required_argument, NULL, 'R'},
	{"config-fd", required_argument, NULL, 'F'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{0},
};

/* Builds cfg from the defaults, the configuration files and the flags of argv (the files
 * first, wherever --config appears, so that the other flags override them). Returns 0; 2
 * after a line saying what is wrong; or 1 with *done set when --help or --version
 * answered. A worker's --worker-channel, --registry-fd and --config-fd go to *channel,
 * *registry_fd and *config_fd. */
static int read_configuration(int argc, char **argv, struct rm_daemon_config *cfg, int *channel, int *registry_fd,
			      int *config_fd, int *done)
{
	int c;
	char why[300];
	rm_config_defaults(cfg);
	*done = 0;
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, "c:l:d:r:s:hV", opts, NULL)) != -1)
		if (c == 'c' && rm_config_load(cfg, optarg))
			return 2;
	optind = 0;
	opterr = 1;
	while ((c = getopt_long(argc, argv, "c:l:d:r:s:hV", opts, NULL)) != -1) {
		const char *key = NULL, *val = optarg, *flag = NULL;
		char kv[1024];
		switch (c) {
		case 'c': break;
		case 'l': key = "listen", flag = "--listen"; break;
		case 'd': key = "driver", flag = "--driver"; break;
		case 'r': key = "ready_file", flag = "--ready-file"; break;
		case 'C': key = "tls_cert", flag = "--tls-cert"; break;
		case 'K': key = "tls_key", flag = "--tls-key"; break;
		case 'A': key = "tls_client_ca", flag = "--tls-client-ca"; break;
		case 'u': key = "user", flag = "--user"; break;
		case 's': {
			if (snprintf(kv, sizeof(kv), "%s", optarg) >= (int)sizeof(kv)) {
				fprintf(stderr, "remorad: --set %.32s...: longer than %zu bytes\n", optarg, sizeof(kv) - 1);
				return 2;
			}
			char *eq = strchr(kv, '=');
			if (!eq) {
				fprintf(stderr, "remorad: --set needs KEY=VALUE, not %s\n", optarg);
				return 2;
			}
			*eq = 0;
			key = kv;
			val = eq + 1;
			flag = "--set";
			break;
		}
		case 'W': *channel = atoi(optarg); break;
		case 'R': *registry_fd = atoi(optarg); break;
		case 'F': *config_fd = atoi(optarg); break;
		case 'h': usage(stdout); *done = 1; return 1;
		case 'V':
			printf("remorad %s (protocol %u, commit %s)\n", RM_VERSION, RM_PROTOCOL_VERSION, RM_COMMIT);
			*done = 1;
			return 1;
		default: usage(stderr); return 2;
		}
		if (key && rm_config_set(cfg, key, val, why, sizeof(why))) {
			fprintf(stderr, "remorad: %s %s: %s\n", flag, optarg, why);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "remorad: unexpected argument '%s': remorad takes flags only (--help lists them)\n",
			argv[optind]);
		return 2;
	}
	if (rm_config_check(cfg, why, sizeof(why))) {
		fprintf(stderr, "remorad: %s\n", why);
		return 2;
	}
	return 0;
}

/* A worker's configuration, from the accepting process (supervisor.c, config_for_worker):
 * 0, or -1 after a line saying why. */
static int read_worker_configuration(int fd, struct rm_daemon_config *cfg)
{
	ssize_t n = fd >= 0 ? pread(fd, cfg, sizeof(*cfg), 0) : -1;
	if (fd >= 0)
		close(fd);
	if (n != (ssize_t)sizeof(*cfg)) {
		rm_log(RM_LOG_ERROR, "worker: no configuration from the accepting process (--config-fd)");
		return -1;
	}
	rm_config_drop_credentials(cfg); /* none came; and none is kept */
	return 0;
}

static int saved_argc;
static char **saved_argv;

/* SIGHUP's reading (server.h): the files and flags remorad started with, read again. */
static int reread_configuration(struct rm_daemon_config *out)
{
	int channel = -1, registry_fd = -1, config_fd = -1, done;
	return read_configuration(saved_argc, saved_argv, out, &channel, &registry_fd, &config_fd, &done) ? -1 : 0;
}

/* Hardware queues per worker context when hardware_queues is not set. Every context's queues
 * take channels of the GPU, which ran out on an H100 at 14 contexts of 32: 32 (the most the
 * driver gives) for one shared context; a worker per tenant shares about 256 among the
 * configured tenants' workers (at least 2); under MPS 2, as its server's queues are shared
 * by every worker (16 workers of 8 left one without a context). */
static int default_hardware_queues(const struct rm_daemon_config *cfg)
{
	if (cfg->isolation == RM_ISOLATE_MPS)
		return 2;
	if (cfg->isolation != RM_ISOLATE_PROCESS)
		return 32;
	int workers = (cfg->ntenants + (cfg->allow_anonymous ? 1 : 0)) * cfg->workers_per_tenant;
	int q = workers > 0 ? 256 / workers : 32;
	return q < 2 ? 2 : q > 32 ? 32 : q;
}

int main(int argc, char **argv)
{
	static struct rm_daemon_config cfg;
	int channel = -1, registry_fd = -1, config_fd = -1, done;
	if (rm_log_init("remorad", RM_LOG_INFO)) {
		fprintf(stderr, "remorad: REMORA_LOG=%s is not a log level (%s)\n", getenv("REMORA_LOG"), RM_LOG_LEVELS);
		return 2;
	}
	int r = read_configuration(argc, argv, &cfg, &channel, &registry_fd, &config_fd, &done);
	if (r)
		return done ? 0 : r;
	/* A worker's configuration is the one in force, without credentials (supervisor.c): the
	 * accepting process checks every credential, and a worker never reads the file. */
	if (channel >= 0 && read_worker_configuration(config_fd, &cfg))
		return 1;
	saved_argc = argc;
	saved_argv = argv;
	signal(SIGPIPE, SIG_IGN);
	rm_host_nvml_configure(cfg.host_nvml);

	if (channel >= 0) { /* a worker */
		signal(SIGHUP, SIG_IGN); /* the accepting process reloads; its quotas reach workers through the registry */
		rm_log_init("remorad", RM_LOG_INFO); /* a worker's lines differ by their process id */
		/* Loading code into a shared context waits for every client's kernels: load it
		 * all when the image arrives rather than at some client's first launch, but into
		 * the loading client's context only (module_loading = context, image_cache.h):
		 * an eager load into every context of the worker also waited for the kernels of
		 * other GPUs' contexts, where NCCL's kernel of one client waited for another. */
		setenv("CUDA_MODULE_LOADING", !strcmp(cfg.module_loading, "eager") ? "EAGER" : "LAZY", 1);
		rm_image_load_here_configure(!strcmp(cfg.module_loading, "context"));
		/* Streams share the context's hardware work queues (8 unless asked): ask for
		 * as many as configured; the stream pool keeps clients from holding each other
		 * up in them. */
		int nqueues = cfg.hardware_queues ? cfg.hardware_queues : default_hardware_queues(&cfg);
		char queues[16];
		snprintf(queues, sizeof(queues), "%d", nqueues);
		setenv("CUDA_DEVICE_MAX_CONNECTIONS", queues, 1);
		rm_log(RM_LOG_DEBUG, "worker: its contexts ask for %d hardware queues", nqueues);
		rm_stream_pool_configure(nqueues, cfg.queue_sharing_wait, cfg.queue_idle_after);
		rm_gpu_set_sync(cfg.gpu_sync);
		rm_gpu_set_malloc_heap(cfg.gpu_malloc_heap);
		rm_stream_wait_configure(cfg.gpu_wait_spin_us);
		rm_nccl_configure(cfg.nccl_library, cfg.nccl_timeout_s, cfg.nccl_twins);
		int count;
		if (registry_fd < 0 || rm_registry_attach(registry_fd) || load_driver(&cfg, &count) < 0)
			return 1;
		return rm_worker_run(&cfg, channel);
	}

	rm_log_init("remorad", RM_LOG_INFO);
	int count, found = load_driver(&cfg, &count);
	if (found < 0)
		return 1;
	int version = 0;
	rm_drv.cuDriverGetVersion(&version);
	rm_log(RM_LOG_INFO, "driver %s: version %d, %d GPU(s), %d functions", cfg.driver, version, count, found);
	registry_fd = rm_registry_create();
	if (registry_fd < 0) {
		rm_log(RM_LOG_ERROR, "cannot create the registry in shared memory: %s", strerror(-registry_fd));
		return 1;
	}
	take_inventory(count);
	/* Workers run this program again with the registry, a channel and their configuration
	 * (supervisor.c), not remorad's own arguments: a --set admin_token stays here. */
	char *wargv[3], regarg[32];
	snprintf(regarg, sizeof(regarg), "--registry-fd=%d", registry_fd);
	wargv[0] = argv[0];
	wargv[1] = regarg;
	wargv[2] = NULL;
	return rm_server_run(&cfg, "/proc/self/exe", wargv, reread_configuration) ? 1 : 0;
}
