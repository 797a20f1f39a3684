#!/usr/bin/env python3
"""The client library's connection, opened and given up (issue 12), under valgrind: a
malformed REMORA_VISIBLE_DEVICES, a refused hello and an unreachable server, each with a
second candidate server after it, leave no memory and no socket behind, and a client
that reaches a server after one it could not works, and closes its connection at exit.

usage: client_lifecycle.py REMORAD DRIVER PROBE LIBDIR
Skipped (77) where valgrind is not installed, or under scripts/sanitize.sh.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon  # noqa: E402

remorad, driver, probe, libdir = sys.argv[1:5]
LEAK_EXIT = 99


def under_valgrind(servers, *args, **env):
    """Runs `probe ARGS` (default `probe free`) through the client library: (exit code, stdout,
    valgrind's report)."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    e.update(LD_LIBRARY_PATH=libdir, REMORA_SERVER=",".join(servers), **env)
    p = subprocess.run(["valgrind", "--leak-check=full", "--errors-for-leak-kinds=definite,indirect",
                        f"--error-exitcode={LEAK_EXIT}", "--track-fds=yes", "--child-silent-after-fork=yes",
                        probe, *(args or ["free"])],
                       capture_output=True, text=True, env=e, timeout=120)
    return p.returncode, p.stdout, p.stderr


def sockets_left(report):
    return re.findall(r"Open (?:AF_INET|AF_INET6|AF_UNIX) socket.*", report)


def main():
    if not shutil.which("valgrind"):
        print("valgrind is not installed: skipped")
        return 77
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        print("AddressSanitizer is preloaded (scripts/sanitize.sh), and valgrind cannot run beside it: skipped")
        return 77
    tmp = tempfile.mkdtemp()
    open_d = Daemon(remorad, driver, tmp, "open", "")
    closed_d = Daemon(remorad, driver, tmp, "tenants", "allow_anonymous = no\n[tenant a]\ntoken = a-secret\n")
    try:
        rc, out, report = under_valgrind([open_d.server, open_d.server], REMORA_VISIBLE_DEVICES="0,x")
        check(rc not in (0, LEAK_EXIT) and "REMORA_VISIBLE_DEVICES=0,x: must be" in report,
              f"a malformed REMORA_VISIBLE_DEVICES: a clear error ({rc})")
        check(rc != LEAK_EXIT and not sockets_left(report), "and nothing left behind, for either candidate")

        rc, out, report = under_valgrind([closed_d.server, closed_d.server])
        check(rc not in (0, LEAK_EXIT) and "refused this client" in report, f"a refused hello: a clear error ({rc})")
        check(rc != LEAK_EXIT and not sockets_left(report), "and nothing left behind, for either candidate")

        rc, out, report = under_valgrind(["127.0.0.1:1", open_d.server])
        check(rc == 0 and out.strip().isdigit(),
              f"an unreachable server, then one that works: the program runs, losing no memory ({rc})")
        check(not sockets_left(report), "and its connection, with its copy links, closed at exit")

        rc, out, report = under_valgrind([open_d.server], "exit")
        check(rc == 0 and "after a child's exit: 0" in out,
              f"a forked child's exit leaves its parent's connection open ({rc}: {out.strip()!r})")
        check("at exit: 0" in out, "a call from the program's atexit handler still reaches the daemon")
        check(not sockets_left(report), "and the connection is closed after it")

        rc, out, report = under_valgrind([open_d.server], "exit", "busy")
        check(rc == 0 and "at exit: 0" in out and "connection to the GPU server lost" not in report and
              sockets_left(report),
              f"a thread with a channel still running at exit: the connection is left open, nothing "
              f"said ({rc}: {out.strip()!r})")
        if failures:
            print("--- valgrind's last report\n" + report, file=sys.stderr)
    finally:
        open_d.stop()
        closed_d.stop()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
