/* pool_cache.c - the pool's last answer, kept on disk (pool_cache.h).
 *
 * The file: a first line "remora-pool-members 1 UNIX_TIME ENDPOINTS", then one address a line.
 * It is read as untrusted text: lines are bounded, an address must look like one, and at most
 * RM_PLACEMENT_MAX are taken. It is written to a temporary file and renamed into place. */
#include "pool_cache.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

#define MAGIC "remora-pool-members 1 "

static int cache_path(char *out, size_t len, int make_dirs)
{
	const char *env = getenv("REMORA_POOL_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	if (env && *env)
		return snprintf(out, len, "%s", env) < (int)len ? 0 : -ENAMETOOLONG;
	char dir[4096];
	if (xdg && *xdg)
		snprintf(dir, sizeof(dir), "%s/remora", xdg);
	else if (home && *home)
		snprintf(dir, sizeof(dir), "%s/.cache/remora", home);
	else
		return -ENOENT;
	if (make_dirs) {
		char parent[4096];
		snprintf(parent, sizeof(parent), "%s", dir);
		char *slash = strrchr(parent, '/');
		if (slash && slash != parent) {
			*slash = 0;
			mkdir(parent, 0700);
		}
		mkdir(dir, 0700);
	}
	return snprintf(out, len, "%s/pool-members", dir) < (int)len ? 0 : -ENAMETOOLONG;
}

void rm_pool_cache_write(const char *endpoints, const struct rm_candidates *c)
{
	char path[4200], tmp[4300];
	if (cache_path(path, sizeof(path), 1) || !c->n || strchr(endpoints, '\n'))
		return;
	snprintf(tmp, sizeof(tmp), "%s.%d", path, (int)getpid());
	FILE *f = fopen(tmp, "w");
	if (!f) {
		rm_log(RM_LOG_DEBUG, "pool cache %s: %s", tmp, strerror(errno));
		return;
	}
	fprintf(f, MAGIC "%lld %s\n", (long long)time(NULL), endpoints);
	for (int i = 0; i < c->n; i++)
		fprintf(f, "%s\n", c->addr[i]);
	if (fclose(f) || rename(tmp, path)) {
		rm_log(RM_LOG_DEBUG, "pool cache %s: %s", path, strerror(errno));
		unlink(tmp);
	}
}

/* An address as placement writes them: printable, no spaces, not empty. */
static int plausible(const char *a)
{
	if (!*a)
		return 0;
	for (; *a; a++)
		if (*a <= ' ' || *a > '~')
			return 0;
	return 1;
}

int rm_pool_cache_read(const char *endpoints, struct rm_candidates *c, long *age_s)
{
	char path[4200], line[512];
	if (cache_path(path, sizeof(path), 0))
		return -ENOENT;
	FILE *f = fopen(path, "r");
	if (!f)
		return -ENOENT;
	int err = -ENOENT;
	long long written;
	int at;
	if (!fgets(line, sizeof(line), f) || strncmp(line, MAGIC, strlen(MAGIC)) ||
	    sscanf(line + strlen(MAGIC), "%lld %n", &written, &at) != 1)
		goto out;
	char *ends = line + strlen(MAGIC) + at;
	ends[strcspn(ends, "\n")] = 0;
	long long now = time(NULL);
	if (strcmp(ends, endpoints) || written > now || now - written > RM_POOL_CACHE_MAX_AGE_S)
		goto out;
	c->n = 0;
	while (c->n < RM_PLACEMENT_MAX && fgets(line, sizeof(line), f)) {
		size_t n = strcspn(line, "\n");
		if (line[n] != '\n' && !feof(f))
			break; /* longer than any address: not ours */
		line[n] = 0;
		if (plausible(line) && n < sizeof(c->addr[0]))
			memcpy(c->addr[c->n++], line, n + 1);
	}
	if (c->n) {
		*age_s = (long)(now - written);
		err = 0;
	}
out:
	fclose(f);
	return err;
}
