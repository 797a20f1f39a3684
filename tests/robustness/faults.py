#!/usr/bin/env python3
"""remorad when things around it go wrong (issue 16), on the CPU test driver, loopback
only. One scenario a run; every bound on time is wide, for a loaded CI machine:

  half-open      300 connections that never say hello are closed once hello_timeout has
                 passed, not before; the daemon's threads fall back; every one is logged
                 (a few lines a second, the rest counted); a real client works meanwhile
                 and after; SIGINT then stops the daemon with status 0
  pending-bound  connections past max_pending_hellos_per_address, then past
                 max_pending_hellos (from other loopback addresses), are closed at once and
                 counted in the log, while those within the bounds wait; a real client
                 dials again with pauses, gives up with a clear line after REMORA_PEER_TIMEOUT,
                 and gets in once the pending ones are gone
  sigterm        SIGTERM with two clients connected (one holding memory, one idle): remorad
                 exits 0 within shutdown_grace, the worker tells its clients it is going
                 away, the idle client's next call fails with a line saying the server is
                 shutting down instead of hanging, and no worker is left
  sigterm-grace  a worker that does not end on SIGTERM (stopped) is killed once
                 shutdown_grace has passed; remorad still exits 0
  sighup         SIGHUP reloads the configuration: a raised client quota applies to the
                 next allocation, a new tenant's token works and a removed one's is
                 refused, while a connected client keeps its session and memory; a
                 configuration that does not read is refused whole, the running one stays
  killed-restarted  remorad and its worker killed (SIGKILL) while a client works: the
                 client's call fails at once with a clear line; remorad started again on
                 the same address serves a new client
  client-killed-copying  a client killed in the middle of its copies: the daemon releases
                 its session and memory, and another client works meanwhile and after
  sd-notify      with NOTIFY_SOCKET set (as systemd does for Type=notify), remorad sends
                 READY=1 with its address once it listens, and STOPPING=1 on SIGTERM
  malloc-heap    gpu_malloc_heap sizes the shared context's device malloc heap, which a
                 client's context reports
  pool-leave     with a pool (a private etcd) and a lease of 60 s, the member's key is gone
                 from etcd as soon as remorad has exited after SIGTERM

usage: faults.py SCENARIO REMORAD DRIVER REMORA PROBE
"""
import os
import re
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
import rmwire as w  # noqa: E402
from etcd_fixture import Etcd  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402

scenario, remorad, driver, remora, probe = sys.argv[1:6]
MARGIN = 20  # seconds added to every configured bound before a test calls it missed


def probe_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}


def run_probe(d, *args, timeout=60, env=None):
    p = subprocess.run([remora, "run", "--server", d.server, "--", probe, *args],
                       capture_output=True, text=True, env={**probe_env(), **(env or {})}, timeout=timeout)
    return p.returncode == 0 and p.stdout.strip() == "ok", p.stderr.strip()


def start_probe(d, *args):
    return subprocess.Popen([remora, "run", "--server", d.server, "--", probe, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=probe_env(), start_new_session=True)


def wait_ready(p, timeout=30):
    """True once probe p has printed "ready"."""
    r, _, _ = select.select([p.stdout], [], [], timeout)
    return bool(r) and p.stdout.readline().strip() == "ready"


def end_probe(p):
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    p.communicate()


def threads(d):
    with open(f"/proc/{d.proc.pid}/status") as f:
        return int(re.search(r"^Threads:\s+(\d+)", f.read(), re.M).group(1))


def worker_alive(pid):
    """Whether pid is still a remorad worker, not a zombie."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return b"--worker-channel" in cmd and state != "Z"


def all_threads_stopped(pid):
    """Whether every thread of pid is stopped (a fatal signal would still reach one that is not)."""
    try:
        states = [open(f"/proc/{pid}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                  for t in os.listdir(f"/proc/{pid}/task")]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return bool(states) and all(s == "T" for s in states)


def logged_count(d, line, summary):
    """Connections the log accounts for: lines matching line, plus the counts of the
    summary lines (summary has one group, the count)."""
    text = d.text()
    return len(re.findall(line, text)) + sum(int(n) for n in re.findall(summary, text))


def sessions_opened(d):
    return len(re.findall(r"session \d+: client ", d.text()))


def stop_with(d, sig, limit):
    """Sends sig to remorad; (exit status or None, seconds it took)."""
    t0 = time.monotonic()
    d.proc.send_signal(sig)
    try:
        rc = d.proc.wait(timeout=limit)
    except subprocess.TimeoutExpired:
        rc = None
    return rc, time.monotonic() - t0


HALF_OPEN, HELLO_TIMEOUT = 300, 3


def half_open(d):
    base = threads(d)
    t0 = time.monotonic()
    socks = [socket.create_connection((d.host, d.port), timeout=10) for _ in range(HALF_OPEN)]
    peak = wait_for(lambda: (lambda n: n if n >= base + HALF_OPEN else None)(threads(d)), timeout=5)
    print(f"     daemon threads: {base} before, {peak or threads(d)} with {HALF_OPEN} silent connections")
    ok, err = run_probe(d, "work", "1")
    check(ok, f"a real client works while {HALF_OPEN} silent connections are pending ({err[-300:]})")

    closed_at = {}
    deadline = t0 + HELLO_TIMEOUT + MARGIN
    while len(closed_at) < len(socks) and time.monotonic() < deadline:
        open_socks = [s for s in socks if s not in closed_at]
        readable, _, _ = select.select(open_socks, [], [], 0.5)
        for s in readable:
            try:
                data = s.recv(4096)
            except ConnectionResetError:
                data = b""
            if not data:
                closed_at[s] = time.monotonic() - t0
    check(len(closed_at) == HALF_OPEN,
          f"the daemon closed all {HALF_OPEN} silent connections within hello_timeout ({HELLO_TIMEOUT} s) + "
          f"{MARGIN} s ({len(closed_at)} closed)")
    if closed_at:
        first, last = min(closed_at.values()), max(closed_at.values())
        print(f"     closed between {first:.1f} s and {last:.1f} s after they were opened")
        check(first >= HELLO_TIMEOUT - 0.5, f"none was closed before hello_timeout (first after {first:.1f} s)")
    check(wait_for(lambda: threads(d) <= base, timeout=MARGIN),
          f"the daemon's threads fall back to {base}, our ends still open (now {threads(d)})")
    for s in socks:
        s.close()
    def count():
        return logged_count(d, r"no hello within \d+ s; closing", r"(\d+) more connection\(s\) closed without a hello")
    check(wait_for(lambda: count() >= HALF_OPEN, timeout=10) and count() == HALF_OPEN,
          f"the log accounts for each of them once ({count()})")
    lines = len(re.findall(r"no hello within", d.text()))
    check(lines < HALF_OPEN / 4, f"in a few lines, not one each ({lines} lines)")
    ok, err = run_probe(d, "work", "1")
    check(ok, f"a real client works after them ({err[-300:]})")
    rc, took = stop_with(d, signal.SIGINT, 10 + MARGIN)
    check(rc == 0, f"SIGINT stops remorad with status 0 (status {rc}, {took:.1f} s)")


PER_ADDRESS, IN_ALL = 8, 12


def pending_bound(d):
    base = threads(d)

    def connect(source, n):
        return [socket.create_connection((d.host, d.port), timeout=10, source_address=(source, 0)) for _ in range(n)]

    def all_closed(socks, timeout):
        end = time.monotonic() + timeout
        return all(w.closed_by_peer(s, max(0.01, end - time.monotonic())) for s in socks)

    def none_closed(socks):
        return not any(w.closed_by_peer(s, 0.2) for s in socks)

    first = connect("127.0.0.1", PER_ADDRESS)
    check(wait_for(lambda: threads(d) >= base + PER_ADDRESS, timeout=10),
          f"{PER_ADDRESS} silent connections from 127.0.0.1 are pending")
    t0 = time.monotonic()
    extra = connect("127.0.0.1", 6)
    check(all_closed(extra, 5), f"6 more from 127.0.0.1 are closed at once ({time.monotonic() - t0:.1f} s)")
    check(none_closed(first), f"the first {PER_ADDRESS} still wait")
    ok, err = run_probe(d, "work", "1", timeout=60, env={"REMORA_PEER_TIMEOUT": "3"})
    tries = re.search(r"closed all (\d+) connection\(s\) of this client before answering its hello, for 3 s: "
                      r"it is overloaded", err)
    check(not ok and tries and int(tries.group(1)) >= 2,
          f"a real client from 127.0.0.1 dials again while shed, then gives up after REMORA_PEER_TIMEOUT with a "
          f"line saying the server is overloaded ({err[-300:]})")
    client_tries = int(tries.group(1)) if tries else 0

    others = connect("127.0.0.2", IN_ALL - PER_ADDRESS)
    check(wait_for(lambda: threads(d) >= base + IN_ALL, timeout=10),
          f"{IN_ALL - PER_ADDRESS} from 127.0.0.2 are pending too ({IN_ALL} in all)")
    t0 = time.monotonic()
    third = connect("127.0.0.3", 3)
    check(all_closed(third, 5), f"3 from 127.0.0.3 are closed at once: {IN_ALL} pending in all "
          f"({time.monotonic() - t0:.1f} s)")
    check(none_closed(first + others), f"the {IN_ALL} pending ones still wait")

    def refused():
        return logged_count(d, r"closed at once: \d+ handshakes", r"(\d+) more connection\(s\) closed at once")
    shed = 6 + 3 + client_tries
    check(wait_for(lambda: refused() >= shed, timeout=10) and refused() == shed,
          f"the log accounts for each connection closed at once ({refused()} of {shed}, the real client's "
          f"{client_tries} included)")
    text = d.text()
    check("(max_pending_hellos_per_address)" in text and "(max_pending_hellos)" in text,
          "and names the bound that closed it")
    waiting = start_probe(d, "work", "1")
    check(wait_for(lambda: refused() > shed, timeout=MARGIN), "a client started now is shed too")
    for s in first + others:
        s.close()
    try:
        out, err = waiting.communicate(timeout=MARGIN + 30)
    except subprocess.TimeoutExpired:
        end_probe(waiting)
        out, err = "", "(still waiting)"
    check(waiting.returncode == 0 and out.strip() == "ok",
          f"and gets in once the pending ones are gone, by dialling again ({err.strip()[-300:]})")
    check(wait_for(lambda: threads(d) <= base, timeout=MARGIN), "the pending ones' threads end once they close")
    ok, err = run_probe(d, "work", "1")
    check(ok, f"as does a client started after ({err[-300:]})")


GRACE = 5


def sigterm(d):
    hold = start_probe(d, "hold", "16")
    idle = start_probe(d, "idle", "10")
    try:
        check(wait_ready(hold), "a client holds 16 MiB")
        check(wait_for(lambda: sessions_opened(d) >= 2, timeout=30), "and another one is connected")
        time.sleep(1)  # the idle client's first calls
        workers = list(d.workers().values())
        check(workers and all(worker_alive(p) for p in workers), f"worker(s) {workers} running")
        rc, took = stop_with(d, signal.SIGTERM, GRACE + MARGIN)
        check(rc == 0, f"remorad exits 0 after SIGTERM (status {rc}, {took:.1f} s; grace {GRACE} s)")
        check(not any(worker_alive(p) for p in workers), "no worker is left running")
        text = d.text()
        check(re.search(r"SIGTERM: told [1-9]\d* client connection\(s\) that the daemon is going away", text),
              "the worker told its clients it is going away")
        check("SIGTERM: stopping" in text and re.search(r"worker \d+ stopped \(signal 15\)", text) and
              re.search(r"info: stopped$", text, re.M), "the log says so, ending with 'stopped'")
        t0 = time.monotonic()
        try:
            _, err = idle.communicate(timeout=10 + MARGIN)
        except subprocess.TimeoutExpired:
            err = "(still running)"
        check(idle.returncode not in (None, 0) and "the GPU server is shutting down" in err and "failed: 46" in err,
              f"the idle client's next call fails: CUDA_ERROR_DEVICE_UNAVAILABLE and a line saying the server "
              f"is shutting down (the daemon's going-away frame), no hang "
              f"(status {idle.returncode} after {time.monotonic() - t0:.1f} s more: {err.strip()[-300:]})")
    finally:
        end_probe(hold)
        end_probe(idle)


SHORT_GRACE = 2


def sigterm_grace(d):
    hold = start_probe(d, "hold", "16")
    workers = []
    try:
        check(wait_ready(hold), "a client holds 16 MiB")
        workers = list(d.workers().values())
        for pid in workers:
            os.kill(pid, signal.SIGSTOP)  # it cannot act on SIGTERM until continued
        check(workers and wait_for(lambda: all(all_threads_stopped(p) for p in workers), timeout=10),
              f"worker(s) {workers} stopped")
        rc, took = stop_with(d, signal.SIGTERM, SHORT_GRACE + MARGIN)
        check(rc == 0 and took >= SHORT_GRACE - 0.5,
              f"remorad waits shutdown_grace ({SHORT_GRACE} s), then exits 0 (status {rc} after {took:.1f} s)")
        check(not any(worker_alive(p) for p in workers), "the stopped worker was killed")
        check("still running after shutdown_grace" in d.text(), "the log says it was killed")
    finally:
        for pid in workers:
            if worker_alive(pid):
                os.kill(pid, signal.SIGKILL)
        end_probe(hold)


LEASE_TTL = 60


def pool_leave(d, etcd):
    key = "/remora/members/faults-member"
    check(wait_for(lambda: etcd.get(key), timeout=30), "remorad registered in the pool")
    rc, took = stop_with(d, signal.SIGTERM, 10 + MARGIN)
    gone = etcd.get(key) is None
    check(rc == 0, f"remorad exits 0 after SIGTERM (status {rc}, {took:.1f} s)")
    check(gone, f"its key is gone from etcd once it has exited ({took:.1f} s), not after the lease ({LEASE_TTL} s)")
    check("pool: left the pool" in d.text(), "the log says it left the pool")


def sighup(d):
    conf = d.log_path[:-len(".log")] + ".conf"

    def reload(text, expect):
        before = d.text().count("SIGHUP:")
        with open(conf, "w") as f:
            f.write(text)
        d.proc.send_signal(signal.SIGHUP)
        return wait_for(lambda: d.text().count("SIGHUP:") > before and expect in d.text(), timeout=10 + MARGIN)

    def probe_as(token, *args):
        env = probe_env()
        if token:
            env["REMORA_TOKEN"] = token
        return subprocess.run([remora, "run", "--server", d.server, "--", probe, *args], capture_output=True,
                              text=True, env=env, timeout=60)

    hold = start_probe(d, "hold", "32")
    try:
        check(wait_ready(hold), "a client holds 32 MiB (client_memory_limit 64M)")
        p = probe_as(None, "hold", "128")
        check(p.returncode != 0, "128 MiB is over the 64M quota: refused")
        check(probe_as("t-research", "free").returncode == 0, "tenant research's token works")
        ok = reload("allow_anonymous = yes\nclient_memory_limit = 256M\n[tenant lab]\ntoken = t-lab\n",
                    "configuration reloaded")
        check(ok, "SIGHUP: the configuration is reloaded")
        check("1 new, 1 retired" in d.text(), "with tenant lab new and research retired")
        big = start_probe(d, "hold", "128")
        check(wait_ready(big), "the raised quota (256M) applies to the next client's 128 MiB")
        end_probe(big)
        check(hold.poll() is None, "the connected client kept its session")
        check(probe_as("t-lab", "free").returncode == 0, "the new tenant's token works")
        p = probe_as("t-research", "free")
        check(p.returncode != 0, "the removed tenant's token is refused")
        ok = reload("client_memory_limit = \"oops\n", "the running one stays")
        check(ok, "a configuration that does not read is refused, the running one stays")
        check(probe_as("t-lab", "free").returncode == 0, "and serves on: the new tenant's token still works")
        check(d.proc.poll() is None, "remorad is still running")
    finally:
        end_probe(hold)


def killed_restarted(d):
    work = start_probe(d, "work", "60")
    try:
        check(wait_for(lambda: sessions_opened(d) >= 1, timeout=30), "a client works")
        time.sleep(1)
        workers = list(d.workers().values())
        d.proc.kill()  # no SIGTERM: no going-away frame, no grace
        d.proc.wait()
        for pid in workers:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        t0 = time.monotonic()
        try:
            _, err = work.communicate(timeout=10 + MARGIN)
        except subprocess.TimeoutExpired:
            err = "(still running)"
        took = time.monotonic() - t0
        check(work.returncode not in (None, 0) and "connection to the GPU server lost" in err,
              f"the working client's call fails {took:.1f} s after the kill, saying the connection was lost "
              f"({err.strip()[-200:]})")
        d.log.close()
        again = Daemon(remorad, driver, os.path.dirname(d.log_path), "restarted", "",
                       args=("--listen", f"tcp://{d.server}"))
        try:
            check(again.server == d.server, f"remorad starts again on the same address {d.server}")
            ok, err = run_probe(again, "work", "2")
            check(ok, f"and serves a new client ({err[-200:]})")
        finally:
            again.stop()
    finally:
        end_probe(work)


def client_killed_copying(d):
    big = start_probe(d, "stripes")  # copies up to 64 MiB both ways, in a loop of sizes
    try:
        check(wait_for(lambda: sessions_opened(d) >= 1, timeout=30), "a client copies")
        time.sleep(1.5)
        os.killpg(big.pid, signal.SIGKILL)
        big.communicate()
        t0 = time.monotonic()
        released = wait_for(lambda: re.search(r"session \d+ \(probe, [^)]*\) closed: released", d.text()),
                            timeout=10 + MARGIN)
        check(released, f"killed mid-copy, its session is released ({time.monotonic() - t0:.1f} s)")
        ok, err = run_probe(d, "work", "2")
        check(ok, f"another client works after ({err[-200:]})")
    finally:
        end_probe(big)


def sd_notify(d):
    sock, path = d.notify_socket
    sock.settimeout(10 + MARGIN)
    try:
        msg = sock.recv(4096).decode()
    except socket.timeout:
        msg = ""
    check(msg.startswith("READY=1\n") and f"listening on {d.server}" in msg, f"READY=1 with the address: {msg!r}")
    rc, took = stop_with(d, signal.SIGTERM, GRACE + MARGIN)
    try:
        msg = sock.recv(4096).decode()
    except socket.timeout:
        msg = ""
    check(msg == "STOPPING=1" and rc == 0, f"STOPPING=1 on SIGTERM, then status 0: {msg!r}, {rc}")


def malloc_heap(d):
    p = subprocess.run([remora, "run", "--server", d.server, "--", probe, "heap"], capture_output=True, text=True,
                       env=probe_env(), timeout=60)
    check(p.returncode == 0 and p.stdout.strip() == str(64 << 20),
          f"a client's context has the malloc heap gpu_malloc_heap made the shared one with ({p.stdout.strip()}, "
          f"{p.stderr.strip()[-200:]})")


SCENARIOS = {
    "half-open": (half_open, f"hello_timeout = {HELLO_TIMEOUT}\nmax_pending_hellos = 1000\n"
                  "max_pending_hellos_per_address = 1000\n"),
    "pending-bound": (pending_bound, f"hello_timeout = 120\nmax_pending_hellos = {IN_ALL}\n"
                      f"max_pending_hellos_per_address = {PER_ADDRESS}\n"),
    "sigterm": (sigterm, f"shutdown_grace = {GRACE}\n"),
    "sigterm-grace": (sigterm_grace, f"shutdown_grace = {SHORT_GRACE}\n"),
    "sd-notify": (sd_notify, f"shutdown_grace = {GRACE}\n"),
    "killed-restarted": (killed_restarted, ""),
    "malloc-heap": (malloc_heap, "gpu_malloc_heap = 64M\n"),
    "client-killed-copying": (client_killed_copying, ""),
    "sighup": (sighup, "allow_anonymous = yes\nclient_memory_limit = 64M\n[tenant research]\ntoken = t-research\n"),
    "pool-leave": (pool_leave, "pool = {endpoint}\nhost_name = faults-member\n" f"lease_ttl = {LEASE_TTL}\n"),
}


def main():
    fn, config = SCENARIOS[scenario]
    tmp = tempfile.mkdtemp(prefix="remora-faults-")
    etcd = Etcd(tmp) if "{endpoint}" in config else None
    d = None
    try:
        env, notify = None, None
        if scenario == "sd-notify":  # systemd's side of Type=notify: a datagram socket
            path = os.path.join(tmp, "notify")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(path)
            env, notify = {"NOTIFY_SOCKET": path}, (sock, path)
        d = Daemon(remorad, driver, tmp, scenario, config.replace("{endpoint}", etcd.endpoint if etcd else ""),
                   env=env)
        d.notify_socket = notify
        if etcd:
            fn(d, etcd)
        else:
            fn(d)
    finally:
        if d:
            d.stop()
        if etcd:
            etcd.stop()
    if failures:
        print("--- remorad log\n" + d.text(), file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
