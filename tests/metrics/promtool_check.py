#!/usr/bin/env python3
"""remorad's /metrics passes `promtool check metrics` (issue 38 item 4): Prometheus's own
linter (snake_case names and labels, _total on counters only, base units, HELP and TYPE)
finds nothing in a scrape taken while a client holds memory, so every family has rows.
And the names cannot drift from what reads them: every series docs/grafana-remora.json
queries and every one docs/operations.md's tables name is a family of the scrape, and
every label the dashboard uses is one of the scrape's.
Skipped (77) where promtool is missing (Debian's prometheus package; scripts/setup.sh).

usage: promtool_check.py REMORA REMORAD DRIVER NVML_QUERY SOURCE_ROOT
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, stop_process, wait_for  # noqa: E402

remora, remorad, driver, query, root = sys.argv[1:6]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
promtool = shutil.which("promtool")
if not promtool:
    print("SKIP: no promtool (Debian's prometheus package; scripts/setup.sh installs it)")
    sys.exit(77)


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "promtool", "client_memory_limit = 64M\nmetrics_listen = 127.0.0.1:0\n")
    client = None
    try:
        m = wait_for(lambda: re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", d.text()))
        check(m is not None, "remorad says where it serves metrics")
        port = int(m.group(1)) if m else 0
        client = subprocess.Popen([remora, "run", "--server", d.server, "--", query, "16", "60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        text = wait_for(lambda: (lambda t: t if "remora_client_fb_used_bytes{" in t else None)(scrape(port)),
                        timeout=30, step=0.2) if port else None
        check(bool(text), "a scrape with the client's series")
        text = text or ""
        p = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
        complaints = (p.stdout + p.stderr).strip()
        check(p.returncode == 0 and not complaints, f"promtool check metrics finds nothing:\n{complaints}")

        families = set(re.findall(r"^# TYPE (\S+) ", text, re.M))
        labels = set(re.findall(r"[{,]([a-zA-Z_][a-zA-Z0-9_]*)=\"", text))
        check(all(re.fullmatch(r"[a-z][a-z0-9_]*", n) for n in labels), f"labels are snake_case: {sorted(labels)}")

        def series_of(expr):
            return {n for n in re.findall(r"\b(remora_[a-z0-9_]+)", expr)}

        dash = json.load(open(os.path.join(root, "docs", "grafana-remora.json")))
        exprs = []

        def walk(o):
            if isinstance(o, dict):
                for k, v in o.items():
                    if k in ("expr", "query", "definition", "legendFormat") and isinstance(v, str):
                        exprs.append(v)
                    else:
                        walk(v)
            elif isinstance(o, list):
                for v in o:
                    walk(v)

        walk(dash)
        used = set().union(*(series_of(e) for e in exprs))
        check(used and used <= families, f"the dashboard's series are the scrape's: unknown {sorted(used - families)}")
        dash_labels = set()
        for e in exprs:
            dash_labels |= set(re.findall(r"\{\{\s*([a-zA-Z_]\w*)\s*\}\}", e))
            dash_labels |= set(re.findall(r"[{,]\s*([a-zA-Z_]\w*)\s*=~?", e))
            dash_labels |= {x.strip() for g in re.findall(r"by \(([^)]*)\)", e) for x in g.split(",")}
            dash_labels |= set(re.findall(r"label_values\([^,]+,\s*(\w+)\)", e))
        check(dash_labels <= labels, f"the dashboard's labels are the scrape's: unknown {sorted(dash_labels - labels)}")

        ops = open(os.path.join(root, "docs", "operations.md")).read()
        named = set()
        for row in re.findall(r"^\| (.*)$", ops, re.M):
            for n in re.findall(r"`(remora_[a-z0-9_*]+)", row.split(" | ")[0]):
                named |= {n.replace("*", w) for w in ("client", "tenant")} if "*" in n else {n}
        check(named and named <= families, f"docs/operations.md names the scrape's series: unknown "
              f"{sorted(named - families)}")
        missing = families - named
        check(not missing, f"docs/operations.md names every family: missing {sorted(missing)}")
    finally:
        if client:
            stop_process(client)
        d.stop()
sys.exit(1 if failures else 0)
