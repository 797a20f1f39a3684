/* The MPS control daemon of tenant_isolation = mps (mps.h). It runs in foreground mode as a
 * child of the accepting process, whose worker reaper also reaps it (rm_mps_reaped); it is
 * started when the first worker needs it and again whenever a worker starts after it ended. */
#include "mps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "server.h"

static pthread_mutex_t mps_lock = PTHREAD_MUTEX_INITIALIZER;
static pid_t control_pid; /* 0: not running; read and cleared by the reaper without mps_lock */
static pid_t asker_pid;   /* the client that asked it to quit (mps_lock) */
static char pipe_dir[600], log_dir[600];

/* Makes the pipe and log directories (mode 0700) under mps_directory, or under a fresh
 * directory of /tmp when it is unset. Under mps_lock. */
static int make_directories(void)
{
	if (pipe_dir[0])
		return 0;
	const char *base = rm_server_config()->mps_directory;
	char made[512];
	if (!base[0]) {
		snprintf(made, sizeof(made), "/tmp/remorad-mps-XXXXXX");
		if (!mkdtemp(made))
			return -errno;
		base = made;
	} else if (mkdir(base, 0700) && errno != EEXIST)
		return -errno;
	snprintf(pipe_dir, sizeof(pipe_dir), "%s/pipe", base);
	snprintf(log_dir, sizeof(log_dir), "%s/log", base);
	if ((mkdir(pipe_dir, 0700) && errno != EEXIST) || (mkdir(log_dir, 0700) && errno != EEXIST)) {
		int err = -errno;
		pipe_dir[0] = 0;
		return err;
	}
	return 0;
}

/* Runs the control program with the pipe and log directories in its environment: in
 * foreground mode (-f) as the daemon, or as a client writing command to its standard input.
 * The child's pid, or -errno. */
static pid_t spawn_control(const char *command, int out_fd)
{
	char pipe_env[640], log_env[640];
	snprintf(pipe_env, sizeof(pipe_env), "CUDA_MPS_PIPE_DIRECTORY=%s", pipe_dir);
	snprintf(log_env, sizeof(log_env), "CUDA_MPS_LOG_DIRECTORY=%s", log_dir);
	char *env[] = {pipe_env, log_env, "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", NULL};
	const char *exe = rm_server_config()->mps_control;
	char *argv[] = {(char *)exe, command ? NULL : "-f", NULL};
	int in[2] = {-1, -1};
	if (command && pipe2(in, O_CLOEXEC))
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		int devnull = open("/dev/null", O_RDWR);
		dup2(command ? in[0] : devnull, 0);
		dup2(out_fd >= 0 ? out_fd : devnull, 1);
		dup2(out_fd >= 0 ? out_fd : devnull, 2);
		setsid(); /* a terminal's signals are remorad's to handle, not its daemon's */
		execve(exe, argv, env);
		execvpe(exe, argv, env);
		_exit(127);
	}
	int err = pid < 0 ? -errno : 0;
	if (command) {
		close(in[0]);
		if (!err && write(in[1], command, strlen(command)) < 0)
			err = -errno;
		close(in[1]);
	}
	return err ? err : pid;
}

/* What the pipe directory holds, as a number that changes when an entry is made anew (a
 * predecessor's pipes may still be there). */
static unsigned long long directory_signature(const char *path)
{
	DIR *d = opendir(path);
	struct dirent *e;
	unsigned long long sig = 0;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			sig = sig * 1000003u + e->d_ino + 1;
	if (d)
		closedir(d);
	return sig;
}

static int start_locked(void)
{
	int err = make_directories();
	if (err) {
		rm_log(RM_LOG_ERROR, "tenant_isolation = mps: cannot make MPS directories under %s: %s",
		       rm_server_config()->mps_directory[0] ? rm_server_config()->mps_directory : "/tmp",
		       strerror(-err));
		return err;
	}
	char path[700];
	snprintf(path, sizeof(path), "%s/remorad-control.log", log_dir);
	int out = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	unsigned long long before = directory_signature(pipe_dir);
	pid_t pid = spawn_control(NULL, out);
	if (out >= 0)
		close(out);
	if (pid < 0) {
		rm_log(RM_LOG_ERROR, "tenant_isolation = mps: cannot start %s: %s", rm_server_config()->mps_control,
		       strerror((int)-pid));
		return (int)pid;
	}
	__atomic_store_n(&control_pid, pid, __ATOMIC_RELEASE);
	/* The control daemon makes its pipes once it listens; a worker started before that would
	 * run without MPS. Wait for one, briefly. */
	for (int waited = 0; directory_signature(pipe_dir) == before && waited < 5000; waited += 10) {
		if (__atomic_load_n(&control_pid, __ATOMIC_ACQUIRE) != pid) { /* reaped */
			rm_log(RM_LOG_ERROR, "tenant_isolation = mps: %s -f ended at start (its log: %s)",
			       rm_server_config()->mps_control, path);
			return -ECHILD;
		}
		usleep(10000);
	}
	if (directory_signature(pipe_dir) == before)
		rm_log(RM_LOG_WARN, "tenant_isolation = mps: %s made no pipe in %s within 5 s; workers may start "
		       "without MPS (its log: %s)", rm_server_config()->mps_control, pipe_dir, path);
	rm_log(RM_LOG_INFO, "MPS control daemon %d started (pipes %s, logs %s)", (int)pid, pipe_dir, log_dir);
	return 0;
}

int rm_mps_ensure(void)
{
	pthread_mutex_lock(&mps_lock);
	int err = __atomic_load_n(&control_pid, __ATOMIC_ACQUIRE) ? 0 : start_locked();
	pthread_mutex_unlock(&mps_lock);
	return err;
}

int rm_mps_reaped(pid_t pid)
{
	pid_t expected = pid;
	if (pid > 0 && __atomic_compare_exchange_n(&control_pid, &expected, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		rm_log(RM_LOG_INFO, "the MPS control daemon %d ended; another is started for the next worker", (int)pid);
		return 1;
	}
	pthread_mutex_lock(&mps_lock); /* taken while the asker is started and recorded */
	int asker = pid > 0 && pid == asker_pid;
	pthread_mutex_unlock(&mps_lock);
	return asker;
}

int rm_mps_worker_env(const struct rm_tenant_config *t, int ngpus, char **env, int cap, char *buf, size_t buflen)
{
	int n = 0;
	size_t used = 0;
#define PUT(...)                                                                               \
	do {                                                                                   \
		if (n >= cap)                                                                  \
			return -1;                                                             \
		int len_ = snprintf(buf + used, buflen - used, __VA_ARGS__);                   \
		if (len_ < 0 || (size_t)len_ >= buflen - used)                                 \
			return -1;                                                             \
		env[n++] = buf + used;                                                         \
		used += (size_t)len_ + 1;                                                      \
	} while (0)
	pthread_mutex_lock(&mps_lock);
	char pipe_copy[600], log_copy[600];
	snprintf(pipe_copy, sizeof(pipe_copy), "%s", pipe_dir);
	snprintf(log_copy, sizeof(log_copy), "%s", log_dir);
	pthread_mutex_unlock(&mps_lock);
	PUT("CUDA_MPS_PIPE_DIRECTORY=%s", pipe_copy);
	PUT("CUDA_MPS_LOG_DIRECTORY=%s", log_copy);
	if (t && t->compute_share)
		PUT("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d", t->compute_share);
	if (t && t->priority)
		PUT("CUDA_MPS_CLIENT_PRIORITY=%d", t->priority);
	uint64_t limit = t && t->memory_limit ? t->memory_limit : rm_server_config()->tenant_memory_limit;
	if (limit && ngpus > 0) {
		/* MPS takes a limit per device, in whole MiB here; the tenant's is for all GPUs
		 * together, so each GPU's is the whole of it, and Remora's quota the sum. */
		char list[512];
		size_t at = 0;
		for (int i = 0; i < ngpus && at < sizeof(list); i++)
			at += (size_t)snprintf(list + at, sizeof(list) - at, "%s%d=%lluM", i ? "," : "", i,
					       (unsigned long long)((limit + (1u << 20) - 1) >> 20));
		if (at >= sizeof(list))
			return -1;
		PUT("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=%s", list);
	}
#undef PUT
	return n;
}

void rm_mps_stop(int timeout_s)
{
	pthread_mutex_lock(&mps_lock);
	pid_t pid = __atomic_load_n(&control_pid, __ATOMIC_ACQUIRE);
	pid_t asker = pid ? spawn_control("quit\n", -1) : 0;
	if (asker > 0)
		asker_pid = asker;
	pthread_mutex_unlock(&mps_lock);
	if (!pid)
		return;
	struct timespec t0, now;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (__atomic_load_n(&control_pid, __ATOMIC_ACQUIRE) != pid)
			break;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec >= timeout_s) {
			rm_log(RM_LOG_WARN, "the MPS control daemon %d did not quit within %d s; killing it", (int)pid,
			       timeout_s);
			kill(pid, SIGKILL);
			break;
		}
		usleep(20000);
	}
	if (asker > 0)
		kill(asker, SIGKILL); /* the worker reaper reaps it (rm_mps_reaped) */
	rm_log(RM_LOG_INFO, "MPS control daemon %d stopped", (int)pid);
}
