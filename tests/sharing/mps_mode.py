#!/usr/bin/env python3
"""tenant_isolation = mps (docs/sharing.md, "Isolation modes"), on the CPU test driver with a
stand-in control program (fake_mps_control.py): what remorad does, not what MPS does.

  - the first worker starts the control daemon, in foreground, with pipe and log
    directories under mps_directory; every tenant's worker gets them, and its tenant's
    compute share, priority and memory limit per GPU, in its environment
  - a control daemon that ends is started again for the next worker
  - at SIGTERM remorad asks it to quit, and it is gone
  - compute_share with another isolation mode is refused at start

usage: mps_mode.py REMORAD DRIVER REMORA TENANT_PROBE FAKE_CONTROL
"""
import os
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, conclude  # noqa: E402
import remorad_fixture  # noqa: E402
from remorad_fixture import alive, wait_for  # noqa: E402

remorad, driver, remora, tenant_probe, fake = sys.argv[1:6]
started = []


def info(d, token):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env["REMORA_TOKEN"] = token
    p = subprocess.run([remora, "run", "--server", d.server, "--", tenant_probe, "info"], env=env,
                       capture_output=True, text=True, timeout=60)
    return p.returncode


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(e.split("=", 1) for e in f.read().decode(errors="replace").split("\0") if "=" in e)


def fake_log(mps):
    path = os.path.join(mps, "log", "fake.log")
    return open(path).read().splitlines() if os.path.exists(path) else []


with tempfile.TemporaryDirectory() as tmp:
    mps = os.path.join(tmp, "mps")
    config = (f"tenant_isolation = mps\nmps_control = {fake}\nmps_directory = {mps}\n"
              "[tenant alpha]\ntoken = alpha-secret\ncompute_share = 25\npriority = low\nmemory_limit = 64M\n"
              "[tenant beta]\ntoken = beta-secret\n"
              "[tenant gamma]\ntoken = gamma-secret\n")
    d = remorad_fixture.Daemon(remorad, driver, tmp, "mps", config)
    try:
        check(not fake_log(mps), "no control daemon before the first worker")
        check(info(d, "alpha-secret") == 0 and info(d, "beta-secret") == 0, "a client of each tenant is served")
        starts = [l for l in fake_log(mps) if l.startswith("started")]
        check(len(starts) == 1, f"one control daemon started for both workers ({starts})")
        check("MPS control daemon" in d.text() and f"pipes {mps}/pipe" in d.text(),
              "remorad logs the control daemon and its pipe directory")
        w = d.workers()
        a, b = environ_of(w["alpha"]), environ_of(w["beta"])
        check(a.get("CUDA_MPS_PIPE_DIRECTORY") == f"{mps}/pipe" and b.get("CUDA_MPS_PIPE_DIRECTORY") == f"{mps}/pipe",
              "each worker has the control daemon's pipe directory")
        check(a.get("CUDA_MPS_LOG_DIRECTORY") == f"{mps}/log", "... and its log directory")
        check(a.get("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") == "25" and "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in b,
              f"alpha's worker has its compute share, beta's none ({a.get('CUDA_MPS_ACTIVE_THREAD_PERCENTAGE')})")
        check(a.get("CUDA_MPS_CLIENT_PRIORITY") == "1" and "CUDA_MPS_CLIENT_PRIORITY" not in b,
              "alpha's worker runs at low priority, beta's at normal")
        limit = a.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", "")
        check(limit.startswith("0=64M") and "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in b,
              f"alpha's memory limit is the driver's too, on each GPU ({limit})")
        check("worker %d is a client of MPS: compute share 25%%, priority low" % w["alpha"] in d.text(),
              "remorad logs alpha's share and priority")

        pid = int(starts[0].split()[1])
        os.kill(pid, signal.SIGKILL)
        check(wait_for(lambda: "MPS control daemon %d ended" % pid in d.text(), timeout=10),
              "remorad notices that the control daemon ended")
        check(info(d, "gamma-secret") == 0, "a new tenant's client is served")
        starts = [l for l in fake_log(mps) if l.startswith("started")]
        check(len(starts) == 2, f"its worker started the control daemon again ({starts})")
        again = int(starts[-1].split()[1])
        check(environ_of(d.workers()["gamma"]).get("CUDA_MPS_PIPE_DIRECTORY") == f"{mps}/pipe",
              "the new worker is its client")

        d.proc.send_signal(signal.SIGTERM)
        d.proc.wait(timeout=30)
        check("command quit" in fake_log(mps), "at SIGTERM remorad asks the control daemon to quit")
        check(wait_for(lambda: not alive(again), timeout=10), "and it is gone")
        check("worker" not in "".join(l for l in d.text().splitlines() if "ended (" in l and str(again) in l),
              "the control daemon is not taken for a worker")
    finally:
        d.stop()

    bad = os.path.join(tmp, "bad.conf")
    with open(bad, "w") as f:
        f.write("allow_anonymous = yes\n[tenant alpha]\ntoken = alpha-secret\ncompute_share = 25\n")
    p = subprocess.run([remorad, "--config", bad, "--driver", driver, "--listen", "tcp://127.0.0.1:0"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode == 2 and "compute_share, which only tenant_isolation = mps enforces" in p.stderr,
          f"compute_share without tenant_isolation = mps is refused at start ({p.returncode}: {p.stderr.strip()[-200:]})")
    sys.exit(conclude(started, tmp))
