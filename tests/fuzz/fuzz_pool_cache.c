/* Fuzz target `pool_cache`: the file where a client keeps the pool's last members
 * (frontend/pool_cache.c), as rm_pool_cache_read reads it. Anyone who can write the file
 * can put anything in it. Input: with its first byte even, the rest follows a valid first
 * line written now for the endpoints asked about; odd, the rest is the whole file. A
 * list that reads has 1..RM_PLACEMENT_MAX addresses, each a printable string that fits. */
#include "../../frontend/pool_cache.c"

#include <fcntl.h>

static char path[64];

static void write_file(const uint8_t *data, size_t size, int with_header)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		abort();
	char head[128];
	int n = with_header ? snprintf(head, sizeof(head), MAGIC "%lld http://etcd:2379\n", (long long)time(NULL)) : 0;
	if ((n && write(fd, head, (size_t)n) != n) || (size && write(fd, data, size) != (ssize_t)size))
		abort();
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!path[0]) {
		snprintf(path, sizeof(path), "/tmp/remora-fuzz-pool-cache.%d", (int)getpid());
		setenv("REMORA_POOL_CACHE", path, 1);
	}
	if (!size)
		return 0;
	write_file(data + 1, size - 1, !(data[0] & 1));
	struct rm_candidates c;
	long age = -1;
	if (rm_pool_cache_read("http://etcd:2379", &c, &age) == 0) {
		if (c.n < 1 || c.n > RM_PLACEMENT_MAX || age < 0 || age > RM_POOL_CACHE_MAX_AGE_S)
			abort();
		for (int i = 0; i < c.n; i++) {
			size_t len = strnlen(c.addr[i], sizeof(c.addr[i]));
			if (len == 0 || len == sizeof(c.addr[i]) || !plausible(c.addr[i]))
				abort();
		}
	}
	unlink(path);
	return 0;
}
