#!/usr/bin/env python3
"""Host functions never hold the daemon for ever (issue 14), on the CPU test driver:

  - a client killed while its host function runs (the daemon's stream waiting for it) has
    its session released at once, without waiting out peer_timeout, and others are served;
  - a client whose host function outlasts peer_timeout: the daemon gives the function up
    with a line, the stream goes on, and the client's synchronize returns;
  - then a client runs every host-function check (drv_hostfn) as usual.

usage: host_functions.py REMORAD DRIVER REMORA DRV_HOSTFN IMAGE
"""
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402

TIMEOUT_S = 6   # peer_timeout: how long the daemon waits for a host function
MARGIN_S = 15   # a loaded 2-core machine

remorad, driver, remora, drv_hostfn, image = sys.argv[1:6]


def client(d, *args):
    e = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    return subprocess.Popen([remora, "run", "--server", d.server, "--", drv_hostfn, image, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=e)


def wait_pending(p):
    """The client's host function started (it printed "pending")."""
    line = p.stdout.readline()
    return line.strip() == "pending"


def released(d, n):
    return len(re.findall(r"closed: released \d+ handles", d.text())) >= n


def main():
    tmp = tempfile.mkdtemp()
    d = Daemon(remorad, driver, tmp, "host-functions", f"peer_timeout = {TIMEOUT_S}\n")
    try:
        a = client(d, "hang")
        check(wait_pending(a), "a client's host function runs, its stream waiting for it")
        t0 = time.monotonic()
        a.kill()
        a.wait()
        ok = wait_for(lambda: released(d, 1), timeout=MARGIN_S)
        took = time.monotonic() - t0
        check(ok, f"killed in its host function, its session is released ({took:.1f} s later)")
        check("unanswered" not in d.text(), "without waiting out peer_timeout for the host function")
        check("callback channel" in d.text(), "the daemon logged the callback channel")

        b = client(d, "hang")
        check(wait_pending(b), "a second client's host function runs")
        t0 = time.monotonic()
        try:
            b.wait(timeout=TIMEOUT_S + MARGIN_S)
        except subprocess.TimeoutExpired:
            b.kill()
            b.wait()
        took = time.monotonic() - t0
        check(b.returncode == 0, f"a host function that outlasts peer_timeout: the client's synchronize returns "
              f"({took:.1f} s, status {b.returncode})")
        check("unanswered after" in d.text(), "the daemon says it gave the host function up")

        c = client(d)
        out, err = c.communicate(timeout=120)
        check(c.returncode == 0 and "each stream's in order: yes" in out,
              f"another client's host functions run as usual: {err.strip()[-300:]}")
        check(d.proc.poll() is None, "remorad is still running")
    finally:
        d.stop()
    if failures:
        print("--- remorad log\n" + d.text(), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
