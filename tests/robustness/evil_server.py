#!/usr/bin/env python3
"""The client library against a malicious server (issue 11): a fake remorad that greets,
answers every call with success and a plausible reply, except for one evil value per
scenario. The real client library runs against it through `remora run` (and `remora
status` reads it). Each program must end with a clean CUDA error: a non-zero exit, no
signal, no sanitizer report, the client's line naming what was wrong; and nothing the
server sent may reach the terminal with a raw ESC or start a line of its own.

usage: evil_server.py REMORA PROBE DRV_QUERY IMAGE API_SPEC API_PROTO REMORA_PROTO [SCENARIO...]
"""
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402
from rmwire import FRAME, F_ASYNC, F_REPLY, MAGIC, OP_HELLO, OP_STATUS, varint  # noqa: E402,F401

CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_PERMITTED = 1, 800
EVIL_TEXT = "\x1b[2J\nforged line"

remora, probe, drv_query, image, api_spec, api_proto, remora_proto = sys.argv[1:8]


# --- the wire, by hand: opcodes from api.spec, field numbers and types from the .proto files

def read_opcodes(path):
    ops = {}
    for line in open(path):
        m = re.match(r"\s*(\d+)\s+(\w+)\s+\w+", line.split("#", 1)[0])
        if m:
            ops[m.group(2)] = int(m.group(1))
    return ops


def read_messages(*paths):
    """{message: {field: (number, type)}}; nested messages as Outer.Inner."""
    msgs, stack = {}, []
    for path in paths:
        for line in open(path):
            line = line.split("//", 1)[0]
            m = re.match(r"\s*message\s+(\w+)\s*\{", line)
            if m:
                stack.append(m.group(1))
                msgs[".".join(stack)] = {}
                continue
            m = re.match(r"\s*(repeated\s+)?(\w+)\s+(\w+)\s*=\s*(\d+)\s*;", line)
            if m and stack:
                msgs[".".join(stack)][m.group(3)] = (int(m.group(4)), m.group(2))
            if "}" in line and stack:
                stack.pop()
    return msgs


OPS = read_opcodes(api_spec)
NAMES = {v: k for k, v in OPS.items()}
MSGS = read_messages(api_proto, remora_proto)
LENGTH_TYPES = ("string", "bytes")


def encode(msg, **values):
    """A protobuf message: scalars as varints, str/bytes and (lists of) encoded messages
    length-delimited, floats as fixed32."""
    out = b""
    for name, value in values.items():
        number, ptype = MSGS[msg][name]
        for v in value if isinstance(value, list) else [value]:
            if isinstance(v, str):
                v = v.encode("utf-8")
            if isinstance(v, bytes):
                out += varint(number << 3 | 2) + varint(len(v)) + v
            elif ptype == "float":
                out += varint(number << 3 | 5) + struct.pack("<f", v)
            else:
                out += varint(number << 3) + varint(int(v))
    return out


def decode(msg, data):
    """The varint and length-delimited fields of a request, by name."""
    numbers = {n: name for name, (n, _) in MSGS.get(msg, {}).items()}
    fields, i = {}, 0
    while i < len(data):
        key, i = read_varint(data, i)
        kind = key & 7
        if kind == 0:
            v, i = read_varint(data, i)
        elif kind == 2:
            n, i = read_varint(data, i)
            v, i = data[i:i + n], i + n
        elif kind == 5:
            v, i = data[i:i + 4], i + 4
        elif kind == 1:
            v, i = data[i:i + 8], i + 8
        else:
            raise ValueError(f"wire type {kind} in {msg}")
        fields[numbers.get(key >> 3, key >> 3)] = v
    return fields


def read_varint(data, i):
    v = shift = 0
    while True:
        b = data[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return v, i


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(min(n - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return data


# --- the server

class Reply:
    def __init__(self, msg=b"", bulk=b"", result=0, seq_delta=0):
        self.msg, self.bulk, self.result, self.seq_delta = msg, bulk, result, seq_delta


HAND_REQUESTS = {"cuMemcpyDtoH_v2": "MemcpyDtoH", "cuMemcpyDtoHAsync_v2": "MemcpyDtoH",
                 "cuMemcpyHtoD_v2": "MemcpyHtoD", "cuMemcpyHtoDAsync_v2": "MemcpyHtoD",
                 "cuModuleLoadData": "ModuleLoad", "cuLibraryLoadData": "ModuleLoad",
                 "cuLaunchKernel": "LaunchKernel", "cuFuncGetName": "FuncGetName",
                 "rmFuncGetParamLayout": "FuncGetParamLayout"}


def plausible(name, req):
    """What a well-behaved daemon on one GPU would answer."""
    def rep(**v):
        return Reply(encode(name + "_Rep", **v))
    if name == "cuDeviceGetCount":
        return rep(count=1)
    if name == "cuDevicePrimaryCtxRetain":
        return rep(pctx=0x7000)
    if name in ("cuModuleLoadData", "cuLibraryLoadData"):
        return Reply(encode("ModuleLoadReply", module=0x7100))
    if name == "cuModuleGetFunction":
        return rep(hfunc=0x7200)
    if name == "cuMemAlloc_v2":
        return rep(dptr=0x100000)
    if name == "cuMemGetInfo_v2":
        return rep(free=1 << 30, total=2 << 30)
    if name in ("cuStreamCreate", "cuStreamCreateWithPriority"):
        return rep(phstream=0x7300)
    if name in ("cuDeviceGetName", "cuDeviceGetPCIBusId"):
        field = "name" if name == "cuDeviceGetName" else "pcibusid"
        n = req.get(field + "_len", 0)
        return rep(**{field: (b"Evil GPU\0" + bytes(n))[:n]})
    if name == "cuFuncGetParamInfo":  # one 8-byte parameter
        if req.get("paramindex", 0) > 0:
            return Reply(result=CUDA_ERROR_INVALID_VALUE)
        return rep(paramoffset=0, paramsize=8)
    if name == "rmFuncGetParamLayout":  # the same, in one reply
        return Reply(encode("FuncGetParamLayoutReply", offset=[0], size=[8]))
    if name in ("cuMemcpyDtoH_v2", "cuMemcpyDtoHAsync_v2"):
        return Reply(bulk=bytes(req.get("count", 0)))
    if name == "cuPointerGetAttribute":
        return rep(data=struct.pack("<QQ", 2, 0)[:req.get("data_len", 0)])
    if name == "cuFuncGetName":
        return Reply(encode("FuncGetNameReply", name="evilKernel"))
    return Reply()


def status_reply():
    gpu = encode("StatusReply.Gpu", index=0, name="GPU " + EVIL_TEXT, uuid="GPU-" + EVIL_TEXT,
                 total_bytes=2 << 30, free_bytes=1 << 30, clients=2)
    clients = [encode("StatusReply.Client", session_id=1, tenant="t" + EVIL_TEXT, name=EVIL_TEXT,
                      peer="127.0.0.1:1" + EVIL_TEXT, pid=1, gpu_mask=1, mem_bytes=1 << 20, since=0),
               encode("StatusReply.Client", session_id=2, tenant="", name="late", peer="",
                      pid=2, gpu_mask=1, mem_bytes=0, since=(1 << 63) - 1)]  # past any calendar
    return encode("StatusReply", host="evil" + EVIL_TEXT, address="127.0.0.1:1", draining=0,
                  pool="none" + EVIL_TEXT, driver_version=13000, gpus=[gpu], clients=clients)


class EvilServer:
    """Serves each connection in a thread; evil(name, request fields) gives a Reply to
    send instead of the plausible one, or None."""

    def __init__(self, evil=None, hello_result=0, driver_version=13000):
        self.evil, self.hello_result = evil or (lambda name, req: None), hello_result
        self.driver_version = driver_version
        self.launch_params = []  # the params' length of each launch that arrived
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.addr = "127.0.0.1:%d" % self.sock.getsockname()[1]
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self.serve, args=(conn,), daemon=True).start()

    def send(self, conn, op, seq, reply):
        conn.sendall(FRAME.pack(MAGIC, op, seq + reply.seq_delta, len(reply.msg), F_REPLY, len(reply.bulk), 0,
                                reply.result, 0) + reply.msg + reply.bulk)

    def serve(self, conn):
        try:
            while True:
                head = recv_exact(conn, FRAME.size)
                if head is None:
                    return
                magic, op, seq, msg_len, flags, bulk_len = FRAME.unpack(head)[:6]
                msg = recv_exact(conn, msg_len) if msg_len else b""
                while bulk_len:  # an image or a copy's bytes: not needed
                    n = min(bulk_len, 1 << 20)
                    if recv_exact(conn, n) is None:
                        return
                    bulk_len -= n
                if op == OP_HELLO:
                    if self.hello_result:
                        self.send(conn, op, seq, Reply(encode("HelloReply", error="refused" + EVIL_TEXT),
                                                       result=self.hello_result))
                        return
                    self.send(conn, op, seq, Reply(encode("HelloReply", protocol_version=1,
                                                          driver_version=self.driver_version, session_id=1)))
                    continue
                if op == OP_STATUS:
                    self.send(conn, op, seq, Reply(status_reply()))
                    return
                name = NAMES.get(op, "?")
                if name == "cuLaunchKernel":
                    self.launch_params.append(len(decode("LaunchKernel", msg).get("params", b"")))
                if flags & F_ASYNC:
                    continue
                req = decode(HAND_REQUESTS.get(name, name + "_Req"), msg)
                reply = self.evil(name, req)
                self.send(conn, op, seq, reply if reply is not None else plausible(name, req))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self):
        self.sock.close()


# --- the scenarios

def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}
    env["REMORA_COPY_LINKS"] = "1"
    return env


def terminal_is_clean(what, out):
    check(b"\x1b" not in out, f"{what}: no raw ESC reached the terminal")
    check(not any(line.startswith(b"forged line") for line in out.splitlines()),
          f"{what}: no line forged by the server")


def run_program(what, server, argv, expect, params_at_most=None):
    try:
        p = subprocess.run([remora, "run", "--server", server.addr, "--", *argv], capture_output=True,
                           timeout=60, env=clean_env())
    except subprocess.TimeoutExpired:
        check(False, f"{what}: the program ended")
        return
    out = p.stdout + p.stderr
    text = out.decode("utf-8", "replace").strip().replace("\n", " | ")
    check(p.returncode > 0, f"{what}: a CUDA error, not success or a signal (exit {p.returncode}: {text})")
    check(b"Sanitizer" not in out and b"runtime error:" not in out, f"{what}: no sanitizer report")
    check(expect.encode() in p.stderr, f"{what}: the client's line names it ({expect!r})")
    terminal_is_clean(what, out)
    if params_at_most is not None:
        check(all(n <= params_at_most for n in server.launch_params),
              f"{what}: no launch sent more of the program's memory than its {params_at_most}-byte parameters "
              f"(launches of {server.launch_params} bytes)")


def params(offsets, sizes, too_many=False):
    """A layout in rmFuncGetParamLayout's reply."""
    return lambda name, req: (Reply(encode("FuncGetParamLayoutReply", offset=offsets, size=sizes, too_many=int(too_many)))
                              if name == "rmFuncGetParamLayout" else None)


def name_reply(make):
    return lambda name, req: (Reply(encode("cuDeviceGetName_Rep", name=make(req["name_len"])))
                              if name == "cuDeviceGetName" else None)


def dtoh_bulk(make):
    return lambda name, req: Reply(bulk=make(req["count"])) if name == "cuMemcpyDtoH_v2" else None


PROGRAM_SCENARIOS = {
    "param-offset": (params([(1 << 64) - 8], [8]), [probe, "fault", image], "cuFuncGetParamInfo"),
    "param-size": (params([0], [1 << 63]), [probe, "fault", image], "cuFuncGetParamInfo"),
    # Layouts no kernel has, for probe's kernel of one 8-byte parameter (issue 37): too many
    # parameters, two parameters at one offset. (Gaps and a first parameter past 0 are real:
    # they are packed as zeros, and read nothing more of the program's memory.)
    "param-endless": (params([], [], too_many=True), [probe, "fault", image], "cuFuncGetParamInfo"),
    "param-overlap": (params([0, 0], [8, 8]), [probe, "fault", image], "cuFuncGetParamInfo"),
    # Replies no daemon sends: more parameters than the bound, offsets without sizes.
    "param-count": (params([8 * i for i in range(520)], [8] * 520), [probe, "fault", image],
                    "rmFuncGetParamLayout: 520 offsets and 520 sizes"),
    "param-unpaired": (params([0, 8], [8]), [probe, "fault", image], "rmFuncGetParamLayout: 2 offsets and 1 sizes"),
    "name-longer": (name_reply(lambda n: b"E" * (n + 44) + b"\0"), [drv_query], "cuDeviceGetName"),
    "name-unterminated": (name_reply(lambda n: b"E" * n), [drv_query], "cuDeviceGetName"),
    "dtoh-longer": (dtoh_bulk(lambda n: bytes(n + 64)), [probe, "work", "0"], "receive bulk"),
    "dtoh-missing": (dtoh_bulk(lambda n: b""), [probe, "work", "0"], "receive bulk"),
    "wrong-seq": (lambda name, req: Reply(encode("cuMemGetInfo_v2_Rep", free=1, total=2), seq_delta=1)
                  if name == "cuMemGetInfo_v2" else None, [probe, "free"], "reply out of order"),
    "pointer-short": (lambda name, req: Reply(encode("cuPointerGetAttribute_Rep", data=b"\x02\x00"))
                      if name == "cuPointerGetAttribute" else None, [probe, "pointers"], "cuPointerGetAttribute"),
}


def param_old_driver():
    """A parameter of 8 KiB from a driver whose limit is 4 KiB (before CUDA 12.1)."""
    s = EvilServer(params([0], [8192]), driver_version=12000)
    try:
        run_program("param-old-driver", s, [probe, "fault", image], "cuFuncGetParamInfo", params_at_most=8)
    finally:
        s.close()


def param_honest():
    """The layout of a kernel of one 8-byte parameter: launched, with those 8 bytes."""
    s = EvilServer()
    try:
        p = subprocess.run([remora, "run", "--server", s.addr, "--", probe, "fault", image], capture_output=True,
                           timeout=60, env=clean_env())
        check(p.returncode == 0 and s.launch_params == [8],
              f"param-honest: launched with its 8 bytes (exit {p.returncode}, launches of {s.launch_params} bytes: "
              f"{p.stderr!r})")
    finally:
        s.close()


def hello_refused():
    s = EvilServer(hello_result=CUDA_ERROR_NOT_PERMITTED)
    try:
        run_program("hello-refused", s, [probe, "free"], "refused this client: refused\\x1b[2J\\x0aforged line")
    finally:
        s.close()


def status():
    s = EvilServer()
    try:
        for args in ([], ["--json"]):
            what = "status" + (" --json" if args else "")
            try:
                p = subprocess.run([remora, "status", s.addr, *args], capture_output=True, timeout=30, env=clean_env())
            except subprocess.TimeoutExpired:
                check(False, f"{what}: ended")
                continue
            out = p.stdout + p.stderr
            check(p.returncode == 0, f"{what}: lists the daemon (exit {p.returncode}: {p.stderr!r})")
            terminal_is_clean(what, out)
            if args:
                try:
                    programs = [c["program"] for c in json.loads(p.stdout)["clients"]]
                except ValueError:
                    programs = []
                check(programs == [EVIL_TEXT, "late"], f"{what}: valid JSON that keeps the names ({programs})")
            else:
                check(b"\\x1b[2J\\x0aforged line" in p.stdout, f"{what}: the name shown escaped")
    finally:
        s.close()


def main():
    chosen = sys.argv[8:]
    for name, (evil, argv, expect) in PROGRAM_SCENARIOS.items():
        if chosen and name not in chosen:
            continue
        s = EvilServer(evil)
        try:
            run_program(name, s, argv, expect, 8 if name.startswith("param-") else None)
        finally:
            s.close()
    if not chosen or "param-honest" in chosen:
        param_honest()
    if not chosen or "param-old-driver" in chosen:
        param_old_driver()
    if not chosen or "hello-refused" in chosen:
        hello_refused()
    if not chosen or "status" in chosen:
        status()
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
