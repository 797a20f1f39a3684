/* rm_image_shareable on images nvcc built: test_image_inspect (shared|private FILE)... */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image_cache.h"

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
		/* Every truncation must be answered without reading past the end. */
		for (long cut = 0; cut < n; cut += 1 + cut / 8) {
			unsigned char *t = malloc(cut + 1);
			memcpy(t, buf, cut);
			t[cut] = 0;
			rm_image_shareable(t, cut);
			free(t);
		}
		free(buf);
	}
	return failed;
}
