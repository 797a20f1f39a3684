#!/usr/bin/env python3
"""Prints the one line CI reads after `meson test`: "N passed, N failed, N skipped",
counted from the newest test log (testlog*.json) of each LOGDIR, summed (scripts/test.sh
gives the main build's and the sanitizer build's). Before it, each failed test's name and
the end of its output: CI shows only the end of a run's output, where the failures the
first run printed are long gone.

usage: test_summary.py LOGDIR...
Passed: OK and EXPECTEDFAIL; skipped: SKIP; failed: every other result (FAIL, ERROR,
TIMEOUT, INTERRUPT, UNEXPECTEDPASS). A LOGDIR with no log counts nothing.
"""
import glob
import json
import os
import sys


TAIL_LINES = 40


def count(logdir):
    passed = failed = skipped = 0
    failures = []
    logs = glob.glob(os.path.join(logdir, "testlog*.json"))
    if logs:
        with open(max(logs, key=os.path.getmtime)) as f:
            for line in f:
                if not line.strip():
                    continue
                test = json.loads(line)
                result = test.get("result")
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
                    failures.append(test)
    return passed, failed, skipped, failures


def show(logdir, test):
    out = (test.get("stdout") or "") + (test.get("stderr") or "")
    tail = out.rstrip("\n").split("\n")[-TAIL_LINES:]
    print(f"--- failed in {logdir}: {test.get('name')} ({test.get('result')}, "
          f"{test.get('duration', 0):.1f} s); the end of its output:")
    print("\n".join(tail))


def main():
    counts = [count(d) for d in sys.argv[1:]]
    for d, c in zip(sys.argv[1:], counts):
        for test in c[3]:
            show(d, test)
    totals = [sum(c[i] for c in counts) for i in range(3)]
    print(f"{totals[0]} passed, {totals[1]} failed, {totals[2]} skipped")


if __name__ == "__main__":
    main()
