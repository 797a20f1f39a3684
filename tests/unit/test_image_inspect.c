/* rm_image_shareable on images nvcc built: test_image_inspect (shared|private|code FILE)...;
 * rm_image_variables: none in a shared image, stateful.cu's three in a private one; and
 * rm_image_code_bytes: a cubin's or PTX's whole length, some of other fatbins; of the code fatbin (an sm_80 cubin
 * and compute_90 PTX) the cubin on sm_86, the PTX on sm_90, the larger entry on sm_75. */
#include <stdint.h>
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
		uint64_t on86 = rm_image_code_bytes(buf, n, 86), on90 = rm_image_code_bytes(buf, n, 90),
			 on75 = rm_image_code_bytes(buf, n, 75);
		int code_ok = !strcmp(argv[i], "code")
				      ? on86 && on90 && on86 != on90 && on75 == (on86 > on90 ? on86 : on90) && on86 < (uint64_t)n
				      : n >= 4 && buf[0] == 0x50 && buf[1] == 0xED && buf[2] == 0x55 && buf[3] == 0xBA
				      ? on86 && on90 && on75 /* nvcc's default entries */
				      : on86 == (uint64_t)n && on90 == (uint64_t)n && on75 == (uint64_t)n;
		printf("%-8s %s: code bytes on sm_86 %llu, sm_90 %llu, sm_75 %llu of %ld\n", code_ok ? "ok" : "WRONG",
		       argv[i + 1], (unsigned long long)on86, (unsigned long long)on90, (unsigned long long)on75, n);
		failed |= !code_ok;
		if (!strcmp(argv[i], "code")) {
			free(buf);
			continue;
		}
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
			rm_image_code_bytes(t, cut, 90);
			free(t);
		}
		free(buf);
	}
	return failed;
}
