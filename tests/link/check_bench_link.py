#!/usr/bin/env python3
"""`remora bench --quick --json --only launch --link rtt=1ms,rate=1gbit` on the test driver:
the bench ran over the emulated link (its facts name the link as measured, within wide
margins of what was asked), the launch section ran, and a synchronous launch took at least
about the round trip. A spec without its rate is refused. Skipped (77) where link-emu.sh
cannot make namespaces here.

usage: check_bench_link.py REMORA --driver TESTDRIVER --native-lib DIR
"""
import json
import subprocess
import sys

remora, rest = sys.argv[1], sys.argv[2:]
bad = subprocess.run([remora, "bench", "--link", "rtt=1ms"] + rest, capture_output=True, text=True)
if bad.returncode != 2 or "both" not in bad.stderr:
    sys.exit(f"--link without a rate: exit {bad.returncode}, {bad.stderr!r}")
r = subprocess.run([remora, "bench", "--quick", "--json", "--only", "launch", "--link", "rtt=1ms,rate=1gbit"] + rest,
                   capture_output=True, text=True, timeout=600)
if r.returncode == 77:
    print(r.stderr.strip().splitlines()[-1])
    sys.exit(77)
if r.returncode:
    sys.exit(f"remora bench --link failed ({r.returncode}): {r.stderr[-1500:]}")
doc = json.loads(r.stdout)
run = doc["run"]
problems = []
if run.get("link") != "rtt=1ms,rate=1gbit":
    problems.append(f"link fact {run.get('link')!r}")
if not (700 <= (run.get("link_rtt_us") or 0) <= 5000):
    problems.append(f"measured round trip {run.get('link_rtt_us')} us, not about 1000")
if not (0 < (run.get("link_gbps") or 0) <= 1.3):
    problems.append(f"measured rate {run.get('link_gbps')} Gbit/s, not at most 1.3")
if not any(s["name"] == "launch" and s["status"] == "ok" for s in doc["sections"]):
    problems.append("the launch section did not run")
sync = [f for f in doc["figures"] if f["section"] == "launch" and f["metric"].startswith("launch + synchronize")]
if not sync or not (sync[0]["remote"] or 0) >= 700:
    problems.append(f"launch + synchronize over the link: {sync and sync[0]['remote']} us, not at least ~1000")
if problems:
    sys.exit("; ".join(problems))
print(f"PASS: link {run['link_rtt_us']} us, {run['link_gbps']} Gbit/s; launch + synchronize {sync[0]['remote']:.0f} us")
