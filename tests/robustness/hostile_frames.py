#!/usr/bin/env python3
"""remorad against a hostile client (issue 11), on the CPU test driver. One scenario a run:

  links        a copy that names 0x80000001 copy links is refused and its connection
               closed; the worker and its other clients go on
  staging      a copy whose staging cannot be allocated (no current context) gets a CUDA
               error and the connection serves on (it used to spin for ever)
  wrap         memsets whose byte length wraps past 2^64 are refused (probe wrap)
  images       an image larger than the client's quota, or than what is left of the
               worker's host-memory bound, is refused before any byte of it is held
  headers      images whose headers reach past their end (an ELF's section table, a fatbin
               wrapper's pointer into the client's memory) are refused before the driver
               reads them
  descriptors  with the daemon out of file descriptors, accept waits instead of spinning,
               and serves again once descriptors are free
  names        control characters in a client's name reach neither the log nor
               `remora status` raw
  lengths      an output array whose length differs from the count an input array of the
               same call was checked against (cuDeviceGetP2PAtomicCapabilities) is refused
               before the driver reads past the input
  staging-fails  a staging allocation that fails (the test driver's REMORA_TESTDRIVER_FAIL)
               gives a real client a CUDA error, for the session's staging and for a copy
               link's, each at its buffer or its event; the daemon keeps serving (with the
               session's first buffer failing, a copy spun for ever before 8b964c3)

usage: hostile_frames.py SCENARIO REMORAD DRIVER REMORA PROBE
"""
import os
import resource
import select
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
import rmwire as w  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402

OP_MEMCPY_HTOD = 36     # cuMemcpyHtoD_v2 (proto/api.spec)
OP_LIBRARY_LOAD = 69    # cuLibraryLoadData
OP_P2P_ATOMIC_CAPS = 424  # cuDeviceGetP2PAtomicCapabilities
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2   # also what the test driver's injected failures return
CUDA_ERROR_INVALID_IMAGE = 200
MIB = 1 << 20

scenario, remorad, driver, remora, probe = sys.argv[1:6]


def run_probe(d, *args, timeout=60, env=None):
    penv = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    penv.update(env or {})
    p = subprocess.run([remora, "run", "--server", d.server, "--", probe, *args],
                       capture_output=True, text=True, env=penv, timeout=timeout)
    return p.returncode == 0 and p.stdout.strip() == "ok", p.stderr.strip()


def start_probe(d, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    return subprocess.Popen([remora, "run", "--server", d.server, "--", probe, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def htod(links, count, bulk_len, ctx=0):
    msg = w.field_varint(1, 0x1000) + w.field_varint(3, links) + w.field_varint(4, count)
    return w.frame(OP_MEMCPY_HTOD, msg, bulk_len=bulk_len, ctx=ctx)


def library_load(size, seq=1):
    return w.frame(OP_LIBRARY_LOAD, w.field_varint(1, 1), seq=seq, bulk_len=size)


def no_worker_died(d):
    return check("ended (signal" not in d.text(), "no worker ended on a signal")


def links(d):
    worker = start_probe(d, "work", "3")
    time.sleep(0.3)
    for n in (0x80000001, 0x80000000, 0xFFFFFFFF, 9):
        s = w.connect(d.host, d.port)
        s.sendall(htod(n, 64, 64))
        check(w.closed_by_peer(s), f"a copy over {n:#x} links: the connection is closed")
        s.close()
    out, err = worker.communicate(timeout=60)
    check(worker.returncode == 0 and out.strip() == "ok", f"another client of the worker kept working ({err})")
    no_worker_died(d)


def lengths(d):
    s = w.connect(d.host, d.port)
    for out_len, count in ((4096, 1), (1, 1)):
        msg = (w.field_varint(1, out_len) + w.field_bytes(2, (1).to_bytes(4, "little") * count) +
               w.field_varint(3, count))
        s.sendall(w.frame(OP_P2P_ATOMIC_CAPS, msg))
        r = w.result_of(w.read_reply(s, timeout=15))
        if out_len != count:
            check(r == CUDA_ERROR_INVALID_VALUE, f"{out_len} capabilities for {count} operation(s): refused ({r})")
        else:
            check(r is not None, f"{out_len} capability for {count} operation: answered ({r})")
    s.close()
    no_worker_died(d)


def staging(d):
    s = w.connect(d.host, d.port)
    for i in range(3):
        s.sendall(htod(1, MIB, MIB) + bytes(MIB))
        r = w.read_reply(s, timeout=15)
        check(w.result_of(r) not in (None, 0), f"copy {i + 1} with no context: a CUDA error ({w.result_of(r)})")
    s.close()
    ok, err = run_probe(d, "work", "0.2")
    check(ok, f"the daemon serves on ({err})")
    no_worker_died(d)


def wrap(d):
    ok, err = run_probe(d, "wrap")
    check(ok, f"wrapping memsets refused, the session works on ({err})")
    no_worker_died(d)


def images(d):
    # client_memory_limit = 64M: a 256 MiB image is refused at once, none of it sent.
    s = w.connect(d.host, d.port)
    s.sendall(library_load(256 * MIB))
    check(w.result_of(w.read_reply(s)) == CUDA_ERROR_OUT_OF_MEMORY,
          "an image past the client's quota: CUDA_ERROR_OUT_OF_MEMORY before its bytes")
    s.close()
    # worker_host_memory_limit = 100M: of three 48 MiB images in flight, whichever the
    # worker comes to last is refused at once; the other two are being received.
    conns = []
    for _ in range(3):
        c = w.connect(d.host, d.port)
        c.sendall(library_load(48 * MIB) + bytes(MIB))
        conns.append(c)
    readable = []
    end = time.monotonic() + 30
    while not readable and time.monotonic() < end:
        readable = select.select(conns, [], [], 1)[0]
    time.sleep(0.5)  # a second refusal, which would be wrong, has had time to come
    readable = select.select(conns, [], [], 0)[0]
    check(len(readable) == 1 and w.result_of(w.read_reply(readable[0])) == CUDA_ERROR_OUT_OF_MEMORY,
          f"one image past the worker's host-memory bound: CUDA_ERROR_OUT_OF_MEMORY ({len(readable)} answered)")
    # The rest of the other two: zeros, which the test driver refuses and NVIDIA's driver
    # takes as empty PTX; either way the load ends and its memory is given back.
    for c in conns:
        if c not in readable:
            c.sendall(bytes(47 * MIB))
            r = w.read_reply(c, timeout=30)
            check(w.result_of(r) not in (None, CUDA_ERROR_OUT_OF_MEMORY), f"a held image completes ({w.result_of(r)})")
        c.close()
    c = w.connect(d.host, d.port)
    c.sendall(library_load(48 * MIB) + bytes(48 * MIB))
    r = w.read_reply(c, timeout=30)
    check(w.result_of(r) not in (None, CUDA_ERROR_OUT_OF_MEMORY), f"once they are done, another is taken ({w.result_of(r)})")
    c.close()
    ok, err = run_probe(d, "work", "0.2")
    check(ok, f"the daemon serves on ({err})")


def headers(d):
    elf = bytearray(128)
    elf[0:5] = b"\x7fELF\x02"
    elf[0x28:0x30] = (64 << 20).to_bytes(8, "little")     # section table 64 MiB in
    elf[0x3A:0x3E] = (64).to_bytes(2, "little") + (4).to_bytes(2, "little")
    elf[0x40:0x48] = b"sleepNs\x00"
    wrapper = (0x466243B1).to_bytes(4, "little") + bytes(4) + (0x1000).to_bytes(8, "little") + bytes(8)
    fatbin = (0xBA55ED50).to_bytes(4, "little") + bytes(2) + (16).to_bytes(2, "little") + \
        (1 << 30).to_bytes(8, "little") + bytes(48)
    for what, image in (("an ELF", elf), ("a fatbin wrapper", wrapper), ("a fatbin", fatbin)):
        s = w.connect(d.host, d.port)
        s.sendall(library_load(len(image)) + bytes(image))
        r = w.read_reply(s)
        check(w.result_of(r) == CUDA_ERROR_INVALID_IMAGE, f"{what} reaching past its end: CUDA_ERROR_INVALID_IMAGE "
              f"({w.result_of(r)})")
        s.close()
    ok, err = run_probe(d, "work", "0.2")
    check(ok, f"the daemon serves on ({err})")
    no_worker_died(d)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descriptors(d):
    idle = []
    for _ in range(200):  # past the daemon's 128 descriptors: each is held by a greeting
        try:
            idle.append(socket.create_connection((d.host, d.port), timeout=5))
        except OSError:
            break
    wait_for(lambda: "new clients wait" in d.text(), timeout=10)
    check("new clients wait" in d.text(), "the log says the daemon is out of descriptors")
    before = cpu_seconds(d.proc.pid)
    time.sleep(3)
    used = cpu_seconds(d.proc.pid) - before
    check(used < 0.5, f"meanwhile the accepting process uses little CPU ({used:.2f} s in 3 s)")
    for s in idle:
        s.close()
    ok, err = run_probe(d, "work", "0.2", timeout=120)
    check(ok, f"once they have gone, a client is served ({err})")


def names(d):
    evil = "evil\n[remorad] forged line\x1b[2J\x07\x9b"
    s = w.connect(d.host, d.port, name=evil)
    status = subprocess.run([remora, "status", d.server], capture_output=True, timeout=30)
    s.close()
    log = open(d.log_path, "rb").read()
    check(b"\x1b" not in log and b"\x07" not in log, "no raw control character in the log")
    check(b"\n[remorad] forged line" not in log, "no forged log line")
    check(b"evil\\x0a[remorad] forged line\\x1b[2J" in log, "the name is logged escaped")
    check(status.returncode == 0 and b"evil" in status.stdout, f"remora status lists the client ({status.stderr})")
    check(b"\x1b" not in status.stdout + status.stderr, "no raw control character from remora status")


# The worker's calls, in the order a fresh worker's first client makes them: its first copy
# opens the session's staging (cuMemAllocHost_v2 1, cuEventCreate 1, cuMemAllocHost_v2 2,
# cuEventCreate 2: backend/copy/staging.c), and with two links the first striped copy then opens
# copy link 1's (calls 3 and 4 of each). No other call of the worker makes either for
# `probe work` or `probe stripes` (no blocking stream, no event of the client's). The
# worker's host-memory bound is what one client's staging takes (16 MiB, and 8 MiB for the
# copy link: docs/configuration.md), with 2 MiB for its connections' read buffers (256 KiB
# each: the main connection and, by default, 3 copy links), so the next client works only if
# the failed allocation gave back all it had taken.
STRIPED = {"REMORA_COPY_LINKS": "2", "REMORA_STRIPE_MIN": str(MIB)}
STAGING_FAILURES = [
    # (REMORA_TESTDRIVER_FAIL, the probe's arguments, its environment, the bound, what fails)
    ("cuMemAllocHost_v2:1", ["work", "0.2"], {}, "18M", "the session's first staging buffer"),
    ("cuEventCreate:2", ["work", "0.2"], {}, "18M", "the session's second staging event"),
    ("cuMemAllocHost_v2:3", ["stripes"], STRIPED, "25M", "copy link 1's first staging buffer"),
    ("cuEventCreate:4", ["stripes"], STRIPED, "25M", "copy link 1's second staging event"),
]


def staging_fails(d):
    ok, err = run_probe(d, "stripes", env=STRIPED, timeout=120)
    check(ok, f"without failures, striped copies over two links work ({err})")
    for spec, args, env, bound, what in STAGING_FAILURES:
        name = "staging-fails-" + spec.replace(":", "-")
        fd = Daemon(remorad, driver, tempfile.mkdtemp(), name, f"worker_host_memory_limit = {bound}\n",
                    env={"REMORA_TESTDRIVER_FAIL": spec})
        try:
            try:
                ok, err = run_probe(fd, *args, env=env, timeout=30)
                # A blocking copy from pageable memory returns once sent (frontend/memory.c):
                # its error comes at the next synchronizing call, the probe's copy back.
                check(not ok and ("cuMemcpyHtoD" in err or "cuMemcpyDtoH" in err) and
                      f"failed: {CUDA_ERROR_OUT_OF_MEMORY}" in err,
                      f"{what} not allocated: the copy fails with CUDA_ERROR_OUT_OF_MEMORY ({err})")
            except subprocess.TimeoutExpired:
                check(False, f"{what} not allocated: the copy still has no answer after 30 s")
            call = spec.replace(":", " call ")
            check(f"{call} fails" in fd.text(), f"the test driver failed {call}")
            check(wait_for(lambda: "closed: released" in fd.text()), "the client's session has closed")
            ok, err = run_probe(fd, *args, env=env, timeout=120)
            check(ok, f"then another client's copies work within a bound of {bound} ({err})")
            no_worker_died(fd)
            check(fd.proc.poll() is None, "remorad is still running")
        finally:
            fd.stop()
        if failures:
            print(f"--- {name} log\n" + fd.text(), file=sys.stderr)
            return
    no_worker_died(d)


def limit_descriptors():
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


SCENARIOS = {
    "links": (links, "", {}),
    "staging": (staging, "", {}),
    "lengths": (lengths, "", {}),
    "wrap": (wrap, "", {}),
    "images": (images, "client_memory_limit = 64M\nworker_host_memory_limit = 100M\n", {}),
    "headers": (headers, "", {}),
    # The bounds on pending handshakes (handshakes.h) lifted, so that greetings exhaust the descriptors.
    "descriptors": (descriptors, "hello_timeout = 60\nmax_pending_hellos = 1000\n"
                    "max_pending_hellos_per_address = 1000\n", {"preexec_fn": limit_descriptors}),
    "names": (names, "", {}),
    "staging-fails": (staging_fails, "", {}),
}


def main():
    fn, config, kw = SCENARIOS[scenario]
    tmp = tempfile.mkdtemp()
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
