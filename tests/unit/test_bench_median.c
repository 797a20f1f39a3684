/* bench_output_median (bench/workers.h): the figures of repeated runs merged into one. */
#include "expect.h"
#include "workers.h"

#include <stdlib.h>
#include <string.h>

static struct bench_output output(int n, const char *const kv[][2], int exit_status)
{
	struct bench_output o = {.exit_status = exit_status};
	o.kv = calloc((size_t)n, sizeof *o.kv);
	for (int i = 0; i < n; i++) {
		snprintf(o.kv[i].key, sizeof o.kv[i].key, "%s", kv[i][0]);
		snprintf(o.kv[i].value, sizeof o.kv[i].value, "%s", kv[i][1]);
	}
	o.count = n;
	if (exit_status)
		snprintf(o.reason, sizeof o.reason, "run %d failed", exit_status);
	return o;
}

int main(void)
{
	const char *const a[][2] = {{"ms_per_step", "9.5"}, {"result_hex", "0x1.8p+1"}, {"seed", "7"}};
	const char *const b[][2] = {{"ms_per_step", "4.25"}, {"result_hex", "0x1.8p+1"}, {"seed", "7"}};
	const char *const c[][2] = {{"ms_per_step", "6"}, {"result_hex", "0x1.9p+1"}, {"seed", "7"}};
	const char *const d[][2] = {{"ms_per_step", "5"}, {"result_hex", "0x1.8p+1"}};
	struct bench_output outs[4] = {output(3, a, 0), output(3, b, 0), output(3, c, 0), output(2, d, 0)}, m;

	/* Three runs: the middle number; a text that one run disagrees with is "differs". */
	EXPECT(!bench_output_median(&m, outs, 3));
	EXPECT(!strcmp(bench_output_get(&m, "ms_per_step"), "6"));
	EXPECT(!strcmp(bench_output_get(&m, "result_hex"), "differs"));
	EXPECT(!strcmp(bench_output_get(&m, "seed"), "7"));
	EXPECT(m.exit_status == 0);
	bench_output_free(&m);

	/* Four runs: the mean of the middle two; a key one run lacks is no median ("differs"). */
	EXPECT(!bench_output_median(&m, (struct bench_output[]){outs[0], outs[1], outs[3], outs[2]}, 4));
	double v = 0;
	EXPECT(bench_output_number(&m, "ms_per_step", &v) && v == 5.5);
	EXPECT(!strcmp(bench_output_get(&m, "seed"), "differs"));
	bench_output_free(&m);

	/* The middle run's own text, no digits added. */
	const char *const f[][2] = {{"sends", "9.15"}}, *const g[][2] = {{"sends", "9.1"}}, *const h[][2] = {{"sends", "12"}};
	struct bench_output texts[3] = {output(1, f, 0), output(1, g, 0), output(1, h, 0)};
	EXPECT(!bench_output_median(&m, texts, 3));
	EXPECT(!strcmp(bench_output_get(&m, "sends"), "9.15"));
	bench_output_free(&m);
	for (int i = 0; i < 3; i++)
		bench_output_free(&texts[i]);

	/* One run: itself. */
	EXPECT(!bench_output_median(&m, &outs[2], 1));
	EXPECT(!strcmp(bench_output_get(&m, "ms_per_step"), "6") && !strcmp(bench_output_get(&m, "result_hex"), "0x1.9p+1"));
	bench_output_free(&m);

	/* A failed run makes the merge failed, with its reason. */
	const char *const e[][2] = {{"ms_per_step", "1"}};
	struct bench_output failed[2] = {output(1, e, 0), output(1, e, 3)};
	EXPECT(!bench_output_median(&m, failed, 2));
	EXPECT(m.exit_status == 3 && !strcmp(m.reason, "run 3 failed"));
	bench_output_free(&m);

	for (int i = 0; i < 4; i++)
		bench_output_free(&outs[i]);
	bench_output_free(&failed[0]);
	bench_output_free(&failed[1]);
	return failures ? 1 : 0;
}
