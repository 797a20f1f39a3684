#!/usr/bin/env python3
"""The command-line conventions (issue 18): every command and subcommand of remora and
remorad answers --help and -h with its usage on stdout and exit status 0; --version names
the version, the protocol and the commit; an unknown command or flag is a usage error
(status 2); `remora status` reaches the daemon named by --server, by its HOST argument or
by REMORA_SERVER, in that order. Log lines carry a UTC timestamp and the process id, or,
when stderr is the journal (JOURNAL_STREAM names it), a syslog priority prefix instead.

usage: conventions.py REMORA REMORAD DRIVER
"""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon  # noqa: E402

remora, remorad, driver = sys.argv[1:4]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}


def run(*args, env=None):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=30, env=env or ENV)


for flag in ("--help", "-h"):
    for cmd in ([remora], [remora, "run"], [remora, "status"], [remora, "pool"], [remora, "pool", "list"],
                [remora, "bench"], [remorad]):
        p = run(*cmd, flag)
        name = " ".join([os.path.basename(cmd[0])] + cmd[1:] + [flag])
        check(p.returncode == 0 and "usage:" in p.stdout, f"{name}: usage on stdout, status 0 ({p.returncode})")
p = run(remora, "help")
check(p.returncode == 0 and "usage:" in p.stdout, "remora help: status 0")
for prog in (remora, remorad):
    p = run(prog, "--version")
    name = os.path.basename(prog)
    check(p.returncode == 0 and re.fullmatch(rf"{name} \d+\.\d+\.\d+ \(protocol \d+, commit \S+\)\n", p.stdout),
          f"{name} --version: {p.stdout.strip()!r}")
p = run(remora, "frobnicate")
check(p.returncode == 2 and "unknown command" in p.stderr, "remora frobnicate: status 2")
p = run(remorad, "--frobnicate")
check(p.returncode == 2, f"remorad --frobnicate: status 2 ({p.returncode})")
p = run(remora, "run", "--", "sh", "-c", "echo $1", "sh", "--help")
check(p.returncode == 0 and p.stdout.strip() == "--help", "remora run -- PROGRAM --help: --help is the program's")

with tempfile.TemporaryDirectory() as tmp:
    # A client that cannot reach its server logs one error line.
    errfile = os.path.join(tmp, "stderr")
    with open(errfile, "w") as f:
        st = os.fstat(f.fileno())
        for journal in (False, True):
            f.seek(0)
            f.truncate()
            env = dict(ENV, REMORA_LOG="info", LD_PRELOAD="")
            if journal:
                env["JOURNAL_STREAM"] = f"{st.st_dev}:{st.st_ino}"
            subprocess.run([remorad, "--listen", "tcp://127.0.0.1:1", "--driver", "/nonexistent/libcuda.so.1"],
                           stderr=f, stdout=subprocess.DEVNULL, env=env, timeout=30)
            f.flush()
            line = open(errfile).read().splitlines()[0] if os.path.getsize(errfile) else ""
            if journal:
                check(re.match(r"<[0-7]>remorad\[\d+\] \w+: ", line), f"journal: a priority prefix: {line[:80]!r}")
            else:
                check(re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z remorad\[\d+\] \w+: ", line),
                      f"a terminal or file: a timestamp and the process id: {line[:80]!r}")
    d = Daemon(remorad, driver, tmp, "cli", "")
    try:
        for args, env, what in [((d.server,), ENV, "HOST argument"),
                                (("--server", d.server), ENV, "--server"),
                                ((), dict(ENV, REMORA_SERVER=d.server), "REMORA_SERVER")]:
            p = run(remora, "status", "--json", *args, env=env)
            check(p.returncode == 0 and p.stdout.lstrip().startswith("{"), f"remora status through {what}: "
                  f"status {p.returncode} {p.stderr.strip()[:200]}")
        p = run(remora, "status", "--server", "127.0.0.1:1", env=dict(ENV, REMORA_SERVER=d.server))
        check(p.returncode == 1 and "127.0.0.1:1" in p.stderr, "--server wins over REMORA_SERVER")
        p = run(remora, "status", d.server, "--server", d.server)
        check(p.returncode == 2, "a HOST and --server together: usage error")
    finally:
        d.stop()
sys.exit(1 if failures else 0)
