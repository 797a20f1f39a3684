/* param_layout.h - a kernel's parameter layout as the GPU host describes it, checked.
 *
 * cuLaunchKernel's kernelParams is an array of pointers, one a parameter, and says nothing
 * of how many there are or how large each is: the client learns that from the GPU host
 * (rmFuncGetParamLayout, launch.c: what cuFuncGetParamInfo answers for every parameter, in
 * one reply) and reads len[i] bytes at kernelParams[i] for each of the count parameters.
 * Only the host knows the kernel's real layout, so a host that lies can make the client
 * read more of the program's memory than the program gave, and send it to the host. The
 * client cannot prevent that altogether; what it guarantees (docs/security.md, "A
 * malicious server") is that it reads nothing beyond what a consistent layout says, and
 * refuses every other:
 *  - at most RM_MAX_KERNEL_PARAMS parameters (common/wire.h);
 *  - each parameter 1 byte or more, at or after the previous one's end: in increasing
 *    order, never overlapping (a gap, which real kernels have, is packed as zeros);
 *  - all of them inside the parameter limit of the host's driver (rm_param_limit).
 * So a launch reads at most count pointers of kernelParams and, in all, at most the limit's
 * bytes through them, each byte once; a host that keeps to this can still name a larger
 * parameter than the program's (a 32764-byte one where the program has a pointer), which
 * is what a real driver would read there too. */
#ifndef REMORA_PARAM_LAYOUT_H
#define REMORA_PARAM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "wire.h"

#define RM_PARAM_LIMIT 32764      /* bytes of a kernel's parameters from CUDA 12.1 (driver 12010) */
#define RM_PARAM_LIMIT_OLD 4096   /* before */

/* A function's layout as the client keeps it (launch.c, in query_cache.h's cache). */
struct rm_param_layout {
	int refused;          /* not a layout a kernel can have: every launch is refused */
	size_t count;         /* parameters: 0 when refused */
	size_t size;          /* bytes the packed arguments span */
	size_t *offset, *len; /* count of each, in the same allocation */
};

/* The parameter limit of a GPU host whose driver is driver_version (cuDriverGetVersion's form). */
size_t rm_param_limit(int driver_version);

/* Whether n parameters at offset[i], len[i] bytes each, are a consistent layout inside limit
 * bytes (above): 0, or -EINVAL with one line saying why in why (whylen bytes). Their end, the
 * bytes the packed parameters span, is written to *end. */
int rm_param_layout_check(const size_t *offset, const size_t *len, size_t n, size_t limit, size_t *end,
			  char *why, size_t whylen);

/* The layout of a rmFuncGetParamLayout reply (remora.proto: n_offset offsets, n_size sizes,
 * too_many), which comes from an untrusted host, for a host whose limit is limit: 0 and
 * *out, one allocation to free(), refused (with why) unless consistent as above; -EPROTO
 * (with why) for a reply no host sends: as many offsets as sizes, at most
 * RM_MAX_KERNEL_PARAMS, none with too_many; -ENOMEM. Nothing is allocated before the
 * counts are checked. */
int rm_param_layout_decode(const uint64_t *offset, size_t n_offset, const uint64_t *size, size_t n_size,
			   int too_many, size_t limit, struct rm_param_layout **out, char *why, size_t whylen);

#endif
