/* CHECK(call) for the benchmark's driver-API programs: a failed call prints its text
 * and error name, prefixed with CHECK_PROGRAM, and exits 1. */
#ifndef REMORA_BENCH_CUDA_CHECK_H
#define REMORA_BENCH_CUDA_CHECK_H

#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                              \
	do {                                                                                     \
		CUresult check_rc_ = (call);                                                     \
		if (check_rc_ != CUDA_SUCCESS) {                                                 \
			const char *check_name_ = NULL;                                          \
			cuGetErrorName(check_rc_, &check_name_);                                 \
			fprintf(stderr, "%s: %s failed: %s (%d)\n", CHECK_PROGRAM, #call,        \
				check_name_ ? check_name_ : "unknown CUresult", (int)check_rc_);  \
			exit(1);                                                                 \
		}                                                                                \
	} while (0)

#endif
