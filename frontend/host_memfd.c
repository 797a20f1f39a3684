/* Sealed memfd mappings (host_memfd.h): pinned host memory the daemon on this host can
 * map and register too (host_memory.c shares it). */
#include "host_memfd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int rm_memfd_map(size_t len, void *at, void **p, int *fd, uint64_t *ino)
{
	struct stat st;
	int err = 0;
	int m = memfd_create("remora-pinned", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (m < 0)
		return -errno;
	if (ftruncate(m, (off_t)len) || fcntl(m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) || fstat(m, &st))
		err = -errno;
	void *map = err ? MAP_FAILED
			: mmap(at, len, PROT_READ | PROT_WRITE, MAP_SHARED | (at ? MAP_FIXED_NOREPLACE : 0), m, 0);
	if (!err && map == MAP_FAILED)
		err = -errno;
	if (!err && at && map != at) { /* a kernel before 4.17 takes the address as a hint only */
		munmap(map, len);
		err = -EEXIST;
	}
	/* Faulted in here, as CUDA's pinned memory is at allocation: the pages are this
	 * process's (its memory cgroup's), not the daemon's that registers them. Best effort:
	 * a kernel before 5.14 leaves it to the registration. */
	if (!err)
		madvise(map, len, MADV_POPULATE_WRITE);
	if (err) {
		close(m);
		return err;
	}
	*p = map;
	*fd = m;
	*ino = (uint64_t)st.st_ino;
	return 0;
}

