#!/usr/bin/env python3
"""What an operator does from docs/operations.md ("From a fresh host to a served client"),
on a fresh root (issue 38 item 1). The blocks are taken from the doc itself, so that doc
and test cannot drift, and run with bash as written but for the host's name and address
(localhost, 127.0.0.1), the ports (free ones), the paths (under the staging root) and the
program (drv_vecadd):

- install: `meson setup` with the block's options in a scratch build directory, whose
  unit, example and man pages must name /etc/remora/remorad.conf as the doc says; then
  this build's `meson install --destdir` into a temporary root.
- user: systemd-sysusers with the installed sysusers.d file (else the useradd block); the
  user and its groups are removed afterwards if this test made them.
- certs, config: as written, into the installed SYSCONFDIR/remora.
- unit: not run (no systemd here); instead the installed unit's ExecStart line, as the
  unit's User, Group and SupplementaryGroups (setpriv), on the CPU test driver.
- firewall: in a network namespace of its own, where nft is installed.
- client, status: the program through the daemon over TLS with the tenant's token, then
  `remora status` with the operator's, which must show the tenant.
- prometheus: `promtool check config` on the block, and `promtool check metrics` on a scrape.
Root only (it makes a system user): skipped (77) otherwise.

usage: walkthrough.py MESON BUILD_ROOT SOURCE_ROOT DRIVER PROGRAM IMAGE
"""
import grp
import json
import os
import pwd
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from remorad_fixture import stop_process, wait_for  # noqa: E402

meson, build, source, driver, program, image = sys.argv[1:3] + [os.path.abspath(a) for a in sys.argv[3:7]]
if os.geteuid() != 0:
    print("SKIP: the walk-through makes a system user and chowns files: run as root (CI does)")
    sys.exit(77)
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_") and k != "LD_LIBRARY_PATH"}
DOC = os.path.join(source, "docs", "operations.md")
blocks = dict(re.findall(r"<!-- walkthrough: (\S+) -->\n```\w+\n(.*?)\n```", open(DOC).read(), re.S))
want = ["install", "user", "user-useradd", "certs", "config", "unit", "firewall", "client", "status", "prometheus"]
check(all(b in blocks for b in want), f"docs/operations.md has every block: missing {set(want) - set(blocks)}")
if failures:
    sys.exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bash(script, what, cwd=None, env=None):
    p = subprocess.run(["bash", "-euc", script], capture_output=True, text=True, cwd=cwd, env=env or ENV,
                       timeout=120)
    check(p.returncode == 0, f"{what} runs ({p.returncode}: {(p.stdout + p.stderr).strip()[-800:]})")
    return p


def existed(kind, name):
    try:
        (pwd.getpwnam if kind == "user" else grp.getgrnam)(name)
        return True
    except KeyError:
        return False


# 1. The install block's options put the configuration at /etc/remora/remorad.conf.
opts = {}
for o in json.loads(subprocess.run([meson, "introspect", build, "--buildoptions"], capture_output=True,
                                   text=True).stdout):
    opts[o["name"]] = o["value"]
setup = blocks["install"].splitlines()[0]
check(setup.startswith("meson setup build ") and "--prefix=/usr" in setup and "meson install" in blocks["install"],
      f"the install block configures and installs: {blocks['install']!r}")
ROOT = tempfile.mkdtemp(prefix="remora-walkthrough.")
os.chmod(ROOT, 0o755)  # the unit's user reads the installed tree
made = {}
daemon = None
try:
    args = shlex.split(setup)[3:]
    args = [f"-Dtoolkit_dir={opts.get('toolkit_dir', '')}" if a.startswith("-Dtoolkit_dir=") else a for a in args]
    scratch = os.path.join(ROOT, "build-prefix-usr")
    p = subprocess.run([meson, "setup", scratch, *args], cwd=source, capture_output=True, text=True, timeout=120)
    check(p.returncode == 0, f"meson setup {' '.join(args)} ({p.stdout[-500:]}{p.stderr[-500:]})")
    if p.returncode == 0:
        for f in ("remorad.service", "remorad.conf.example", "remorad.conf.5.scd", "remorad.8.scd"):
            path = os.path.join(scratch, "dist", f)
            check(not os.path.exists(path) and f.endswith(".scd") or
                  "/etc/remora/remorad.conf" in open(path).read(),
                  f"with the doc's options, {f} names /etc/remora/remorad.conf")
        inst = json.loads(subprocess.run([meson, "introspect", scratch, "--installed"], capture_output=True,
                                         text=True).stdout)
        check({"/usr/lib/systemd/system/remorad.service", "/usr/lib/sysusers.d/remora.conf",
               "/etc/remora/remorad.conf.example"} <= set(inst.values()), "... and the unit, sysusers file and "
              "example go where systemd and the doc look")
    shutil.rmtree(scratch, ignore_errors=True)

    # This build, installed into the fresh root.
    stage = os.path.join(ROOT, "root")
    p = subprocess.run([meson, "install", "-C", build, "--destdir", stage, "--no-rebuild"], capture_output=True,
                       text=True, timeout=300)
    check(p.returncode == 0, f"meson install --destdir ({p.stderr.strip()[-500:]})")
    found = {}
    for top, _, names in os.walk(stage):
        for n in names:
            found.setdefault(n, []).append(os.path.join(top, n))
    unit_path = [f for f in found.get("remorad.service", []) if "/systemd/system/" in f]
    sysusers = [f for f in found.get("remora.conf", []) if "/sysusers.d/" in f]
    check(len(unit_path) == 1 and len(sysusers) == 1, f"the unit and the sysusers file: {unit_path} {sysusers}")
    if failures:
        sys.exit(1)
    unit = {}
    for line in open(unit_path[0]):
        k, sep, v = line.strip().partition("=")
        if sep and not k.startswith("#"):
            unit.setdefault(k, v)
    argv = shlex.split(unit["ExecStart"])
    config = argv[argv.index("--config") + 1]
    confdir = os.path.dirname(config)
    staged = lambda path: stage + path  # noqa: E731
    bindir = os.path.dirname(staged(argv[0]))
    user, group = unit["User"], unit["Group"]
    groups = unit.get("SupplementaryGroups", "").split()
    check(f"u {user} " in open(sysusers[0]).read(), f"the sysusers file makes the unit's user {user}")
    os.makedirs(staged(confdir), exist_ok=True)
    os.chmod(staged(confdir), 0o755)
    env = dict(ENV, PATH=bindir + os.pathsep + ENV.get("PATH", "/usr/bin:/bin"))

    def doc(name, **subst):
        """A block as the test runs it: the doc's names, ports and paths replaced."""
        text = blocks[name].replace("/etc/remora", staged(confdir)).replace("gpu1.example.org", host)
        text = text.replace("192.0.2.10", "127.0.0.1").replace(":7700", f":{port}").replace(":9400", f":{mport}")
        for a, b in subst.items():
            text = text.replace(a, b)
        return text

    # The name clients use: localhost where it is 127.0.0.1 first (remorad listens on IPv4).
    first = socket.getaddrinfo("localhost", None, type=socket.SOCK_STREAM)
    host = "localhost" if first and first[0][0] == socket.AF_INET else "127.0.0.1"
    port, mport = free_port(), free_port()

    # 2. The user.
    for kind, name in [("user", user), ("group", group)] + [("group", g) for g in groups]:
        made.setdefault((kind, name), not existed(kind, name))
    if shutil.which("systemd-sysusers"):
        bash(doc("user", **{"remora.conf": sysusers[0]}), "systemd-sysusers with the installed file", env=env)
    else:
        bash(doc("user-useradd"), "the useradd block", env=env)
    check(existed("user", user) and all(pwd.getpwnam(user).pw_name in grp.getgrnam(g).gr_mem
                                        for g in groups if existed("group", g)),
          f"the user {user} exists, in {groups}")
    if failures:
        sys.exit(1)

    # 3, 4. Certificates, tokens and the configuration.
    bash(doc("certs"), "the certificates block", env=env)
    vars_file = os.path.join(ROOT, "tokens")
    bash(doc("config") + f'\nprintf "%s\\n%s\\n" "$TOKEN" "$ADMIN" > {vars_file}\n', "the configuration block",
         env=env)
    token, admin = (open(vars_file).read().split() + ["", ""])[:2]
    st = os.stat(staged(config))
    check(st.st_mode & 0o777 == 0o640 and grp.getgrgid(st.st_gid).gr_name == user,
          f"the configuration is root:{user} 0640")

    # 5. The unit's command line, as its user, on the test driver.
    tdriver = os.path.join(ROOT, "testdriver.so")  # where the unit's user can read it
    shutil.copy(driver, tdriver)
    os.chmod(tdriver, 0o755)
    cmd = [staged(argv[0])] + [staged(a) if a == config else a for a in argv[1:]] + ["--driver", tdriver]
    denv = dict(ENV, **dict(e.split("=", 1) for e in shlex.split(unit.get("Environment", ""))))
    log_path = os.path.join(ROOT, "remorad.log")
    log = open(log_path, "w")
    daemon = subprocess.Popen(["setpriv", f"--reuid={user}", f"--regid={group}",
                               "--groups=" + ",".join(groups) if groups else "--clear-groups", "--", *cmd],
                              stderr=log, env=denv)
    up = wait_for(lambda: "listening on" in open(log_path).read() or daemon.poll() is not None, timeout=20)
    text = open(log_path).read()
    check(up and daemon.poll() is None, f"remorad starts from the unit's ExecStart as {user}:\n{text[-1500:]}")
    check("every client will be refused" not in text, "the walk-through's configuration serves a tenant")
    ids = open(f"/proc/{daemon.pid}/status").read() if daemon.poll() is None else ""
    uid = pwd.getpwnam(user).pw_uid
    check(re.search(rf"^Uid:\s+{uid}\s+{uid}\s+{uid}\s+{uid}$", ids, re.M) is not None,
          f"remorad runs as {user} (uid {uid})")

    # 6. The firewall block, in a network namespace of its own.
    if shutil.which("nft") and shutil.which("ip"):
        ns = f"remora-walk-{os.getpid()}"
        if subprocess.run(["ip", "netns", "add", ns], capture_output=True).returncode == 0:
            try:
                bash(f"ip netns exec {ns} nft add table inet filter\n"
                     f"ip netns exec {ns} nft add chain inet filter input "
                     "'{ type filter hook input priority 0; policy drop; }'\n" +
                     "\n".join(f"ip netns exec {ns} {line}" for line in blocks["firewall"].splitlines()
                               if line.startswith("nft ")), "the firewall block (in a namespace)")
                rules = subprocess.run(["ip", "netns", "exec", ns, "nft", "list", "chain", "inet", "filter", "input"],
                                       capture_output=True, text=True).stdout
                check("tcp dport 7700 accept" in rules and "ip saddr 192.0.2.20 tcp dport 9400 accept" in rules,
                      f"... and opens the client port, and the metrics port to Prometheus alone: {rules!r}")
            finally:
                subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    else:
        print("note: no nft here, the firewall block is not run")

    # 7, 8. A client with the CA and the tenant's token, then remora status with the operator's.
    client_dir = os.path.join(ROOT, "client")
    os.makedirs(client_dir)
    shutil.copy(staged(confdir) + "/ca.pem", client_dir)
    cenv = dict(env, TOKEN=token, ADMIN=admin)
    script = doc("client", **{"./my_cuda_program": " ".join(shlex.quote(a) for a in (program, image, "all"))})
    p = bash(script + "\necho ===status===\n" + doc("status"), "the client and status blocks", cwd=client_dir,
             env=cenv)
    out, _, status = p.stdout.partition("===status===")
    native = subprocess.run([program, image, "all"], capture_output=True, text=True, timeout=120,
                            env=dict(ENV, LD_LIBRARY_PATH=os.path.dirname(driver)))
    check(native.returncode == 0 and out.strip() and out.strip() == native.stdout.strip(),
          f"the program runs through the installed remorad over TLS, as natively: {out[-300:]!r}")
    check(re.search(r"^research\s+0\s+1\s", status, re.M) is not None,
          f"remora status with the operator's token shows the tenant and its client: {status!r}")

    # 9. Prometheus: the scrape job checks, and the scrape passes the linter.
    promtool = shutil.which("promtool")
    if promtool:
        yml = os.path.join(ROOT, "prometheus.yml")
        open(yml, "w").write(doc("prometheus"))
        p = subprocess.run([promtool, "check", "config", yml], capture_output=True, text=True, timeout=30)
        check(p.returncode == 0, f"promtool check config on the doc's scrape job ({p.stdout}{p.stderr})")
        with urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5) as r:
            metrics = r.read().decode()
        p = subprocess.run([promtool, "check", "metrics"], input=metrics, capture_output=True, text=True,
                           timeout=30)
        check(p.returncode == 0 and not (p.stdout + p.stderr).strip(), f"promtool check metrics ({p.stdout}"
              f"{p.stderr})")
        check(re.search(r'^remora_tenant_sessions_total\{tenant="research",[^}]*\} 1$', metrics, re.M),
              "the scrape counts the tenant's client")
    else:
        print("note: no promtool here (scripts/setup.sh installs it), the Prometheus step is not checked")
finally:
    if daemon:
        stop_process(daemon)
    shutil.rmtree(ROOT, ignore_errors=True)
    for (kind, name), new in made.items():
        if kind == "user" and new and existed("user", name):
            subprocess.run(["userdel", name], capture_output=True)
    for (kind, name), new in made.items():
        if kind == "group" and new and existed("group", name):
            subprocess.run(["groupdel", name], capture_output=True)
sys.exit(1 if failures else 0)
