#!/usr/bin/env python3
"""The sanitize test setup's bracket (tests/meson.build): `clear DIR` empties the folder
ASan writes its reports to (run alone, before the other tests); `check DIR` (run alone,
after them) fails, printing the start of each, when any report was written meanwhile,
by whatever process: a daemon's report counts even where no test looked at its exit.

usage: sanitizer_reports.py clear|check DIR
"""
import os
import shutil
import sys

what, folder = sys.argv[1:3]
if what == "clear":
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    print(f"{folder}: emptied")
    sys.exit(0)
if os.environ.get("SANITIZE_SETUP") != "1":
    print("not under the sanitize test setup (meson test --setup sanitize): skipped")
    sys.exit(77)
reports = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
for name in reports:
    with open(os.path.join(folder, name), errors="replace") as f:
        print(f"==== {name}\n" + "".join(f.readlines()[:60]))
print(f"{len(reports)} sanitizer report(s) in {folder}")
sys.exit(1 if reports else 0)
