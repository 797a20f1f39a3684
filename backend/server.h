/* The daemon's accept loop and its configuration. */
#ifndef REMORA_SERVER_H
#define REMORA_SERVER_H

struct rm_server_config {
	const char *listen;     /* transport address, e.g. tcp://0.0.0.0:7700 */
	const char *driver;     /* the driver library dlopened */
	const char *ready_file; /* written with the bound address once listening */
};

/* Accepts clients until the listener fails; returns -errno. */
int rm_server_run(const struct rm_server_config *cfg);

#endif
