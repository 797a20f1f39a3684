#!/usr/bin/env python3
"""Soak (issue 17): one remorad on the CPU test driver serves CLIENTS (256) concurrent
clients, each allocating, copying, launching a kernel and checking the result in a loop
for SECONDS, then 2,000 connections that say hello and leave; and all that twice. Every
client must finish without an error. The daemon's figures after the first round are the
baseline (its caches and allocator arenas are warm then): after the second its processes
must have the same open descriptors (a few either way) and resident memory grown by less
than RSS_SLACK_MB (fragmentation of the allocator's per-thread arenas moves it by tens of
MiB either way between rounds). Then SEQUENTIAL clients one after another must not grow
it by SEQUENTIAL_SLACK_MB: a leak of a session's worth would. Prints the figures
(docs/testing.md keeps them).

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
RSS_SLACK_MB = 128      # between the two rounds: what 256 threads' allocator arenas fragment
SEQUENTIAL = 100        # clients one after another, after the rounds: the per-session check
SEQUENTIAL_SLACK_MB = 4 # under 40 KiB a session
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


def round_of_load(d, n):
    """CLIENTS soaking clients at once, then CYCLES hello cycles; checks round n's results."""
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
        if p.returncode != 0 or out.split()[:1] != ["ok"]:
            bad.append(err.strip()[-300:])
    took = time.monotonic() - t0
    check(not bad, f"round {n}: {CLIENTS} concurrent clients, {SECONDS:.0f} s of allocations, copies and launches "
          f"each: {len(bad)} failed, in {took:.1f} s" + (f" (first: {bad[0]})" if bad else ""))

    def cycle(i):
        s = w.connect(d.host, d.port, name=f"cycle{i}")
        s.close()

    t0 = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        errors = [e for e in pool.map(lambda i: _try(cycle, i), range(CYCLES)) if e]
    took = time.monotonic() - t0
    check(not errors, f"round {n}: {CYCLES} connect, hello, close cycles in {took:.1f} s: {len(errors)} failed"
          + (f" (first: {errors[0]})" if errors else ""))
    expected = 1 + n * (CLIENTS + CYCLES)
    check(wait_for(lambda: sessions_closed(d) >= expected, timeout=120),
          f"round {n}: every session was released ({sessions_closed(d)} of {expected})")
    time.sleep(1)


with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "soak", "")
    try:
        warm = subprocess.run([remora, "run", "--server", d.server, "--", probe, "soak", image, "0"],
                              capture_output=True, text=True, env=ENV, timeout=120)
        check(warm.stdout.split()[:1] == ["ok"], f"a first client works ({warm.stderr.strip()[-200:]})")
        pids = [d.proc.pid] + list(d.workers().values())
        wait_for(lambda: sessions_closed(d) >= 1, timeout=30)
        start = figures(pids)
        round_of_load(d, 1)
        before = figures(pids)
        round_of_load(d, 2)
        after = figures(pids)
        for pid in pids:
            (f0, r0), (f1, r1) = before[pid], after[pid]
            role = "remorad" if pid == d.proc.pid else "worker"
            print(f"soak figures: {role} {pid}: descriptors {start[pid][0]} at start, {f0} after round 1, {f1} after "
                  f"round 2; resident memory {start[pid][1]:.1f}, {r0:.1f}, {r1:.1f} MiB")
            check(abs(f1 - f0) <= FD_SLACK, f"{role}: open descriptors {f0} before, {f1} after")
            check(r1 - r0 < RSS_SLACK_MB, f"{role}: resident memory {r0:.1f} MiB before, {r1:.1f} MiB after "
                  f"(less than {RSS_SLACK_MB} MiB more)")
        for _ in range(SEQUENTIAL):
            subprocess.run([remora, "run", "--server", d.server, "--", probe, "soak", image, "0"], capture_output=True,
                           env=ENV, timeout=120)
        wait_for(lambda: sessions_closed(d) >= 1 + 2 * (CLIENTS + CYCLES) + SEQUENTIAL, timeout=60)
        time.sleep(1)
        last = figures(pids)
        for pid in pids:
            role = "remorad" if pid == d.proc.pid else "worker"
            grew = last[pid][1] - after[pid][1]
            print(f"soak figures: {role} {pid}: {SEQUENTIAL} sessions one after another: resident memory "
                  f"{after[pid][1]:.1f} -> {last[pid][1]:.1f} MiB, descriptors {after[pid][0]} -> {last[pid][0]}")
            check(grew < SEQUENTIAL_SLACK_MB and abs(last[pid][0] - after[pid][0]) <= FD_SLACK,
                  f"{role}: {SEQUENTIAL} sessions one after another grew it by {grew:.1f} MiB "
                  f"(less than {SEQUENTIAL_SLACK_MB})")
        check(d.proc.poll() is None, "remorad is still running")
    finally:
        d.stop()
    if failures:
        print("--- remorad log (end)\n" + d.text()[-4000:], file=sys.stderr)
sys.exit(1 if failures else 0)
