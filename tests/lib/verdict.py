"""The Python tests' check: each condition is printed as ok or FAIL and a failed one is
kept in failures, which the test's exit status reports (conclude)."""
import os
import sys

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond


def conclude(procs, log_dir):
    """Ends what is still running of procs; after a failure prints every *.log of log_dir.
    The test's exit status: 1 after a failure, else 0."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    if failures:
        for name in sorted(os.listdir(log_dir)):
            if name.endswith(".log"):
                with open(os.path.join(log_dir, name)) as f:
                    print(f"--- {name}\n{f.read()}", file=sys.stderr)
    return 1 if failures else 0
