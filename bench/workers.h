/* Worker processes of `remora bench`: each run natively or through Remora,
 * their key=value output collected, and the private remorad they talk to. */
#ifndef REMORA_BENCH_WORKERS_H
#define REMORA_BENCH_WORKERS_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

/* Where a worker's CUDA calls go. */
struct bench_side {
	const char *name;    /* "native" or "remote": names its output files too */
	const char *lib_dir; /* put first on LD_LIBRARY_PATH (a libcuda.so.1's folder), or NULL */
	const char *server;  /* REMORA_SERVER, or NULL */
	const char *tls_ca;  /* REMORA_TLS_CA, or NULL */
	const char *token_prefix; /* REMORA_TOKEN: this prefix and the worker's index, or NULL */
	const char *mps_pipe;     /* CUDA_MPS_PIPE_DIRECTORY (native clients of NVIDIA MPS), or NULL */
};

struct bench_kv {
	char key[96];
	char value[160];
};

/* What one worker left: its key=value lines and how it ended. */
struct bench_output {
	struct bench_kv *kv;
	int count;
	int exit_status;  /* the exit status, or -1 when it did not exit normally */
	char reason[256]; /* why it failed (the last line of its stderr), "" when it did not */
};

const char *bench_output_get(const struct bench_output *out, const char *key);
/* The value of key as a number; false when absent or not a number. */
bool bench_output_number(const struct bench_output *out, const char *key, double *value);
void bench_output_free(struct bench_output *out);
/* to = a copy of from (its own key=value array); 0, or -1 when out of memory. */
int bench_output_copy(struct bench_output *to, const struct bench_output *from);
/* to = n outputs of one worker (repeats) in one: each key of the first, as its text where all
 * n agree, else the median where every one has it as a decimal number, else "differs" (so
 * results that must match, hex floats included, never match by accident); the exit status
 * and reason of the first that failed. 0, or -1 when out of memory. n is 1 to
 * BENCH_MAX_REPEAT. */
#define BENCH_MAX_REPEAT 9
int bench_output_median(struct bench_output *to, const struct bench_output *outs, int n);

/* Runs n copies of argv on one side at once and waits for them all, at most
 * timeout_s seconds (then kills them).  With gate, each worker gets a pipe on
 * fd 3 to write one byte to when it is ready and a pipe on fd 4 that reaches
 * end of file when all are ready (or have died), so they start together.
 * outs has n entries.  Returns the number of workers that failed. */
int bench_run_workers(const struct bench_side *side, char *const argv[], int n, bool gate, int timeout_s,
		      const char *tmpdir, struct bench_output *outs);

/* How the remote side reaches its remorad. */
enum bench_transport { BENCH_TCP, BENCH_SHM, BENCH_TLS, BENCH_RDMA };
extern const char *const bench_transport_names[]; /* "tcp", "shm", "tls", "rdma" */

/* A remorad on a free loopback port. */
struct bench_daemon {
	pid_t pid;
	char addr[128];     /* REMORA_SERVER: host:port, unix:PATH, tls://host:port or rdma://host:port */
	char log[PATH_MAX]; /* its stderr */
	const char *config; /* set before the start: its --config FILE, or NULL */
};

/* Starts remorad (with --driver driver unless NULL) and waits for its address; 0 or
 * -errno, with a message on stderr. Its ready file and log go in dir. BENCH_TCP: loopback
 * TCP; BENCH_SHM: a Unix socket in dir, clients on the shared-memory transport (unix:PATH);
 * BENCH_TLS: loopback TLS with dir/cert.pem and dir/key.pem (selfsigned.h); BENCH_RDMA:
 * rdma:// on rdma_host, an address of this host that an RDMA device serves. */
int bench_daemon_start(struct bench_daemon *d, const char *remorad, const char *driver, const char *dir,
		       enum bench_transport transport, const char *rdma_host);
void bench_daemon_stop(struct bench_daemon *d);

#endif
