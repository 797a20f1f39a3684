"""Remora's wire format by hand, for tests that play a hostile peer (common/wire.h,
proto/remora.proto): frames, and protobuf fields encoded without a protobuf library."""
import socket
import struct

MAGIC = 0x524D5231
FRAME = struct.Struct("<IIQIIQQii")  # 48 bytes: magic op seq msg_len flags bulk_len ctx result async_result
F_REPLY, F_ASYNC = 1, 2
OP_HELLO, OP_STATUS, OP_ATTACH = 0, 0x10000, 0x10001
PROTOCOL_VERSION = 1


def varint(v):
    v &= (1 << 64) - 1
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def field_varint(number, v):
    return varint(number << 3) + varint(v)


def field_bytes(number, data):
    if isinstance(data, str):
        data = data.encode("utf-8", "surrogateescape")
    return varint(number << 3 | 2) + varint(len(data)) + data


def frame(op, msg=b"", seq=1, flags=0, bulk_len=None, ctx=0):
    """A request frame; bulk_len defaults to nothing beyond the message."""
    return FRAME.pack(MAGIC, op, seq, len(msg), flags, bulk_len or 0, ctx, 0, 0) + msg


def hello(name="hostile", credential=b"", pid=1):
    return (field_varint(1, PROTOCOL_VERSION) + field_varint(2, 13000) + field_bytes(3, credential) +
            field_bytes(4, name) + field_varint(5, pid))


def recv_exact(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_reply(sock, timeout=5.0):
    """(header fields as a tuple, message bytes), or None when the peer closed or timed out."""
    sock.settimeout(timeout)
    try:
        head = recv_exact(sock, FRAME.size)
        if head is None:
            return None
        f = FRAME.unpack(head)
        msg = recv_exact(sock, f[3]) if f[3] else b""
        return f, msg
    except (socket.timeout, ConnectionResetError):
        return None


def result_of(reply):
    return None if reply is None else reply[0][7]


def connect(host, port, name="hostile", credential=b""):
    """A connection whose hello was accepted."""
    s = socket.create_connection((host, port))
    s.sendall(frame(OP_HELLO, hello(name, credential)))
    r = read_reply(s)
    if result_of(r) != 0:
        raise RuntimeError(f"hello refused ({result_of(r)})")
    return s


def closed_by_peer(sock, timeout=5.0):
    """True once the peer has closed the connection (EOF or reset)."""
    sock.settimeout(timeout)
    try:
        while True:
            if not sock.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
