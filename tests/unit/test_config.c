/* remorad's configuration parser (backend/daemon/config.c): keys, sizes, tenant sections, and
 * what it must refuse, each with the file and line it names. */
#include "config.h"
#include "credential.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "expect.h"

static char path[] = "/tmp/remora-config-XXXXXX";
static char said[4096]; /* what the last load logged */

/* Loads text as a configuration file over the defaults: 0 or -1; its log lines in said. */
static int load(const char *text, struct rm_daemon_config *c)
{
	strcpy(path, "/tmp/remora-config-XXXXXX");
	int fd = mkstemp(path);
	FILE *log = tmpfile();
	int saved_stderr = dup(STDERR_FILENO);
	if (fd < 0 || !log || saved_stderr < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
		exit(1);
	close(fd);
	dup2(fileno(log), STDERR_FILENO);
	rm_config_defaults(c);
	int err = rm_config_load(c, path);
	dup2(saved_stderr, STDERR_FILENO);
	close(saved_stderr);
	rewind(log);
	said[fread(said, 1, sizeof(said) - 1, log)] = 0;
	fclose(log);
	unlink(path);
	return err;
}

/* A text the parser must refuse, the line it must name and a part of its reason. */
struct refusal {
	const char *text;
	int line;
	const char *reason;
};

static const struct refusal refusals[] = {
	{"no_such_key = 1\n", 1, "unknown setting 'no_such_key'"},
	{"client_memory_limit = lots\n", 1, "client_memory_limit"},
	{"max_clients_per_gpu = -1\n", 1, "max_clients_per_gpu"},
	{"listen\n", 1, "expected key = value"},
	{"[tenants research]\ntoken = x\n", 1, "unknown section [tenants research]"}, /* once a tenant "s" */
	{"# pools are not sections\n[pool]\n", 2, "unknown section [pool]"},
	{"[tenant research\ntoken = x\n", 1, "expected [tenant NAME]"},
	{"[tenant]\ntoken = x\n", 1, "expected [tenant NAME]"},
	{"[tenant a b]\ntoken = x\n", 1, "expected [tenant NAME]"},
	{"[tenant a]\ntoken = pbkdf2-sha256$20000$c2FsdA==$aGFzaA==\n", 2, "bad value"}, /* a hash too short */
	{"admin_token = pbkdf2-sha256$x$$\n", 1, "bad value"},
	{"[tenant a]\ntoken = x\n[tenant b]\ntoken = x\n", 3, "tenant b shares a name or a token with tenant a"},
	{"[tenant a]\ntoken = x\n[tenant a]\ntoken = y\n", 3, "tenant a shares a name or a token with tenant a"},
	{"[tenant a]\ntoken = x\nlisten = tcp://0.0.0.0:1\n", 3, "unknown tenant setting 'listen'"},
	/* A key set twice in one section. */
	{"listen = tcp://127.0.0.1:7800\n\nlisten = tcp://127.0.0.1:7801\n", 3, "listen set again (first at line 1)"},
	{"[tenant a]\ntoken = x\nmemory_limit = 1G\nmemory_limit = 2G\n", 4, "memory_limit set again (first at line 3)"},
	/* Quotes: double quotes are removed, anything else is refused rather than kept. */
	{"listen = 'tcp://127.0.0.1:7800'\n", 1, "single quotes are not understood"},
	{"listen = \"tcp://127.0.0.1:7800\n", 1, "double quotes"},
	{"listen = \"tcp://127.0.0.1\":7800\n", 1, "double quotes"},
	/* Addresses are checked where they are read, not at the first listen. */
	{"listen = http://127.0.0.1:7800\n", 1, "names no transport"},
	{"listen = tcp://127.0.0.1\n", 1, "has no port"},
	{"listen = tcp://127.0.0.1:70000\n", 1, "is not a port"},
	{"listen = tcp://gpu host:7700\n", 1, "is not a host name"},
	{"advertise = tcp://gpu07:0\n", 1, "is not a port (1 to 65535)"},
	{"driver = \"\"\n", 1, "driver"},
};

int main(void)
{
	static struct rm_daemon_config c;
	EXPECT(load("# comment\n\nlisten = tcp://127.0.0.1:7800  # trailing\n"
		    "client_memory_limit = 64M\ntenant_memory_limit=2G\nmax_clients_per_gpu = 8\n"
		    "worker_host_memory_limit = 512M\nallow_anonymous = no\n"
		    "[tenant research]\ntoken = r-secret\nmemory_limit = 1G\n"
		    "[tenant  ops.team-2 ]\ntoken = o-secret\nclient_memory_limit = 100M\n", &c) == 0);
	EXPECT(!strcmp(c.listen, "tcp://127.0.0.1:7800"));
	EXPECT(c.client_memory_limit == 64ull << 20 && c.tenant_memory_limit == 2ull << 30);
	EXPECT(c.max_clients_per_gpu == 8 && !c.allow_anonymous);
	EXPECT(c.worker_host_memory_limit == 512ull << 20);
	EXPECT(c.ntenants == 2 && !strcmp(c.tenants[0].name, "research") && !strcmp(c.tenants[1].name, "ops.team-2"));
	EXPECT(c.tenants[0].memory_limit == 1ull << 30 && c.tenants[1].client_memory_limit == 100ull << 20);
	EXPECT(rm_config_tenant(&c, "o-secret", 8) == &c.tenants[1]);
	/* a prefix or an extension of a token finds none */
	EXPECT(rm_config_tenant(&c, "o-secre", 7) == NULL && rm_config_tenant(&c, "o-secrets", 9) == NULL);
	EXPECT(rm_config_tenant(&c, "", 0) == NULL); /* no anonymous tenant when allow_anonymous = no */

	/* Double-quoted values lose their quotes; a '#' inside them is not a comment. */
	EXPECT(load("listen = \"tcp://127.0.0.1:7800\"  # quoted\n[tenant a]\ntoken = \"a#b c\"\n", &c) == 0);
	EXPECT(!strcmp(c.listen, "tcp://127.0.0.1:7800") && !strcmp(c.tenants[0].token, "a#b c"));
	/* A key in the top section and again in a tenant's, or in two tenants', is no duplicate. */
	EXPECT(load("client_memory_limit = 1G\n[tenant a]\ntoken = x\nclient_memory_limit = 2G\n"
		    "[tenant b]\ntoken = y\nclient_memory_limit = 3G\n", &c) == 0);
	EXPECT(c.client_memory_limit == 1ull << 30 && c.tenants[1].client_memory_limit == 3ull << 30);
	EXPECT(load("listen = [::1]:0\nadvertise = gpu07.example:7700\n", &c) == 0);
	EXPECT(load("listen = 0.0.0.0:7700\n", &c) == 0);
	EXPECT(!strcmp(c.gpu_sync, "auto"));
	EXPECT(load("gpu_sync = block\n", &c) == 0 && !strcmp(c.gpu_sync, "block"));
	EXPECT(load("gpu_sync = sleep\n", &c) == -1);
	EXPECT(c.gpu_wait_spin_us == -1); /* by the CPU count (stream_wait.h) */
	EXPECT(load("gpu_wait_spin_us = 0\n", &c) == 0 && c.gpu_wait_spin_us == 0);
	EXPECT(load("gpu_wait_spin_us = 1000\n", &c) == 0 && c.gpu_wait_spin_us == 1000);
	EXPECT(load("gpu_wait_spin_us = 1001\n", &c) == -1);
	EXPECT(load("gpu_wait_spin_us = -5\n", &c) == -1);
#ifdef RM_HAVE_SHM
	/* Shared memory for clients on this host: a socket path, or @NAME (abstract). */
	EXPECT(load("listen = unix:/run/remora/remorad.sock\n", &c) == 0 && !strcmp(c.listen, "unix:/run/remora/remorad.sock"));
	EXPECT(load("listen = unix:///run/remora/remorad.sock\n", &c) == 0);
	EXPECT(load("listen = unix:@remorad\n", &c) == 0);
	EXPECT(load("listen = unix:\n", &c) == -1);
#endif

	rm_config_defaults(&c);
	EXPECT(c.worker_host_memory_limit > 0); /* the worker's host-memory bound has a default */
	EXPECT(!c.allow_anonymous);              /* anonymous clients are served only when asked for */

	/* A tenant without a token is reached by a client certificate only, so it needs TLS
	 * with client certificates; the whole configuration is checked after the flags. */
	char why[300];
	EXPECT(load("\n[tenant research]\n", &c) == 0);
	EXPECT(rm_config_check(&c, why, sizeof(why)) == -1 && strstr(why, "tenant research has no token"));
	EXPECT(load("listen = tls://127.0.0.1:0\ntls_cert = s.pem\ntls_key = s.key\ntls_client_ca = ca.pem\n"
		    "admin_cn = ops\n[tenant research]\n", &c) == 0);
	EXPECT(rm_config_check(&c, why, sizeof(why)) == 0);
	EXPECT(rm_config_tenant_by_cn(&c, "research") == &c.tenants[0] && !rm_config_tenant_by_cn(&c, "other"));
	EXPECT(rm_config_is_admin(&c, "", 0, "ops") && !rm_config_is_admin(&c, "", 0, "research"));
	EXPECT(load("listen = tls://127.0.0.1:0\n", &c) == 0 && rm_config_check(&c, why, sizeof(why)) == -1 &&
	       strstr(why, "needs tls_cert and tls_key"));
	EXPECT(load("tls_cert = s.pem\n", &c) == 0 && rm_config_check(&c, why, sizeof(why)) == -1);
#ifdef RM_HAVE_TLS
	/* Hashed tokens: the right token matches, a wrong one or a prefix does not. */
	char hash[RM_TOKEN_HASH_MAX], text[400];
	EXPECT(rm_credential_hash("h-secret", 8, hash, sizeof(hash)) == 0 && rm_credential_check_hash(hash) == 0);
	snprintf(text, sizeof(text), "admin_token = %s\n[tenant h]\ntoken = %s\n[tenant p]\ntoken = p-secret\n", hash, hash);
	EXPECT(load(text, &c) == 0);
	EXPECT(rm_config_tenant(&c, "h-secret", 8) == &c.tenants[0] && rm_config_tenant(&c, "p-secret", 8) == &c.tenants[1]);
	EXPECT(!rm_config_tenant(&c, "h-secre", 7) && !rm_config_tenant(&c, "h-secret!", 9) && !rm_config_tenant(&c, hash, strlen(hash)));
	EXPECT(rm_config_is_admin(&c, "h-secret", 8, NULL) && !rm_config_is_admin(&c, "p-secret", 8, NULL));
	rm_config_drop_credentials(&c);
	EXPECT(!rm_config_tenant(&c, "h-secret", 8) && !rm_config_tenant(&c, "p-secret", 8));

	/* Token ids (issue 37): a token ID.SECRET is checked against the one stored credential
	 * carrying ID, so a check costs one hash however many tenants have hashed tokens. */
	char id[RM_TOKEN_ID_MAX + 1], big[64 * 200 + 400];
	EXPECT(rm_credential_token_id("alice.s3cret", 12, id) == 5 && !strcmp(id, "alice"));
	EXPECT(rm_credential_token_id("s3cret", 6, id) == 0 && rm_credential_token_id(".x", 2, id) == 0 &&
	       rm_credential_token_id("a b.x", 5, id) == 0 && rm_credential_token_id("alice.", 5, id) == 0);
	EXPECT(rm_credential_hash("alice.s3cret", 12, hash, sizeof(hash)) == 0 && rm_credential_check_hash(hash) == 0);
	EXPECT(strstr(hash, "$alice") && rm_credential_stored_id(hash, id) == 5 && !strcmp(id, "alice"));
	EXPECT(rm_credential_matches(hash, "alice.s3cret", 12) && !rm_credential_matches(hash, "alice.s3cre", 11));
	int n = snprintf(big, sizeof(big), "admin_token = ops.root\n");
	for (int i = 0; i < 64; i++) {
		char token[32];
		int len = snprintf(token, sizeof(token), "t%d.secret-%d", i, i);
		EXPECT(rm_credential_hash(token, (size_t)len, hash, sizeof(hash)) == 0);
		n += snprintf(big + n, sizeof(big) - (size_t)n, "[tenant t%d]\ntoken = %s\n", i, hash);
	}
	EXPECT(load(big, &c) == 0);
	EXPECT(rm_config_credential_key(&c, "t63.x", 5) == 63 && rm_config_credential_key(&c, "ops.x", 5) == RM_CREDENTIAL_ADMIN &&
	       rm_config_credential_key(&c, "nobody.x", 8) == RM_CREDENTIAL_OTHER && rm_config_hashes_without_id(&c) == 0);
	unsigned long before = rm_credential_hashes_computed();
	EXPECT(rm_config_tenant(&c, "t63.secret-63", 13) == &c.tenants[63] && rm_config_tenant(&c, "t7.wrong", 8) == NULL);
	EXPECT(rm_config_tenant(&c, "nobody.x", 8) == NULL && rm_config_tenant(&c, "no-id-at-all", 12) == NULL);
	EXPECT(rm_credential_hashes_computed() - before == 2); /* one each for the two tokens with a known id */
	EXPECT(rm_config_is_admin(&c, "ops.root", 8, NULL) && !rm_config_is_admin(&c, "t1.secret-1", 11, NULL));
	/* A hash line without an id still works, and is counted for the start-up warning. */
	EXPECT(rm_credential_hash("legacy", 6, hash, sizeof(hash)) == 0);
	snprintf(text, sizeof(text), "[tenant old]\ntoken = %s\n[tenant new]\ntoken = new.x\n", hash);
	EXPECT(load(text, &c) == 0 && rm_config_hashes_without_id(&c) == 1 && rm_config_tenant(&c, "legacy", 6) == &c.tenants[0]);
	/* An id names one stored credential. */
	EXPECT(load("[tenant a]\ntoken = x.1\n[tenant b]\ntoken = x.2\n", &c) != 0 && strstr(said, "token id 'x'"));
	EXPECT(load("admin_token = x.1\n[tenant b]\ntoken = x.2\n", &c) == 0 && rm_config_check(&c, why, sizeof(why)) &&
	       strstr(why, "token id 'x' of admin_token"));
#endif

	for (size_t i = 0; i < sizeof(refusals) / sizeof(refusals[0]); i++) {
		const struct refusal *r = &refusals[i];
		char where[64];
		int err = load(r->text, &c);
		snprintf(where, sizeof(where), "%s:%d: ", path, r->line);
		if (err == 0 || !strstr(said, where) || !strstr(said, r->reason)) {
			fprintf(stderr, "FAIL %s, not refused at line %d with \"%s\"; it said: %s\n", r->text, r->line,
				r->reason, said);
			failures++;
		}
	}
	char *longline = malloc(5000);
	memset(longline, 'x', 4998);
	memcpy(longline, "listen = ", 9);
	longline[4998] = '\n';
	longline[4999] = 0;
	EXPECT(load(longline, &c) != 0); /* a line longer than the parser reads is refused, not split */
	free(longline);
	if (!failures)
		printf("config: ok\n");
	return failures ? 1 : 0;
}
