"""TLS and identity (issue 17, docs/security.md): one scenario per test.

usage: tls.py SCENARIO REMORAD DRIVER REMORA TENANT_PROBE

Certificates are made for the run in a temporary directory (tests/lib/make_certs.sh).
  handshake     openssl s_client reports TLS 1.3 with the daemon, and a client that is
                not Remora (Python's ssl) gets a status answer: the records are standard
  refusals      a plaintext client at a TLS port, a TLS client at a plaintext port, a
                wrong CA, a missing client certificate: each refused at once with one
                clear line, never a hang
  certificates  a client certificate's CN names its tenant; status with it shows that
                tenant's clients only; the admin's certificate shows all
  errors        a table of failures (plaintext and TLS at each other's port, an untrusted
                certificate, a name the certificate does not cover, an expired one, an old
                TLS version, a client certificate the daemon rejects, a name that does not
                resolve, a port nobody listens on): each gives exactly one error line, in
                words of its own; the daemon warns at start of a certificate that has expired
                or expires within 30 days
  credentials   a hashed token accepted and a wrong one refused (and slowed down); status
                refused without a credential, a tenant's token sees its own clients only,
                the admin token all; anonymous clients refused by default
"""
import os
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import remorad_fixture  # noqa: E402
import rmwire  # noqa: E402
from verdict import check, failures  # noqa: E402

scenario, remorad, driver, remora, tenant_probe = sys.argv[1:6]
here = os.path.dirname(os.path.abspath(__file__))
clients = []


def make_certs(tmp, *cns):
    subprocess.run([os.path.join(here, "..", "lib", "make_certs.sh"), os.path.join(tmp, "certs"), *cns], check=True)
    return os.path.join(tmp, "certs")


def Daemon(tmp, name, config, args=()):
    return remorad_fixture.Daemon(remorad, driver, tmp, name, config, args=args)


def tls_daemon(tmp, certs, name, config, client_ca=False, cert="server.pem"):
    args = ["--listen", "tls://127.0.0.1:0", "--tls-cert", f"{certs}/{cert}", "--tls-key", f"{certs}/server.key"]
    if client_ca:
        args += ["--tls-client-ca", f"{certs}/{client_ca if isinstance(client_ca, str) else 'ca.pem'}"]
    return Daemon(tmp, name, config, args=args)


def env_with(**kw):
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env.update({k: v for k, v in kw.items() if v is not None})
    return env


def run(server, *args, timeout=30, **kw):
    """`remora run` of tenant_probe: (returncode, stdout, stderr, seconds)."""
    t0 = time.monotonic()
    r = subprocess.run([remora, "run", "--server", server, "--", tenant_probe, *args], capture_output=True,
                       text=True, timeout=timeout, env=env_with(**kw))
    return r.returncode, r.stdout, r.stderr, time.monotonic() - t0


def holder(server, **kw):
    """A client holding 8 MiB until its stdin closes; returns the process once it holds them."""
    p = subprocess.Popen([remora, "run", "--server", server, "--", tenant_probe, "alloc", "8"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env_with(**kw))
    clients.append(p)
    for line in p.stdout:
        if line.startswith("ready"):
            break
    return p


def status(server, *extra, **kw):
    r = subprocess.run([remora, "status", server, "--json", *extra], capture_output=True, text=True, timeout=30,
                       env=env_with(**kw))
    return r.returncode, r.stdout, r.stderr


def tenants_seen(out):
    import json
    try:
        return sorted(c["tenant"] for c in json.loads(out)["clients"])
    except (ValueError, KeyError):
        return None


def one_line(err, needle):
    lines = [ln for ln in err.splitlines() if needle in ln]
    return len(lines) == 1


def scenario_handshake(tmp):
    certs = make_certs(tmp)
    d = tls_daemon(tmp, certs, "handshake", "")
    try:
        r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{d.port}", "-CAfile", f"{certs}/ca.pem",
                            "-verify_return_error", "-brief"], input="", capture_output=True, text=True, timeout=20)
        said = r.stdout + r.stderr
        check("Protocol version: TLSv1.3" in said, f"openssl s_client reports TLS 1.3 ({said.strip()[:200]!r})")
        check("Verification: OK" in said, "and verifies the daemon's certificate with the test CA")
        r = subprocess.run(["openssl", "s_client", "-connect", f"127.0.0.1:{d.port}", "-tls1_2", "-brief"],
                           input="", capture_output=True, text=True, timeout=20)
        check("TLSv1.2" not in (r.stdout + r.stderr).split("Protocol version:")[-1][:12] or r.returncode != 0,
              "TLS 1.2 is not offered")
        # A status request through Python's own TLS: the daemon's records are standard ones.
        ctx = ssl.create_default_context(cafile=f"{certs}/ca.pem")
        with socket.create_connection(("127.0.0.1", d.port), timeout=10) as raw:
            with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                version = s.version()
                s.sendall(rmwire.frame(rmwire.OP_STATUS))
                reply = recv_exact(s, 48)
        check(version == "TLSv1.3", f"Python's ssl negotiates {version}")
        magic = struct.unpack_from("<I", reply)[0] if reply else 0
        check(magic == 0x524D5231, "and gets a Remora frame back over it (a status reply)")
        rc, out, err, _ = run("tls://" + d.server, "info", REMORA_TLS_CA=f"{certs}/ca.pem")
        check(rc == 0, f"a client over tls:// is served ({err.strip()[-200:]})")
        check("TLS 1.3" in d.text(), "the daemon's log says it listens with TLS 1.3")
    finally:
        d.stop()


def recv_exact(s, n):
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            break
        b += chunk
    return b


def scenario_refusals(tmp):
    certs = make_certs(tmp, "nobody")
    d = tls_daemon(tmp, certs, "refusals", "")
    p = Daemon(tmp, "plain", "")
    try:
        rc, _, err, dt = run(d.server, "info")  # plaintext at the TLS port
        check(rc != 0 and dt < 10, f"a plaintext client at the TLS port fails at once (exit {rc}, {dt:.1f} s)")
        check(one_line(err, "the server speaks TLS"), f"with one clear line ({err.strip()[-300:]!r})")
        check(remorad_fixture.wait_for(lambda: "a client without TLS at this TLS port" in d.text(), timeout=5),
              "and the daemon's log says so")
        rc, _, err, dt = run("tls://" + p.server, "info", REMORA_TLS_CA=f"{certs}/ca.pem")
        check(rc != 0 and dt < 10, f"a TLS client at a plaintext port fails at once (exit {rc}, {dt:.1f} s)")
        check(one_line(err, "is it a plaintext port"), f"with one clear line ({err.strip()[-300:]!r})")
        check(remorad_fixture.wait_for(lambda: "a TLS client at this plaintext port" in p.text(), timeout=5),
              "and the plaintext daemon's log says so")
        rc, _, err, dt = run("tls://" + d.server, "info", REMORA_TLS_CA=f"{certs}/other-ca.pem")
        check(rc != 0 and dt < 10, f"a client trusting another CA refuses the daemon (exit {rc}, {dt:.1f} s)")
        check(one_line(err, "certificate is not trusted"), f"with one clear line ({err.strip()[-300:]!r})")
        rc, _, err, _ = run("tls://localhost:" + str(d.port), "info", REMORA_TLS_CA=f"{certs}/ca.pem")
        check(rc == 0, f"the certificate's DNS name is accepted ({err.strip()[-200:]})")
    finally:
        d.stop()
        p.stop()
    # A daemon requiring client certificates refuses a client without one.
    d = tls_daemon(tmp, certs, "needcert", "allow_anonymous = yes\n", client_ca=True)
    try:
        rc, _, err, dt = run("tls://" + d.server, "info", REMORA_TLS_CA=f"{certs}/ca.pem")
        check(rc != 0 and dt < 10, f"no client certificate: refused at once (exit {rc}, {dt:.1f} s)")
        check("client certificate" in err, f"saying a certificate is required ({err.strip()[-300:]!r})")
        rc, _, err, _ = run("tls://" + d.server, "info", REMORA_TLS_CA=f"{certs}/ca.pem",
                            REMORA_TLS_CERT=f"{certs}/client-nobody.pem", REMORA_TLS_KEY=f"{certs}/other-ca.key")
        check(rc != 0 and "private key" in err, f"a key that is not the certificate's: refused by the client ({err.strip()[-200:]!r})")
    finally:
        d.stop()


def scenario_certificates(tmp):
    certs = make_certs(tmp, "alpha", "beta", "ops", "stranger")
    config = "admin_cn = ops\n[tenant alpha]\n[tenant beta]\ntoken = beta-secret\n"
    d = tls_daemon(tmp, certs, "certs", config, client_ca=True)
    server = "tls://" + d.server
    ca = f"{certs}/ca.pem"

    def as_(cn):
        return dict(REMORA_TLS_CA=ca, REMORA_TLS_CERT=f"{certs}/client-{cn}.pem", REMORA_TLS_KEY=f"{certs}/client-{cn}.key")
    try:
        a = holder(server, **as_("alpha"))
        b = holder(server, REMORA_TOKEN="beta-secret", **as_("stranger"))
        check(remorad_fixture.wait_for(lambda: "started worker" in d.text() and d.text().count("started worker") >= 2,
                                       timeout=10), "alpha (by certificate) and beta (by token) have workers")
        check("for alpha" in d.text(), "the worker of tenant alpha serves the client whose certificate says CN=alpha")
        rc, out, err = status(server, **as_("alpha"))
        check(rc == 0 and tenants_seen(out) == ["alpha"], f"status with alpha's certificate shows alpha's client only "
              f"({tenants_seen(out)}, {err.strip()[-200:]})")
        rc, out, err = status(server, **as_("ops"))
        check(rc == 0 and tenants_seen(out) == ["alpha", "beta"], f"the admin's certificate shows all ({tenants_seen(out)})")
        rc, _, err, _ = run(server, "info", **as_("stranger"))
        check(rc != 0 and "names no tenant" in d.text(), "a certificate naming no tenant, without a token, is refused")
        for p in (a, b):
            p.stdin.close()
            p.wait(timeout=30)
    finally:
        d.stop()


def error_lines(err):
    return [ln for ln in err.splitlines() if "] error: " in ln]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scenario_errors(tmp):
    certs = make_certs(tmp, "nobody")
    ca = f"{certs}/ca.pem"
    d = tls_daemon(tmp, certs, "good", "allow_anonymous = yes\n")
    p = Daemon(tmp, "plain", "allow_anonymous = yes\n")
    elsewhere = tls_daemon(tmp, certs, "elsewhere", "allow_anonymous = yes\n", cert="server-elsewhere.pem")
    expired = tls_daemon(tmp, certs, "expired", "allow_anonymous = yes\n", cert="server-expired.pem")
    soon = tls_daemon(tmp, certs, "soon", "allow_anonymous = yes\n", cert="server-soon.pem")
    strict = tls_daemon(tmp, certs, "strict", "allow_anonymous = yes\n", client_ca="other-ca.pem")
    old = subprocess.Popen(["openssl", "s_server", "-accept", f"127.0.0.1:{free_port()}", "-tls1_2", "-cert",
                            f"{certs}/server.pem", "-key", f"{certs}/server.key", "-quiet"],
                           stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    old_port = old.args[3].rsplit(":", 1)[1]
    client_cert = dict(REMORA_TLS_CERT=f"{certs}/client-nobody.pem", REMORA_TLS_KEY=f"{certs}/client-nobody.key")
    reach = "start remorad there"
    # (what, server, environment, words the one error line has, whether it may say "start remorad")
    table = [
        ("plaintext client at a TLS port", d.server, {}, "the server speaks TLS", False),
        ("TLS client at a plaintext port", "tls://" + p.server, dict(REMORA_TLS_CA=ca), "is it a plaintext port",
         False),
        ("a CA that did not sign the certificate", "tls://" + d.server, dict(REMORA_TLS_CA=f"{certs}/other-ca.pem"),
         "certificate is not trusted", False),
        ("a name the certificate does not cover", f"tls://localhost:{elsewhere.port}", dict(REMORA_TLS_CA=ca),
         "does not cover the name localhost", False),
        ("an address the certificate does not cover", "tls://" + elsewhere.server, dict(REMORA_TLS_CA=ca),
         "does not cover the name 127.0.0.1", False),
        ("an expired certificate", "tls://" + expired.server, dict(REMORA_TLS_CA=ca),
         "certificate has expired (on Jan  2 00:00:00 2020 GMT)", False),
        ("a server without TLS 1.3", f"tls://127.0.0.1:{old_port}", dict(REMORA_TLS_CA=ca),
         "does not speak TLS 1.3", False),
        ("a client certificate the daemon rejects", "tls://" + strict.server, dict(REMORA_TLS_CA=ca, **client_cert),
         "refused this client's certificate (unknown CA)", False),
        ("a name that does not resolve", "no-such-host.invalid:7000", {}, "no-such-host.invalid does not resolve",
         False),
        ("a name that does not resolve, over TLS", "tls://no-such-host.invalid:7000", dict(REMORA_TLS_CA=ca),
         "no-such-host.invalid does not resolve", False),
        ("a port nobody listens on", f"127.0.0.1:{free_port()}", {}, reach, True),
    ]
    try:
        for what, server, env, words, may_say_reach in table:
            rc, _, err, dt = run(server, "info", **env)
            lines = error_lines(err)
            check(rc != 0 and dt < 15, f"{what}: refused at once (exit {rc}, {dt:.1f} s)")
            check(len(lines) == 1 and words in lines[0] and (may_say_reach or reach not in lines[0]),
                  f"{what}: one error line saying {words!r} ({lines!r})")
        check(len(error_lines(run("tls://" + d.server, "info", REMORA_TLS_CA=ca)[2])) == 0,
              "and a client the daemon serves says no error")
        check(remorad_fixture.wait_for(lambda: "expired on Jan  2 00:00:00 2020 GMT" in expired.text(), timeout=5),
              f"the daemon warns at start of its expired certificate ({expired.text()[-300:]!r})")
        check("expires on" in soon.text() and ("in 4 day" in soon.text() or "in 5 day" in soon.text()),
              "and of one that expires within 30 days")
        check("expire" not in d.text(), "but not of one valid for 400 days")
    finally:
        old.kill()
        old.wait()
        for daemon in (d, p, elsewhere, expired, soon, strict):
            daemon.stop()


def scenario_credentials(tmp):
    hashed = subprocess.run([remora, "hash-token"], input="alpha.secret\n", capture_output=True, text=True,
                            check=True).stdout.strip()
    check(hashed.startswith("pbkdf2-sha256$") and "alpha.secret" not in hashed and hashed.endswith("$alpha"), f"remora hash-token prints a hash")
    admin = subprocess.run([remora, "hash-token", "ops.admin-secret"], capture_output=True, text=True,
                           check=True).stdout.strip()
    config = (f"allow_anonymous = no\nadmin_token = {admin}\n[tenant alpha]\ntoken = {hashed}\n"
              "[tenant beta]\ntoken = beta-secret\n")
    d = Daemon(tmp, "creds", config)
    try:
        rc, _, err, _ = run(d.server, "info", REMORA_TOKEN="alpha.secret")
        check(rc == 0, f"the hashed token's tenant is served ({err.strip()[-200:]})")
        rc, _, err, _ = run(d.server, "info")
        check(rc != 0 and "needs a credential" in err, "a client without a credential is refused")
        t0 = time.monotonic()
        results = [run(d.server, "info", REMORA_TOKEN="wrong")[0] for _ in range(4)]
        dt = time.monotonic() - t0
        check(all(r != 0 for r in results), "a wrong token is refused")
        check(dt > 0.6, f"and failures slow the sender down ({dt:.2f} s for 4; at least 0.1+0.2+0.4)")
        check("unknown credential (failure 4" in d.text(), "failures are logged with their count")
        a = holder(d.server, REMORA_TOKEN="alpha.secret")
        b = holder(d.server, REMORA_TOKEN="beta-secret")
        rc, out, err = status(d.server)
        check(rc != 0 and "needs a credential" in err, f"status without a credential is refused ({err.strip()[-200:]!r})")
        rc, out, err = status(d.server, "--token", "alpha.secret")
        check(rc == 0 and tenants_seen(out) == ["alpha"], f"alpha's token sees alpha's client only ({tenants_seen(out)})")
        rc, out, err = status(d.server, REMORA_TOKEN="ops.admin-secret")
        check(rc == 0 and tenants_seen(out) == ["alpha", "beta"], f"the admin token sees all ({tenants_seen(out)})")
        for p in (a, b):
            p.stdin.close()
            p.wait(timeout=30)
    finally:
        d.stop()


def main():
    with tempfile.TemporaryDirectory(prefix="remora-tls-") as tmp:
        try:
            globals()["scenario_" + scenario](tmp)
        finally:
            for p in clients:
                if p.poll() is None:
                    p.kill()
                    p.wait()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
