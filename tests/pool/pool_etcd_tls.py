#!/usr/bin/env python3
"""The pool on a secured etcd (docs/pool.md, "A secured etcd"): etcd over TLS with client
certificates (--client-cert-auth) and with its own users and roles, set up with etcdctl
as an administrator would. A remorad registers through it and a client is placed
through it; `remora pool` works with credentials; a wrong password, a missing client
certificate, the wrong CA, a user without a role for the prefix, a read-only user's
drain, and an endpoint that never answers are each refused in one line, quickly. etcd
restarted (its tokens forgotten): the daemon takes a new token and registers again.

usage: pool_etcd_tls.py REMORAD DRIVER REMORA PROBE
"""
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "lib"))
from verdict import check, failures  # noqa: E402

remorad, driver, remora, probe = sys.argv[1:5]
LEASE_TTL = 2
QUICK_S = 5.0  # a refusal comes well within this: every etcd request ends in 2 s
procs = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout=10.0):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    return None


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_POOL") and k != "REMORA_SERVER"}
    env["REMORA_POOL_CACHE"] = os.environ["REMORA_POOL_CACHE"]
    env.update(extra)
    return env


def cli(*args, env=None):
    start = time.time()
    p = subprocess.run([remora, *args], capture_output=True, text=True, timeout=30, env=env or clean_env())
    return p.returncode, p.stdout, p.stderr, time.time() - start


class Etcd:
    """etcd on https:// with client certificates required, in tmp."""

    def __init__(self, tmp, certs):
        self.tmp, self.certs = tmp, certs
        self.port, self.peer = free_port(), free_port()
        self.endpoint = f"https://127.0.0.1:{self.port}"
        self.proc = None
        self.user = None  # root, once auth is on

    def start(self):
        etcd = shutil.which("etcd") or "/usr/bin/etcd"
        c = self.certs
        log = open(os.path.join(self.tmp, "etcd.log"), "a")
        peer = f"http://127.0.0.1:{self.peer}"
        self.proc = subprocess.Popen(
            [etcd, "--name", "secured", "--data-dir", os.path.join(self.tmp, "etcd"),
             "--listen-client-urls", self.endpoint, "--advertise-client-urls", self.endpoint,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"secured={peer}",
             "--cert-file", f"{c}/server.pem", "--key-file", f"{c}/server.key",
             "--trusted-ca-file", f"{c}/ca.pem", "--client-cert-auth"],
            stdout=log, stderr=subprocess.STDOUT)
        procs.append(self.proc)
        if not wait_for(lambda: self.ctl("endpoint", "health", user=self.user, check_rc=False)[0] == 0, 30):
            raise RuntimeError("etcd did not become healthy:\n" + open(os.path.join(self.tmp, "etcd.log")).read()[-3000:])

    def stop(self):
        self.proc.kill()
        self.proc.wait()

    def ctl(self, *args, user=None, check_rc=True):
        """etcdctl as the administrator's certificate (and user, once auth is on)."""
        c = self.certs
        cmd = ["etcdctl", "--endpoints", self.endpoint, "--cacert", f"{c}/ca.pem", "--cert", f"{c}/client-admin.pem",
               "--key", f"{c}/client-admin.key", "--dial-timeout", "2s", "--command-timeout", "5s"]
        if user:
            cmd += ["--user", user]
        p = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=30,
                           env=dict(os.environ, ETCDCTL_API="3"))
        if check_rc and p.returncode != 0:
            raise RuntimeError(f"etcdctl {' '.join(args)}: {p.stderr.strip()}")
        return p.returncode, p.stdout, p.stderr


def secure(etcd):
    """Users and roles as docs/pool.md has an administrator make them, then auth on."""
    for cmd in (["user", "add", "root:rootpw"], ["user", "grant-role", "root", "root"],
                ["role", "add", "remora"], ["role", "grant-permission", "remora", "--prefix=true", "readwrite", "/remora/"],
                ["user", "add", "remora:remorapw"], ["user", "grant-role", "remora", "remora"],
                ["role", "add", "pool-reader"], ["role", "grant-permission", "pool-reader", "--prefix=true", "read", "/remora/"],
                ["user", "add", "reader:readerpw"], ["user", "grant-role", "reader", "pool-reader"],
                ["user", "add", "nobody:nobodypw"],
                ["auth", "enable"]):
        etcd.ctl(*cmd)
    etcd.user = "root:rootpw"


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, 0o600)
    return path


def main():
    tmp = tempfile.mkdtemp(prefix="remora-pool-tls-")
    os.environ["REMORA_POOL_CACHE"] = os.path.join(tmp, "pool-members")
    certs = os.path.join(tmp, "certs")
    subprocess.run([os.path.join(here, "..", "lib", "make_certs.sh"), "--etcd", certs, "admin", "remora", "cli"],
                   check=True)
    hold = None
    try:
        etcd = Etcd(tmp, certs)
        etcd.start()
        secure(etcd)
        rc, out, err = etcd.ctl("get", "/remora/", "--prefix", user="root:rootpw")
        check(rc == 0, "etcd speaks TLS with client certificates and has auth enabled")
        ep = etcd.endpoint

        pw = {name: write(os.path.join(tmp, name + ".pw"), secret + "\n") for name, secret in
              (("remora", "remorapw"), ("reader", "readerpw"), ("nobody", "nobodypw"), ("wrong", "not-it"))}
        tls_args = ["--pool", ep, "--pool-ca", f"{certs}/ca.pem", "--pool-cert", f"{certs}/client-cli.pem",
                    "--pool-key", f"{certs}/client-cli.key"]

        def as_user(user, pwfile):
            return tls_args + ["--pool-user", user, "--pool-password-file", pwfile]

        # A daemon registers over TLS as user remora.
        conf = write(os.path.join(tmp, "node-s.conf"),
                     f"allow_anonymous = yes\npool = {ep}\nhost_name = node-s\nlease_ttl = {LEASE_TTL}\n"
                     f"pool_ca = {certs}/ca.pem\npool_cert = {certs}/client-remora.pem\n"
                     f"pool_key = {certs}/client-remora.key\npool_user = remora\npool_password_file = {pw['remora']}\n")
        ready = os.path.join(tmp, "node-s.addr")
        log_path = os.path.join(tmp, "node-s.log")
        daemon = subprocess.Popen([remorad, "--config", conf, "--listen", "tcp://127.0.0.1:0", "--driver", driver,
                                   "--ready-file", ready], stdout=open(log_path, "w"), stderr=subprocess.STDOUT,
                                  env=dict(os.environ, REMORA_TESTDRIVER_DEVICES="1"))
        procs.append(daemon)
        if not wait_for(lambda: os.path.exists(ready) and os.path.getsize(ready) > 0, 20):
            raise RuntimeError("remorad did not start:\n" + open(log_path).read())
        addr = "tcp://" + open(ready).read().strip()

        def members():
            rc, out, err, _ = cli("pool", "list", "--json", *as_user("remora", pw["remora"]))
            return {m["host"]: m for m in json.loads(out)["members"]} if rc == 0 else {}
        got = wait_for(lambda: members().get("node-s", {}).get("registered"), 15)
        check(got is True and members()["node-s"]["address"] == addr,
              "remorad registered over TLS with a client certificate, as etcd user remora")
        rc, out, err = etcd.ctl("get", "/remora/members/node-s", "--print-value-only", user="root:rootpw")
        check(rc == 0 and json.loads(out or "{}").get("host") == "node-s", "its record is in etcd")

        # remora pool list with credentials from options, and from the environment.
        rc, out, err, _ = cli("pool", "list", *as_user("remora", pw["remora"]))
        check(rc == 0 and any(l.split()[:1] == ["node-s"] for l in out.splitlines()[1:]),
              f"remora pool list with --pool-ca/--pool-cert/--pool-key/--pool-user ({err.strip()})")
        client_env = clean_env(REMORA_POOL=ep, REMORA_POOL_CA=f"{certs}/ca.pem",
                               REMORA_POOL_CERT=f"{certs}/client-cli.pem", REMORA_POOL_KEY=f"{certs}/client-cli.key",
                               REMORA_POOL_USER="reader", REMORA_POOL_PASSWORD_FILE=pw["reader"])
        rc, out, err, _ = cli("pool", "list", env=client_env)
        check(rc == 0 and "node-s" in out, f"remora pool list with REMORA_POOL_* in the environment ({err.strip()})")

        # A client placed through the secured pool (password in the environment this time).
        penv = dict(client_env, REMORA_LOG="info", REMORA_POOL_PASSWORD="readerpw")
        del penv["REMORA_POOL_PASSWORD_FILE"]
        p = subprocess.run([remora, "run", "--", probe, "free"], capture_output=True, text=True, timeout=60, env=penv)
        check(p.returncode == 0 and f"connected to {addr}" in p.stderr,
              f"a client is placed through the secured pool ({p.stderr.strip()[-300:]})")

        # Refusals: one line, non-zero, quickly.
        def refused(what, args, env, expect):
            rc, out, err, took = cli("pool", "list", *args, env=env)
            check(rc != 0 and err.count("\n") == 1 and expect in err and took < QUICK_S,
                  f"{what}: refused in one line in {took:.1f} s ({err.strip()})")
        refused("a wrong password", as_user("remora", pw["wrong"]), None, "authentication failed")
        refused("no user", tls_args, None, "pool_user")
        refused("a user without a role for the prefix", as_user("nobody", pw["nobody"]), None, "permission denied")
        no_cert = ["--pool", ep, "--pool-ca", f"{certs}/ca.pem", "--pool-user", "remora", "--pool-password-file",
                   pw["remora"]]
        refused("no client certificate", no_cert, None, "TLS with etcd")
        wrong_ca = as_user("remora", pw["remora"])
        wrong_ca[wrong_ca.index("--pool-ca") + 1] = f"{certs}/other-ca.pem"
        refused("the wrong CA", wrong_ca, None, "TLS with etcd")
        plain = as_user("remora", pw["remora"])
        plain[1] = ep.replace("https://", "http://")
        refused("http:// to a TLS port", plain, None, "etcd")
        with socket.socket() as silent:  # listens, never answers
            silent.bind(("127.0.0.1", 0))
            silent.listen(16)
            mute = as_user("remora", pw["remora"])
            mute[1] = f"https://127.0.0.1:{silent.getsockname()[1]}"
            refused("an endpoint that never answers", mute, None, "cannot reach etcd")
        rc, out, err, took = cli("pool", "drain", "node-s", *as_user("reader", pw["reader"]))
        check(rc != 0 and err.count("\n") == 1 and "permission denied" in err and took < QUICK_S,
              f"a read-only user cannot drain ({err.strip()})")
        check(members()["node-s"]["state"] == "serving", "node-s still serving after the refused drain")
        rc, out, err, _ = cli("pool", "drain", "node-s", *as_user("remora", pw["remora"]))
        check(rc == 0 and wait_for(lambda: members()["node-s"]["state"] == "draining", 10),
              "a read-write user drains, and the daemon mirrors it")
        cli("pool", "undrain", "node-s", *as_user("remora", pw["remora"]))
        penv_bad = dict(penv, REMORA_POOL_PASSWORD="wrong")
        p = subprocess.run([remora, "run", "--", probe, "free"], capture_output=True, text=True, timeout=60,
                           env=penv_bad)
        check(p.returncode != 0 and "authentication failed" in p.stderr and "last seen" not in p.stderr,
              f"a client with a wrong password fails clearly, not on the last members ({p.stderr.strip()[-200:]})")

        # etcd restarted: its simple tokens are gone; the daemon authenticates again.
        etcd.stop()
        etcd.start()
        restarted = time.time()
        again = wait_for(lambda: (lambda m: m.get("node-s", {}).get("updated", 0) >= int(restarted))(members()), 20)
        check(again is not None, "after etcd restarted the daemon took a new token and wrote its record again")
        check(daemon.poll() is None, "remorad kept running")
    finally:
        for p in ([hold] if hold else []) + procs[::-1]:
            if p.poll() is None:
                p.kill()
                p.wait()
        if failures:
            for name in ("node-s.log", "etcd.log"):
                path = os.path.join(tmp, name)
                if os.path.exists(path):
                    print(f"--- {name}\n" + open(path).read()[-3000:], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"pool_etcd_tls: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("etcd over TLS with auth: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
