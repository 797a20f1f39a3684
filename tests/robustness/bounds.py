#!/usr/bin/env python3
"""What one client makes remorad hold is bounded and charged to it (issue 37, findings 4
and 7), on the CPU test driver. One scenario a run:

  host-memory     two clients whose 8 threads each copy once (8 channels with staging
                  each) get no more than client_host_memory_limit; a third client's copies
                  work beside them within worker_host_memory_limit (before: the first
                  two took the worker's bound and the third's copies failed)
  shm-ring        unix: dialers whose memfds hold two 64 MiB rings are refused at set-up
                  (shm_ring_max) and the accepting process's memory does not grow by
                  them (before: mapped with MAP_POPULATE, 128 MiB each); a client with
                  the default rings works
  granularity     one-byte allocations are charged 512 bytes each: a 1 MiB quota takes
                  2048 of them, not 4096 (before: charged 1 byte each)
  module-state    a module's variables and code are charged while it is loaded: under a
                  10 MiB quota, modules of a 3 MiB variable (charged 4 MiB each) load
                  twice, the third refused, as libraries loaded with no context current;
                  cuMemGetInfo's free falls by their charge and comes back when they are
                  unloaded (before: a module's variables were not charged, any number loaded);
                  a kernel's image loaded twice is two modules, the second usable once the
                  first is unloaded (before: one shared handle, gone with the first)
  limits          what a context limit holds on the device is charged: under a 64 MiB
                  quota a printf FIFO 32 MiB larger is charged 32 MiB, a heap 48 MiB larger
                  beside it is refused, and taken once the FIFO is back; a stack 64 bytes a
                  thread larger (64 x 132 SMs x 2048 threads, 18 MiB charged) is refused
                  beside that heap and taken without it; a created context's FIFO is charged
                  until it is destroyed (before: no limit was charged)
  metrics-idle    24 idle connections to the metrics endpoint keep no scrape out (before:
                  0 of 20 served)
  attach-index    a copy link's Attach with an index out of order is answered with an
                  error, not success then a close; one in order is taken
  etcd-message    an etcd error message with control characters reaches the log escaped

usage: bounds.py SCENARIO REMORAD DRIVER REMORA PROBE
"""
import http.server
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
import rmshm  # noqa: E402
import rmwire as w  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402

MIB = 1 << 20
CUDA_ERROR_OUT_OF_MEMORY = 2

scenario, remorad, driver, remora, probe = sys.argv[1:6]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}


def run_probe(d, *args, timeout=120):
    p = subprocess.run([remora, "run", "--server", d.server, "--", probe, *args],
                       capture_output=True, text=True, env=ENV, timeout=timeout)
    return p.returncode, p.stdout.strip(), p.stderr.strip()


def no_worker_died(d):
    check("ended (signal" not in d.text(), "no worker ended on a signal")


def host_memory(d):
    # Each channel's staging for an 8 MiB copy is 16 MiB: 64M lets a client copy on 3 of its
    # 8 threads' channels. Two such clients hold at most 128 MiB of the worker's 160.
    hogs = [subprocess.Popen([remora, "run", "--server", d.server, "--", probe, "threads", "8", "60"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV) for _ in range(2)]
    try:
        copied = []
        for h in hogs:
            line = h.stdout.readline().strip()
            m = re.match(r"copied (\d+) of 8", line)
            copied.append(int(m.group(1)) if m else None)
        for i, k in enumerate(copied):
            check(k is not None and 1 <= k <= 4, f"client {i + 1}: its channels' staging stops at its bound "
                  f"(copied on {k} of 8 threads)")
        check("client_host_memory_limit" in d.text(), "the log names the client's bound")
        rc, out, err = run_probe(d, "work", "1")
        check(rc == 0 and out == "ok", f"a third client's copies work beside them ({err})")
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    no_worker_died(d)


def vm_rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def shm_ring(d):
    path = d.server[len("unix:"):]
    before = vm_rss_kib(d.proc.pid)
    dialers = [rmshm.big_ring_dialer(path, 64 * MIB) for _ in range(3)]
    time.sleep(1.5)  # set-up is done on the accepting process's greeting thread, at once
    grew = (vm_rss_kib(d.proc.pid) - before) // 1024
    check(grew < 64, f"the accepting process did not take up the dialers' rings (grew {grew} MiB; 384 MiB offered)")
    closed = 0
    for s in dialers:
        s.settimeout(10)
        try:
            closed += s.recv(1) == b""
        except ConnectionResetError:
            closed += 1
        except socket.timeout:
            pass
        s.close()
    check(closed == len(dialers), f"each dialer with rings past shm_ring_max is refused ({closed} of {len(dialers)})")
    check("shm_ring_max" in d.text(), "the log says why")
    rc, out, err = run_probe(d, "work", "0.5")
    check(rc == 0 and out == "ok", f"a client with the default rings works ({err})")


def granularity(d):
    rc, out, err = run_probe(d, "tiny", "4096")
    m = re.match(r"allocated (\d+) (\d+)", out)
    check(m is not None, f"the probe ran ({out!r} {err})")
    if m:
        k, r = int(m.group(1)), int(m.group(2))
        check(k <= 2048 and r == CUDA_ERROR_OUT_OF_MEMORY,
              f"one-byte allocations are charged 512 bytes: a 1 MiB quota takes {k} of them (at most 2048), "
              f"then CUDA_ERROR_OUT_OF_MEMORY ({r})")
        check(k >= 1024, f"... and no more than the rule says ({k} taken)")


def module_state(d):
    rc, out, err = run_probe(d, "modules", "6")
    m = re.match(r"modules (\d+) (\d+) libraries (\d+) (\d+) twice (\d+)\s+free (\d+) (\d+) (\d+)", out)
    check(rc == 0 and m is not None, f"the probe ran ({out!r} {err})")
    if not m:
        return
    km, rm, kl, rl, twice, free0, free1, free2 = map(int, m.groups())
    check(twice == 0, f"an image loaded twice is two modules: the second works once the first is unloaded ({twice})")
    check(km == 2 and rm == CUDA_ERROR_OUT_OF_MEMORY,
          f"modules of a 3 MiB variable: 2 load within a 10 MiB quota, then CUDA_ERROR_OUT_OF_MEMORY "
          f"({km} loaded, then {rm})")
    check(kl == 2 and rl == CUDA_ERROR_OUT_OF_MEMORY,
          f"the same as libraries with no context current ({kl} loaded, then {rl})")
    check(free0 - free1 == 8 * MIB, f"cuMemGetInfo's free falls by the two modules' charge, 8 MiB "
          f"({free0} then {free1})")
    check(free2 == free0, f"... and comes back once they are unloaded ({free2}, was {free0})")
    check("could not be named" not in d.text(), "every module's variables were named")


def limits(d):
    rc, out, err = run_probe(d, "limits")
    m = re.match(r"limits ((?:-?\d+ ?){8})\s+free (\d+) (\d+) (\d+) (\d+) (\d+)", out)
    check(rc == 0 and m is not None, f"the probe ran ({out!r} {err})")
    if not m:
        return
    r = list(map(int, m.group(1).split()))
    f = list(map(int, m.groups()[1:]))
    want = [0, CUDA_ERROR_OUT_OF_MEMORY, 0, 0, CUDA_ERROR_OUT_OF_MEMORY, 0, 0, 0]
    check(r == want, f"FIFO +32M taken, heap +48M refused beside it and taken after, stack +64 refused beside "
          f"the heap and taken without it, a created context's FIFO taken ({r}, want {want})")
    check(f[0] - f[1] == 32 * MIB, f"the FIFO's growth is charged: 32 MiB ({f[0]} then {f[1]})")
    check(f[0] - f[2] == 18 * MIB, f"the stack's: 64 x 132 x 2048 bytes, charged 18 MiB ({f[0]} then {f[2]})")
    check(f[2] - f[3] == 32 * MIB and f[4] == f[2],
          f"a created context's FIFO is charged until it is destroyed ({f[2]}, {f[3]}, {f[4]})")


def metrics_idle(d):
    m = wait_for(lambda: re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", d.text()))
    check(m is not None, "remorad says where it serves metrics")
    if not m:
        return
    port = int(m.group(1))
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(24)]
    time.sleep(0.3)
    served = 0
    for _ in range(20):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                served += r.status == 200 and b"remora_" in r.read()
        except OSError:
            pass
    check(served >= 18, f"with 24 idle connections open, scrapes are served ({served} of 20)")
    for s in idle:
        s.close()


def hello_session(d):
    """A connection whose hello was taken, with its session id and attach key."""
    s = socket.create_connection((d.host, d.port))
    s.sendall(w.frame(w.OP_HELLO, w.hello("attacher")))
    r = w.read_reply(s)
    if w.result_of(r) != 0:
        raise RuntimeError(f"hello refused ({w.result_of(r)})")
    fields, msg, i = {}, r[1], 0
    while i < len(msg):  # HelloReply: varints and bytes only
        key, i = read_varint(msg, i)
        if key & 7 == 0:
            fields[key >> 3], i = read_varint(msg, i)
        else:
            n, i = read_varint(msg, i)
            fields[key >> 3], i = msg[i:i + n], i + n
    return s, fields[3], fields[5]


def read_varint(b, i):
    v = shift = 0
    while True:
        v |= (b[i] & 0x7F) << shift
        shift += 7
        i += 1
        if not b[i - 1] & 0x80:
            return v, i


def attach(d, session, key, index):
    s = socket.create_connection((d.host, d.port))
    msg = w.field_varint(1, session) + w.field_bytes(2, key) + w.field_varint(3, index)
    s.sendall(w.frame(w.OP_ATTACH, msg))
    return s, w.read_reply(s, timeout=15)


def attach_index(d):
    main, session, key = hello_session(d)
    for index in (5, 0, 200):
        s, r = attach(d, session, key, index)
        check(r is not None and w.result_of(r) != 0,
              f"a copy link's Attach with index {index} (1 expected) is answered with an error "
              f"({w.result_of(r)})")
        check(w.closed_by_peer(s), f"... and its connection closed (index {index})")
        s.close()
    s, r = attach(d, session, key, 1)
    check(w.result_of(r) == 0, f"index 1 is taken ({w.result_of(r)})")
    s.close()
    main.close()
    no_worker_died(d)


class FakeEtcd(http.server.BaseHTTPRequestHandler):
    """An etcd gateway that refuses everything, with control characters in its message."""
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"error": "x", "code": 3,
                           "message": "evil\n[remorad] forged line\x1b[2J\x07 etcd"}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def etcd_message(tmp):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeEtcd)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    d = Daemon(remorad, driver, tmp, "etcd-message", f"pool = http://127.0.0.1:{httpd.server_address[1]}\n")
    try:
        wait_for(lambda: "etcd" in d.text() and "evil" in d.text(), timeout=20)
        log = open(d.log_path, "rb").read()
        check(b"evil" in log, "remorad logged etcd's refusal")
        check(b"\x1b" not in log and b"\x07" not in log, "no raw control character from etcd in the log")
        check(b"\n[remorad] forged line" not in log, "no forged log line")
        check(b"evil\\x0a[remorad] forged line\\x1b[2J" in log, "etcd's message is logged escaped")
    finally:
        d.stop()
        httpd.shutdown()
    if failures:
        print("--- remorad log\n" + d.text(), file=sys.stderr)


SCENARIOS = {
    "host-memory": (host_memory, "worker_host_memory_limit = 160M\nclient_host_memory_limit = 64M\n", {}),
    "shm-ring": (shm_ring, "", {"listen": "unix"}),
    "granularity": (granularity, "client_memory_limit = 1M\n", {}),
    "module-state": (module_state, "client_memory_limit = 10M\n", {}),
    "limits": (limits, "client_memory_limit = 64M\n", {}),
    "metrics-idle": (metrics_idle, "metrics_listen = 127.0.0.1:0\n", {}),
    "attach-index": (attach_index, "", {}),
}


def main():
    tmp = tempfile.mkdtemp()
    if scenario == "etcd-message":
        etcd_message(tmp)
        return 1 if failures else 0
    fn, config, kw = SCENARIOS[scenario]
    if kw.get("listen") == "unix":
        kw = dict(kw, listen="unix:" + os.path.join(tmp, "remorad.sock"))
    d = Daemon(remorad, driver, tmp, scenario, config, **kw)
    try:
        fn(d)
        check(d.proc.poll() is None, "remorad is still running")
    finally:
        d.stop()
    if failures:
        print("--- remorad log\n" + d.text(), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
