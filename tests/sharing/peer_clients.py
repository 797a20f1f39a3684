#!/usr/bin/env python3
"""Peer access is each client's own (docs/status.md, "Peer access"), on the CPU test driver of
two devices, with tests/programs/drv_peer:

  - while one client holds access both ways, another of the same worker starts with none
    (its first disable is CUDA_ERROR_PEER_ACCESS_NOT_ENABLED, its enables succeed) and
    passes every check, enabling, disabling and using peer memory itself
  - its disables leave the first client's access as it was (still enabled for it), and the
    driver's access of the shared contexts is enabled once and given up when the last
    client holding it has gone
  - host-located virtual memory is charged to host memory, refused past the worker's bound,
    and given back at release and at a session's end

usage: peer_clients.py REMORAD DRIVER REMORA DRV_PEER IMAGE
"""
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, conclude  # noqa: E402
import remorad_fixture  # noqa: E402
from remorad_fixture import wait_for  # noqa: E402

remorad, driver, remora, drv_peer, image = sys.argv[1:6]


started = []


def run(d, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    p = subprocess.Popen([remora, "run", "--server", d.server, "--", drv_peer, image, *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    started.append(p)
    return p


def main():
    with tempfile.TemporaryDirectory() as tmp:
        d = remorad_fixture.Daemon(remorad, driver, tmp, "peer", "", env={"REMORA_TESTDRIVER_DEVICES": "2"})
        try:
            holder = run(d, "hold")
            held = holder.stdout.readline().strip()
            check(held == "held", f"the first client holds peer access both ways ({held!r})")
            other = run(d)
            out, err = other.communicate(timeout=60)
            check(other.returncode == 0 and out.strip().endswith("PASS"),
                  f"a second client sees none of the first one's access and passes ({other.returncode}: {err[-400:]})")
            check(d.text().count("peer access of GPU 0 to GPU 1 enabled") == 1 and "given up" not in d.text(),
                  "the driver's access was enabled once and kept while the first client holds it")
            holder.stdin.close()
            still = holder.stdout.readline().strip()
            check(holder.wait(timeout=30) == 0 and still == "still held",
                  f"the second client's disables left the first one's access "
                  f"({still!r}, {holder.stderr.read()[-400:]})")
            check(wait_for(lambda: d.text().count("given up: no client holds it") == 2, timeout=10),
                  "and given up, both ways, once the first client has gone")
        finally:
            d.stop()
        # Host-located virtual memory is charged to the worker's host memory and given back
        # at release and at a session's end: three clients in turn each fit, none does past it.
        d = remorad_fixture.Daemon(remorad, driver, tmp, "hostmem", "worker_host_memory_limit = 200M\n",
                                   env={"REMORA_TESTDRIVER_DEVICES": "2"})
        try:
            for k in range(3):
                out, err = run(d, "hostmem").communicate(timeout=60)
                check(out.splitlines() == ["48 MiB released: CUDA_SUCCESS"] * 3 +
                      ["512 MiB: CUDA_ERROR_OUT_OF_MEMORY", "48 MiB kept: CUDA_SUCCESS"],
                      f"client {k + 1}: host-located memory within the limit, refused past it ({out!r}, {err[-300:]})")
            check("host-located virtual memory of 536870912 bytes refused" in d.text(), "the refusal is logged")
            status = conclude(started, tmp)
        finally:
            d.stop()
    return status


if __name__ == "__main__":
    sys.exit(main())
