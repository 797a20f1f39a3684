/* remorad: serves the GPUs of this host to remote CUDA programs. */
#include <dlfcn.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_table.h"
#include "log.h"
#include "server.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: remorad [--listen ADDR] [--driver PATH] [--ready-file PATH]\n"
		"  --listen ADDR      where clients connect (default tcp://0.0.0.0:7700)\n"
		"  --driver PATH      the CUDA driver library to serve (default libcuda.so.1)\n"
		"  --ready-file PATH  write the bound address here once listening\n"
		"Logs go to stderr; REMORA_LOG=error|warn|info|debug sets how much (default info).\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"listen", required_argument, NULL, 'l'},
		{"driver", required_argument, NULL, 'd'},
		{"ready-file", required_argument, NULL, 'r'},
		{"help", no_argument, NULL, 'h'},
		{0},
	};
	struct rm_server_config cfg = {.listen = "tcp://0.0.0.0:7700", .driver = "libcuda.so.1"};
	int c;
	while ((c = getopt_long(argc, argv, "l:d:r:h", opts, NULL)) != -1) {
		switch (c) {
		case 'l': cfg.listen = optarg; break;
		case 'd': cfg.driver = optarg; break;
		case 'r': cfg.ready_file = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	rm_log_init("remorad", RM_LOG_INFO);
	signal(SIGPIPE, SIG_IGN);

	void *lib = dlopen(cfg.driver, RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		rm_log(RM_LOG_ERROR, "cannot load the CUDA driver %s: %s", cfg.driver, dlerror());
		return 1;
	}
	int found = rm_driver_table_load(lib);
	if (!rm_drv.cuInit || !rm_drv.cuCtxSetCurrent || !rm_drv.cuStreamCreate) {
		rm_log(RM_LOG_ERROR, "%s is not a usable CUDA driver (%d functions found)", cfg.driver, found);
		return 1;
	}
	CUresult r = rm_drv.cuInit(0);
	int count = 0, version = 0;
	if (r == CUDA_SUCCESS)
		r = rm_drv.cuDeviceGetCount(&count);
	if (r != CUDA_SUCCESS || count == 0) {
		rm_log(RM_LOG_ERROR, "the driver %s found no usable GPU (error %d)", cfg.driver, r);
		return 1;
	}
	rm_drv.cuDriverGetVersion(&version);
	rm_log(RM_LOG_INFO, "driver %s: version %d, %d GPU(s), %d functions", cfg.driver, version, count, found);
	for (int i = 0; i < count; i++) {
		char name[256] = "?";
		rm_drv.cuDeviceGetName(name, sizeof(name), i);
		rm_log(RM_LOG_INFO, "GPU %d: %s", i, name);
	}
	return rm_server_run(&cfg) ? 1 : 0;
}
