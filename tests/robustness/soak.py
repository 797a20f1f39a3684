#!/usr/bin/env python3
"""Soak (issue 17): one remorad on the CPU test driver serves CLIENTS (256) concurrent
clients, each allocating, copying, launching a kernel and checking the result in a loop
for SECONDS, then 2,000 connections that say hello and leave. Every client must finish
without an error, and afterwards the daemon's processes must be back where they were:
the same open descriptors (a few either way) and resident memory grown by less than
RSS_SLACK_MB. Prints the figures (docs/testing.md keeps them).

usage: soak.py REMORAD DRIVER REMORA PROBE IMAGE
Environment: REMORA_SOAK_CLIENTS, REMORA_SOAK_SECONDS, REMORA_SOAK_CYCLES override the sizes.
"""
import concurrent.futures
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
import rmwire as w  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402

remorad, driver, remora, probe, image = sys.argv[1:6]
CLIENTS = int(os.environ.get("REMORA_SOAK_CLIENTS", "256"))
SECONDS = float(os.environ.get("REMORA_SOAK_SECONDS", "20"))
CYCLES = int(os.environ.get("REMORA_SOAK_CYCLES", "2000"))
RSS_SLACK_MB = 64
FD_SLACK = 4
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}


def fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def figures(pids):
    return {p: (fds(p), rss_mb(p)) for p in pids}


def _try(fn, *args):
    """None, or what went wrong."""
    try:
        fn(*args)
        return None
    except Exception as e:  # noqa: BLE001 - any failure of one cycle is a finding
        return repr(e)


def sessions_closed(d):
    return d.text().count("closed: released")


with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "soak", "")
    try:
        warm = subprocess.run([remora, "run", "--server", d.server, "--", probe, "soak", image, "0"],
                              capture_output=True, text=True, env=ENV, timeout=120)
        check(warm.stdout.strip() == "ok", f"a first client works ({warm.stderr.strip()[-200:]})")
        pids = [d.proc.pid] + list(d.workers().values())
        wait_for(lambda: sessions_closed(d) >= 1, timeout=30)
        before = figures(pids)

        t0 = time.monotonic()
        procs = [subprocess.Popen([remora, "run", "--server", d.server, "--", probe, "soak", image, str(SECONDS)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
                 for _ in range(CLIENTS)]
        bad = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=SECONDS + 600)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            if p.returncode != 0 or out.strip() != "ok":
                bad.append(err.strip()[-300:])
        took = time.monotonic() - t0
        check(not bad, f"{CLIENTS} concurrent clients, {SECONDS:.0f} s of allocations, copies and launches each: "
              f"{len(bad)} failed, in {took:.1f} s" + (f" (first: {bad[0]})" if bad else ""))

        t0 = time.monotonic()

        def cycle(i):
            s = w.connect(d.host, d.port, name=f"cycle{i}")
            s.close()

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            errors = [e for e in pool.map(lambda i: _try(cycle, i), range(CYCLES)) if e]
        took = time.monotonic() - t0
        check(not errors, f"{CYCLES} connect, hello, close cycles in {took:.1f} s: {len(errors)} failed"
              + (f" (first: {errors[0]})" if errors else ""))

        expected = 1 + CLIENTS + CYCLES
        settled = wait_for(lambda: sessions_closed(d) >= expected, timeout=120)
        check(settled, f"every session was released ({sessions_closed(d)} of {expected})")
        time.sleep(1)
        after = figures(pids)
        for pid in pids:
            (f0, r0), (f1, r1) = before[pid], after[pid]
            role = "remorad" if pid == d.proc.pid else "worker"
            print(f"soak figures: {role} {pid}: descriptors {f0} -> {f1}, resident memory {r0:.1f} -> {r1:.1f} MiB")
            check(abs(f1 - f0) <= FD_SLACK, f"{role}: open descriptors {f0} before, {f1} after")
            check(r1 - r0 < RSS_SLACK_MB, f"{role}: resident memory {r0:.1f} MiB before, {r1:.1f} MiB after "
                  f"(less than {RSS_SLACK_MB} MiB more)")
        check(d.proc.poll() is None, "remorad is still running")
    finally:
        d.stop()
    if failures:
        print("--- remorad log (end)\n" + d.text()[-4000:], file=sys.stderr)
sys.exit(1 if failures else 0)
