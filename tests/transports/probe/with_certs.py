"""Runs transport-probe over tls:// with certificates made for the run.

    with_certs.py MAKE_CERTS PROBE ARG...

MAKE_CERTS (tests/lib/make_certs.sh) writes a CA, and a server certificate it signed, into
a new directory; the probe gets them with --tls before ARG... Exits with the probe's status.
"""
import subprocess
import sys
import tempfile

make_certs, probe, args = sys.argv[1], sys.argv[2], sys.argv[3:]
d = tempfile.mkdtemp(prefix="remora-tls-probe-")
subprocess.run([make_certs, d], check=True, stdout=subprocess.DEVNULL)
tls = ["--tls", d + "/server.pem", d + "/server.key", d + "/ca.pem"]
sys.exit(subprocess.run([probe] + tls + args).returncode)
