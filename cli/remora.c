/* remora: the user's command. Subcommands are a table driving both dispatch and usage. */
#include <errno.h>
#include <limits.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "credential.h"
#include "version.h"
#include "wire.h"

/* Exit codes, for every command: 0 done, 1 it failed (the reason on stderr), 2 a usage error;
 * `remora run` exits as the program does, 127 if it cannot be started. */
struct subcommand {
	const char *name;
	const char *args;
	const char *summary;
	int (*run)(int argc, char **argv);
	int own_help; /* the command answers --help itself, with more than its usage line */
	/* Every word the command takes after its name but values and operands: its
	 * subcommands and flags (--help aside). Shell completion offers these words, and
	 * tests/cli/messages.py compares them with dist/remora.bash-completion and with the
	 * command's usage, so that neither can drift (`remora help --words` prints them). */
	const char *words;
};

static int cmd_run(int argc, char **argv);
static int cmd_help(int argc, char **argv);
int cmd_bench(int argc, char **argv); /* bench.c */
int cmd_pool(int argc, char **argv);   /* pool.c */
int cmd_status(int argc, char **argv); /* pool.c */
int cmd_migrate(int argc, char **argv); /* migrate.c */
static int cmd_hash_token(int argc, char **argv);

static const struct subcommand subcommands[] = {
	{"run", "[--server HOST:PORT] [--token TOKEN] [--] PROGRAM [ARGS...]",
	 "run an unmodified CUDA program on a remote GPU", cmd_run, 0, "--server --token --"},
	{"bench", "[--json] [--quick] [--only SECTIONS] [--driver PATH] [--native-lib DIR] ... (--help)",
	 "on a GPU host: measure natively and through a private remorad, side by side", cmd_bench, 1,
	 "--json --quick --only --transport --concurrency --spin-iters --remorad --driver --native-lib --client-lib "
	 "--workers --rdma-host --link --repeat"},
	{"pool", "list [--json] | show HOST | drain HOST [--migrate HOST] | undrain HOST | remove HOST [--pool URL] [--pool-ca FILE] "
	 "[--pool-cert FILE --pool-key FILE] [--pool-user NAME --pool-password-file FILE]",
	 "the GPU pool in etcd (docs/pool.md); URL defaults to REMORA_POOL", cmd_pool, 0,
	 "list show drain undrain remove --pool --pool-ca --pool-cert --pool-key --pool-user --pool-password-file "
	 "--json --migrate"},
	{"migrate", "CLIENT --to HOST:PORT [--server HOST:PORT] [--token TOKEN] [--wait SECONDS]",
	 "move a running client (session or pid, as remora status shows) to another remorad, as the admin",
	 cmd_migrate, 1, "--to --server --token --wait"},
	{"status", "[HOST[:PORT] | --server HOST:PORT] [--json] [--token TOKEN]",
	 "a daemon's GPUs, and the clients the credential may see (default REMORA_SERVER, else 127.0.0.1:7700)",
	 cmd_status, 0, "--server --json --token"},
	{"hash-token", "[TOKEN]", "print the salted hash of TOKEN, ID.SECRET (else of stdin's first line), for "
	 "remorad's configuration", cmd_hash_token, 0, ""},
	{"help", "[--words]", "show this text (--words: each command's words, for shell completion)", cmd_help, 0,
	 "--words"},
};

#define NSUB (sizeof(subcommands) / sizeof(subcommands[0]))

static void usage(FILE *f)
{
	fprintf(f, "usage: remora COMMAND [ARGS]    (remora --version; remora COMMAND --help)\n\n");
	for (size_t i = 0; i < NSUB; i++)
		fprintf(f, "  remora %s %s\n      %s\n", subcommands[i].name, subcommands[i].args, subcommands[i].summary);
	fprintf(f, "\nThe server is REMORA_SERVER (host:port, default 127.0.0.1:7700) unless --server names one.\n");
}

/* remora hash-token [TOKEN]: the line to put in the configuration instead of the token
 * (docs/security.md). Without TOKEN it reads stdin's first line, which keeps the token out
 * of the process list and the shell's history. The token carries its id (ID.SECRET,
 * credential.h), which the line keeps, so that remorad checks a token against one hash. */
static int cmd_hash_token(int argc, char **argv)
{
	char line[1024], out[RM_TOKEN_HASH_MAX];
	const char *token = argc > 1 ? argv[1] : NULL;
	if (token && token[0] == '-') {
		fprintf(stderr, "remora hash-token: %s is not a token (hash-token takes no option; a token is ID.SECRET "
			"and does not start with '-'): give the token, or its line on stdin\n", token);
		return 2;
	}
	if (argc > 2) {
		fprintf(stderr, "remora hash-token: one TOKEN at most\n");
		return 2;
	}
	if (!token) {
		if (!fgets(line, sizeof(line), stdin)) {
			fprintf(stderr, "remora hash-token: no token on stdin\n");
			return 2;
		}
		line[strcspn(line, "\r\n")] = 0;
		token = line;
	}
	if (!*token) {
		fprintf(stderr, "remora hash-token: the token is empty\n");
		return 2;
	}
	char id[RM_TOKEN_ID_MAX + 1];
	if (!rm_credential_token_id(token, strlen(token), id)) {
		fprintf(stderr, "remora hash-token: the token has no token id: write it as ID.SECRET (ID: up to %d letters, "
			"digits, '_' or '-'; e.g. alice.$(openssl rand -hex 24)), so that remorad checks it against one "
			"hash (docs/security.md, Credentials)\n", RM_TOKEN_ID_MAX);
		explicit_bzero(line, sizeof(line));
		return 2;
	}
	int err = rm_credential_hash(token, strlen(token), out, sizeof(out));
	if (err) {
		fprintf(stderr, "remora hash-token: %s\n",
			err == -ENOTSUP ? "built without OpenSSL (meson option tls)" : strerror(-err));
		return 1;
	}
	printf("%s\n", out);
	explicit_bzero(line, sizeof(line));
	return 0;
}

static int cmd_help(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "--words")) {
		for (size_t i = 0; i < NSUB; i++)
			printf("%s: %s\n", subcommands[i].name, subcommands[i].words);
		return 0;
	}
	if (argc > 1) {
		fprintf(stderr, "remora help: unknown option %s\n", argv[1]);
		return 2;
	}
	usage(stdout);
	return 0;
}

/* Finds the folder holding the client library's libcuda.so.1: REMORA_CLIENT_LIB, else
 * beside this program in the build tree (../frontend) or in an install (the private
 * directory under libdir, RM_CLIENT_LIB_FROM_BINDIR from meson). */
static int client_lib_dir(char *out, size_t len)
{
	const char *env = getenv("REMORA_CLIENT_LIB");
	if (env && *env) {
		snprintf(out, len, "%s", env);
		return 0;
	}
	char self[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n < 0)
		return -errno;
	self[n] = 0;
	const char *dir = dirname(self);
	static const char *candidates[] = {"../frontend", RM_CLIENT_LIB_FROM_BINDIR};
	for (size_t i = 0; i < 2; i++) {
		char probe[PATH_MAX + 64];
		snprintf(probe, sizeof(probe), "%s/%s/libcuda.so.1", dir, candidates[i]);
		if (access(probe, R_OK) == 0) {
			char resolved[PATH_MAX];
			snprintf(probe, sizeof(probe), "%s/%s", dir, candidates[i]);
			if (!realpath(probe, resolved))
				return -errno;
			snprintf(out, len, "%s", resolved);
			return 0;
		}
	}
	return -ENOENT;
}

/* The client's libnccl.so.2 goes first in LD_PRELOAD: a program may load NCCL by an absolute
 * path (PyTorch's wheels find nvidia/nccl/lib/libnccl.so.2 by RUNPATH, or preload it), and
 * a preloaded library both answers a later load of the same soname and comes first in symbol
 * lookup, so every NCCL call is the client's whichever NCCL file gets loaded too
 * (docs/architecture.md, "NCCL"). 0, or 1 after a line saying why. */
static int preload_nccl(const char *dir)
{
	char lib[PATH_MAX + 32];
	snprintf(lib, sizeof(lib), "%s/libnccl.so.2", dir);
	if (access(lib, R_OK) != 0)
		return 0; /* a client library built without it */
	const char *old = getenv("LD_PRELOAD");
	char *v = malloc(strlen(lib) + (old ? strlen(old) : 0) + 2);
	if (!v) {
		fprintf(stderr, "remora run: out of memory\n");
		return 1;
	}
	sprintf(v, old && *old ? "%s:%s" : "%s", lib, old);
	setenv("LD_PRELOAD", v, 1);
	free(v);
	return 0;
}

static int cmd_run(int argc, char **argv)
{
	const char *server = NULL, *token = NULL;
	int i = 1;
	for (; i < argc; i++) {
		if (!strcmp(argv[i], "--")) {
			i++;
			break;
		} else if (!strcmp(argv[i], "--server") || !strcmp(argv[i], "--token")) {
			if (i + 1 >= argc) {
				fprintf(stderr, "remora run: option %s needs a value\nusage: remora run %s\n", argv[i],
					subcommands[0].args);
				return 2;
			}
			*(argv[i][2] == 's' ? &server : &token) = argv[i + 1];
			i++;
		} else if (argv[i][0] == '-') {
			fprintf(stderr, "remora run: unknown option %s\n", argv[i]);
			return 2;
		} else {
			break;
		}
	}
	if (i >= argc) {
		fprintf(stderr, "remora run: no program given\nusage: remora run %s\n", subcommands[0].args);
		return 2;
	}
	char dir[PATH_MAX];
	if (client_lib_dir(dir, sizeof(dir))) {
		fprintf(stderr, "remora run: cannot find the client library libcuda.so.1; set REMORA_CLIENT_LIB\n");
		return 1;
	}
	const char *old = getenv("LD_LIBRARY_PATH");
	char *path = malloc(strlen(dir) + (old ? strlen(old) : 0) + 2);
	if (!path)
		return 1;
	sprintf(path, old && *old ? "%s:%s" : "%s", dir, old);
	setenv("LD_LIBRARY_PATH", path, 1);
	free(path);
	if (preload_nccl(dir))
		return 1;
	const char *pool = getenv("REMORA_POOL");
	if (server && pool && *pool) {
		/* The client library would take the pool before REMORA_SERVER: the flag wins. */
		fprintf(stderr, "remora run: --server %s wins over REMORA_POOL (%s), which this program does not get\n",
			server, pool);
		unsetenv("REMORA_POOL");
	}
	if (server)
		setenv("REMORA_SERVER", server, 1);
	if (token)
		setenv("REMORA_TOKEN", token, 1);
	execvp(argv[i], &argv[i]);
	fprintf(stderr, "remora run: cannot run %s: %s\n", argv[i], strerror(errno));
	return 127;
}

static int is_help(const char *arg)
{
	return !strcmp(arg, "--help") || !strcmp(arg, "-h");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (is_help(argv[1])) {
		usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("remora %s (protocol %u, commit %s)\n", RM_VERSION, RM_PROTOCOL_VERSION, RM_COMMIT);
		return 0;
	}
	for (size_t i = 0; i < NSUB; i++) {
		const struct subcommand *c = &subcommands[i];
		if (strcmp(argv[1], c->name))
			continue;
		/* COMMAND --help, anywhere before a program's own arguments ("--" or the program). */
		for (int a = 2; a < argc && !c->own_help; a++) {
			if (is_help(argv[a])) {
				printf("usage: remora %s %s\n    %s\n", c->name, c->args, c->summary);
				return 0;
			}
			if (c->run == cmd_run && (!strcmp(argv[a], "--") || argv[a][0] != '-'))
				break;
			if (c->run == cmd_run && (!strcmp(argv[a], "--server") || !strcmp(argv[a], "--token")))
				a++;
		}
		return c->run(argc - 1, argv + 1);
	}
	fprintf(stderr, "remora: unknown command %s\n", argv[1]);
	usage(stderr);
	return 2;
}
