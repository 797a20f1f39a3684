/* The unit tests' check: a condition that does not hold is reported with its place and
 * counted in failures, which main returns as its verdict. */
#ifndef REMORA_TESTS_EXPECT_H
#define REMORA_TESTS_EXPECT_H

#include <stdio.h>

static int failures;

#define EXPECT(cond)                                                                    \
	do {                                                                            \
		if (!(cond)) {                                                          \
			fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                     \
		}                                                                       \
	} while (0)

#endif
