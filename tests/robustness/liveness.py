#!/usr/bin/env python3
"""Nothing waits for ever on a peer (issue 16), on the CPU test driver. One scenario a run:

  frozen-worker  the worker serving a client is stopped (SIGSTOP) mid-run: the client's
                 next call fails within its REMORA_PEER_TIMEOUT with a line saying so
  frozen-daemon  the accepting process is stopped: a new client's hello fails likewise
  frozen-client  a client holding memory is stopped: the daemon releases its session,
                 memory and quota within peer_timeout
  long-call      a kernel several timeouts long is no false alarm: heartbeats cover it
  long-copy      nor are copies both ways behind such a kernel
  idle-client    a client that makes no call for several timeouts keeps its session
  killed-mid-kernel  a client killed while it waits behind a 60 s kernel has its admission
                 place (max_clients_per_gpu = 1) and quota freed at once, long before
                 the kernel ends: `remora status` shows no client and a new client is
                 admitted; its session is released when the kernel ends

usage: liveness.py SCENARIO REMORAD DRIVER REMORA PROBE DRV_SLEEP IMAGE
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402

TIMEOUT_S = 3   # peer_timeout and REMORA_PEER_TIMEOUT in these scenarios
MARGIN_S = 15   # a loaded 2-core machine: the bound checked is TIMEOUT_S + MARGIN_S

scenario, remorad, driver, remora, probe, drv_sleep, image = sys.argv[1:8]


def client(d, *args, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    e.update(REMORA_PEER_TIMEOUT=str(TIMEOUT_S), **env)
    return subprocess.Popen([remora, "run", "--server", d.server, "--", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=e)


def free_bytes(d):
    out, err = client(d, probe, "free").communicate(timeout=60)
    return int(out) if out.strip().isdigit() else None


def worker_of(d):
    return wait_for(lambda: next(iter(d.workers().values()), None), timeout=10)


def frozen_worker(d):
    p = client(d, probe, "work", "120")
    pid = worker_of(d)
    time.sleep(1)
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        out, err = p.communicate(timeout=TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - t0
        check(p.returncode not in (0, None), f"the client's call failed ({p.returncode}) after {took:.1f} s, "
              f"within {TIMEOUT_S} + {MARGIN_S} s")
        check("silent for longer than REMORA_PEER_TIMEOUT" in err, f"and it said why ({err.strip()[-200:]})")
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "the client's call failed within the bound")
    finally:
        os.kill(pid, signal.SIGCONT)


def frozen_daemon(d):
    os.kill(d.proc.pid, signal.SIGSTOP)
    t0 = time.monotonic()
    try:
        p = client(d, probe, "free")
        out, err = p.communicate(timeout=TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - t0
        check(p.returncode not in (0, None), f"a new client's hello failed ({p.returncode}) after {took:.1f} s")
        check("silent for longer than REMORA_PEER_TIMEOUT" in err, f"and it said why ({err.strip()[-200:]})")
    except subprocess.TimeoutExpired:
        p.kill()
        check(False, "a new client's hello failed within the bound")
    finally:
        os.kill(d.proc.pid, signal.SIGCONT)
    out, err = client(d, probe, "free").communicate(timeout=60)
    check(out.strip().isdigit(), "once the daemon runs again, it serves")


def frozen_client(d):
    before = free_bytes(d)
    holder = client(d, probe, "hold", "64")
    check(holder.stdout.readline().strip() == "ready", "a client holds 64 MiB")
    check(free_bytes(d) <= before - (64 << 20), "its memory is in use")
    holder.send_signal(signal.SIGSTOP)
    t0 = time.monotonic()
    released = wait_for(lambda: "was silent for" in d.text(), timeout=TIMEOUT_S + MARGIN_S)
    took = time.monotonic() - t0
    check(released, f"the daemon took the stopped client for gone after {took:.1f} s")
    check(wait_for(lambda: free_bytes(d) == before, timeout=MARGIN_S), "its memory is free again")
    holder.kill()
    holder.wait()


def long_call(d):
    ns = str((4 * TIMEOUT_S) * 10**9)
    out, err = client(d, drv_sleep, image, ns).communicate(timeout=4 * TIMEOUT_S + 60)
    check("ok" in out, f"a kernel of {4 * TIMEOUT_S} s through a {TIMEOUT_S} s timeout ({err.strip()[-200:]})")
    check("was silent for" not in d.text(), "the daemon kept the session")


def long_copy(d):
    out, err = client(d, probe, "late-copy", image, str(2 * TIMEOUT_S)).communicate(timeout=4 * TIMEOUT_S + 60)
    check(out.strip() == "ok", f"32 MiB copies behind {2 * TIMEOUT_S} s kernels, through a {TIMEOUT_S} s timeout "
          f"({err.strip()[-200:]})")
    check("was silent for" not in d.text(), "the daemon kept the session")


def idle_client(d):
    out, err = client(d, probe, "idle", str(3 * TIMEOUT_S)).communicate(timeout=3 * TIMEOUT_S + 60)
    check(out.strip() == "ok", f"a client idle for {3 * TIMEOUT_S} s works on ({err.strip()[-200:]})")
    check("was silent for" not in d.text(), "the daemon kept the session")


def killed_mid_kernel(d):
    status_env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}

    def clients():
        p = subprocess.run([remora, "status", "--json", "--server", d.server], capture_output=True, text=True,
                           env=status_env, timeout=30)
        return json.loads(p.stdout)["clients"] if p.returncode == 0 else None

    a = client(d, probe, "late-copy", image, "60")
    try:
        check(wait_for(lambda: clients() and clients()[0]["memory"] > 0, timeout=20),
              "a client holds memory and waits behind a 60 s kernel")
        time.sleep(1)
        a.kill()
        a.wait()
        t0 = time.monotonic()
        freed = wait_for(lambda: clients() == [], timeout=TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - t0
        check(freed, f"killed, its admission place and quota are free {took:.1f} s later, the kernel still running "
              f"(bound {TIMEOUT_S + MARGIN_S} s)")
        check("the client is gone while its call runs" in d.text(), "the daemon logs why")
        out, err = client(d, probe, "free").communicate(timeout=60)
        check(out.strip().isdigit(), f"a new client is admitted (max_clients_per_gpu = 1): {err.strip()[-200:]}")
    finally:
        if a.poll() is None:
            a.kill()
            a.wait()


SCENARIOS = {
    "frozen-worker": frozen_worker,
    "frozen-daemon": frozen_daemon,
    "frozen-client": frozen_client,
    "long-call": long_call,
    "long-copy": long_copy,
    "idle-client": idle_client,
    "killed-mid-kernel": killed_mid_kernel,
}


def main():
    tmp = tempfile.mkdtemp()
    extra = "max_clients_per_gpu = 1\n" if scenario == "killed-mid-kernel" else ""
    d = Daemon(remorad, driver, tmp, scenario, f"peer_timeout = {TIMEOUT_S}\n" + extra)
    try:
        SCENARIOS[scenario](d)
        check(d.proc.poll() is None, "remorad is still running")
    finally:
        d.stop()
    if failures:
        print("--- remorad log\n" + d.text(), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
