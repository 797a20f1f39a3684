#!/usr/bin/env python3
"""Shared pinned memory (docs/hotpath.md): pinned copies over shared memory go by the
daemon's driver from the client's memfd, not as bytes. One scenario a run, on the CPU test
driver; remorad listens on a Unix socket in a private directory (and on TCP for tcp):

  shm      drv_pinned through unix: is correct; the daemon logs each region shared, its
           copy profile (REMORA_PROFILE=copies) shows host=shared for every size, and the
           session closes with nothing left shared (cuMemFreeHost unshared each region)
  tcp      drv_pinned through TCP is correct, and nothing is shared (no descriptors pass)
  limit    with shared_pinned_limit = 2M, drv_pinned is still correct: the regions past the
           limit are refused with a line saying so, and copied over the connection
  hostile  a client speaking the shm transport by hand shares a memfd not sealed against
           shrinking, one smaller than the region, one whose inode is not the one named,
           a pipe, and nothing at all: each is refused with its line and an error reply,
           the session serves on (a well-formed share without a context is answered too),
           and drv_pinned then works beside it
  killed   drv_pinned killed (SIGKILL) holding three shared regions: the daemon's session
           closes with the three regions (6 MiB) released, and serves the next client

usage: shared_pinned.py SCENARIO REMORAD DRIVER REMORA DRV_PINNED IMAGE
"""
import os
import re
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
import rmwire as w  # noqa: E402
import rmshm  # noqa: E402
from remorad_fixture import stop_process, wait_for  # noqa: E402

scenario, remorad, driver, remora, prog, image = sys.argv[1:7]
OP_HOST_SHARE = 0x1000A
CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_CONTEXT = 1, 201


class Daemon:
    def __init__(self, tmp, listen, config=""):
        self.log_path = os.path.join(tmp, "remorad.log")
        conf, ready = os.path.join(tmp, "remorad.conf"), os.path.join(tmp, "addr")
        with open(conf, "w") as f:
            f.write("allow_anonymous = yes\n" + config)
        env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
        env.update(REMORA_LOG="info", REMORA_PROFILE="copies:1K")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([remorad, "--config", conf, "--listen", listen, "--driver", driver,
                                      "--ready-file", ready], stderr=self.log, env=env)
        if not wait_for(lambda: os.path.exists(ready) and open(ready).read().strip()):
            raise RuntimeError("remorad did not start:\n" + self.text())
        addr = open(ready).read().strip()
        self.server = addr if listen.startswith("tcp") else "unix:" + addr
        self.path = addr

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        stop_process(self.proc)
        self.log.close()


def run(d, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    return subprocess.run([remora, "run", "--server", d.server, "--", prog, image, *args], capture_output=True,
                          text=True, env=env, timeout=120)


def ran_ok(p, what):
    ok = p.returncode == 0 and p.stdout.count(" ok checksum=") == 5 and "mapped pinned ok" in p.stdout
    if not check(ok, what):
        print(p.stdout + p.stderr)
    return ok


def profiles(d, host):
    return re.findall(r"side=daemon op=(cuMemcpy\w+) host=" + host + r" bytes=(\d+)", d.text())


def closed_line(d):
    return wait_for(lambda: re.search(r"closed: released .* (\d+) shared pinned regions \((\d+) bytes\)", d.text()))


def scenario_shm(tmp):
    d = Daemon(tmp, "unix:" + os.path.join(tmp, "remorad.sock"))
    try:
        ran_ok(run(d), "drv_pinned through shared memory is correct")
        text = d.text()
        shares = re.findall(r"shared pinned region 0x[0-9a-f]+, (\d+) bytes", text)
        # Two a size from 64 KiB on, and the mapped one; the 4 KiB allocation is not worth sharing.
        check(len(shares) == 9 and "4096" not in shares, f"each allocation from 64 KiB shared ({len(shares)})")
        shared = profiles(d, "shared")
        for op in ("cuMemcpyHtoD_v2", "cuMemcpyDtoH_v2", "cuMemcpyHtoDAsync_v2", "cuMemcpyDtoHAsync_v2"):
            sizes = {int(n) for o, n in shared if o == op}
            check({65536, 1052684, 8388608, 34603108} <= sizes, f"{op} went by shared memory at every size")
        # As bytes: through the session's small buffer (a blocking copy up to 16 KiB) or staging.
        check(("cuMemcpyHtoD_v2", "4096") in profiles(d, "small") + profiles(d, "staging"),
              "a 4 KiB pinned allocation's copies went as bytes")
        # A small blocking copy waits for the device when its source is page-locked, as in CUDA
        # (host=small: one wait, after the copy), and returns once staged when it is pageable
        # (host=small-pageable: the part copied from pageable memory; its one wait is before).
        text = d.text()
        small = re.findall(r"side=daemon op=cuMemcpyHtoD_v2 host=small bytes=(\d+) .* wait_calls=(\d+)", text)
        staged = re.findall(r"side=daemon op=cuMemcpyHtoD_v2 host=small-pageable bytes=(\d+) .* wait_calls=(\d+)", text)
        check(("4096", "1") in small, f"a small copy from pinned memory waited for the device: {small[:6]}")
        check(staged and all(w == "1" for _, w in staged) and not any(b == "4096" for b, _ in staged),
              f"only the copies from pageable memory returned once staged: {staged[:6]}")
        m = closed_line(d)
        check(m and m.group(1) == "0", "cuMemFreeHost unshared every region before the session closed")
    finally:
        d.stop()


def scenario_tcp(tmp):
    d = Daemon(tmp, "tcp://127.0.0.1:0")
    try:
        ran_ok(run(d), "drv_pinned through TCP is correct")
        # A share's line names its address; the session's closing line ("0 shared pinned
        # regions") may already be there too.
        check(not re.search(r"shared pinned region 0x", d.text()) and not profiles(d, "shared"),
              "nothing shared over TCP")
    finally:
        d.stop()


def scenario_limit(tmp):
    d = Daemon(tmp, "unix:" + os.path.join(tmp, "remorad.sock"), "shared_pinned_limit = 2M\n")
    try:
        ran_ok(run(d), "drv_pinned is correct with regions refused past shared_pinned_limit")
        text = d.text()
        check("not shared: it would pass shared_pinned_limit" in text, "a share past the limit is refused with a line")
        check(profiles(d, "shared") and profiles(d, "staging"), "copies went by shared memory within it, bytes past it")
    finally:
        d.stop()


def memfd(size, seals):
    fd = os.memfd_create("hostile", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        import fcntl
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def scenario_hostile(tmp):
    import fcntl
    d = Daemon(tmp, "unix:" + os.path.join(tmp, "remorad.sock"))
    sealed = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
    try:
        c = rmshm.Conn(d.path)
        c.hello()
        seq = [10]

        def share(fds, length, inode=None, addr=0x7F0000000000):
            seq[0] += 1
            ino = inode if inode is not None else (os.fstat(fds[0]).st_ino if fds else 0)
            msg = w.field_varint(1, addr) + w.field_varint(2, length) + w.field_varint(3, ino)
            return w.result_of(c.call(OP_HOST_SHARE, msg, seq=seq[0], fds=fds))

        cases = [
            ("a memfd not sealed against shrinking", [memfd(1 << 20, 0)], 1 << 20, None, "not sealed against shrinking"),
            ("a memfd smaller than the region", [memfd(1 << 16, sealed)], 1 << 20, None, "smaller than the region"),
            ("a memfd that is not the file named", [memfd(1 << 20, sealed)], 1 << 20, 12345, "not the file the share names"),
            ("a pipe", [os.pipe()[0]], 1 << 20, None, "is not a memfd"),
            ("no descriptor at all", None, 1 << 20, 0, "no memfd came with it"),
        ]
        for what, fds, length, inode, line in cases:
            before = d.text().count(line)
            r = share(fds, length, inode)
            check(r == CUDA_ERROR_INVALID_VALUE, f"{what}: refused ({r})")
            check(wait_for(lambda: d.text().count(line) > before), f"{what}: the log says '{line}'")
        r = share([memfd(1 << 20, sealed)], 1 << 20)
        check(r == CUDA_ERROR_INVALID_CONTEXT, f"a sound share without a context is answered ({r}): the session serves on")
        ran_ok(run(d), "drv_pinned works beside the hostile client")
        c.close()
        check(d.proc.poll() is None and "shared pinned region" in d.text(), "the daemon serves on")
    finally:
        d.stop()


def scenario_killed(tmp):
    d = Daemon(tmp, "unix:" + os.path.join(tmp, "remorad.sock"))
    try:
        p = run(d, "kill")
        check(p.returncode != 0 and "ready" in p.stdout, "drv_pinned made its shares and was killed")
        m = closed_line(d)
        check(m and m.group(1) == "3" and m.group(2) == str(6 << 20),
              "the killed client's session released its 3 shared regions (6 MiB): "
              + (m.group(0) if m else "no line"))
        ran_ok(run(d), "the next client is served")
    finally:
        d.stop()


with tempfile.TemporaryDirectory() as tmp:
    {"shm": scenario_shm, "tcp": scenario_tcp, "limit": scenario_limit, "hostile": scenario_hostile,
     "killed": scenario_killed}[scenario](tmp)
sys.exit(1 if failures else 0)
