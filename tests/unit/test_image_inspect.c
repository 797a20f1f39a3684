/* rm_image_shareable on images nvcc built: test_image_inspect (shared|private FILE)...; and
 * rm_image_variables: none in a shared image, stateful.cu's three in a private one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_cache.h"

static int seen(const char *name, void *arg)
{
	unsigned *mask = arg;
	*mask |= !strcmp(name, "counter") ? 1 : !strcmp(name, "table") ? 2 : !strcmp(name, "coef") ? 4 : 8;
	return 0;
}

static int none(const char *name, void *arg)
{
	(void)name, (void)arg;
	return 0;
}

int main(int argc, char **argv)
{
	int failed = 0;
	for (int i = 1; i + 1 < argc; i += 2) {
		FILE *f = fopen(argv[i + 1], "rb");
		if (!f) {
			perror(argv[i + 1]);
			return 1;
		}
		fseek(f, 0, SEEK_END);
		long n = ftell(f);
		rewind(f);
		unsigned char *buf = malloc(n + 1);
		if (!buf || fread(buf, 1, n, f) != (size_t)n)
			return 1;
		buf[n] = 0;
		fclose(f);
		int want = !strcmp(argv[i], "shared"), got = rm_image_shareable(buf, n);
		printf("%-8s %s: %s\n", got == want ? "ok" : "WRONG", argv[i + 1], got ? "shared" : "private");
		failed |= got != want;
		unsigned names = 0;
		int vars = rm_image_variables(buf, n, seen, &names);
		int vars_ok = vars == 0 && names == (want ? 0u : 7u);
		printf("%-8s %s: variables %d, names 0x%x\n", vars_ok ? "ok" : "WRONG", argv[i + 1], vars, names);
		failed |= !vars_ok;
		/* Every truncation must be answered without reading past the end. */
		for (long cut = 0; cut < n; cut += 1 + cut / 8) {
			unsigned char *t = malloc(cut + 1);
			memcpy(t, buf, cut);
			t[cut] = 0;
			rm_image_shareable(t, cut);
			rm_image_variables(t, cut, none, NULL);
			free(t);
		}
		free(buf);
	}
	return failed;
}
