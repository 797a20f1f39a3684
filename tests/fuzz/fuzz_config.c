/* Fuzz target `config`: remorad's configuration file (backend/daemon/config.c), as rm_config_load
 * reads it: whoever may edit it, or a reload (SIGHUP) of a file half written. Input: the
 * file. A file that loads holds tenants within RM_CONFIG_MAX_TENANTS, each with a name of
 * letters, digits, '.', '_' or '-', no two sharing a name or a token; every string ends
 * within its field; every setting within its documented range; and a token it holds is
 * the one the tenant lookup finds. */
#include "config.h"
#include "credential.h"
#include "log.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char path[64];

static void check_string(const char *s, size_t cap)
{
	if (strnlen(s, cap) == cap)
		abort();
}

static int name_char(char ch)
{
	return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
	       ch == '_' || ch == '-';
}

static void check_loaded(const struct rm_daemon_config *c)
{
	if (c->ntenants < 0 || c->ntenants > RM_CONFIG_MAX_TENANTS)
		abort();
	check_string(c->listen, sizeof(c->listen));
	check_string(c->driver, sizeof(c->driver));
	check_string(c->admin_token, sizeof(c->admin_token));
	check_string(c->advertise, sizeof(c->advertise));
	check_string(c->gpu_sync, sizeof(c->gpu_sync));
	check_string(c->mps_control, sizeof(c->mps_control));
	check_string(c->mps_directory, sizeof(c->mps_directory));
	if (c->hardware_queues < 0 || c->hardware_queues > 32 || c->queue_idle_after < 1 || /* 0: by the isolation */
	    c->workers_per_tenant < 1 || c->workers_per_tenant > RM_CONFIG_MAX_WORKERS_PER_TENANT ||
	    c->queue_idle_after > 3600 || c->npool_endpoints < 0 || c->npool_endpoints > RM_CONFIG_MAX_ENDPOINTS)
		abort();
	for (int i = 0; i < c->ntenants; i++) {
		const struct rm_tenant_config *t = &c->tenants[i];
		check_string(t->name, sizeof(t->name));
		check_string(t->token, sizeof(t->token));
		if (!t->name[0] || t->compute_share < 0 || t->compute_share > 100 || t->priority < 0 || t->priority > 1)
			abort();
		for (const char *p = t->name; *p; p++)
			if (!name_char(*p))
				abort();
		for (int j = 0; j < i; j++)
			if (!strcmp(t->name, c->tenants[j].name) || (t->token[0] && !strcmp(t->token, c->tenants[j].token)))
				abort();
		if (t->token[0] && !rm_credential_is_hash(t->token)) { /* in the clear: the lookup finds its tenant */
			const struct rm_tenant_config *found = rm_config_tenant(c, t->token, strlen(t->token));
			if (found != t)
				abort();
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!path[0]) {
		snprintf(path, sizeof(path), "/tmp/remora-fuzz-config.%d", (int)getpid());
		if (!getenv("REMORA_LOG")) /* a refused file's line, for every input: quiet unless asked */
			rm_log_level = -1;
	}
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	close(fd);
	static struct rm_daemon_config c; /* large: not on the stack */
	rm_config_defaults(&c);
	if (rm_config_load(&c, path) == 0) {
		check_loaded(&c);
		char why[300];
		rm_config_check(&c, why, sizeof(why));
	}
	unlink(path);
	return 0;
}
