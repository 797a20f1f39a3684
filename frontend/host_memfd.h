/* A sealed memfd mapped shared (host_memfd.c), for pinned memory shared with the daemon. */
#ifndef REMORA_HOST_MEMFD_H
#define REMORA_HOST_MEMFD_H

#include <stddef.h>
#include <stdint.h>

/* A sealed memfd of len bytes (whole pages) mapped shared into *p (at `at` exactly, unless
 * NULL), its descriptor in *fd and inode in *ino: 0 or -errno, nothing left behind on
 * failure. The pages are faulted in here, as CUDA's pinned memory is at allocation. */
int rm_memfd_map(size_t len, void *at, void **p, int *fd, uint64_t *ino);

#endif
