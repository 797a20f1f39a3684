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
  non-reading-neighbours  three connections pipeline calls and read none of the replies,
                 reconnecting whenever the daemon drops them, beside a client's kernel
                 several timeouts long: its heartbeats keep coming and it succeeds, and a
                 newcomer's hello is answered promptly (issue 37: a writer to a client that
                 reads nothing held up the worker's heartbeats and admissions)
  unix-full-ring  over unix:, 100 clients whose reply ring looks full send a hello that is
                 refused, to a daemon with 128 descriptors: each is dropped within
                 hello_timeout, and a client then connects (issue 37: the refusal waited
                 for ever, outside max_pending_hellos, and locked every client out)

usage: liveness.py SCENARIO REMORAD DRIVER REMORA PROBE DRV_SLEEP IMAGE
"""
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, wait_for  # noqa: E402
import rmshm  # noqa: E402
import rmwire as w  # noqa: E402

TIMEOUT_S = 3   # peer_timeout and REMORA_PEER_TIMEOUT in these scenarios
MARGIN_S = 15   # a loaded 2-core machine: the bound checked is TIMEOUT_S + MARGIN_S

scenario, remorad, driver, remora, probe, drv_sleep, image = sys.argv[1:8]


def client(d, *args, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    e.update({"REMORA_PEER_TIMEOUT": str(TIMEOUT_S), **env})
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


OP_DEVICE_GET_NAME = 4
NEIGHBOURS_PEER_TIMEOUT_S = 10  # the daemon's: a writer to a client that reads nothing waits this long
HELLO_BOUND_S = 5               # a newcomer's hello, on a loaded 2-core machine


def non_reading_attacker(d, stop):
    """Connects, pipelines cuDeviceGetName calls until the daemon stops taking them (its thread
    is stuck writing replies nobody reads), then reads nothing; again once the daemon has had
    time to drop it."""
    req = w.field_varint(1, 1 << 16) + w.field_varint(2, 1 << 16) + w.field_varint(3, 0)  # 64 KiB replies
    while not stop.is_set():
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((d.host, d.port))
            s.sendall(w.frame(w.OP_HELLO, w.hello("non-reader")))
            if w.result_of(w.read_reply(s, timeout=30)) != 0:
                s.close()
                continue
            s.setblocking(False)
            seq, stalled_since = 2, None
            while not stop.is_set():
                try:
                    s.send(w.frame(OP_DEVICE_GET_NAME, req, seq=seq))
                    seq, stalled_since = seq + 1, None
                except BlockingIOError:
                    stalled_since = stalled_since or time.monotonic()
                    time.sleep(0.05)
                    if time.monotonic() - stalled_since > 1:
                        break
            stop.wait(NEIGHBOURS_PEER_TIMEOUT_S + 2)
            s.close()
        except OSError:
            time.sleep(0.1)


def non_reading_neighbours(d):
    stop = threading.Event()
    attackers = [threading.Thread(target=non_reading_attacker, args=(d, stop)) for _ in range(3)]
    # The client's own timeout is half the daemon's: a stall of its heartbeats as long as a
    # stuck writer's fails it.
    victim_timeout_s = NEIGHBOURS_PEER_TIMEOUT_S // 2
    kernel_s = 3 * victim_timeout_s
    victim = None
    hellos = []
    try:
        for t in attackers:
            t.start()
        time.sleep(3)  # the attackers' writers are stuck
        victim = client(d, drv_sleep, image, str(kernel_s * 10**9), REMORA_PEER_TIMEOUT=str(victim_timeout_s))
        end = time.monotonic() + kernel_s
        while time.monotonic() < end and victim.poll() is None:
            t0 = time.monotonic()
            try:
                w.connect(d.host, d.port, name="newcomer").close()
                hellos.append(time.monotonic() - t0)
            except (OSError, RuntimeError):
                hellos.append(float("inf"))
            time.sleep(0.5)
        out, err = victim.communicate(timeout=kernel_s + 60)
        check("ok" in out, f"a kernel of {kernel_s} s beside 3 clients that read nothing, through a {victim_timeout_s} s "
              f"client timeout ({err.strip()[-200:]})")
        worst = max(hellos) if hellos else float("inf")
        check(worst < HELLO_BOUND_S, f"{len(hellos)} newcomers' hellos were answered within {worst:.1f} s "
              f"(bound {HELLO_BOUND_S} s; a stuck writer holds for {NEIGHBOURS_PEER_TIMEOUT_S} s)")
    finally:
        stop.set()
        for t in attackers:
            t.join()
        if victim and victim.poll() is None:
            victim.kill()
            victim.wait()


HELLO_TIMEOUT_S = 2
FULL_RING_CLIENTS = 100


def limit_descriptors():
    resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))


def unix_full_ring(d):
    descriptors = lambda: len(os.listdir(f"/proc/{d.proc.pid}/fd"))  # noqa: E731
    before = descriptors()
    conns = []
    try:
        for i in range(FULL_RING_CLIENTS):
            try:
                c = rmshm.Conn(d.path)
            except OSError:
                break  # the daemon's backlog is full: those in are enough
            c._word(rmshm.CTL[1] + 128).value = (1 << 64) - rmshm.RING  # ring 1 (daemon -> us) looks full
            c.send(w.frame(w.OP_HELLO, w.field_varint(1, 999) + w.field_varint(5, 1)))  # refused: version
            conns.append(c)
        t0 = time.monotonic()
        dropped = wait_for(lambda: all(c.peer_closed() for c in conns), timeout=HELLO_TIMEOUT_S + MARGIN_S)
        took = time.monotonic() - t0
        check(dropped, f"{len(conns)} clients whose reply ring looks full were dropped {took:.1f} s after their "
              f"hellos (hello_timeout {HELLO_TIMEOUT_S} s; bound {HELLO_TIMEOUT_S + MARGIN_S} s)")
        check(wait_for(lambda: descriptors() <= before + 4, timeout=MARGIN_S),
              f"the accepting process holds {descriptors()} descriptors again (before: {before})")
        out, err = client(d, probe, "free").communicate(timeout=60)
        check(out.strip().isdigit(), f"then a client is served, theirs still open ({err.strip()[-200:]})")
    finally:
        for c in conns:
            c.close()


SCENARIOS = {
    "frozen-worker": frozen_worker,
    "frozen-daemon": frozen_daemon,
    "frozen-client": frozen_client,
    "long-call": long_call,
    "long-copy": long_copy,
    "idle-client": idle_client,
    "killed-mid-kernel": killed_mid_kernel,
    "non-reading-neighbours": non_reading_neighbours,
    "unix-full-ring": unix_full_ring,
}


def main():
    tmp = tempfile.mkdtemp()
    config, kw = f"peer_timeout = {TIMEOUT_S}\n", {}
    if scenario == "killed-mid-kernel":
        config += "max_clients_per_gpu = 1\n"
    elif scenario == "non-reading-neighbours":
        config = f"peer_timeout = {NEIGHBOURS_PEER_TIMEOUT_S}\n"
    elif scenario == "unix-full-ring":
        config += f"hello_timeout = {HELLO_TIMEOUT_S}\n"
        kw = {"listen": "unix:" + os.path.join(tmp, "remorad.sock"), "preexec_fn": limit_descriptors}
    d = Daemon(remorad, driver, tmp, scenario, config, **kw)
    if scenario == "unix-full-ring":
        d.path = os.path.join(tmp, "remorad.sock")
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
