#!/usr/bin/env python3
"""`remora bench --transport tcp,tls` (issue 17): one run measures the remote side over
loopback TCP and over TLS (a throwaway self-signed certificate the bench makes itself),
natively once, and compares TLS with TCP. Checks, on the CPU test driver with --quick and
two sections: both passes ran; every figure of each transport is a positive number;
every TLS figure has its comparison row with TCP, the launch + synchronize one with its
target (<= +3 us; not judged here: the test driver's timings mean nothing); whether
kernel TLS offload carried the records is reported. A repeated or unknown transport is
refused.
usage: check_bench_tls.py REMORA [BENCH OPTIONS...]"""
import json
import math
import subprocess
import sys

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


remora, options = sys.argv[1], sys.argv[2:]
for bad in ("tcp,tcp", "tls,bogus", ""):
    p = subprocess.run([remora, "bench", "--transport", bad] + options, capture_output=True, text=True)
    check(p.returncode == 2, f"--transport '{bad}' refused: rc {p.returncode}")

proc = subprocess.run([remora, "bench", "--quick", "--json", "--only", "launch,memcpy", "--transport", "tcp,tls"]
                      + options, capture_output=True, text=True, timeout=150)
sys.stderr.write(proc.stderr[-3000:])
check(proc.returncode == 0, f"remora bench --transport tcp,tls exited {proc.returncode}")
doc = json.loads(proc.stdout) if proc.stdout.strip() else {"run": {}, "sections": [], "figures": [], "comparison": []}
run = doc["run"]
check(run.get("transport") == "tcp,tls", f"run.transport = {run.get('transport')!r}")
for key in ("tls_ktls_tx", "tls_ktls_rx"):
    check(isinstance(run.get(key), bool), f"run.{key} = {run.get(key)!r}: whether kTLS carried the records")
status = {(s["name"], s["transport"]): s["status"] for s in doc["sections"]}
for t in ("tcp", "tls"):
    for name in ("launch", "memcpy"):
        check(status.get((name, t)) == "ok", f"section {name} over {t}: {status.get((name, t))}")
    rows = [f for f in doc["figures"] if f["transport"] == t]
    check(len(rows) == 3 + 6 * 4 + 3 * 4, f"{t}: {len(rows)} figures")
    bad = [f["metric"] for f in rows if not (positive(f["native"]) and positive(f["remote"]))]
    check(not bad, f"{t}: every figure positive on both sides {bad}")
cmp = doc["comparison"]
check(len(cmp) == 3 + 6 * 4 + 3 * 4 and all(c["transport"] == "tls" and c["baseline"] == "tcp" for c in cmp),
      f"a comparison row for every TLS figure ({len(cmp)})")
check(all(positive(c["baseline_value"]) and positive(c["value"]) and math.isfinite(c["ratio"]) for c in cmp),
      "comparison rows: both figures and a ratio")
sync = [c for c in cmp if c["metric"].startswith("launch + synchronize")]
check(len(sync) == 1 and sync[0]["ratio_of"] == "transport-baseline" and sync[0]["target"]
      and sync[0]["target"]["op"] == "<=" and sync[0]["target"]["limit"] == 3,
      f"launch + synchronize: TLS - TCP, target <= 3 us: {sync}")
mib = [c for c in cmp if c["metric"].endswith(("1 MiB", "4 MiB")) and ("pageable" in c["metric"] or "pinned" in c["metric"])]
check(len(mib) == 8 and all(c["target"] and c["target"]["op"] == ">=" and c["target"]["limit"] == 0.9 for c in mib),
      f"copies of 1 and 4 MiB: TLS / TCP, target >= 0.9 (issue 36): {len(mib)} rows")

# TLS alone: the remote side over TLS, as --transport shm is.
proc = subprocess.run([remora, "bench", "--quick", "--json", "--only", "launch", "--transport", "tls"] + options,
                      capture_output=True, text=True, timeout=100)
check(proc.returncode == 0, f"remora bench --transport tls exited {proc.returncode}: {proc.stderr[-300:]}")
if proc.returncode == 0:
    doc = json.loads(proc.stdout)
    rows = [f for f in doc["figures"] if f["section"] == "launch"]
    check(len(rows) == 3 and all(f["transport"] == "tls" and positive(f["remote"]) for f in rows) and
          not doc["comparison"], "--transport tls: launch figures over TLS, no comparison")
sys.exit(1 if failures else 0)
