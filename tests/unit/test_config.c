/* remorad's configuration parser (backend/config.c): keys, sizes, tenant sections, and
 * what it must refuse, each with the file and line it names. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

/* Loads text as a configuration file over the defaults: 0 or -1. */
static int load(const char *text, struct rm_daemon_config *c)
{
	char path[] = "/tmp/remora-config-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		exit(1);
	close(fd);
	rm_config_defaults(c);
	int err = rm_config_load(c, path);
	unlink(path);
	return err;
}

#define EXPECT(cond, what)                                                   \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "FAIL %s: %s\n", what, #cond);      \
			failures++;                                          \
		}                                                            \
	} while (0)

int main(void)
{
	static struct rm_daemon_config c;
	EXPECT(load("# comment\n\nlisten = tcp://127.0.0.1:7800  # trailing\n"
		    "client_memory_limit = 64M\ntenant_memory_limit=2G\nmax_clients_per_gpu = 8\n"
		    "worker_host_memory_limit = 512M\nallow_anonymous = no\n"
		    "[tenant research]\ntoken = r-secret\nmemory_limit = 1G\n"
		    "[tenant  ops.team-2 ]\ntoken = o-secret\nclient_memory_limit = 100M\n", &c) == 0, "a full file");
	EXPECT(!strcmp(c.listen, "tcp://127.0.0.1:7800"), "listen");
	EXPECT(c.client_memory_limit == 64ull << 20 && c.tenant_memory_limit == 2ull << 30, "sizes");
	EXPECT(c.max_clients_per_gpu == 8 && !c.allow_anonymous, "integers and booleans");
	EXPECT(c.worker_host_memory_limit == 512ull << 20, "worker_host_memory_limit");
	EXPECT(c.ntenants == 2 && !strcmp(c.tenants[0].name, "research") && !strcmp(c.tenants[1].name, "ops.team-2"),
	       "tenant names");
	EXPECT(c.tenants[0].memory_limit == 1ull << 30 && c.tenants[1].client_memory_limit == 100ull << 20,
	       "tenant keys");
	EXPECT(rm_config_tenant(&c, "o-secret", 8) == &c.tenants[1], "a token finds its tenant");
	EXPECT(rm_config_tenant(&c, "o-secre", 7) == NULL && rm_config_tenant(&c, "o-secrets", 9) == NULL,
	       "a prefix or an extension of a token finds none");
	EXPECT(rm_config_tenant(&c, "", 0) == NULL, "no anonymous tenant when allow_anonymous = no");

	rm_config_defaults(&c);
	EXPECT(c.worker_host_memory_limit > 0, "the worker's host-memory bound has a default");

	static const char *const refused[] = {
		"no_such_key = 1\n",
		"client_memory_limit = lots\n",
		"max_clients_per_gpu = -1\n",
		"listen\n",
		"[tenants research]\ntoken = x\n", /* once taken as a tenant named "s" */
		"[tenant research\ntoken = x\n",
		"[tenant]\ntoken = x\n",
		"[tenant a b]\ntoken = x\n",
		"[tenant research]\n",               /* no token */
		"[tenant a]\ntoken = x\n[tenant b]\ntoken = x\n",
		"[tenant a]\ntoken = x\n[tenant a]\ntoken = y\n",
		"[tenant a]\ntoken = x\nlisten = tcp://0.0.0.0:1\n", /* a daemon key inside a section */
	};
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		int err = load(refused[i], &c);
		if (err == 0) {
			fprintf(stderr, "FAIL accepted: %s", refused[i]);
			failures++;
		}
	}
	char *longline = malloc(5000);
	memset(longline, 'x', 4998);
	memcpy(longline, "listen = ", 9);
	longline[4998] = '\n';
	longline[4999] = 0;
	EXPECT(load(longline, &c) != 0, "a line longer than the parser reads is refused, not split");
	free(longline);
	if (!failures)
		printf("config: ok\n");
	return failures ? 1 : 0;
}
