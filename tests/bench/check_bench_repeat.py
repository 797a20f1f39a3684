#!/usr/bin/env python3
"""`remora bench --repeat N` (issue 36: one run's figure on the GPU host moves by 1.6x between
runs, natively too): each native and remote program of a section runs N times in turns and
the rows give the medians. Checks, on the CPU test driver with --quick: each turn runs the
native program and then the remote one over every transport (tcp, and shm where built), all
in the first pass, which the later pass's figures come from; run.repeat says N; every
figure is a positive number; 0, 10 and a non-number are refused.
usage: check_bench_repeat.py REMORA HAVE_SHM [BENCH OPTIONS...]"""
import json
import math
import re
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


remora, have_shm, options = sys.argv[1], sys.argv[2] == "true", sys.argv[3:]
for bad in ("0", "10", "3x", "-1"):
    p = subprocess.run([remora, "bench", "--repeat", bad] + options, capture_output=True, text=True)
    check(p.returncode == 2 and "--repeat" in p.stderr, f"--repeat {bad} refused: rc {p.returncode}")

transports = ["tcp", "shm"] if have_shm else ["tcp"]
proc = subprocess.run([remora, "bench", "--quick", "--json", "--only", "launch", "--repeat", "3",
                       "--transport", ",".join(transports)] + options, capture_output=True, text=True, timeout=150)
sys.stderr.write(proc.stderr[-2000:])
check(proc.returncode == 0, f"remora bench --repeat 3 exited {proc.returncode}")
runs = re.findall(r"remora bench: launch (\S+) \((\d) of 3\)", proc.stderr)
sides = ["remote-" + t for t in transports] if len(transports) > 1 else ["remote"]
expected = [(side, str(i)) for i in range(1, 4) for side in ["native"] + sides]
check(runs == expected, f"in turns, every transport in each turn, on the first pass only: {runs}")
ended = re.findall(r"remora bench: launch (\S+), run (\d):((?: \S+=\S+)+)", proc.stderr)
check([(side, i) for side, i, _ in ended] == expected and all("=" in f for _, _, f in ended),
      f"each run's numbers printed as it ends: {[(side, i) for side, i, _ in ended]}")
doc = json.loads(proc.stdout) if proc.stdout.strip() else {"run": {}, "figures": []}
check(doc["run"].get("repeat") == 3, f"run.repeat = {doc['run'].get('repeat')!r}")
rows = doc["figures"]
check(len(rows) == 3 * len(transports) and all(
    isinstance(f[k], (int, float)) and math.isfinite(f[k]) and f[k] > 0 for f in rows for k in ("native", "remote")),
    f"every figure a positive median: {[(f['transport'], f['native'], f['remote']) for f in rows]}")
sys.exit(1 if failures else 0)
