#!/usr/bin/env python3
"""remorad under abuse: a client killed mid-work leaves nothing behind; garbage and a
truncated frame close only their own connection, with a logged reason, while another
client keeps working; a client's GPU fault does not outlive it; a client with no
server gets a clear message and an error.

usage: daemon_robustness.py REMORAD DRIVER REMORA PROBE IMAGE
"""
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from rmwire import FRAME, MAGIC, OP_ATTACH as ATTACH, varint  # noqa: E402

remorad, driver, remora, probe, image = sys.argv[1:6]


def client(server, *args, **kw):
    return subprocess.Popen([remora, "run", "--server", server, "--", probe, *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def free_bytes(server):
    p = client(server, "free")
    out, err = p.communicate(timeout=30)
    if p.returncode != 0:
        raise RuntimeError(f"probe free failed: {err}")
    return int(out)


def sessions_closed(log_path, timeout=10.0):
    """True once every session the daemon's log opened has logged its end (or False after timeout)."""
    end = time.monotonic() + timeout
    while True:
        text = open(log_path).read()
        opened = set(re.findall(r"session (\d+): client ", text))
        closed = set(re.findall(r"session (\d+) \(.*\) closed: ", text))
        if opened <= closed or time.monotonic() > end:
            return opened <= closed
        time.sleep(0.05)


def closed_by_daemon(sock, timeout=5.0):
    """True once the daemon has closed the connection (EOF or reset)."""
    sock.settimeout(timeout)
    try:
        while True:
            data = sock.recv(4096)
            if not data:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def main():
    tmp = tempfile.mkdtemp()
    ready = os.path.join(tmp, "addr")
    log_path = os.path.join(tmp, "remorad.log")
    log = open(log_path, "w")
    d = subprocess.Popen([remorad, "--listen", "tcp://127.0.0.1:0", "--set", "allow_anonymous=yes", "--driver", driver, "--ready-file", ready],
                         stderr=log, env=dict(os.environ, REMORA_LOG="info"))
    try:
        for _ in range(200):
            if os.path.exists(ready) and open(ready).read().strip():
                break
            time.sleep(0.05)
        server = open(ready).read().strip()
        host, port = server.rsplit(":", 1)

        # 1. A client killed while holding memory and a stream leaves nothing behind.
        before = free_bytes(server)
        holder = client(server, "hold", "256")
        check(holder.stdout.readline().strip() == "ready", "holder allocated 256 MiB")
        during = free_bytes(server)
        check(before - during >= 256 << 20, f"its memory is in use ({before - during} bytes)")
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        after = during
        for _ in range(100):
            after = free_bytes(server)
            if after == before:
                break
            time.sleep(0.05)
        check(after == before, f"after SIGKILL all of it is free again ({before} -> {after})")

        # 2. Garbage and a truncated frame close their own connections only.
        worker = client(server, "work", "2")
        time.sleep(0.2)
        g = socket.create_connection((host, int(port)))
        g.sendall(bytes(random.getrandbits(8) for _ in range(256)))
        check(closed_by_daemon(g), "garbage: the daemon closed that connection")
        t = socket.create_connection((host, int(port)))
        t.sendall(FRAME.pack(MAGIC, 0, 1, 100, 0, 0, 0, 0, 0) + b"\x08\x01")  # says 100 bytes, sends 2
        t.shutdown(socket.SHUT_WR)
        check(closed_by_daemon(t), "truncated frame: the daemon closed that connection")
        o = socket.create_connection((host, int(port)))
        o.sendall(FRAME.pack(MAGIC, 0, 1, 1 << 30, 0, 0, 0, 0, 0))  # over the message bound
        check(closed_by_daemon(o), "oversized length: closed before allocating")
        out, err = worker.communicate(timeout=60)
        check(worker.returncode == 0 and out.strip() == "ok", f"the other client kept working ({err.strip()})")
        check(free_bytes(server) == before, "and nothing leaked")
        check(d.poll() is None, "remorad is still running")

        p = client(server, "pointers")
        out, err = p.communicate(timeout=60)
        check(p.returncode == 0 and out.strip() == "ok", f"pointer attributes and registered memory ({err.strip()})")

        # 3. A client's GPU fault breaks the shared context; once its clients have
        #    left, the daemon resets it and serves new clients.
        p = client(server, "fault", image)
        out, err = p.communicate(timeout=60)
        check(out.strip() == "CUDA_ERROR_ILLEGAL_ADDRESS", f"a faulting kernel reports its fault ({out.strip()} {err.strip()})")
        # Its session ends a little after its process, and until then a new client gets
        # CUDA_ERROR_DEVICE_UNAVAILABLE (backend/gpu/gpus.h): wait for that, not for luck.
        check(sessions_closed(log_path), "the faulting client's session has ended")
        p = client(server, "work", "0.2")
        out, err = p.communicate(timeout=60)
        check(p.returncode == 0 and out.strip() == "ok", f"the next client works on a fresh context ({err.strip()})")
        # A fault no reply reported (its client left at once) is found when its session ends.
        p = client(server, "fault", image, "quietly")
        p.communicate(timeout=60)
        check(sessions_closed(log_path), "the quietly faulting client's session has ended")
        p = client(server, "work", "0.2")
        out, err = p.communicate(timeout=60)
        check(p.returncode == 0 and out.strip() == "ok",
              f"after a fault nobody heard of, the next client works on a fresh context ({err.strip()})")

        # 4. Copies striped over copy links arrive whole; a copy link that names no
        #    session, presents a wrong key or is malformed is refused, and nobody notices.
        p = client(server, "stripes", env=dict(os.environ, REMORA_COPY_LINKS="3", REMORA_STRIPE_MIN="1048576"))
        out, err = p.communicate(timeout=120)
        check(p.returncode == 0 and out.strip() == "ok", f"striped copies of odd sizes both ways ({err.strip()})")
        check("copy link 2 attached" in open(log_path).read(), "over two copy links beside the connection")
        holder = client(server, "hold", "16")
        check(holder.stdout.readline().strip() == "ready", "a client holds a session")
        sessions = re.findall(r"session (\d+): client probe", open(log_path).read())
        held = int(sessions[-1]) if sessions else 0

        def attach(session_id, key, index=1):
            msg = b"\x08" + varint(session_id) + b"\x12" + bytes([len(key)]) + key + b"\x18" + varint(index)
            a = socket.create_connection((host, int(port)))
            a.sendall(FRAME.pack(MAGIC, ATTACH, 1, len(msg), 0, 0, 0, 0, 0) + msg)
            a.settimeout(5)
            reply = b""
            while len(reply) < FRAME.size:
                data = a.recv(FRAME.size - len(reply))
                if not data:
                    break
                reply += data
            result = FRAME.unpack(reply)[7] if len(reply) == FRAME.size else None
            return result, closed_by_daemon(a)

        result, closed = attach(held + 1000, bytes(16))
        check(result not in (None, 0) and closed, f"an attach naming no session is refused ({result})")
        result, closed = attach(held, bytes(16))
        check(result == 800 and closed, f"an attach with a wrong key is refused: CUDA_ERROR_NOT_PERMITTED ({result})")
        text = open(log_path).read()
        check(f"copy link for session {held} refused (wrong key)" in text and
              f"copy link for session {held + 1000} refused (no such session)" in text,
              "the accepting process refuses a wrong key as it refuses an unknown session")
        check(not re.search(rf"session {held} \(.*\): copy link \d+ refused", text),
              "a wrong key never reaches the session's worker")
        # A wrong key of a live session is a guess; an unknown session is most often one that
        # just ended, and counting it would slow down every client behind its address.
        check(text.count("an attach with a wrong key") == 1,
              "a wrong key counts as a failed credential, an unknown session does not")
        result, closed = attach(held, bytes(3))
        check(result is None and closed, "a malformed attach is closed")
        check(holder.poll() is None, "the client it named is untouched")
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        p = client(server, "work", "0.2")
        out, err = p.communicate(timeout=60)
        check(p.returncode == 0 and out.strip() == "ok", f"and the daemon serves on ({err.strip()})")
    finally:
        d.terminate()
        d.wait()
        log.close()
    # 5. No server: a clear message and a CUDA error, not a hang.
    p = subprocess.run([remora, "run", "--server", "127.0.0.1:1", "--", probe, "free"],
                       capture_output=True, text=True, timeout=30)
    check(p.returncode != 0 and "cannot reach the GPU server" in p.stderr,
          "an unreachable server gives a clear message and an error")
    text = open(log_path).read()
    check("no valid hello" in text, "the log gives a reason for each closed connection")
    check("released" in text and "268435456 bytes" in text, "the log records the killed client's memory released")
    if failures:
        print("--- remorad log\n" + text, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
