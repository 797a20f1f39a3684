#!/usr/bin/env python3
"""What remorad does about its own exposure when it starts (issue 17, docs/security.md).

  user      remorad --user nobody, started as root: once listening, the accepting
            process and the worker it starts run as nobody (real, effective and saved
            ids in /proc/PID/status, and nobody's groups), a client program still runs
            through it, and SIGHUP still reloads; an unknown user, and a configuration
            file nobody cannot read, stop it at start with a line saying why. Skipped
            (77) when the test does not run as root.
  exposure  listening beyond loopback without TLS, or with allow_anonymous, logs a
            WARNING naming it; on loopback it does not.

usage: daemon_start.py SCENARIO REMORAD DRIVER REMORA PROBE
"""
import os
import pwd
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, stop_process, wait_for  # noqa: E402

scenario, remorad, driver, remora, probe = sys.argv[1:6]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}


def ids(pid):
    """{"Uid": [real, effective, saved, fs], "Gid": [...], "Groups": [...]} of a process."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, rest = line.partition(":")
            if key in ("Uid", "Gid", "Groups"):
                out[key] = [int(x) for x in rest.split()]
    return out


def run_probe(server):
    p = subprocess.run([remora, "run", "--server", server, "--", probe, "work", "1"], capture_output=True,
                       text=True, timeout=60, env=ENV)
    return p.returncode == 0 and "ok" in p.stdout, (p.stdout + p.stderr).strip()[-300:]


def refused_at_start(argv, expect, what):
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=20, env=dict(ENV, REMORA_LOG="info"))
    except subprocess.TimeoutExpired:
        check(False, f"{what}: still running after 20 s")
        return
    check(p.returncode != 0 and re.search(expect, p.stderr) is not None,
          f"{what}: exit {p.returncode}: {p.stderr.strip().splitlines()[-1:] or '(silent)'}")


def user(tmp):
    if os.geteuid() != 0:
        print("SKIP: dropping root needs the test to run as root")
        sys.exit(77)
    nobody = pwd.getpwnam("nobody")
    os.chmod(tmp, 0o755)  # the configuration must be readable by the user (workers read it again)
    d = Daemon(remorad, driver, tmp, "user", "user = nobody\n")
    try:
        check(wait_for(lambda: "running as user nobody" in d.text()), "remorad logs that it runs as nobody")
        main = ids(d.proc.pid)
        check(main.get("Uid") == [nobody.pw_uid] * 4 and main.get("Gid") == [nobody.pw_gid] * 4,
              f"the accepting process runs as nobody: {main}")
        check(0 not in main.get("Groups", [0]), f"no root group left: {main.get('Groups')}")
        ok, said = run_probe(d.server)
        check(ok, f"a client runs through a daemon that gave up root: {said}")
        workers = d.workers()
        check(len(workers) == 1, f"one worker started: {workers}")
        for tenant, pid in workers.items():
            w = ids(pid) if os.path.exists(f"/proc/{pid}") else {}
            check(w.get("Uid") == [nobody.pw_uid] * 4, f"worker {pid} ({tenant}) runs as nobody: {w}")
        # SIGHUP reads the file again as nobody.
        with open(os.path.join(tmp, "user.conf"), "a") as f:
            f.write("max_clients_per_gpu = 7\n")
        d.proc.send_signal(signal.SIGHUP)
        check(wait_for(lambda: "SIGHUP: configuration reloaded" in d.text()), "SIGHUP reloads as nobody")
        ok, said = run_probe(d.server)
        check(ok, f"a client after the reload: {said}")
    finally:
        d.stop()

    base = [remorad, "--listen", "tcp://127.0.0.1:0", "--driver", driver, "--set", "allow_anonymous=yes"]
    refused_at_start(base + ["--user", "no-such-user-remora"], r"no such user", "an unknown user")
    secret = os.path.join(tmp, "secret.conf")
    with open(secret, "w") as f:
        f.write("allow_anonymous = yes\n")
    os.chmod(secret, 0o600)
    refused_at_start(base + ["--config", secret, "--user", "nobody"], r"cannot be read again",
                     "a configuration file nobody cannot read")


def exposure(tmp):
    def warnings(name, config, listen):
        d = Daemon(remorad, driver, tmp, name, config, args=["--listen", listen])
        try:
            wait_for(lambda: "listening on" in d.text())
            return [ln for ln in d.text().splitlines() if "WARNING" in ln]
        finally:
            d.stop()

    w = warnings("wide-open", "allow_anonymous = yes\n", "tcp://0.0.0.0:0")
    check(any("beyond loopback WITHOUT TLS" in ln for ln in w), f"0.0.0.0 without TLS: {w}")
    check(any("WITHOUT CREDENTIALS" in ln for ln in w), f"0.0.0.0 with allow_anonymous: {w}")
    w = warnings("with-token", "allow_anonymous = no\n[tenant alice]\ntoken = s3cret-token-alice\n",
                 "tcp://0.0.0.0:0")
    check(any("WITHOUT TLS" in ln for ln in w) and not any("WITHOUT CREDENTIALS" in ln for ln in w),
          f"0.0.0.0 with credentials, without TLS: {w}")
    w = warnings("loopback", "allow_anonymous = yes\n", "tcp://127.0.0.1:0")
    check(not w, f"loopback: no warning: {w}")


with tempfile.TemporaryDirectory() as tmp:
    {"user": user, "exposure": exposure}[scenario](tmp)
sys.exit(1 if failures else 0)
