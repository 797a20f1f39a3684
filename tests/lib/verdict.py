"""The Python tests' check: each condition is printed as ok or FAIL and a failed one is
kept in failures, which the test's exit status reports."""

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)
    return cond
