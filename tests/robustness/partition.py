#!/usr/bin/env python3
"""Network partitions (issue 16): client and daemon in two network namespaces joined by a
veth pair, on the CPU test driver; the link is then cut, so that neither side hears
anything more (no reset, no close), as when a host or a switch goes away. One scenario a run:

  client-vanishes  a client holding 256 MiB is cut off: the daemon releases its session,
                   memory and quota within peer_timeout (TCP keepalives find the silence),
                   and serves other clients meanwhile
  daemon-vanishes  a client waiting behind a long kernel is cut off from the daemon: its
                   call fails within REMORA_PEER_TIMEOUT with a line saying the server
                   was silent, long before the kernel would have ended

Needs root and `ip` (iproute2) for the namespaces; without them the test is skipped
(status 77) and says why.

usage: partition.py SCENARIO REMORAD DRIVER REMORA PROBE IMAGE
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import stop_process, wait_for  # noqa: E402

TIMEOUT_S = 3  # peer_timeout and REMORA_PEER_TIMEOUT
MARGIN_S = 20  # a loaded 2-core machine
scenario, remorad, driver, remora, probe, image = sys.argv[1:7]
tag = f"rm{os.getpid() % 100000}"
NS_C, NS_D = tag + "c", tag + "d"  # the client's namespace, the daemon's
ADDR_C, ADDR_D = "10.213.0.1", "10.213.0.2"


def ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def in_ns(ns, *cmd):
    return ["ip", "netns", "exec", ns, *cmd]


def clean_env(**extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    e.update(extra)
    return e


def setup():
    for args in (["netns", "add", NS_C], ["netns", "add", NS_D],
                 ["link", "add", tag + "a", "type", "veth", "peer", "name", tag + "b"],
                 ["link", "set", tag + "a", "netns", NS_C], ["link", "set", tag + "b", "netns", NS_D],
                 ["-n", NS_C, "addr", "add", ADDR_C + "/24", "dev", tag + "a"],
                 ["-n", NS_D, "addr", "add", ADDR_D + "/24", "dev", tag + "b"],
                 ["-n", NS_C, "link", "set", tag + "a", "up"], ["-n", NS_D, "link", "set", tag + "b", "up"],
                 ["-n", NS_C, "link", "set", "lo", "up"], ["-n", NS_D, "link", "set", "lo", "up"]):
        p = ip(*args)
        if p.returncode:
            raise RuntimeError(f"ip {' '.join(args)}: {p.stderr.strip()}")


def cut():
    """Drops every packet both ways: nobody hears a reset or a close."""
    ip("-n", NS_C, "link", "set", tag + "a", "down")
    ip("-n", NS_D, "link", "set", tag + "b", "down")


def teardown():
    ip("netns", "del", NS_C)
    ip("netns", "del", NS_D)


def status(addr):
    p = subprocess.run(in_ns(NS_D, remora, "status", "--json", "--server", addr), capture_output=True, text=True,
                       env=clean_env(), timeout=30)
    return json.loads(p.stdout) if p.returncode == 0 else None


def client_vanishes(addr, tmp):
    hold = subprocess.Popen(in_ns(NS_C, remora, "run", "--server", addr, "--", probe, "hold", "256"),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=clean_env())
    try:
        check(hold.stdout.readline().strip() == "ready", "a client in the other namespace holds 256 MiB")
        st = status(addr)
        check(st and [c["memory"] for c in st["clients"]] == [256 << 20], "the daemon counts its 256 MiB")
        cut()
        t0 = time.monotonic()
        gone = wait_for(lambda: (status(addr) or {"clients": [1]})["clients"] == [], timeout=TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - t0
        check(gone, f"the cut-off client's session is released ({took:.1f} s after the cut; peer_timeout "
              f"{TIMEOUT_S} s, bound {TIMEOUT_S + MARGIN_S} s)")
        p = subprocess.run(in_ns(NS_D, remora, "run", "--server", addr, "--", probe, "free"), capture_output=True,
                           text=True, env=clean_env(), timeout=60)
        check(p.returncode == 0 and p.stdout.strip().isdigit() and int(p.stdout) >= 256 << 20,
              f"another client is served, with the memory back ({p.stdout.strip()} bytes free)")
    finally:
        hold.kill()
        hold.wait()


def daemon_vanishes(addr, tmp):
    c = subprocess.Popen(in_ns(NS_C, remora, "run", "--server", addr, "--", probe, "late-copy", image, "120"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=clean_env(REMORA_PEER_TIMEOUT=str(TIMEOUT_S)))
    try:
        time.sleep(3)  # connected, and waiting behind the 120 s kernel
        check(c.poll() is None, "the client waits behind a long kernel, kept alive by heartbeats")
        cut()
        t0 = time.monotonic()
        out, err = c.communicate(timeout=TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - t0
        check(c.returncode not in (0, None) and "silent for longer than REMORA_PEER_TIMEOUT" in err,
              f"its call fails {took:.1f} s after the cut (bound {TIMEOUT_S + MARGIN_S} s) with the silent-server "
              f"line ({err.strip()[-200:]})")
    except subprocess.TimeoutExpired:
        check(False, f"the client still waits {TIMEOUT_S + MARGIN_S} s after the cut")
    finally:
        if c.poll() is None:
            c.kill()
            c.wait()


SCENARIOS = {"client-vanishes": client_vanishes, "daemon-vanishes": daemon_vanishes}


def main():
    if os.geteuid() != 0 or not shutil.which("ip"):
        print("partition: skipped: network namespaces need root and ip (iproute2, scripts/setup.sh)")
        return 77
    fn = SCENARIOS[scenario]
    tmp = tempfile.mkdtemp(prefix="remora-partition-")
    d = None
    try:
        setup()
        ready = os.path.join(tmp, "addr")
        log = open(os.path.join(tmp, "remorad.log"), "w")
        d = subprocess.Popen(in_ns(NS_D, remorad, "--listen", f"tcp://{ADDR_D}:0", "--driver", driver,
                                   "--ready-file", ready, "--set", "allow_anonymous=yes",
                                   "--set", f"peer_timeout={TIMEOUT_S}"), stderr=log, env=clean_env(REMORA_LOG="info"))
        if not wait_for(lambda: os.path.exists(ready) and open(ready).read().strip(), timeout=20):
            raise RuntimeError("remorad did not start")
        fn(open(ready).read().strip(), tmp)
    finally:
        if d:
            stop_process(d)
        teardown()
    if failures:
        print("--- remorad log\n" + open(os.path.join(tmp, "remorad.log")).read()[-4000:], file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
