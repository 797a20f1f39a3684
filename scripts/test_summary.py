#!/usr/bin/env python3
"""Prints the one line CI reads after `meson test`: "N passed, N failed, N skipped",
counted from the newest test log (testlog*.json) of each LOGDIR, summed (scripts/test.sh
gives the main build's and the sanitizer build's).

usage: test_summary.py LOGDIR...
Passed: OK and EXPECTEDFAIL; skipped: SKIP; failed: every other result (FAIL, ERROR,
TIMEOUT, INTERRUPT, UNEXPECTEDPASS). A LOGDIR with no log counts nothing.
"""
import glob
import json
import os
import sys


def count(logdir):
    passed = failed = skipped = 0
    logs = glob.glob(os.path.join(logdir, "testlog*.json"))
    if logs:
        with open(max(logs, key=os.path.getmtime)) as f:
            for line in f:
                if not line.strip():
                    continue
                result = json.loads(line).get("result")
                if result in ("OK", "EXPECTEDFAIL"):
                    passed += 1
                elif result == "SKIP":
                    skipped += 1
                else:
                    failed += 1
    return passed, failed, skipped


def main():
    totals = [sum(c) for c in zip(*(count(d) for d in sys.argv[1:]))] or [0, 0, 0]
    print(f"{totals[0]} passed, {totals[1]} failed, {totals[2]} skipped")


if __name__ == "__main__":
    main()
