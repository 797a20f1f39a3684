#!/usr/bin/env python3
"""Accounting of GPU time (backend/worker/kernel_timing.c): kernel time, measured in spans of events
on the daemon's streams, is in `remora status --json` once a client has left. One long kernel
(drv_spin times it with its own events) is accounted at no less than half its own time and no
more than the client's wall time; so is one long kernel launched right before a synchronize
(drv_sleep: its span has no events, the synchronize ends it in host time); a client of
thousands of launches and synchronizes is accounted with more than zero and no more than its
wall time.

usage: gpu_time.py REMORA REMORAD DRIVER DRV_SPIN IMAGE BENCH_WORKER BENCH_IMAGE DRV_SLEEP
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon  # noqa: E402

remora, remorad, driver, spin, image, worker, worker_image, sleep = sys.argv[1:9]
SLEEP_NS = 300_000_000
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}


def run(server, *argv):
    """Runs argv through Remora: (stdout, wall seconds)."""
    t0 = time.monotonic()
    p = subprocess.run([remora, "run", "--server", server, "--", *argv], capture_output=True, text=True,
                       timeout=120, env=ENV)
    wall = time.monotonic() - t0
    check(p.returncode == 0, f"{os.path.basename(argv[0])} exited {p.returncode}: {p.stderr[-500:]}")
    return p.stdout, wall


def gpu_seconds(server, program):
    p = subprocess.run([remora, "status", "--server", server, "--json"], capture_output=True, text=True,
                       timeout=30, env=ENV)
    hist = [h for h in json.loads(p.stdout).get("history", []) if h["program"] == program]
    check(len(hist) == 1, f"one {program} in the history: {hist}")
    return hist[0]["usage"]["gpu_seconds"] if hist else None


with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "gputime", "")
    try:
        out, wall = run(d.server, spin, image, "10000000")
        m = re.search(r"time_ms=([0-9.]+)", out)
        check(m is not None, f"drv_spin printed its kernel time: {out!r}")
        kernel_s = float(m.group(1)) / 1e3 if m else 0
        g = gpu_seconds(d.server, "drv_spin")
        check(g is not None and 0.5 * kernel_s <= g <= wall,
              f"one kernel of {kernel_s:.3f} s in a client of {wall:.3f} s accounted as {g} s")
        out, wall = run(d.server, sleep, image, str(SLEEP_NS))
        g = gpu_seconds(d.server, "drv_sleep")
        check(g is not None and 0.5 * SLEEP_NS / 1e9 <= g <= wall,
              f"one kernel of {SLEEP_NS / 1e9:.3f} s, synchronized right after its launch, in a client of "
              f"{wall:.3f} s accounted as {g} s")
        out, wall = run(d.server, worker, worker_image, "launch", "5000", "500")
        g = gpu_seconds(d.server, "bench_worker")
        check(g is not None and 0 < g <= wall, f"5500 launches in a client of {wall:.3f} s accounted as {g} s")
    finally:
        d.stop()
sys.exit(1 if failures else 0)
