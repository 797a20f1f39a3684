/* Worker processes and the private remorad of `remora bench`. */
#include "workers.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define READY_FD 3
#define GO_FD 4
#define DAEMON_START_TIMEOUT_S 30

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

const char *bench_output_get(const struct bench_output *out, const char *key)
{
	for (int i = 0; i < out->count; i++)
		if (!strcmp(out->kv[i].key, key))
			return out->kv[i].value;
	return NULL;
}

bool bench_output_number(const struct bench_output *out, const char *key, double *value)
{
	const char *s = bench_output_get(out, key);
	char *end;
	if (!s || !*s)
		return false;
	*value = strtod(s, &end);
	return *end == 0;
}

int bench_output_copy(struct bench_output *to, const struct bench_output *from)
{
	*to = *from;
	to->kv = NULL;
	if (from->count && !(to->kv = malloc((size_t)from->count * sizeof *to->kv))) {
		to->count = 0;
		return -1;
	}
	if (from->count)
		memcpy(to->kv, from->kv, (size_t)from->count * sizeof *to->kv);
	return 0;
}

/* One run's figure of a key: its value and its text. */
struct figure_run {
	double v;
	const char *text;
};

static int by_value(const void *a, const void *b)
{
	double x = ((const struct figure_run *)a)->v, y = ((const struct figure_run *)b)->v;
	return x < y ? -1 : x > y;
}

/* A figure: a decimal number (a hex float such as a result's bits is text, never averaged). */
static bool decimal_figure(const struct bench_output *out, const char *key, double *v)
{
	const char *s = bench_output_get(out, key);
	return s && s[strspn(s, "0123456789+-.eE")] == 0 && bench_output_number(out, key, v);
}

int bench_output_median(struct bench_output *to, const struct bench_output *outs, int n)
{
	if (bench_output_copy(to, &outs[0]))
		return -1;
	for (int i = 1; i < n && !to->exit_status; i++)
		if (outs[i].exit_status) {
			to->exit_status = outs[i].exit_status;
			memcpy(to->reason, outs[i].reason, sizeof to->reason);
		}
	for (int k = 0; k < to->count; k++) {
		struct bench_kv *kv = &to->kv[k];
		struct figure_run runs[BENCH_MAX_REPEAT];
		int numbers = 0, same = 1;
		for (int i = 0; i < n; i++) {
			const char *s = bench_output_get(&outs[i], kv->key);
			same &= s && !strcmp(s, kv->value);
			if (decimal_figure(&outs[i], kv->key, &runs[numbers].v))
				runs[numbers++].text = s;
		}
		if (same)
			continue;
		if (numbers < n) {
			snprintf(kv->value, sizeof kv->value, "differs");
			continue;
		}
		qsort(runs, (size_t)n, sizeof runs[0], by_value);
		if (n % 2) /* the middle run's own text: no digits added */
			snprintf(kv->value, sizeof kv->value, "%s", runs[n / 2].text);
		else
			snprintf(kv->value, sizeof kv->value, "%.9g", (runs[n / 2 - 1].v + runs[n / 2].v) / 2);
	}
	return 0;
}

void bench_output_free(struct bench_output *out)
{
	free(out->kv);
	out->kv = NULL;
	out->count = 0;
}

/* Reads a worker's stdout file: every line KEY=VALUE. */
static void parse_output(const char *path, struct bench_output *out)
{
	FILE *f = fopen(path, "re");
	char line[512];
	int cap = 0;
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = 0;
		char *eq = strchr(line, '=');
		if (!eq || eq == line)
			continue;
		if (out->count == cap) {
			cap = cap ? cap * 2 : 32;
			struct bench_kv *kv = realloc(out->kv, (size_t)cap * sizeof *kv);
			if (!kv)
				break;
			out->kv = kv;
		}
		*eq = 0;
		struct bench_kv *kv = &out->kv[out->count++];
		snprintf(kv->key, sizeof kv->key, "%.*s", (int)sizeof kv->key - 1, line);
		snprintf(kv->value, sizeof kv->value, "%.*s", (int)sizeof kv->value - 1, eq + 1);
	}
	fclose(f);
}

/* The last non-empty line of a file, as the reason a worker failed. */
static void last_line(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "re");
	char line[512];
	if (!f)
		return;
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\r\n")] = 0;
		if (line[0])
			snprintf(out, len, "%.*s", (int)len - 1, line);
	}
	fclose(f);
}

/* In the child: fds, environment, exec.  Never returns. */
static void exec_worker(const struct bench_side *side, int index, char *const argv[], const char *out_path,
			const char *err_path, int ready_w, int go_r)
{
	int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (out < 0 || err < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0)
		_exit(126);
	if (ready_w >= 0) {
		/* Above fd 4 first, so that the dup2s below never meet their own target. */
		int r = fcntl(ready_w, F_DUPFD, 10), g = fcntl(go_r, F_DUPFD, 10);
		if (r < 0 || g < 0 || dup2(r, READY_FD) < 0 || dup2(g, GO_FD) < 0)
			_exit(126);
		close(r);
		close(g);
	}
	if (side->lib_dir) {
		const char *old = getenv("LD_LIBRARY_PATH");
		char *path = malloc(strlen(side->lib_dir) + (old ? strlen(old) : 0) + 2);
		if (!path)
			_exit(126);
		sprintf(path, old && *old ? "%s:%s" : "%s", side->lib_dir, old);
		setenv("LD_LIBRARY_PATH", path, 1);
	}
	if (side->server)
		setenv("REMORA_SERVER", side->server, 1);
	if (side->tls_ca)
		setenv("REMORA_TLS_CA", side->tls_ca, 1);
	if (side->token_prefix) {
		char token[96];
		snprintf(token, sizeof token, "%s%d", side->token_prefix, index);
		setenv("REMORA_TOKEN", token, 1);
	}
	if (side->mps_pipe)
		setenv("CUDA_MPS_PIPE_DIRECTORY", side->mps_pipe, 1);
	execv(argv[0], argv);
	fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

static void record_exit(struct bench_output *out, int status, const char *err_path)
{
	out->exit_status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
	if (out->exit_status == 0)
		return;
	last_line(err_path, out->reason, sizeof out->reason);
	if (!out->reason[0] && WIFEXITED(status))
		snprintf(out->reason, sizeof out->reason, "exited with status %d", out->exit_status);
	else if (!out->reason[0])
		snprintf(out->reason, sizeof out->reason, "killed by signal %d", WTERMSIG(status));
}

struct child {
	pid_t pid;
	bool exited;
	bool ready;
	char out_path[PATH_MAX], err_path[PATH_MAX];
};

/* Reaps whichever children have exited; returns how many are still running. */
static int reap(struct child *c, int n, struct bench_output *outs)
{
	int running = 0;
	for (int i = 0; i < n; i++) {
		int status;
		if (c[i].exited)
			continue;
		if (waitpid(c[i].pid, &status, WNOHANG) == c[i].pid) {
			c[i].exited = true;
			record_exit(&outs[i], status, c[i].err_path);
		} else {
			running++;
		}
	}
	return running;
}

int bench_run_workers(const struct bench_side *side, char *const argv[], int n, bool gate, int timeout_s,
		      const char *tmpdir, struct bench_output *outs)
{
	static int runs; /* numbers each run's files, so that the logs of all runs stay apart */
	int ready[2] = { -1, -1 }, go[2] = { -1, -1 }, failed = 0, started = 0, run = runs++;
	struct child *c = calloc((size_t)n, sizeof *c);
	memset(outs, 0, (size_t)n * sizeof *outs);
	if (!c || (gate && (pipe2(ready, O_CLOEXEC) || pipe2(go, O_CLOEXEC)))) {
		for (int i = 0; i < n; i++)
			snprintf(outs[i].reason, sizeof outs[i].reason, "cannot set up workers: %s", strerror(errno));
		failed = n;
		goto out;
	}
	for (; started < n; started++) {
		struct child *ch = &c[started];
		snprintf(ch->out_path, sizeof ch->out_path, "%s/%03d-%s.%d.out", tmpdir, run, side->name, started);
		snprintf(ch->err_path, sizeof ch->err_path, "%s/%03d-%s.%d.err", tmpdir, run, side->name, started);
		ch->pid = fork();
		if (ch->pid == 0)
			exec_worker(side, started, argv, ch->out_path, ch->err_path, ready[1], go[0]);
		if (ch->pid < 0) {
			snprintf(outs[started].reason, sizeof outs[started].reason, "fork: %s", strerror(errno));
			outs[started].exit_status = -1;
			break;
		}
	}
	failed = n - started;
	if (gate) {
		close(ready[1]);
		close(go[0]);
		ready[1] = go[0] = -1;
	}
	double deadline = now_s() + timeout_s;
	/* Gate: release everyone once each worker is ready or gone. */
	for (int nready = 0; gate && go[1] >= 0;) {
		int running = reap(c, started, outs), waiting = 0;
		for (int i = 0; i < started; i++)
			waiting += !c[i].exited;
		if (nready >= waiting || running == 0 || now_s() > deadline) {
			close(go[1]);
			go[1] = -1;
			break;
		}
		struct pollfd p = { ready[0], POLLIN, 0 };
		if (poll(&p, 1, 20) > 0) {
			char bytes[256];
			ssize_t got = read(ready[0], bytes, sizeof bytes);
			nready += got > 0 ? (int)got : 0;
		}
	}
	while (reap(c, started, outs) > 0 && now_s() <= deadline)
		sleep_ms(5);
	for (int i = 0; i < started; i++) {
		int status;
		if (c[i].exited)
			continue;
		kill(c[i].pid, SIGKILL);
		waitpid(c[i].pid, &status, 0);
		c[i].exited = true;
		outs[i].exit_status = -1;
		snprintf(outs[i].reason, sizeof outs[i].reason, "timed out after %d s", timeout_s);
	}
	for (int i = 0; i < started; i++) {
		parse_output(c[i].out_path, &outs[i]);
		failed += outs[i].exit_status != 0;
	}
out:
	for (int i = 0; i < 2; i++) {
		if (ready[i] >= 0)
			close(ready[i]);
		if (go[i] >= 0)
			close(go[i]);
	}
	free(c);
	return failed;
}

const char *const bench_transport_names[] = { [BENCH_TCP] = "tcp", [BENCH_SHM] = "shm", [BENCH_TLS] = "tls",
					       [BENCH_RDMA] = "rdma" };

int bench_daemon_start(struct bench_daemon *d, const char *remorad, const char *driver, const char *dir,
		       enum bench_transport transport, const char *rdma_host)
{
	char ready_file[PATH_MAX], listen[PATH_MAX + 8] = "tcp://127.0.0.1:0", cert[PATH_MAX], key[PATH_MAX];
	bool shm = transport == BENCH_SHM, tls = transport == BENCH_TLS, rdma = transport == BENCH_RDMA;
	snprintf(ready_file, sizeof ready_file, "%s/remorad.addr", dir);
	if (shm)
		snprintf(listen, sizeof listen, "unix:%s/remorad.sock", dir);
	if (tls)
		snprintf(listen, sizeof listen, "tls://127.0.0.1:0");
	/* Inside an emulated link (scripts/link-emu.sh): remorad in the server's namespace. */
	const char *link_ns = getenv("REMORA_LINK_SERVER_NS"), *link_ip = getenv("REMORA_LINK_SERVER_IP"),
		   *link_tool = getenv("REMORA_LINK_TOOL");
	bool linked = link_ns && link_ip && link_tool && (transport == BENCH_TCP || tls);
	if (linked)
		snprintf(listen, sizeof listen, "%s://%s:0", tls ? "tls" : "tcp", link_ip);
	if (rdma)
		snprintf(listen, sizeof listen, strchr(rdma_host, ':') ? "rdma://[%s]:0" : "rdma://%s:0", rdma_host);
	snprintf(cert, sizeof cert, "%s/cert.pem", dir);
	snprintf(key, sizeof key, "%s/key.pem", dir);
	snprintf(d->log, sizeof d->log, "%s/remorad.log", dir);
	d->addr[0] = 0;
	d->pid = fork();
	if (d->pid < 0)
		return -errno;
	if (d->pid == 0) {
		int log = open(d->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		if (log < 0 || dup2(log, STDOUT_FILENO) < 0 || dup2(log, STDERR_FILENO) < 0) /* stdout: the JSON's */
			_exit(126);
		char *argv[24] = { (char *)remorad, "--listen", listen, "--set", "allow_anonymous=yes", "--ready-file",
				   ready_file };
		/* The NCCL the nccl section's native worker loads (REMORA_BENCH_NCCL, else the toolkit's). */
		const char *nccl = getenv("REMORA_BENCH_NCCL");
		char nccl_set[PATH_MAX + 16];
		if (!nccl || !*nccl)
			nccl = BENCH_NCCL_LIBRARY;
		snprintf(nccl_set, sizeof nccl_set, "nccl_library=%s", nccl);
		int n = 7;
		if (linked) { /* remora-link exec NETNS remorad ... */
			memmove(argv + 3, argv, (size_t)n * sizeof *argv);
			argv[0] = (char *)link_tool, argv[1] = "exec", argv[2] = (char *)link_ns;
			n += 3;
		}
		if (tls) {
			argv[n++] = "--tls-cert", argv[n++] = cert;
			argv[n++] = "--tls-key", argv[n++] = key;
		}
		if (driver)
			argv[n++] = "--driver", argv[n++] = (char *)driver;
		if (access(nccl, R_OK) == 0)
			argv[n++] = "--set", argv[n++] = nccl_set;
		if (d->config)
			argv[n++] = "--config", argv[n++] = (char *)d->config;
		argv[n] = NULL;
		execv(argv[0], argv);
		fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	double deadline = now_s() + DAEMON_START_TIMEOUT_S;
	for (;;) {
		int status;
		FILE *f = fopen(ready_file, "re");
		if (f) {
			/* The ready file holds host:port, or the socket path: the client wants unix:PATH
			 * for shared memory, tls://host:port for TLS and rdma://host:port for RDMA. */
			const char *scheme = shm ? "unix:" : tls ? "tls://" : rdma ? "rdma://" : "";
			size_t at = strlen(scheme);
			memcpy(d->addr, scheme, at);
			bool got = fgets(d->addr + at, (int)(sizeof d->addr - at), f) != NULL;
			fclose(f);
			d->addr[strcspn(d->addr, "\r\n")] = 0;
			if (got && d->addr[0])
				return 0;
		}
		if (waitpid(d->pid, &status, WNOHANG) == d->pid || now_s() > deadline) {
			char reason[256] = "";
			last_line(d->log, reason, sizeof reason);
			fprintf(stderr, "remora bench: remorad did not start: %s (log %s)\n",
				reason[0] ? reason : "no address written", d->log);
			bench_daemon_stop(d);
			return -EIO;
		}
		sleep_ms(20);
	}
}

void bench_daemon_stop(struct bench_daemon *d)
{
	int status;
	if (d->pid <= 0)
		return;
	if (waitpid(d->pid, &status, WNOHANG) == 0) {
		kill(d->pid, SIGTERM);
		waitpid(d->pid, &status, 0);
	}
	d->pid = 0;
}
