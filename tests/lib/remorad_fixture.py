"""A private remorad for Python tests: started on a free loopback port with a
configuration file, its log kept, stopped at the end."""
import os
import re
import subprocess
import time


def wait_for(pred, timeout=10.0, step=0.05):
    """pred()'s first true value, or its last value once timeout seconds have passed."""
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > end:
            return v
        time.sleep(step)


def alive(pid):
    """Whether process pid exists (a zombie not yet reaped counts)."""
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def stop_process(proc, grace=10):
    """Ends proc: SIGTERM, then SIGKILL once grace seconds have passed."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Daemon:
    """remorad on the given driver (None: the system's libcuda), REMORA_LOG=info, its log in
    tmp/NAME.log."""

    def __init__(self, remorad, driver, tmp, name, config, env=None, args=(), preexec_fn=None,
                 listen="tcp://127.0.0.1:0"):
        self.log_path = os.path.join(tmp, name + ".log")
        conf = os.path.join(tmp, name + ".conf")
        ready = os.path.join(tmp, name + ".addr")
        with open(conf, "w") as f:
            # Anonymous clients are off by default; the tests that are not about
            # credentials run their clients without one.
            if "allow_anonymous" not in config:
                f.write("allow_anonymous = yes\n")
            f.write(config)
        denv = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
        denv.update({"REMORA_LOG": "info", **(env or {})})  # env may set REMORA_LOG too
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([remorad, "--config", conf, "--listen", listen,
                                      *(["--driver", driver] if driver else []), "--ready-file", ready, *args],
                                     stderr=self.log, env=denv, preexec_fn=preexec_fn)
        ok = wait_for(lambda: os.path.exists(ready) and open(ready).read().strip(), timeout=10)
        if not ok:
            self.stop()
            raise RuntimeError("remorad did not start:\n" + self.text())
        self.server = open(ready).read().strip()
        if listen.startswith("unix:") or ":" not in self.server:  # the ready file names the socket's path
            self.server, self.host, self.port = "unix:" + self.server, None, None
            return
        host, port = self.server.rsplit(":", 1)
        self.host, self.port = host, int(port)

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def workers(self):
        """{tenant: pid} from the "started worker PID for TENANT" lines."""
        return {m.group(2): int(m.group(1)) for m in re.finditer(r"started worker (\d+) for ([^\n]+)", self.text())}

    def stop(self):
        stop_process(self.proc)
        self.log.close()
