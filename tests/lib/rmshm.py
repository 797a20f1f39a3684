"""The shared-memory transport's dialing end by hand (transport/shm/shm.c), for tests that
play a hostile client on this host: a Unix socket, a sealed memfd holding two rings, and
wake-up bytes. Small frames only; indices are read and written as aligned 64-bit words."""
import ctypes
import fcntl
import mmap
import os
import select
import socket
import struct
import time

import rmwire as w

_libc = ctypes.CDLL(None, use_errno=True)

SHM_MAGIC = 0x314E5248534D5252
SHM_VERSION = 2  # transport/shm/shm_conn.h
HEADER = 4096
RING = 64 << 10
CTL = (64, 64 + 256)  # ring 0 (dialer -> acceptor), ring 1: head +0, reader_waiting +64, tail +128, writer_waiting +192


class Conn:
    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(path)
        self.timeout = timeout
        self.memfd = os.memfd_create("hostile-shm", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.memfd, HEADER + 2 * RING)
        fcntl.fcntl(self.memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.map = mmap.mmap(self.memfd, HEADER + 2 * RING)
        struct.pack_into("<QIIQQQQ", self.map, 0, SHM_MAGIC, SHM_VERSION, HEADER, RING, RING, HEADER, HEADER + RING)
        self.words = {}
        self.tx_head = self.rx_tail = 0
        socket.send_fds(self.sock, [struct.pack("<QII", SHM_MAGIC, SHM_VERSION, 0)], [self.memfd])

    def _word(self, off):
        if off not in self.words:
            self.words[off] = ctypes.c_uint64.from_buffer(self.map, off)
        return self.words[off]

    def futex_wake(self, off):
        """Wakes whoever sleeps on the 32-bit flag at off (SYS_futex, FUTEX_WAKE, x86-64)."""
        word = ctypes.c_uint32.from_buffer(self.map, off)
        _libc.syscall(202, ctypes.c_void_p(ctypes.addressof(word)), 1, 0x7FFFFFFF, None, None, 0)
        del word

    def wake(self, fds=()):
        """A wake-up byte, with descriptors riding on it if given."""
        if fds:
            socket.send_fds(self.sock, [b"\0"], list(fds))
        else:
            self.sock.send(b"\0")

    def send(self, data):
        assert len(data) <= RING
        while RING - (self.tx_head - self._word(CTL[0] + 128).value) < len(data):
            time.sleep(0.001)
        for i, b in enumerate(data):
            self.map[HEADER + (self.tx_head + i) % RING] = b
        self.tx_head += len(data)
        self._word(CTL[0]).value = self.tx_head
        # Always, both ways the daemon may sleep (on its flag, or in poll()): a flag read
        # before the store is seen could miss the daemon going to sleep.
        self.futex_wake(CTL[0] + 64)
        self.wake()

    def recv_exact(self, n):
        out = bytearray()
        end = time.monotonic() + self.timeout
        while len(out) < n:
            head = self._word(CTL[1]).value
            if head == self.rx_tail:
                if time.monotonic() > end or self.peer_closed():
                    return None
                time.sleep(0.001)
                continue
            take = min(head - self.rx_tail, n - len(out))
            for i in range(take):
                out.append(self.map[HEADER + RING + (self.rx_tail + i) % RING])
            self.rx_tail += take
            self._word(CTL[1] + 128).value = self.rx_tail
            if self._word(CTL[1] + 192).value:
                self._word(CTL[1] + 192).value = 0
                self.futex_wake(CTL[1] + 192)
                self.wake()
        return bytes(out)

    def peer_closed(self):
        r, _, _ = select.select([self.sock], [], [], 0)
        if not r:
            return False
        try:
            return self.sock.recv(4096, socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return False
        except ConnectionResetError:
            return True

    def read_reply(self):
        head = self.recv_exact(w.FRAME.size)
        if head is None:
            return None
        f = w.FRAME.unpack(head)
        msg = self.recv_exact(f[3]) if f[3] else b""
        return None if msg is None else (f, msg)

    def call(self, op, msg=b"", seq=1, fds=None):
        """Sends a request (descriptors passed just before it, as the client does) and reads its reply."""
        if fds is not None:
            self.wake(fds)
        self.send(w.frame(op, msg, seq=seq))
        return self.read_reply()

    def hello(self, name="hostile"):
        r = self.call(w.OP_HELLO, w.hello(name))
        if w.result_of(r) != 0:
            raise RuntimeError(f"hello refused ({w.result_of(r)})")

    def close(self):
        self.words.clear()
        self.sock.close()
        os.close(self.memfd)


def big_ring_dialer(path, ring):
    """A unix: dialer whose memfd holds two rings of ring bytes, untouched (sparse)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    fd = os.memfd_create("big-rings", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 4096 + 2 * ring)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
    os.pwrite(fd, struct.pack("<QIIQQQQ", 0x314E5248534D5252, SHM_VERSION, 4096, ring, ring, 4096, 4096 + ring), 0)
    socket.send_fds(s, [struct.pack("<QII", 0x314E5248534D5252, SHM_VERSION, 0)], [fd])
    os.close(fd)  # the daemon holds its own reference, if it took it
    return s
