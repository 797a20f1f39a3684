"""A private etcd for Python tests (Debian's etcd-server, installed by scripts/setup.sh),
started on free loopback ports as tests/pool/pool_etcd.py starts one, and its keys read
through the JSON gateway."""
import base64
import json
import os
import shutil
import socket
import subprocess
import time
import urllib.request

from remorad_fixture import stop_process


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """etcd with its data and log in tmp; endpoint is its http://127.0.0.1:PORT."""

    def __init__(self, tmp, name="faults"):
        etcd = shutil.which("etcd") or "/usr/bin/etcd"
        if not os.path.exists(etcd):
            raise RuntimeError("etcd is not installed: run scripts/setup.sh (Debian package etcd-server)")
        client, peer = free_port(), free_port()
        self.endpoint = f"http://127.0.0.1:{client}"
        self.log_path = os.path.join(tmp, "etcd.log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([etcd, "--name", name, "--data-dir", os.path.join(tmp, "etcd"),
                                      "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
                                      "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                                      "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                                      "--initial-cluster", f"{name}=http://127.0.0.1:{peer}"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        end = time.monotonic() + 30
        while not self.healthy():
            if time.monotonic() > end or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError("etcd did not become healthy:\n" + open(self.log_path).read()[-3000:])
            time.sleep(0.1)

    def healthy(self):
        try:
            with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except OSError:
            return False

    def get(self, key):
        """The value of key (str), or None when it does not exist."""
        body = json.dumps({"key": base64.b64encode(key.encode()).decode()}).encode()
        req = urllib.request.Request(self.endpoint + "/v3/kv/range", data=body,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=5) as r:
            kvs = json.loads(r.read()).get("kvs") or []
        return base64.b64decode(kvs[0].get("value", "")).decode() if kvs else None

    def stop(self):
        stop_process(self.proc)
        self.log.close()
