#!/usr/bin/env python3
"""The GPU pool against a real etcd (Debian's etcd-server) and three remorad on
loopback, each on the CPU test driver with a different memory size:
registration, placement by load and by free memory, drain (no new placement, its
clients go on), undrain, remove, expiry of a killed daemon's entry, the CLI's table
and JSON, remora status, and the CLI's one-line errors.

usage: pool_etcd.py REMORAD DRIVER REMORA PROBE
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402

remorad, driver, remora, probe = sys.argv[1:5]
migrant = sys.argv[5:7]  # drv_migrate and its image, where nvcc built them: drain --migrate
ADMIN = "ops.pool-admin"
LEASE_TTL = 2
MEMORY_MB = {"node-a": 1024, "node-b": 2048, "node-c": 4096}
procs = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    return None


def cli(*args, env=None):
    p = subprocess.run([remora, *args], capture_output=True, text=True, timeout=30, env=env)
    return p.returncode, p.stdout, p.stderr


def members(endpoint):
    rc, out, err = cli("pool", "list", "--json", "--pool", endpoint)
    if rc != 0:
        raise RuntimeError(f"remora pool list --json failed: {err.strip()}")
    return {m["host"]: m for m in json.loads(out)["members"]}


def run_probe(env_extra, *args, timeout=30):
    env = {k: v for k, v in os.environ.items() if k not in ("REMORA_SERVER", "REMORA_POOL")}
    env.update(REMORA_LOG="info", **env_extra)
    p = subprocess.run([remora, "run", "--", probe, *args], capture_output=True, text=True, timeout=timeout,
                       env=env)
    return p.returncode, p.stdout, p.stderr


def connected_to(stderr):
    """The address the client library says it connected to."""
    for line in stderr.splitlines():
        if "connected to " in line:
            return line.split("connected to ", 1)[1].split(",", 1)[0]
    return None


def start_etcd(tmp):
    etcd = shutil.which("etcd") or "/usr/bin/etcd"
    if not os.path.exists(etcd):
        print("pool_etcd: etcd is not installed: run scripts/setup.sh (Debian package etcd-server)", file=sys.stderr)
        sys.exit(1)
    client, peer = free_port(), free_port()
    endpoint = f"http://127.0.0.1:{client}"
    log = open(os.path.join(tmp, "etcd.log"), "w")
    p = subprocess.Popen([etcd, "--name", "pooltest", "--data-dir", os.path.join(tmp, "etcd"),
                          "--listen-client-urls", endpoint, "--advertise-client-urls", endpoint,
                          "--listen-peer-urls", f"http://127.0.0.1:{peer}",
                          "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
                          "--initial-cluster", f"pooltest=http://127.0.0.1:{peer}"],
                         stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)

    def healthy():
        try:
            with urllib.request.urlopen(endpoint + "/health", timeout=1) as r:
                return json.loads(r.read()).get("health") == "true"
        except OSError:
            return False
    if not wait_for("etcd", healthy, 30):
        print(open(os.path.join(tmp, "etcd.log")).read()[-3000:], file=sys.stderr)
        raise RuntimeError("etcd did not become healthy")
    return endpoint


def start_daemon(tmp, name, endpoint):
    conf = os.path.join(tmp, name + ".conf")
    with open(conf, "w") as f:
        f.write(f"# pool test member\nallow_anonymous = yes\npool = {endpoint}\nhost_name = {name}\nlease_ttl = {LEASE_TTL}\n"
                f"admin_token = {ADMIN}\n")
    ready = os.path.join(tmp, name + ".addr")
    env = dict(os.environ, REMORA_TESTDRIVER_DEVICES="1", REMORA_TESTDRIVER_MEM_MB=str(MEMORY_MB[name]))
    log = open(os.path.join(tmp, name + ".log"), "w")
    p = subprocess.Popen([remorad, "--config", conf, "--listen", "tcp://127.0.0.1:0", "--driver", driver,
                          "--ready-file", ready], stdout=log, stderr=subprocess.STDOUT, env=env)
    procs.append(p)
    if not wait_for(name, lambda: os.path.exists(ready) and os.path.getsize(ready) > 0, 20):
        raise RuntimeError(f"remorad {name} did not start:\n" + open(os.path.join(tmp, name + ".log")).read())
    return p, "tcp://" + open(ready).read().strip()


def main():
    tmp = tempfile.mkdtemp(prefix="remora-pool-")
    os.environ["REMORA_POOL_CACHE"] = os.path.join(tmp, "pool-members")  # never the user's own
    hold = None
    try:
        endpoint = start_etcd(tmp)
        pool = {"REMORA_POOL": endpoint}
        daemons, addr = {}, {}
        for name in MEMORY_MB:
            daemons[name], addr[name] = start_daemon(tmp, name, endpoint)

        # Registration: every daemon with its address and GPU.
        got = wait_for("registration", lambda: (lambda m: m if len(m) == 3 else None)(members(endpoint)))
        check(got is not None, "three daemons registered")
        for name, m in (got or {}).items():
            check(m["address"] == addr[name] and m["state"] == "serving" and m["registered"],
                  f"{name} registered serving at its address")
            check(len(m["gpus"]) == 1 and m["gpus"][0]["total"] == MEMORY_MB[name] << 20 and
                  m["gpus"][0]["uuid"].startswith("GPU-") and m["gpus"][0]["name"],
                  f"{name} lists its GPU with name, UUID and memory")
        rc, out, err = cli("pool", "list", "--pool", endpoint)
        lines = out.splitlines()
        check(rc == 0 and lines[0].split()[:3] == ["HOST", "ADDRESS", "STATE"] and
              [l.split()[0] for l in lines[1:]] == ["node-a", "node-b", "node-c"],
              "pool list prints a table with one row per host")
        check(any(l.split()[:3] == ["node-c", addr["node-c"], "serving"] for l in lines[1:]),
              "the table shows each host's address and state")

        # Placement: with no load, most free memory first (node-c).
        hold = subprocess.Popen([remora, "run", "--", probe, "hold", "64"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=dict(os.environ, REMORA_LOG="info", **pool))
        check(hold.stdout.readline().strip() == "ready", "a held client was placed and allocated")
        placed = wait_for("load", lambda: [h for h, m in members(endpoint).items() if m["clients"] == 1], 10)
        check(placed == ["node-c"], f"the idle pool placed it on the host with most free memory (got {placed})")

        # remora status shows the held client and its memory.
        rc, out, err = cli("status", addr["node-c"].split("://", 1)[1], "--json")
        st = json.loads(out) if rc == 0 else {}
        check(st.get("host") == "node-c" and st.get("pool") == "registered" and len(st.get("gpus", [])) == 1,
              "remora status --json names the daemon, its pool membership and GPU")
        check([c["memory"] for c in st.get("clients", [])] == [64 << 20] and st["clients"][0]["program"] == "probe",
              "remora status shows the held client's 64 MiB")
        rc, out, err = cli("status", "node-c", "--pool", endpoint)
        check(rc == 0 and "probe" in out and "64.0" in out and "Remora Test Device" in out,
              "remora status HOST (looked up in the pool) prints GPUs and memory per client")

        # Placement by load: node-c has a client, so the next goes to an idle host (node-b: more free).
        rc, out, err = run_probe(pool, "free")
        check(rc == 0 and connected_to(err) == addr["node-b"], f"a new client goes to the least loaded host (node-b, got {connected_to(err)})")
        rc, out, err = run_probe(dict(pool, REMORA_MIN_FREE_MEMORY="3G"), "free")
        check(rc == 0 and connected_to(err) == addr["node-c"], "REMORA_MIN_FREE_MEMORY=3G leaves only node-c")

        # Drain node-c: a client working there goes on; no new placement there.
        worker = subprocess.Popen([remora, "run", "--server", addr["node-c"], "--", probe, "work", "4"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        rc, out, err = cli("pool", "drain", "node-c", "--pool", endpoint)
        check(rc == 0 and "draining" in out, "pool drain node-c")
        rc, out, err = run_probe(dict(pool, REMORA_MIN_FREE_MEMORY="3G"), "free")
        check(rc != 0 and "no serving GPU host" in err, "a drained host gets no new placement")
        rc, out, err = run_probe(pool, "free")
        check(rc == 0 and connected_to(err) != addr["node-c"], "placement goes elsewhere while node-c drains")
        check(wait_for("mirror", lambda: json.loads(cli("status", addr["node-c"], "--json")[1])["draining"]) is True,
              "the daemon mirrors the drain")
        rc, out, err = run_probe({"REMORA_SERVER": addr["node-c"]}, "free")
        check(rc != 0 and "draining" in err, "the drained daemon refuses a new client that names it")
        rc, out, err = run_probe({"REMORA_SERVER": f"{addr['node-c']},{addr['node-b']}"}, "free")
        check(rc == 0 and connected_to(err) == addr["node-b"] and "trying the next" in err,
              "a client refused by one server of a REMORA_SERVER list tries the next")
        wout, werr = worker.communicate(timeout=60)
        check(worker.returncode == 0 and wout.strip() == "ok", "a client working on node-c finished its work")
        check(hold.poll() is None, "the held client on node-c is still connected")
        check(members(endpoint)["node-c"]["state"] == "draining", "pool list shows node-c draining")
        rc, out, err = cli("pool", "undrain", "node-c", "--pool", endpoint)
        check(rc == 0 and wait_for("undrain", lambda: not json.loads(cli("status", addr["node-c"], "--json")[1])["draining"]),
              "pool undrain node-c makes it serve again")

        # Drain node-a moving its client to node-b (docs/pool.md, "Live migration"): it runs on there.
        if migrant:
            env = {k: v for k, v in os.environ.items() if k not in ("REMORA_SERVER", "REMORA_POOL")}
            mover = subprocess.Popen([remora, "run", "--server", addr["node-a"], "--", *migrant, "30", "60"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     env=dict(env, REMORA_LOG="info"))
            check(wait_for("iterations", lambda: mover.stdout.readline().startswith("iter 2")) is not None,
                  "a client works on node-a")
            rc, out, err = cli("pool", "drain", "node-a", "--migrate", "node-b", "--pool", endpoint,
                               env=dict(os.environ, REMORA_TOKEN=ADMIN))
            check(rc == 0 and "moved from " + addr["node-a"] in out, f"pool drain node-a --migrate node-b: {out}{err}")
            mout, merr = mover.communicate(timeout=60)
            check(mover.returncode == 0 and mout.rstrip().endswith("PASS") and
                  f"moved to the GPU server at {addr['node-b']}" in merr, "its client went on at node-b to the end")
            rc, out, err = cli("pool", "undrain", "node-a", "--pool", endpoint)
            check(rc == 0 and wait_for("undrain", lambda: not json.loads(cli("status", addr["node-a"], "--json")[1])["draining"]),
                  "pool undrain node-a")

        # Remove node-b: it leaves the pool and stays out until undrain.
        rc, out, err = cli("pool", "remove", "node-b", "--pool", endpoint)
        check(rc == 0, "pool remove node-b")
        time.sleep(LEASE_TTL)
        m = members(endpoint)["node-b"]
        check(not m["registered"] and m["state"] == "removed", "a removed host stays unregistered, listed as removed")
        rc, out, err = run_probe(pool, "free")
        check(rc == 0 and connected_to(err) == addr["node-a"], "placement skips the removed host")
        rc, out, err = cli("pool", "undrain", "node-b", "--pool", endpoint)
        check(rc == 0 and wait_for("readd", lambda: members(endpoint).get("node-b", {}).get("registered")),
              "undrain lets a removed host register again")

        # Expiry: a killed daemon's entry goes with its lease.
        daemons["node-a"].send_signal(signal.SIGKILL)
        daemons["node-a"].wait()
        killed = time.time()
        gone = wait_for("expiry", lambda: "node-a" not in members(endpoint), LEASE_TTL + 8)
        check(gone is not None, f"node-a's entry expired {time.time() - killed:.1f} s after SIGKILL (lease {LEASE_TTL} s)")

        # show, and the errors: one line, non-zero exit.
        rc, out, err = cli("pool", "show", "node-c", "--json", "--pool", endpoint)
        check(rc == 0 and json.loads(out)["host"] == "node-c", "pool show --json")
        rc, out, err = cli("pool", "drain", "no-such-host", "--pool", endpoint)
        check(rc != 0 and err.count("\n") == 1 and "no host no-such-host" in err, "unknown host: one line, non-zero")
        dead = f"http://127.0.0.1:{free_port()}"
        rc, out, err = cli("pool", "list", "--pool", dead)
        check(rc != 0 and err.count("\n") == 1 and "cannot reach etcd" in err, "etcd unreachable: one line, non-zero")
        rc, out, err = run_probe({"REMORA_POOL": dead}, "free")
        check(rc != 0 and "cannot reach etcd" in err, "a client given an unreachable pool fails clearly")
        rc, out, err = run_probe({"REMORA_POOL": dead, "REMORA_SERVER": ",".join(addr.values())}, "free")
        check(rc == 0 and "trying the servers REMORA_SERVER names" in err,
              f"with REMORA_SERVER as well, it says so and uses those ({err.strip()[-300:]})")
        rc, out, err = cli("status", f"127.0.0.1:{free_port()}")
        check(rc != 0 and err.count("\n") == 1 and "cannot reach remorad" in err, "status of no daemon: one line")

        # etcd gone: a client given only REMORA_POOL tries the members it saw last, and says so.
        cached = open(os.environ["REMORA_POOL_CACHE"]).read().splitlines()
        check(cached and cached[0].startswith("remora-pool-members 1 ") and cached[0].endswith(endpoint) and
              set(cached[1:]) <= set(addr.values()) and len(cached) > 1,
              f"the pool's serving members were kept ({cached})")
        procs[0].kill()  # etcd
        procs[0].wait()
        rc, out, err = run_probe(pool, "free")
        check(rc == 0 and "last seen" in err and connected_to(err) in addr.values(),
              f"etcd away, no REMORA_SERVER: the pool's last members are tried, and it says so ({err.strip()[-300:]})")
    finally:
        for p in ([hold] if hold else []) + procs[::-1]:
            if p.poll() is None:
                p.kill()
                p.wait()
        if failures:
            for name in MEMORY_MB:
                path = os.path.join(tmp, name + ".log")
                if os.path.exists(path):
                    print(f"--- {name} log\n" + open(path).read()[-2000:], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"pool_etcd: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
