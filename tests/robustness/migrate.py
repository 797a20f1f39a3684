#!/usr/bin/env python3
"""Live migration of a client between two remorads on the test driver (docs/pool.md, "Live
migration"; issue 40). One scenario a run:

  moves        drv_migrate, moved A -> B -> A -> B -> A mid-run by `remora migrate`, prints
               exactly what it prints unmoved; each move's bytes and pause are printed
  refused      moves that must fail leave the client running at the source, its output
               unchanged: a target whose admin token differs (it refuses the hello), a target
               where the client's addresses are taken (the test driver's hint not taken),
               a non-admin asking
  cold-target  drv_migrate moved A -> B where B has no worker for its tenant yet and making a
               context takes 1.5 s (the test driver's REMORA_TESTDRIVER_CONTEXT_MS, as a GPU's
               first context takes most of a second): B is greeted when the move is asked for
               and makes its context then, while the client runs, so the pause stays under
               half of that time; output unchanged
  quiet-client drv_migrate sleeping 3 s between iterations, moved A -> B where B closes a
               client silent for 2 s (peer_timeout = 2): the source keeps B's greeted session
               with heartbeats until the client's next call, and the move succeeds; then a
               move B -> C whose target is killed once greeted fails at the client's call,
               and the client goes on at B
  busy-target  drv_migrate moved A -> B where both test drivers hand out device addresses from
               the same place (REMORA_TESTDRIVER_DEVICE_SLOT, as on a GPU) and two earlier runs
               on B used and freed the addresses the client holds: B reserves them
               (RM_OP_MIGRATE_RANGES) before the images it loads ahead could land there
  source-gone  the source killed mid-run: the client ends with a clear error, not a hang
  threads      drv_migrate with a second thread on a channel of its own, in its calls when
               the move comes: moved A -> B -> A -> B, each later move asked as soon as the one
               before ends; output and the thread's results unchanged
  runtime      rt_migrate (cudart: its kernels a library, launched as CUkernels) moved
               A -> B -> A mid-run prints what it prints unmoved
  window       as variables, with both remorads' migratable_memory on (cuMemAlloc and
               cuMemAddressReserve in each worker's own window of addresses)
  variables    drv_migrate on STATEFUL_IMAGE holding the address of its module's variable,
               written and read through that address (copies, a kernel's argument) and by
               name, moved A -> B -> A -> B: output unchanged, the address the same throughout

               (drv_migrate runs on IMAGE, a module without device variables); and a module
               holding device variables (STATEFUL_IMAGE) moves, with them

usage: migrate.py SCENARIO REMORAD DRIVER REMORA PROGRAM IMAGE [RT_PROGRAM [STATEFUL_IMAGE]]
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from remorad_fixture import Daemon, wait_for  # noqa: E402

scenario, remorad, driver, remora, program, image = sys.argv[1:7]
image_path = image
rt_program = sys.argv[7] if len(sys.argv) > 7 else None
stateful_image = sys.argv[8] if len(sys.argv) > 8 else None
ADMIN = "ops.migrate-admin"
ITERATIONS, PAUSE_MS = 40, 60
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def client_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env["REMORA_LOG"] = "info"
    return env


def command(iterations, pause_ms):
    if scenario == "runtime":
        return [rt_program, str(iterations), str(pause_ms)]
    if scenario in ("variables", "window"):
        return [program, stateful_image, str(iterations), str(pause_ms), "global"]
    if scenario == "busy-target":
        return [program, stateful_image, str(iterations), str(pause_ms)]
    return [program, image, str(iterations), str(pause_ms)] + (["threads"] if scenario == "threads" else [])


def start_client(d, *extra, iterations=ITERATIONS):
    return subprocess.Popen([remora, "run", "--server", d.server, "--", *command(iterations, PAUSE_MS), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=client_env())


def migrate(pid, src, dst, token=ADMIN, wait=20):
    env = client_env()
    env["REMORA_TOKEN"] = token
    return subprocess.run([remora, "migrate", f"pid:{pid}", "--to", dst.server, "--server", src.server,
                           "--wait", str(wait)], capture_output=True, text=True, env=env, timeout=120)


def iterations_seen(lines):
    return sum(1 for l in lines if l.startswith("iter "))


class Reader:
    """The client's stdout, read line by line as it runs."""

    def __init__(self, proc):
        self.proc, self.lines = proc, []
        os.set_blocking(proc.stdout.fileno(), False)
        self.buf = ""

    def poll(self):
        try:
            chunk = self.proc.stdout.read()
        except (BlockingIOError, TypeError):
            chunk = None
        if chunk:
            self.buf += chunk
            *done, self.buf = self.buf.split("\n")
            self.lines += done
        return iterations_seen(self.lines)

    def finish(self, timeout=120):
        self.proc.wait(timeout=timeout)
        os.set_blocking(self.proc.stdout.fileno(), True)
        rest = self.buf + (self.proc.stdout.read() or "")
        self.lines += [l for l in rest.split("\n") if l]
        return self.proc.returncode, self.lines, self.proc.stderr.read()


def baseline(d, iterations=ITERATIONS):
    p = subprocess.run([remora, "run", "--server", d.server, "--", *command(iterations, 0)],
                       capture_output=True, text=True, env=client_env(), timeout=120)
    check(p.returncode == 0 and p.stdout.rstrip().endswith("PASS"), f"unmoved run passes ({p.returncode})")
    return p.stdout.splitlines()


def daemons(tmp, b_config="", b_env=None, a_env=None):
    level = {"REMORA_LOG": os.environ.get("MIGRATE_DAEMON_LOG", "info"),  # debug, to see each reservation
             # The test driver lays a module loaded after cuMemAddressFree at the range given
             # back, as an H100's did with the images a target loads ahead of a client coming back.
             "REMORA_TESTDRIVER_REUSE_FREED_VA": "1"}
    extra = "migratable_memory = yes\n" if scenario == "window" else ""
    a = Daemon(remorad, driver, tmp, "a", f"admin_token = {ADMIN}\n{extra}", env={**level, **(a_env or {})})
    b = Daemon(remorad, driver, tmp, "b", (b_config or f"admin_token = {ADMIN}\n") + extra, env={**level, **(b_env or {})})
    return a, b


def moves(tmp):
    a, b = daemons(tmp)
    try:
        want = baseline(a)
        r = Reader(start_client(a))
        route = {"runtime": [(a, b), (b, a)], "threads": [(a, b), (b, a), (a, b)]}.get(
            scenario, [(a, b), (b, a), (a, b), (b, a)])
        # Under the sanitizers their allocator, preloaded into the workers, may take the
        # addresses the test driver's device memory gave back at the source (a GPU's device
        # addresses are not the host heap's): one move there, away from the source.
        if os.environ.get("SANITIZE_SETUP"):
            route = route[:1]
        figures = []
        for n, (src, dst) in enumerate(route):
            # threads: each later move asked at once, before the second thread's next call at
            # the target (its channel there has run nothing when the move holds it)
            if scenario != "threads" or n == 0:
                wait_for(lambda: r.poll() >= 4 + 6 * n, timeout=60)
            m = migrate(r.proc.pid, src, dst)
            check(m.returncode == 0, f"move {n + 1} ({src.server} -> {dst.server}): {m.stdout.strip()} {m.stderr.strip()}")
            f = re.search(r"([\d.]+) MiB moved, paused ([\d.]+) ms", m.stdout)
            if f:
                figures.append((float(f.group(1)), float(f.group(2))))
        rc, lines, err = r.finish()
        check(rc == 0, f"the moved client ends well ({rc}): {err[-2000:]}")
        check(lines == want, f"its {iterations_seen(lines)} iterations' checksums equal the unmoved run's bit for bit")
        check(err.count("moved to the GPU server at") == len(route), "it says each move once in its log")
        for n, (mib, ms) in enumerate(figures):
            print(f"migration {n + 1}: {mib:.1f} MiB moved, pause {ms:.1f} ms")
        check("closed: released" in a.text() and "moved to" in a.text(), "the source ends the session it moved")
        held = re.findall(r"(\d+) of (\d+) address ranges of the moving client reserved ahead", a.text() + b.text())
        check(len(held) == len(route) and all(int(h) == int(n) >= 1 for h, n in held),
              f"each target reserved the client's address ranges before it loaded anything (held of sent: {held})")
        ahead = [int(n) for n in re.findall(r"\((\d+) loaded ahead\)", a.text() + b.text())]
        check(len(ahead) == len(route) and all(n >= 1 for n in ahead),
              f"each target had the client's images loaded before its call (loaded ahead: {ahead})")
        if scenario == "window":
            check("migratable memory: device addresses from" in a.text(), "A's worker allocated in its window")
        if scenario == "variables":
            check("is at 0x" in a.text() + b.text(), "the variable lay at another address after a move (aliased)")
        if scenario == "threads":
            into_b = sum(1 for _, dst in route if dst is b)
            check(b.text().count("channel 1 attached") >= into_b and "moving client's state" in b.text(),
                  "the second thread's channel followed the client each time")
    finally:
        a.stop(), b.stop()
        logs(a, b)


def busy_target(tmp):
    # Both test drivers hand out device addresses from the same place, as every process's
    # driver on a GPU does, and B's earlier clients used (and freed) the addresses the moving
    # client holds at A: B's images loaded ahead would land there unless B reserved the
    # client's ranges first.
    # A runs STATEFUL_IMAGE twice, the second run moving; B ran the same kernels built as a
    # cubin twice: the same device variables, the same allocations, other bytes, so that B
    # loads the moving client's image anew.
    slot = {"REMORA_TESTDRIVER_DEVICE_SLOT": "77"}
    a, b = daemons(tmp, b_env=slot, a_env=slot)
    cubin = os.path.join(os.path.dirname(stateful_image), "kernels.cubin")
    try:
        want = baseline(a)
        for _ in range(2):
            p = subprocess.run([remora, "run", "--server", b.server, "--", program, cubin, str(ITERATIONS), "0"],
                               capture_output=True, text=True, env=client_env(), timeout=120)
            check(p.returncode == 0, f"an earlier client of B passes ({p.returncode}) {p.stderr[-500:]}")
        r = Reader(start_client(a))
        wait_for(lambda: r.poll() >= 4, timeout=60)
        m = migrate(r.proc.pid, a, b)
        check(m.returncode == 0, f"moved into a remorad whose earlier clients had its addresses: {m.stdout.strip()} "
              f"{m.stderr.strip()}")
        rc, lines, err = r.finish()
        check(rc == 0 and lines == want, f"its checksums equal the unmoved run's bit for bit ({rc}) {err[-1500:]}")
        held = re.findall(r"(\d+) of (\d+) address ranges of the moving client reserved ahead", b.text())
        check(len(held) == 1 and held[0][0] == held[0][1], f"B reserved them all before loading the images ({held})")
    finally:
        a.stop(), b.stop()
        logs(a, b)


def logs(*ds):
    if failures:
        for d in ds:
            print(f"--- {d.log_path}\n" + "\n".join(d.text().splitlines()[-40:]))
            if os.environ.get("MIGRATE_LOGS"):  # a directory for the whole logs
                with open(os.path.join(os.environ["MIGRATE_LOGS"], f"{scenario}-{os.path.basename(d.log_path)}"), "w") as f:
                    f.write(d.text())


def refused(tmp):
    # B's spans: neither their own addresses nor their 32 MiB blocks', however often tried.
    a, b = daemons(tmp, b_env={"REMORA_TESTDRIVER_FAIL": "cuMemAddressReserve:1+"})
    c = Daemon(remorad, driver, tmp, "c", "admin_token = ops.another-admin\n")
    global c_ok
    c_ok = Daemon(remorad, driver, tmp, "d", f"admin_token = {ADMIN}\n")
    try:
        want = baseline(a)
        r = Reader(start_client(a))
        wait_for(lambda: r.poll() >= 3, timeout=60)
        m = migrate(r.proc.pid, a, c)
        check(m.returncode != 0 and "refused" in m.stderr, f"a target with another admin token refuses: {m.stderr.strip()}")
        m = migrate(r.proc.pid, a, b)
        check(m.returncode != 0 and "taken" in m.stderr, f"addresses taken at the target: refused: {m.stderr.strip()}")
        m = migrate(r.proc.pid, a, b, token="ops.not-the-admin")
        check(m.returncode != 0 and "admin" in m.stderr, f"a non-admin may not move a client: {m.stderr.strip()}")
        rc, lines, err = r.finish()
        check(rc == 0 and lines == want, f"the client went on at the source, its output unchanged ({rc}) {err[-1500:]}")
        check("moved to the GPU server" not in err, "it never moved")
        check("addresses" in b.text() or "taken" in b.text(), "the target's log says why it refused the state")
        # A client whose module holds device variables (STATEFUL_IMAGE: kernels.cu's
        # kernelsMagic, which a kernel adds 1 to each iteration, checked by the program) moves
        # with their values.
        if stateful_image:
            r = Reader(subprocess.Popen([remora, "run", "--server", a.server, "--", program, stateful_image, "30",
                                         str(PAUSE_MS), "magic"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=client_env()))
            wait_for(lambda: r.poll() >= 2, timeout=60)
            m = migrate(r.proc.pid, a, c_ok)
            check(m.returncode == 0, f"a module with device variables moves: {m.stdout.strip()} {m.stderr.strip()}")
            rc, lines, err = r.finish()
            check(rc == 0 and lines[-1] == "PASS", f"it goes on ({rc})")
    finally:
        a.stop(), b.stop(), c.stop(), c_ok.stop()
        logs(a, b, c, c_ok)


def cold_target(tmp):
    context_ms, iterations = 1500, 150
    a, b = daemons(tmp, b_env={"REMORA_TESTDRIVER_CONTEXT_MS": str(context_ms)})
    try:
        want = baseline(a, iterations)
        r = Reader(start_client(a, iterations=iterations))
        wait_for(lambda: r.poll() >= 4, timeout=60)
        t0 = time.monotonic()
        m = migrate(r.proc.pid, a, b)
        took_ms = (time.monotonic() - t0) * 1000
        check(m.returncode == 0, f"moved into a remorad without a worker: {m.stdout.strip()} {m.stderr.strip()}")
        f = re.search(r"paused ([\d.]+) ms", m.stdout)
        pause = float(f.group(1)) if f else float("inf")
        check(took_ms >= context_ms, f"the move took the target's context time at least ({took_ms:.0f} ms)")
        check(pause < context_ms / 2, f"the client paused {pause:.1f} ms, under half of the {context_ms} ms the "
              "target took to make its context: it made it before the client's call")
        check("contexts ready in" in b.text() and "greeted in" in a.text(), "the logs say the target was greeted early")
        rc, lines, err = r.finish()
        check(rc == 0 and lines == want, f"its checksums equal the unmoved run's ({rc}) {err[-1500:]}")
    finally:
        a.stop(), b.stop()
        logs(a, b)


def quiet_client(tmp):
    iterations, pause_ms = 5, 3000
    a, b = daemons(tmp, b_config=f"admin_token = {ADMIN}\npeer_timeout = 2\n")
    c = Daemon(remorad, driver, tmp, "c", f"admin_token = {ADMIN}\n")
    try:
        want = baseline(a, iterations)
        r = Reader(subprocess.Popen([remora, "run", "--server", a.server, "--", *command(iterations, pause_ms)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=client_env()))
        wait_for(lambda: r.poll() >= 1, timeout=60)
        m = migrate(r.proc.pid, a, b)
        check(m.returncode == 0, f"moved at a call seconds after B was greeted: {m.stdout.strip()} {m.stderr.strip()}")
        # The next move is asked for once an iteration has ended, in the client's sleep: C is
        # killed long before its next call.
        seen = r.poll()
        wait_for(lambda: r.poll() > seen, timeout=60)
        env = client_env()
        env["REMORA_TOKEN"] = ADMIN
        m = subprocess.Popen([remora, "migrate", f"pid:{r.proc.pid}", "--to", c.server, "--server", b.server],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        wait_for(lambda: "greeted in" in b.text(), timeout=30)
        for pid in [c.proc.pid, *c.workers().values()]:  # the worker holds the greeted session
            os.kill(pid, signal.SIGKILL)
        out, err_m = m.communicate(timeout=60)
        check(m.returncode != 0 and "not moved" in err_m,
              f"a target gone after its greeting: the move fails at the client's call ({m.returncode}): {err_m.strip()}")
        rc, lines, err = r.finish()
        check(rc == 0 and lines == want, f"its checksums equal the unmoved run's ({rc}) {err[-1500:]}")
        check(err.count("moved to the GPU server at") == 1, "it moved once, to B")
    finally:
        a.stop(), b.stop(), c.stop()
        logs(a, b, c)


def source_gone(tmp):
    a, b = daemons(tmp)
    try:
        r = Reader(start_client(a))
        wait_for(lambda: r.poll() >= 3, timeout=60)
        a.proc.send_signal(signal.SIGKILL)
        t0 = time.monotonic()
        rc, lines, err = r.finish(timeout=90)
        check(rc != 0, f"the client fails once its remorad is gone ({rc}, {time.monotonic() - t0:.1f} s)")
        check("connection to the GPU server lost" in err or "GPU server" in err,
              f"with a clear line: {err.strip().splitlines()[-3:] if err.strip() else err}")
    finally:
        a.stop(), b.stop()
        logs(a, b)


with tempfile.TemporaryDirectory() as tmp:
    {"moves": moves, "busy-target": busy_target, "refused": refused, "source-gone": source_gone, "cold-target": cold_target,
     "quiet-client": quiet_client, "runtime": moves, "threads": moves,
     "variables": moves, "window": moves}[scenario](tmp)
print("FAIL" if failures else "PASS")
sys.exit(1 if failures else 0)
