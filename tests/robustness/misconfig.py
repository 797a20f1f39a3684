#!/usr/bin/env python3
"""Bad configuration refused (issue 16): remorad given a stray argument, a bad --set or
--listen, a bad REMORA_LOG or a configuration file with a duplicate key, an unknown
section or a single-quoted value exits non-zero at once, naming the flag, the variable
or the file and line, before it loads the driver; a client whose REMORA_LOG,
REMORA_COPY_LINKS, REMORA_STRIPE_MIN, REMORA_SERVER, REMORA_TRACE or REMORA_TOKEN is
bad fails at cuInit with a line naming the variable, without connecting.

usage: misconfig.py REMORAD DRIVER REMORA PROBE
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import stop_process, wait_for  # noqa: E402

remorad, driver, remora, probe = sys.argv[1:5]
QUICK_S = 5  # a refusal takes well under this; a daemon that accepted would still be running


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env.update(extra)
    return env


def refused(what, argv, env, expect):
    """Runs argv; checks that it exits non-zero within QUICK_S with a line matching expect."""
    start = time.monotonic()
    try:
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=QUICK_S * 2)
    except subprocess.TimeoutExpired as e:
        check(False, f"{what}: refused (still running after {QUICK_S * 2} s; it said {e.stderr!r})")
        return ""
    took = time.monotonic() - start
    said = p.stdout + p.stderr
    lines = said.strip().splitlines() or ["(silent)"]
    line = next((ln for ln in lines if re.search(expect, ln)), None)
    check(p.returncode != 0 and took < QUICK_S and line is not None,
          f"{what}: exit {p.returncode} in {took:.1f} s: {line or lines[-1]}")
    return said


def daemon_refusals(tmp):
    base = [remorad, "--listen", "tcp://127.0.0.1:0", "--driver", driver]
    env = clean_env(REMORA_LOG="info")

    def conf(name, text):
        path = os.path.join(tmp, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    cases = [
        ("a stray argument", base + ["extra"], env, r"unexpected argument 'extra'"),
        ("a bad --set", base + ["--set", "max_clients_per_gpu=many"], env,
         r"--set max_clients_per_gpu=many: bad value"),
        ("an unknown --set key", base + ["--set", "max_client=1"], env, r"--set max_client=1: unknown setting"),
        ("a bad --listen", [remorad, "--listen", "127.0.0.1", "--driver", driver], env,
         r"--listen 127\.0\.0\.1: .*no port"),
        ("a bad REMORA_LOG", base, clean_env(REMORA_LOG="loud"), r"REMORA_LOG=loud is not a log level"),
    ]
    dup = conf("dup.conf", "# twice\nlisten = tcp://127.0.0.1:0\nlisten = tcp://127.0.0.1:0\n")
    cases.append(("a duplicate key", [remorad, "--config", dup, "--driver", driver], env,
                  re.escape(dup) + r":3: listen set again \(first at line 2\)"))
    section = conf("section.conf", "max_clients_per_gpu = 4\n[tenants research]\ntoken = r\n")
    cases.append(("an unknown section", [remorad, "--config", section, "--driver", driver], env,
                  re.escape(section) + r":2: unknown section \[tenants research\]"))
    quoted = conf("quoted.conf", "listen = 'tcp://127.0.0.1:0'\n")
    cases.append(("a single-quoted listen", [remorad, "--config", quoted, "--driver", driver], env,
                  re.escape(quoted) + r":1: single quotes"))
    for what, argv, e, expect in cases:
        said = refused("remorad with " + what, argv, e, expect)
        check("GPU 0" not in said and "listening" not in said, f"remorad with {what}: stopped before the driver")


class QuotedDaemon:
    """remorad whose file gives listen and ready_file in double quotes, and no flag does."""

    def __init__(self, tmp):
        ready = os.path.join(tmp, "quoted.addr")
        path = os.path.join(tmp, "quoted.conf")
        with open(path, "w") as f:
            f.write(f'allow_anonymous = yes\nlisten = "tcp://127.0.0.1:0"  # quoted\nready_file = "{ready}"\n')
        self.log_path = os.path.join(tmp, "quoted.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([remorad, "--config", path, "--driver", driver], stderr=self.log,
                                     env=clean_env(REMORA_LOG="info"))
        self.server = wait_for(lambda: os.path.exists(ready) and open(ready).read().strip(), timeout=10)

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def stop(self):
        stop_process(self.proc)
        self.log.close()


def client_refusals(d):
    def run(server, **env):
        return [remora, "run", "--server", server, "--", probe, "free"], clean_env(**env)

    cases = [
        ("REMORA_LOG", run(d.server, REMORA_LOG="loud"), r"REMORA_LOG=loud: not a log level"),
        ("REMORA_COPY_LINKS", run(d.server, REMORA_COPY_LINKS="many"), r"REMORA_COPY_LINKS=many: expected .* 1 to 8"),
        ("REMORA_COPY_LINKS", run(d.server, REMORA_COPY_LINKS="9"), r"REMORA_COPY_LINKS=9: expected .* 1 to 8"),
        ("REMORA_STRIPE_MIN", run(d.server, REMORA_STRIPE_MIN="16 MB"), r"REMORA_STRIPE_MIN=16 MB: not a size"),
        ("REMORA_STRIPE_MIN", run(d.server, REMORA_STRIPE_MIN="0"), r"REMORA_STRIPE_MIN=0: not a size"),
        ("REMORA_SERVER", run(d.server + ",gpu07"), r"REMORA_SERVER=.*'gpu07' has no port"),
        ("REMORA_SERVER", run("http://" + d.server), r"REMORA_SERVER=.* names no transport"),
        ("REMORA_TRACE", run(d.server, REMORA_TRACE="0"), r"REMORA_TRACE=0: set it to 1"),
        ("REMORA_TOKEN", run(d.server, REMORA_TOKEN=""), r"REMORA_TOKEN: set but empty"),
    ]
    def sessions():
        return len(re.findall(r"session \d+: client ", d.text()))

    argv, env = run(d.server, REMORA_LOG="WARN", REMORA_COPY_LINKS="2", REMORA_STRIPE_MIN="1M", REMORA_TRACE="1")
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and p.stdout.strip().isdigit(), f"good settings work ({p.stderr.strip()})")
    before = wait_for(sessions, timeout=5)
    check(before > 0, "and that client's session is in the daemon's log")
    for var, (argv, env), expect in cases:
        said = refused(f"a client with a bad {var}", argv, env, expect)
        check("cuInit" in said, f"a client with a bad {var}: its cuInit failed")
    check(sessions() == before, "no refused client reached the daemon")


def main():
    tmp = tempfile.mkdtemp()
    daemon_refusals(tmp)
    d = QuotedDaemon(tmp)
    try:
        check(bool(d.server) and d.server.startswith("127.0.0.1:"),
              f"double-quoted values are taken without their quotes ({d.server or d.text()})")
        if d.server:
            client_refusals(d)
    finally:
        d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
