#!/usr/bin/env python3
"""Attack soak (issue 37, "Done when"): honest clients allocate, copy, launch and check in a
loop (`probe soak`) for SECONDS beside ATTACKERS attackers of each kind below, on the CPU
test driver. Every honest client must finish its loops without an error and every daemon
process must stay up; the figures (loops done, attackers' connections made and refused)
are printed. Only error counts and liveness are checked, never throughput: it must hold on
a loaded 2-core machine.

Two daemons, configured alike (credentials required, peer_timeout 10 s): one on loopback
TCP with a metrics endpoint, one on `unix:` (unless --no-unix). Honest clients present
their tenant's token (`honest.…`) from 127.0.0.1 (TCP) or as this user (`unix:`); one in
UNIX_SHARE of them goes to the `unix:` daemon. They arrive over the first RAMP seconds.
Attackers that hold a hello open come from loopback addresses of their own (127.K.…),
as an attacker on another host would: the per-address bounds are not theirs to take
from the honest clients' address. The kinds (tests that check each bound alone in
brackets):

  non-reader   honest tenant's token; pipelines cuDeviceGetName calls with 64 KiB replies
               and reads none, again once the daemon drops it (liveness-non-reading-neighbours)
  full-ring    unix: a client whose reply ring looks full sends a refused hello, or a
               dialer that never sends its ring (liveness-unix-full-ring)
  half-open    8 connections at a time that say nothing (faults-half-open)
  slowloris    4 connections at a time that send a hello's header a byte a second
  hog          honest tenant's token; `probe threads 8`: 8 channels copying, their staging
               held (bounds-host-memory: client_host_memory_limit)
  big-ring     unix: rings of 64 MiB, past shm_ring_max (bounds-shm-ring)
  guesser      wrong tokens of another tenant, unknown token ids and admin-token guesses
               by status request, each from a random address 127.K.x.y (credentials-*)
  metrics-idle 4 idle connections at a time to the metrics endpoint, while it is
               scraped every 2 s (bounds-metrics-idle)
  malformed    bad magic, oversized lengths, garbage, a truncated frame; with the honest
               token, unknown opcodes and oversized frames after a hello (hostile-*)

Guessers do not guess the honest tenant's own token: that is bounded per credential and
slows that tenant down by design (docs/security.md, "Credentials").

usage: attack_soak.py REMORAD DRIVER REMORA PROBE IMAGE [--clients N] [--attackers K]
                      [--seconds S] [--no-unix]
"""
import argparse
import collections
import os
import random
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, stop_process, wait_for  # noqa: E402
import rmwire as w  # noqa: E402
import rmshm  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
for name in ("remorad", "driver", "remora", "probe", "image"):
    ap.add_argument(name)
ap.add_argument("--clients", type=int, default=24, help="honest clients (default 24)")
ap.add_argument("--attackers", type=int, default=2, help="attackers of each kind (default 2)")
ap.add_argument("--seconds", type=float, default=20, help="each honest client's loops (default 20)")
ap.add_argument("--no-unix", action="store_true", help="no unix: daemon (a build without the shm transport)")
args = ap.parse_args()

PEER_TIMEOUT_S = 10
HELLO_TIMEOUT_S = 5
UNIX_SHARE = 8            # one honest client in 8 over unix:
RAMP_S = min(10.0, args.seconds / 4)
MARGIN_S = 600            # past its SECONDS, an honest client on a loaded machine
HONEST = "honest.h0nest-soak-secret"
ADMIN = "ops.admin-soak-secret"
OP_DEVICE_GET_NAME = 4
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
HONEST_ENV = dict(ENV, REMORA_TOKEN=HONEST)

stop = threading.Event()
stats = collections.defaultdict(collections.Counter)  # kind -> made, refused, failed (the attacker's own)
stats_lock = threading.Lock()


def count(kind, what, n=1):
    with stats_lock:
        stats[kind][what] += n


def hash_token(token):
    return subprocess.run([args.remora, "hash-token"], input=token + "\n", capture_output=True, text=True,
                          check=True).stdout.strip()


def closed_by_peer(s, timeout):
    """True once the daemon has closed s (EOF or reset) within timeout, reading what it sends."""
    end = time.monotonic() + timeout
    while not stop.is_set():
        left = end - time.monotonic()
        if left <= 0:
            return False
        r, _, _ = select.select([s], [], [], min(left, 0.5))
        if r:
            try:
                if not s.recv(65536):
                    return True
            except (ConnectionResetError, BlockingIOError):
                return True
            except OSError:
                return True
    return False


def tcp(d, src, **kw):
    s = socket.socket()
    s.bind((src, 0))
    s.settimeout(kw.get("timeout", 10))
    s.connect((d.host, kw.get("port") or d.port))
    return s


def source(kind_no, k, i=1):
    return f"127.{kind_no}.{k}.{i % 250 + 1}"


# ---- the attackers: each loops until stop, counting what it did ----

def non_reader(d, k):
    req = w.field_varint(1, 1 << 16) + w.field_varint(2, 1 << 16) + w.field_varint(3, 0)  # 64 KiB replies
    while not stop.is_set():
        try:
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.bind((source(10, k), 0))
            s.settimeout(30)
            s.connect((d.host, d.port))
            s.sendall(w.frame(w.OP_HELLO, w.hello("non-reader", HONEST.encode())))
            count("non-reader", "made")
            if w.result_of(w.read_reply(s, timeout=30)) != 0:
                count("non-reader", "refused")
                s.close()
                continue
            s.setblocking(False)
            seq, stalled_since, pending = 2, None, b""
            while not stop.is_set():
                if not pending:
                    pending, seq = w.frame(OP_DEVICE_GET_NAME, req, seq=seq), seq + 1
                try:
                    pending, stalled_since = pending[s.send(pending):], None
                except BlockingIOError:
                    stalled_since = stalled_since or time.monotonic()
                    time.sleep(0.05)
                    if time.monotonic() - stalled_since > 1:
                        break
                except OSError:  # dropped already: the send below says so too
                    break
            count("non-reader", "requests sent", seq - 2)
            # Reads nothing, ever: whether the daemon dropped it shows in a send's reset.
            stop.wait(PEER_TIMEOUT_S + 5)
            try:
                s.send(pending or b"\0")
            except BlockingIOError:
                pass
            except OSError:
                count("non-reader", "dropped")
            s.close()
        except OSError:
            count("non-reader", "failed")
            stop.wait(0.5)


def full_ring(d, k):
    n = 0
    while not stop.is_set():
        n += 1
        try:
            if n % 2:
                c = rmshm.Conn(d.path)
                c._word(rmshm.CTL[1] + 128).value = (1 << 64) - rmshm.RING  # ring 1 (daemon -> us) looks full
                c.send(w.frame(w.OP_HELLO, w.field_varint(1, 999) + w.field_varint(5, 1)))  # refused: version
                count("full-ring", "made")
                end = time.monotonic() + HELLO_TIMEOUT_S + 30
                while not c.peer_closed() and time.monotonic() < end and not stop.is_set():
                    time.sleep(0.2)
                count("full-ring", "refused", c.peer_closed())
                c.close()
            else:  # a dialer that never sends its ring
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                s.connect(d.path)
                count("full-ring", "made")
                count("full-ring", "refused", closed_by_peer(s, HELLO_TIMEOUT_S + 30))
                s.close()
        except (OSError, RuntimeError):
            count("full-ring", "failed")
            stop.wait(0.5)


def half_open(d, k):
    while not stop.is_set():
        socks = []
        try:
            for i in range(8):
                socks.append(tcp(d, source(11, k, i)))
                count("half-open", "made")
            for s in socks:
                count("half-open", "refused", closed_by_peer(s, HELLO_TIMEOUT_S + 30))
        except OSError:
            count("half-open", "failed")
            stop.wait(0.5)
        for s in socks:
            s.close()


def slowloris(d, k):
    head = w.frame(w.OP_HELLO, w.hello("slow", HONEST.encode()))
    while not stop.is_set():
        socks = []
        try:
            for i in range(4):
                socks.append(tcp(d, source(12, k, i)))
                count("slowloris", "made")
            alive = list(socks)
            for b in range(len(head) - 1):  # never the last byte
                if stop.is_set() or not alive:
                    break
                for s in list(alive):
                    try:
                        s.send(head[b:b + 1])
                    except OSError:
                        alive.remove(s)
                        count("slowloris", "refused")
                stop.wait(1.0)
                for s in list(alive):
                    r, _, _ = select.select([s], [], [], 0)
                    if r:
                        alive.remove(s)
                        count("slowloris", "refused")
        except OSError:
            count("slowloris", "failed")
            stop.wait(0.5)
        for s in socks:
            s.close()


def hog(d, k):
    while not stop.is_set():
        p = subprocess.Popen([args.remora, "run", "--server", d.server, "--", args.probe, "threads", "8", "15"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=HONEST_ENV)
        count("hog", "made")
        line = p.stdout.readline().strip()
        m = re.match(r"copied (\d+) of 8", line)
        if m:
            count("hog", "channels refused", 8 - int(m.group(1)))
        else:
            count("hog", "failed")
        while p.poll() is None and not stop.is_set():
            stop.wait(0.5)
        stop_process(p, grace=5)


def big_ring(d, k):
    while not stop.is_set():
        try:
            s = rmshm.big_ring_dialer(d.path, 64 << 20)
            count("big-ring", "made")
            count("big-ring", "refused", closed_by_peer(s, HELLO_TIMEOUT_S + 30))
            s.close()
        except OSError:
            count("big-ring", "failed")
            stop.wait(0.5)
        stop.wait(0.2)


def guesser(d, k):
    rnd = random.Random(k)
    while not stop.is_set():
        src = f"127.13.{rnd.randrange(256)}.{rnd.randrange(1, 255)}"
        what = rnd.randrange(3)
        if what == 0:
            op, msg = w.OP_HELLO, w.hello("guesser", f"victim.guess{rnd.random()}".encode())
        elif what == 1:
            op, msg = w.OP_HELLO, w.hello("guesser", f"nobody{rnd.randrange(1000)}.guess".encode())
        else:
            op, msg = w.OP_STATUS, w.field_bytes(1, f"ops.guess{rnd.random()}".encode())
        try:
            s = tcp(d, src)
            s.sendall(w.frame(op, msg))
            count("guesser", "made")
            r = w.read_reply(s, timeout=15)
            count("guesser", "refused", w.result_of(r) != 0)
            s.close()
        except OSError:
            count("guesser", "failed")
            stop.wait(0.5)


def metrics_idle(d, k):
    while not stop.is_set():
        socks = []
        try:
            for i in range(4):
                socks.append(tcp(d, source(14, k, i), port=d.metrics_port))
                count("metrics-idle", "made")
            for s in socks:
                count("metrics-idle", "refused", closed_by_peer(s, 60))
        except OSError:
            count("metrics-idle", "failed")
            stop.wait(0.5)
        for s in socks:
            s.close()


def malformed(d, k):
    rnd = random.Random(100 + k)
    hello = w.frame(w.OP_HELLO, w.hello("malformed", HONEST.encode()))
    frames = [
        lambda: [w.FRAME.pack(0xDEADBEEF, 0, 1, 0, 0, 0, 0, 0, 0)],                     # bad magic
        lambda: [w.FRAME.pack(w.MAGIC, w.OP_HELLO, 1, 1 << 30, 0, 0, 0, 0, 0)],         # a hello of 1 GiB
        lambda: [bytes(rnd.randrange(256) for _ in range(rnd.randrange(1, 400)))],     # garbage
        lambda: [hello[:rnd.randrange(1, len(hello))]],                                 # truncated, then closed
        lambda: [w.frame(w.OP_HELLO, bytes(rnd.randrange(256) for _ in range(64)))],   # a hello of junk
        lambda: [hello, w.frame(0x7FFF0000, b"x" * 16, seq=2)],                         # an unknown opcode
        lambda: [hello, w.FRAME.pack(w.MAGIC, OP_DEVICE_GET_NAME, 2, 1 << 31, 0, 1 << 40, 0, 0, 0)],  # oversized
    ]
    while not stop.is_set():
        try:
            s = tcp(d, source(15, k, rnd.randrange(250)))
            count("malformed", "made")
            for data in rnd.choice(frames)():
                s.sendall(data)
            count("malformed", "refused", closed_by_peer(s, HELLO_TIMEOUT_S + 30))
            s.close()
        except OSError:
            count("malformed", "failed")
            stop.wait(0.5)
        stop.wait(0.1)


TCP_KINDS = {"non-reader": non_reader, "half-open": half_open, "slowloris": slowloris, "hog": hog,
             "guesser": guesser, "metrics-idle": metrics_idle, "malformed": malformed}
UNIX_KINDS = {"full-ring": full_ring, "big-ring": big_ring}


def scraper(d, served):
    while not stop.is_set():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{d.metrics_port}/metrics", timeout=10) as r:
                served["served"] += r.status == 200 and b"remora_" in r.read()
        except OSError:
            pass
        served["tried"] += 1
        stop.wait(2)


# ---- the honest clients ----

def newcomers(d, results):
    """An honest client that connects anew every 2 s while the attack goes on: it must be
    served each time (the clients above all connect in the first seconds)."""
    while not stop.is_set():
        try:
            p = subprocess.run([args.remora, "run", "--server", d.server, "--", args.probe, "soak", args.image, "0"],
                               capture_output=True, text=True, env=HONEST_ENV, timeout=120)
            ok = p.stdout.split()[:1] == ["ok"]
            results["served" if ok else "failed"] += 1
            if not ok and not results["first"]:
                results["first"] = f"{d.server}: {p.stderr.strip()[-300:]}"
        except subprocess.TimeoutExpired:
            results["failed"] += 1
        stop.wait(2)



def honest_client(d, i, tmp):
    out = open(os.path.join(tmp, f"honest{i}.out"), "w+")
    err = open(os.path.join(tmp, f"honest{i}.err"), "w+")
    p = subprocess.Popen([args.remora, "run", "--server", d.server, "--", args.probe, "soak", args.image,
                          str(args.seconds)], stdout=out, stderr=err, env=HONEST_ENV)
    return p, out, err


def honest_result(p, out, err, deadline):
    try:
        p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    out.seek(0)
    err.seek(0)
    words, e = out.read().split(), err.read().strip()
    out.close()
    err.close()
    if p.returncode == 0 and words[:1] == ["ok"] and len(words) == 2:
        return int(words[1]), None
    return 0, f"exit {p.returncode}, {' '.join(words)!r}: {e[-300:]}"


def config(extra=""):
    return (extra + f"allow_anonymous = no\npeer_timeout = {PEER_TIMEOUT_S}\nhello_timeout = {HELLO_TIMEOUT_S}\n"
            f"client_host_memory_limit = 64M\nadmin_token = {hash_token(ADMIN)}\n"
            f"[tenant honest]\ntoken = {HONEST}\n[tenant victim]\ntoken = {hash_token('victim.v1ctim-secret')}\n")


def main():
    tmp = tempfile.mkdtemp(prefix="remora-attack-soak-")
    daemons = [Daemon(args.remorad, args.driver, tmp, "tcp", config("metrics_listen = 127.0.0.1:0\n"))]
    if not args.no_unix:
        daemons.append(Daemon(args.remorad, args.driver, tmp, "unix", config(),
                              listen="unix:" + os.path.join(tmp, "remorad.sock")))
        daemons[1].path = daemons[1].server[len("unix:"):]
    tcpd = daemons[0]
    m = wait_for(lambda: re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", tcpd.text()))
    tcpd.metrics_port = int(m.group(1)) if m else None
    threads, scrapes = [], collections.Counter()
    honest = []
    try:
        for d in daemons:
            p = subprocess.run([args.remora, "run", "--server", d.server, "--", args.probe, "soak", args.image, "0"],
                               capture_output=True, text=True, env=HONEST_ENV, timeout=120)
            check(p.stdout.split()[:1] == ["ok"], f"{d.server}: a first honest client works ({p.stderr[-200:]})")
        kinds = [(tcpd, name, fn) for name, fn in TCP_KINDS.items()
                 if name != "metrics-idle" or tcpd.metrics_port]
        if not args.no_unix:
            kinds += [(daemons[1], name, fn) for name, fn in UNIX_KINDS.items()]
        for d, name, fn in kinds:
            for k in range(args.attackers):
                threads.append(threading.Thread(target=fn, args=(d, k), daemon=True))
        if tcpd.metrics_port:
            threads.append(threading.Thread(target=scraper, args=(tcpd, scrapes), daemon=True))
        late = collections.Counter()
        for d in daemons:
            threads.append(threading.Thread(target=newcomers, args=(d, late), daemon=True))
        for t in threads:
            t.start()
        time.sleep(3)  # the attacks are under way before the first honest client
        t0 = time.monotonic()
        for i in range(args.clients):
            d = daemons[1] if len(daemons) > 1 and i % UNIX_SHARE == 1 else tcpd
            time.sleep(max(0.0, t0 + RAMP_S * i / args.clients - time.monotonic()))
            honest.append((d,) + honest_client(d, i, tmp))
        deadline = time.monotonic() + args.seconds + MARGIN_S
        loops, errors = collections.Counter(), []
        for d, p, out, err in honest:
            n, e = honest_result(p, out, err, deadline)
            loops[d.server] += n
            if e:
                errors.append(f"{d.server}: {e}")
        took = time.monotonic() - t0
        up = [d.proc.poll() is None for d in daemons]
        stop.set()
        for t in threads:
            t.join(timeout=60)

        print(f"attack soak figures: {args.clients} honest clients, {args.attackers} attackers of each of "
              f"{len({n for _, n, _ in kinds})} kinds, {args.seconds:.0f} s each client, "
              f"{took:.0f} s in all")
        for d in daemons:
            n = sum(1 for h in honest if h[0] is d)
            print(f"attack soak figures: {d.server}: {n} honest clients, {loops[d.server]} loops")
        print(f"attack soak figures: honest errors {len(errors)}")
        for _, name, _ in kinds:
            if name in stats:
                c = stats.pop(name)
                print(f"attack soak figures: {name}: " + ", ".join(f"{v} {k}" for k, v in sorted(c.items())))
        right_token = re.compile(r"client 127\.(?:0|10|12|15)\.[^ ]*: credential not checked")
        for d in daemons:  # what the attacks cost beyond their own connections (log lines, rate-limited)
            text = d.text()
            print(f"attack soak figures: {d.server}: log lines of right tokens' checks not made "
                  f"{len(right_token.findall(text))}, of staging refused at worker_host_memory_limit "
                  f"{text.count('(worker_host_memory_limit)')}")
        if tcpd.metrics_port:
            print(f"attack soak figures: metrics scrapes served {scrapes['served']} of {scrapes['tried']}")
        print(f"attack soak figures: newcomers during the attack served {late['served']}, failed {late['failed']}")
        check(late["served"] and not late["failed"], f"every newcomer during the attack is served ({late['served']} "
              f"served, {late['failed']} failed; first: {late['first']})")
        check(not errors, f"{args.clients} honest clients, {sum(loops.values())} loops: {len(errors)} errors"
              + (f" (first: {errors[0]})" if errors else ""))
        check(all(up) and all(d.proc.poll() is None for d in daemons), "every daemon is still running")
        for d in daemons:
            check("ended (signal" not in d.text(), f"{d.server}: no worker ended on a signal")
            p = subprocess.run([args.remora, "run", "--server", d.server, "--", args.probe, "soak", args.image, "0"],
                               capture_output=True, text=True, env=HONEST_ENV, timeout=120)
            check(p.stdout.split()[:1] == ["ok"], f"{d.server}: an honest client works after the attack "
                  f"({p.stderr[-200:]})")
        if tcpd.metrics_port:
            check(scrapes["served"] * 2 >= scrapes["tried"],
                  f"the metrics endpoint served {scrapes['served']} of {scrapes['tried']} scrapes beside idle "
                  f"connections")
    finally:
        stop.set()
        for d, p, out, err in honest:
            if p.poll() is None:
                p.kill()
                p.wait()
        for d in daemons:
            d.stop()
    if failures:
        for d in daemons:
            print(f"--- {d.server} log (end)\n" + d.text()[-6000:], file=sys.stderr)
        print(f"logs and each honest client's output kept in {tmp}", file=sys.stderr)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
