#!/usr/bin/env python3
"""Prometheus metrics (metrics_listen): a real Prometheus server scrapes remorad on loopback
and its HTTP API (/api/v1/query) returns the series of a client running through Remora
(memory held, against its quota); the responder answers only GET /metrics, refuses other
paths, methods, malformed and oversized requests, and closes idle connections to make room for a
scrape.
Skipped (77) where no prometheus binary is installed (scripts/setup.sh installs Debian's).

usage: prometheus_scrape.py REMORA REMORAD DRIVER NVML_QUERY
"""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import Daemon, stop_process, wait_for  # noqa: E402

remora, remorad, driver, query = sys.argv[1:5]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
MiB = 1 << 20
prometheus = shutil.which("prometheus")
if not prometheus:
    print("SKIP: no prometheus binary (Debian's prometheus package; scripts/setup.sh installs it)")
    sys.exit(77)


def raw(port, data, timeout=5):
    """What the responder answers to bytes data."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            out += chunk
    return out


def status_of(reply):
    m = re.match(rb"HTTP/1\.1 (\d+) ", reply)
    return int(m.group(1)) if m else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prom_query(port, q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.load(r)
    except OSError:
        return None


with tempfile.TemporaryDirectory() as tmp:
    d = Daemon(remorad, driver, tmp, "metrics", "client_memory_limit = 64M\nmetrics_listen = 127.0.0.1:0\n")
    client = prom = None
    try:
        m = wait_for(lambda: re.search(r"serving metrics on http://127\.0\.0\.1:(\d+)/metrics", d.text()))
        check(m is not None, "remorad says where it serves metrics")
        mport = int(m.group(1))

        # The responder's bounds, with raw requests.
        r = raw(mport, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        check(status_of(r) == 200 and b"text/plain; version=0.0.4" in r, "GET /metrics: 200, the text format")
        check(b"remora_dev_fb_bytes{gpu=\"0\",uuid=\"GPU-" in r, "a per-GPU series")
        check(status_of(raw(mport, b"GET /other HTTP/1.1\r\n\r\n")) == 404, "another path: 404")
        r = raw(mport, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        check(status_of(r) == 405 and b"Allow: GET" in r, "POST: 405")
        check(status_of(raw(mport, b"\x00\xff garbage\r\n\r\n")) == 400, "garbage: 400")
        check(status_of(raw(mport, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 5000)) == 431, "an oversized request: 431")
        r = raw(mport, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        check(status_of(r) == 200 and r.endswith(b"\r\n\r\n"), "HEAD: headers only")
        idle = [socket.create_connection(("127.0.0.1", mport)) for _ in range(16)]
        time.sleep(0.2)
        r = raw(mport, b"GET /metrics HTTP/1.1\r\n\r\n", timeout=5)
        check(status_of(r) == 200, "a 17th connection while 16 idle ones are open is answered")
        idle[0].settimeout(3)
        try:
            gone = idle[0].recv(1) == b""
        except ConnectionResetError:
            gone = True
        except socket.timeout:
            gone = False
        check(gone, "... in the place of the oldest idle one")
        t0 = time.monotonic()
        idle[1].settimeout(10)
        try:
            gone = idle[1].recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            gone = False
        check(gone and time.monotonic() - t0 < 8, "an idle connection is closed after the timeout")
        for s in idle:
            s.close()
        check(status_of(raw(mport, b"GET /metrics HTTP/1.0\r\n\r\n")) == 200, "metrics served after the flood")

        # A client holding 16 MiB of its 64 MiB quota, while Prometheus scrapes.
        client = subprocess.Popen([remora, "run", "--server", d.server, "--", query, "16", "60"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
        pport = free_port()
        conf = os.path.join(tmp, "prometheus.yml")
        with open(conf, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "scrape_configs:\n  - job_name: remorad\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{mport}']\n")
        plog = open(os.path.join(tmp, "prometheus.log"), "w")
        prom = subprocess.Popen([prometheus, f"--config.file={conf}", f"--storage.tsdb.path={tmp}/tsdb",
                                 f"--web.listen-address=127.0.0.1:{pport}"], stdout=plog, stderr=plog)

        def client_series():
            j = prom_query(pport, 'remora_client_fb_used_bytes{program="nvml_query"}')
            if j and j.get("status") == "success" and j["data"]["result"]:
                return j["data"]["result"]
            return None

        res = wait_for(client_series, timeout=60, step=0.5)
        check(bool(res), "Prometheus returns the client's series through /api/v1/query")
        if res:
            check(float(res[0]["value"][1]) >= 16 * MiB, f"memory held: {res[0]['value'][1]}")
            check(res[0]["metric"].get("tenant") == "anonymous" and res[0]["metric"].get("job") == "remorad",
                  f"labels {res[0]['metric']}")
        j = prom_query(pport, 'remora_client_fb_limit_bytes{program="nvml_query"}')
        check(bool(j and j["data"]["result"]) and float(j["data"]["result"][0]["value"][1]) == 64 * MiB,
              "the client's quota series")
        j = prom_query(pport, 'up{job="remorad"}')
        check(bool(j and j["data"]["result"]) and j["data"]["result"][0]["value"][1] == "1", "the target is up")
        # Time held for a shared hardware queue: a counter per client and per tenant.
        for who, sel in (("client", 'program="nvml_query"'), ("tenant", 'tenant="anonymous"')):
            j = prom_query(pport, f'remora_{who}_queue_wait_seconds_total{{{sel}}}')
            check(bool(j and j["data"]["result"]) and float(j["data"]["result"][0]["value"][1]) >= 0,
                  f"the {who}'s queue wait series: {j and j['data']['result']}")
        stop_process(client)
        client = None

        def scrape():
            return raw(mport, b"GET /metrics HTTP/1.1\r\n\r\n").decode()

        def client_gone():
            t = scrape()
            return t if "remora_client_fb_used_bytes{" not in t else None

        text = wait_for(client_gone, timeout=15, step=0.2)
        check(bool(text), "a client that left has no client series")
        text = text or scrape()
        m = re.search(r'remora_tenant_sessions_total\{tenant="anonymous",hostname="[^"]*"\} (\d+)', text)
        check(m is not None and int(m.group(1)) >= 1, "the tenant's sessions are kept after its client left")
        m = re.search(r'remora_tenant_fb_peak_bytes\{tenant="anonymous",hostname="[^"]*"\} (\d+)', text)
        check(m is not None and int(m.group(1)) >= 16 * MiB, "the tenant's peak memory is kept")
        # Accounting in remora status --json: the client that left is in the history.
        p = subprocess.run([remora, "status", "--server", d.server, "--json"], capture_output=True, text=True,
                           timeout=30, env=ENV)
        st = json.loads(p.stdout)
        hist = [h for h in st.get("history", []) if h["program"] == "nvml_query"]
        check(len(hist) == 1 and hist[0]["usage"]["peak_memory"] >= 16 * MiB and hist[0]["until"] >= hist[0]["since"],
              f"status --json keeps the client that left: {hist}")
        ten = [t for t in st.get("tenants", []) if t["name"] == "anonymous"]
        check(len(ten) == 1 and ten[0]["sessions"] == 1 and ten[0]["usage"]["calls"]["memory"] >= 1,
              f"status --json: the tenant's totals {ten}")
        check(len(ten) == 1 and ten[0]["usage"].get("queue_wait_seconds", -1) >= 0 and
              hist and hist[0]["usage"].get("queue_wait_seconds", -1) >= 0, "status --json: queue_wait_seconds")
    finally:
        if client:
            stop_process(client)
        if prom:
            stop_process(prom)
        d.stop()
sys.exit(1 if failures else 0)
