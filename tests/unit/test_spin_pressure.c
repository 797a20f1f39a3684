/* The spin's CPU-pressure gate (transport/spin.h): the "some" line's total read from
 * /proc/pressure/cpu texts, and the busy verdict with its hysteresis. */
#include <stdlib.h>

#include "expect.h"
#include "spin.h"

#define MS 1000000ull

static void parse(void)
{
	uint64_t us = 0;
	EXPECT(!rm_cpu_pressure_parse("some avg10=0.00 avg60=0.00 avg300=0.26 total=10504658611\n"
				      "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
				      &us) &&
	       us == 10504658611ull);
	EXPECT(!rm_cpu_pressure_parse("full avg10=0.00 total=7\nsome avg10=1.00 total=42", &us) && us == 42);
	EXPECT(rm_cpu_pressure_parse("full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n", &us) == -1);
	EXPECT(rm_cpu_pressure_parse("some avg10=0.00\nfull total=5\n", &us) == -1); /* total on another line */
	EXPECT(rm_cpu_pressure_parse("some avg10=0.00 total=x\n", &us) == -1);
	EXPECT(rm_cpu_pressure_parse("", &us) == -1);
}

static void verdicts(void)
{
	struct rm_cpu_pressure p = {0};
	/* the first sample gives no verdict */
	EXPECT(!rm_cpu_pressure_update(&p, 100 * MS, 1000000, 10));
	/* 50 ms with 20 ms stalled: 40%, busy */
	EXPECT(rm_cpu_pressure_update(&p, 150 * MS, 1000000 + 20000, 10));
	/* 5%: between a third of 10% and 10%, still busy */
	EXPECT(rm_cpu_pressure_update(&p, 200 * MS, 1020000 + 2500, 10));
	/* a total that went backwards, or a window under a millisecond: unchanged */
	EXPECT(rm_cpu_pressure_update(&p, 250 * MS, 5, 10));
	EXPECT(rm_cpu_pressure_update(&p, 250 * MS + 1000, 5, 10));
	/* 2%: idle again */
	EXPECT(!rm_cpu_pressure_update(&p, 300 * MS, 5 + 1000, 10));
	/* 8%: below 10%, stays idle */
	EXPECT(!rm_cpu_pressure_update(&p, 350 * MS, 1005 + 4000, 10));
	/* exactly 10% is not above it; 11% is */
	EXPECT(!rm_cpu_pressure_update(&p, 400 * MS, 5005 + 5000, 10));
	EXPECT(rm_cpu_pressure_update(&p, 450 * MS, 10005 + 5500, 10));
	/* percent 0: never busy, whatever the stall */
	EXPECT(!rm_cpu_pressure_update(&p, 500 * MS, 15505 + 50000, 0));
	/* a long quiet window after a busy one: idle */
	struct rm_cpu_pressure q = {0};
	rm_cpu_pressure_update(&q, 10 * MS, 0, 10);
	EXPECT(rm_cpu_pressure_update(&q, 60 * MS, 30000, 10));
	EXPECT(!rm_cpu_pressure_update(&q, 60 * MS + 10000 * MS, 30000 + 1000, 10));
}

int main(void)
{
	parse();
	verdicts();
	/* REMORA_SPIN_PRESSURE=0: the host is never busy for the spin */
	setenv("REMORA_SPIN_PRESSURE", "0", 1);
	EXPECT(!rm_spin_host_busy());
	return failures != 0;
}
