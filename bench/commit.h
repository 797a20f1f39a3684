/* Which commit a benchmark run measured. */
#ifndef REMORA_BENCH_COMMIT_H
#define REMORA_BENCH_COMMIT_H

#include <stddef.h>

/* git's HEAD of the source tree at run time when git can read it, else the
 * commit the program was built from, else "unknown". */
void bench_commit_id(char *out, size_t len);

#endif
