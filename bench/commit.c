/* The commit of a benchmark run: BENCH_SOURCE_DIR and the build's commit come from meson. */
#include "commit.h"

#include "build_commit.h"

#include <stdio.h>
#include <string.h>

void bench_commit_id(char *out, size_t len)
{
	FILE *p = popen("git -C '" BENCH_SOURCE_DIR "' rev-parse HEAD 2>/dev/null", "re");
	char line[128];
	snprintf(out, len, "%s", BENCH_BUILD_COMMIT);
	if (!p)
		return;
	if (fgets(line, sizeof line, p) && strlen(line) >= 40) {
		line[strcspn(line, "\r\n")] = 0;
		snprintf(out, len, "%s", line);
	}
	pclose(p);
}
