#!/usr/bin/env python3
"""Runs `remora bench --quick --json` with the given options and checks the
document: every section present and run, every figure a positive number on
both sides, targets well formed, cuBLAS and PyTorch either measured or skipped
with a reason.  Also checks that a bad option is refused.
usage: check_bench_json.py REMORA [BENCH OPTIONS...]"""
import json
import math
import subprocess
import sys

SECTIONS = {"tcp", "launch", "memcpy", "memset", "event", "graph", "concurrency", "tenants", "latency", "cublas", "torch",
            "nccl", "sharing"}
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)


def positive(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def main():
    remora, options = sys.argv[1], sys.argv[2:]
    bad = subprocess.run([remora, "bench", "--only", "nonsense"] + options, capture_output=True, text=True)
    check(bad.returncode == 2 and "unknown section" in bad.stderr, f"--only nonsense: rc {bad.returncode}")

    proc = subprocess.run([remora, "bench", "--quick", "--json"] + options, capture_output=True, text=True,
                          timeout=100)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        sys.exit(f"remora bench exited {proc.returncode}")
    doc = json.loads(proc.stdout)

    run = doc["run"]
    for key in ("date", "git_commit", "gpu_name", "remote_gpu_name"):
        check(isinstance(run.get(key), str) and run[key], f"run.{key} missing")
    for key in ("driver_version", "remote_driver_version", "loopback_tcp_gbps", "loopback_tcp_rtt_us",
                "loopback_tcp_cold_mib", "loopback_tcp_cold_gbps", "loopback_tcp_cold_2_streams_gbps",
                "loopback_tcp_cold_4_streams_gbps", "spin_iters"):
        check(positive(run.get(key)), f"run.{key} = {run.get(key)!r}, not a positive number")
    check(run.get("quick") is True, "run.quick is not true")

    status = {s["name"]: s for s in doc["sections"]}
    check(set(status) == SECTIONS, f"sections {sorted(status)}")
    for name, s in status.items():
        if name in ("cublas", "torch", "nccl", "sharing") and s["status"] == "skipped":
            check(isinstance(s["reason"], str) and s["reason"], f"{name} skipped without a reason")
        else:
            check(s["status"] == "ok", f"section {name}: {s['status']}: {s['reason']}")

    figures = doc["figures"]
    by_section = {}
    for f in figures:
        by_section.setdefault(f["section"], []).append(f)
        where = f"{f['section']} / {f['metric']}"
        skipped = status.get(f["section"], {}).get("status") == "skipped"
        for side in ("native", "remote"):
            # A skipped section has no numbers where it could not run; never a made-up one.
            check(positive(f[side]) or (skipped and f[side] is None), f"{where}: {side} = {f[side]!r}")
        if not skipped:
            check(positive(f["ratio"]), f"{where}: ratio = {f['ratio']!r}")
        check(isinstance(f["unit"], str) and f["unit"] and isinstance(f["ratio_of"], str), f"{where}: unit")
        t = f["target"]
        if t is not None:
            check(t["op"] in ("<=", ">=") and positive(t["limit"]) and t["met"] in (True, False, None),
                  f"{where}: target {t!r}")
            check(t["met"] is not None or skipped, f"{where}: target not judged")

    for name in SECTIONS - {"tcp"}:
        # torch skipped where PyTorch is missing has no rows at all; every other section has its figures.
        check(by_section.get(name) or (name in ("torch", "nccl", "sharing") and status.get(name, {}).get("status") == "skipped"),
              f"no figures for section {name}")
    check(len(by_section.get("memcpy", [])) == 6 * 4 + 3 * 4,
          "memcpy: not 4 KiB .. 4 MiB x 2 kinds x 2 directions, and 256 KiB .. 4 MiB compressible and random")
    metrics = {f["metric"] for f in figures}
    for n in (1, 2):
        check(f"N={n} mean kernel / 1 client" in metrics, f"concurrency N={n} missing")
        check(f"N={n} mean client wall / 1 client" in metrics, f"concurrency N={n} client wall missing")
        check(f"N={n} a tenant each, process: mean kernel / 1 client" in metrics, f"tenants N={n} (process) missing")
    targets = [f for f in figures if f["target"]]
    check(any(f["ratio_of"].startswith("remote/(native+1 TCP RTT") for f in targets), "launch+sync target missing")
    check(any(f["section"] == "graph" and f["ratio_of"].startswith("remote/(native+1 native async")
              for f in targets), "graph launch target missing")

    only = subprocess.run([remora, "bench", "--quick", "--json", "--only", "graph"] + options, capture_output=True,
                          text=True, timeout=100)
    sys.stderr.write(only.stderr)
    check(only.returncode == 0, f"--only graph exited {only.returncode}")
    if only.returncode == 0:
        odoc = json.loads(only.stdout)
        ran = {s["name"] for s in odoc["sections"] if s["status"] == "ok"}
        check(ran == {"tcp", "graph"}, f"--only graph ran {sorted(ran)}")
        check(len([f for f in odoc["figures"] if f["section"] == "graph"]) == 3, "--only graph: not 3 figures")

    if failures:
        sys.exit("bench JSON check failed:\n  " + "\n  ".join(failures))
    print(f"ok: {len(figures)} figures, sections {', '.join(sorted(SECTIONS))}")


main()
