#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/TARGET/): valid inputs of each
kind and regression inputs for known defects. Run again after changing it; the files are
kept in the repository. Image seeds are copied from a build directory that built
tests/unit's images with nvcc: make_corpus.py [BUILD_DIR]."""
import base64
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(HERE, 'corpus')

# common/wire.h
FRAME = struct.Struct('<IIQIIQQii')
MAGIC = 0x524D5231
F_REPLY, F_ASYNC = 1, 2
OP_HELLO, OP_STATUS, OP_ATTACH = 0, 0x10000, 0x10001
OP_MIGRATE_STATE, OP_MIGRATE_IMAGE, OP_MIGRATE_RANGES = 0x102BD, 0x102C1, 0x102C2  # proto/reserved_ops.def
# Opcodes of proto/api.spec (fixed, append-only), as the generated api_ops.h numbers them.
OP = {'cuInit': 1, 'cuDeviceGet': 2, 'cuDeviceGetCount': 3, 'cuDeviceGetName': 4,
      'cuDevicePrimaryCtxRetain': 13, 'cuCtxSynchronize': 21, 'cuMemAlloc_v2': 27, 'cuMemFree_v2': 28,
      'cuMemGetInfo_v2': 29, 'cuMemsetD16Async': 34, 'cuMemsetD32Async': 35, 'cuMemcpyHtoD_v2': 36, 'cuMemcpyDtoH_v2': 37,
      'cuMemcpyDtoD_v2': 38, 'cuModuleLoadData': 43, 'cuModuleUnload': 44, 'cuModuleGetFunction': 45,
      'cuLaunchKernel': 47, 'cuStreamCreate': 53, 'cuStreamDestroy_v2': 55, 'cuStreamSynchronize': 56,
      'cuEventCreate': 61, 'cuEventDestroy_v2': 62, 'cuEventRecord': 63, 'cuEventSynchronize': 65,
      'cuLibraryLoadData': 69, 'cuMemAllocAsync': 86, 'rmFuncGetParamLayout': 158}
OP.update({'rmNcclGetVersion': 620, 'rmNcclGetUniqueId': 621, 'rmNcclCommInitRank': 622, 'rmNcclCommInitAll': 623,
           'rmNcclCommSplit': 624, 'rmNcclCommFinalize': 625, 'rmNcclCommDestroy': 626, 'rmNcclCommAbort': 627,
           'rmNcclCommQuery': 628, 'rmNcclGetLastError': 629, 'rmNcclCollective': 630, 'rmNcclGroupStart': 631,
           'rmNcclGroupEnd': 632, 'rmNcclRedOpCreatePreMulSum': 633, 'rmNcclRedOpDestroy': 634})
ASYNC_OPS = {'cuMemsetD16Async', 'cuMemsetD32Async', 'cuLaunchKernel', 'cuEventRecord'}


def alias(n, offset=0):
    """What fuzz_request.c replaces with the n-th handle the daemon's replies carried, plus offset."""
    return 0xA11A << 48 | n << 32 | offset


def varint(v):
    v &= (1 << 64) - 1
    out = b''
    while True:
        out += bytes([(v & 0x7F) | (0x80 if v > 0x7F else 0)])
        v >>= 7
        if not v:
            return out


def fv(number, v):
    return varint(number << 3) + varint(v)


def fb(number, data):
    data = data.encode() if isinstance(data, str) else data
    return varint(number << 3 | 2) + varint(len(data)) + data


def frame(op, msg=b'', seq=1, flags=0, bulk=b'', bulk_len=None, ctx=0):
    return FRAME.pack(MAGIC, op, seq, len(msg), flags, len(bulk) if bulk_len is None else bulk_len, ctx, 0,
                      0) + msg + bulk


class Session:
    """A request target input: frames after the hello, numbered from 2."""

    def __init__(self):
        self.data = b''
        self.seq = 2

    def call(self, name, msg=b'', bulk=b'', ctx=alias(0), **kw):
        flags = F_ASYNC if name in ASYNC_OPS else 0
        self.data += frame(OP[name], msg, self.seq, flags, bulk, ctx=ctx, **kw)
        self.seq += 1
        return self


PTX = (b'.version 8.0\n.target sm_90\n.address_size 64\n\n'
       b'.visible .entry vecAdd(\n\t.param .u64 a,\n\t.param .u64 b,\n\t.param .u64 c,\n\t.param .u32 n\n)\n'
       b'{\n\tret;\n}\n')
PTX_STATEFUL = PTX.replace(b'\n\n', b'\n\n.visible .global .align 4 .u32 counter;\n\n', 1)


def context(s):
    """Handle 0: the primary context of device 0."""
    return s.call('cuInit', fv(1, 0), ctx=0).call('cuDeviceGet', fv(1, 0), ctx=0) \
            .call('cuDevicePrimaryCtxRetain', fv(1, 0), ctx=0)


def request_seeds():
    seeds = {}
    # Handles: 0 context, 1 memory, 2 module, 3 function, 4 stream, 5 event.
    s = context(Session())
    s.call('cuMemAlloc_v2', fv(1, 4096))
    s.call('cuMemcpyHtoD_v2', fv(1, alias(1)) + fv(3, 1) + fv(4, 64), bulk=bytes(range(64)))
    s.call('cuMemsetD16Async', fv(1, alias(1, 64)) + fv(2, 0x3c00) + fv(3, 32))
    s.call('cuModuleLoadData', fv(1, 2), bulk=PTX)
    s.call('cuModuleGetFunction', fv(1, alias(2)) + fb(2, 'vecAdd'))
    params = struct.pack('<QQQI', alias(1), alias(1, 256), alias(1, 512), 16)
    s.call('cuLaunchKernel', fv(1, alias(3)) + fv(2, 1) + fv(3, 1) + fv(4, 1) + fv(5, 16) + fv(6, 1) + fv(7, 1) +
           fb(10, params))
    s.call('cuStreamCreate', fv(1, 1))
    s.call('cuEventCreate', fv(1, 0))
    s.call('cuEventRecord', fv(1, alias(5)) + fv(2, alias(4)))
    s.call('cuEventSynchronize', fv(1, alias(5)))
    s.call('cuMemcpyDtoH_v2', fv(1, alias(1, 512)) + fv(2, 64) + fv(4, 1))
    s.call('cuCtxSynchronize')
    s.call('cuEventDestroy_v2', fv(1, alias(5)))
    s.call('cuStreamDestroy_v2', fv(1, alias(4)))
    s.call('cuModuleUnload', fv(1, alias(2)))
    s.call('cuMemFree_v2', fv(1, alias(1)))
    seeds['session'] = s.data

    # Left for the session's end to release: memory, a stream, an event, a private module.
    s = context(Session())
    s.call('cuMemAlloc_v2', fv(1, 1 << 20)).call('cuStreamCreate', fv(1, 0)).call('cuEventCreate', fv(1, 2))
    s.call('cuModuleLoadData', fv(1, 2), bulk=PTX_STATEFUL)
    s.call('cuMemcpyDtoH_v2', fv(1, alias(1)) + fv(2, 4096) + fv(3, alias(2)) + fv(4, 1))
    seeds['left-open'] = s.data

    # A move's target (fuzz_request.c): images sent ahead (backend/worker/migrate_wire.h:
    # u32 kind 1 module / 2 library, u32 device ordinal), one of them stateful, one refused;
    # the session ends before any state, so what it preloaded goes with it.
    ahead = frame(OP_MIGRATE_IMAGE, seq=2, bulk=struct.pack('<II', 1, 0) + PTX)
    ahead += frame(OP_MIGRATE_IMAGE, seq=3, bulk=struct.pack('<II', 2, 0) + PTX_STATEFUL)
    ahead += frame(OP_MIGRATE_IMAGE, seq=4, bulk=struct.pack('<II', 1, 7) + PTX)
    ahead += frame(OP_MIGRATE_STATE, seq=5, bulk=b'\0' * 16)
    seeds['images-ahead'] = ahead

    # Address ranges sent ahead (migrate_wire.h: u64 base, u64 size each): one at a 32 MiB
    # block, one that ends past the address space, then one of a length that is no list.
    ranges = frame(OP_MIGRATE_RANGES, seq=2, bulk=struct.pack('<QQ', 0x7f0000000000, 32 << 20) +
                   struct.pack('<QQ', 0x7f1000200000, 2 << 20))
    ranges += frame(OP_MIGRATE_RANGES, seq=3, bulk=struct.pack('<QQ', 0xffffffffffe00000, 4 << 20))
    ranges += frame(OP_MIGRATE_RANGES, seq=4, bulk=b'\1' * 15)
    ranges += frame(OP_MIGRATE_IMAGE, seq=5, bulk=struct.pack('<II', 1, 0) + PTX)
    seeds['ranges-ahead'] = ranges

    # A kernel that faults the shared context, and the client gone before any reply said so.
    s = context(Session()).call('cuModuleLoadData', fv(1, 2), bulk=PTX.replace(b'vecAdd', b'faultKernel'))
    s.call('cuModuleGetFunction', fv(1, alias(1)) + fb(2, 'faultKernel'))
    s.call('cuLaunchKernel', fv(1, alias(2)) + fv(2, 1) + fv(3, 1) + fv(4, 1) + fv(5, 1) + fv(6, 1) + fv(7, 1) +
           fb(10, struct.pack('<Q', 8)))
    seeds['kernel-fault-then-close'] = s.data

    # Launches each followed at once by a synchronize of its stream (the span with no start
    # event, rm_session_sync_follows): a created stream and cuStreamSynchronize, the legacy
    # stream and cuCtxSynchronize. Handles: 0 context, 1 memory, 2 module, 3 function, 4 stream.
    s = context(Session()).call('cuMemAlloc_v2', fv(1, 4096)).call('cuModuleLoadData', fv(1, 2), bulk=PTX)
    s.call('cuModuleGetFunction', fv(1, alias(2)) + fb(2, 'vecAdd')).call('cuStreamCreate', fv(1, 1))
    launch = fv(1, alias(3)) + fv(2, 1) + fv(3, 1) + fv(4, 1) + fv(5, 16) + fv(6, 1) + fv(7, 1)
    params = fb(10, struct.pack('<QQQI', alias(1), alias(1, 256), alias(1, 512), 16))
    s.call('cuLaunchKernel', launch + fv(9, alias(4)) + params).call('cuStreamSynchronize', fv(1, alias(4)))
    s.call('cuLaunchKernel', launch + params).call('cuCtxSynchronize')
    s.call('cuLaunchKernel', launch + fv(9, alias(4)) + params).call('cuStreamSynchronize', fv(1, 0))
    seeds['launch-then-sync'] = s.data

    # A function's parameter layout in one reply; a function the client does not own.
    # Handles: 0 context, 1 module, 2 function.
    s = context(Session()).call('cuModuleLoadData', fv(1, 2), bulk=PTX)
    s.call('cuModuleGetFunction', fv(1, alias(1)) + fb(2, 'vecAdd')).call('rmFuncGetParamLayout', fv(1, alias(2)))
    s.call('rmFuncGetParamLayout', fv(1, 0x7200))
    seeds['param-layout'] = s.data

    s = context(Session()).call('cuMemGetInfo_v2').call('cuDeviceGetName', fv(1, 64) + fv(2, 64) + fv(3, 0))
    s.call('cuDeviceGetCount')
    seeds['queries'] = s.data
    # Compressed copies (common/zchunk.h): to the device, a zstd chunk and a stored one; from
    # it, asked compressed; then chunks that lie about their lengths (the session closes).
    z = zstd(bytes(8192))
    s = context(Session()).call('cuMemAlloc_v2', fv(1, 1 << 20))
    s.call('cuMemcpyHtoD_v2', fv(1, alias(1)) + fv(4, 8192 + 16) + fv(9, 1),
           bulk=struct.pack('<II', 8192, len(z)) + z + struct.pack('<II', 16, 16) + bytes(range(16)))
    s.call('cuMemcpyDtoH_v2', fv(1, alias(1)) + fv(2, 1 << 20) + fv(8, 1))
    s.call('cuMemcpyHtoD_v2', fv(1, alias(1)) + fv(4, 8000) + fv(9, 1), bulk=struct.pack('<II', 8000, len(z)) + z)
    seeds['compressed-copies'] = s.data
    s = context(Session()).call('cuMemAlloc_v2', fv(1, 1 << 20))
    s.call('cuMemcpyHtoD_v2', fv(1, alias(1)) + fv(4, 4096) + fv(9, 1), bulk=struct.pack('<II', 8192, 16) + bytes(16))
    seeds['compressed-header-past-copy'] = s.data

    # Regressions. A striped copy over 0x80000001 links overflowed a stack array of 8.
    s = context(Session()).call('cuMemAlloc_v2', fv(1, 4096))
    s.call('cuMemcpyHtoD_v2', fv(1, alias(1)) + fv(3, 0x80000001) + fv(4, 16), bulk=bytes(16))
    seeds['regress-htod-links-0x80000001'] = s.data
    s = context(Session()).call('cuMemAlloc_v2', fv(1, 4096))
    s.call('cuMemcpyDtoH_v2', fv(1, alias(1)) + fv(2, 16) + fv(4, 0x80000001))
    seeds['regress-dtoh-links-0x80000001'] = s.data
    # Memsets whose length in bytes, N * 2 or N * 4, wrapped past 2^64 to a few bytes
    # (and cuMemsetD16Async of 2^62+1, whose 2^63+2 bytes do not wrap).
    for op, unit, n in (('cuMemsetD16Async', 2, (1 << 62) + 1), ('cuMemsetD16Async', 2, (1 << 63) + 1),
                        ('cuMemsetD32Async', 4, (1 << 62) + 1)):
        s = context(Session()).call('cuMemAlloc_v2', fv(1, 4096))
        s.call(op, fv(1, alias(1)) + fv(2, 1) + fv(3, n))
        seeds['regress-memsetd%d-n-%d' % (unit * 8, n)] = s.data
    # Memory from the client's default pool, left for the session's end: the pool's record in
    # the test driver outlived cuMemPoolDestroy unreachable (found by fuzzing, a leak).
    s = context(Session()).call('cuMemAllocAsync', fv(1, 256))
    seeds['regress-default-pool-left'] = s.data
    # A first request with a zero-length message (rm_link_read of 0 bytes into no buffer).
    seeds['regress-empty-message'] = frame(OP['cuCtxSynchronize'], seq=2) + frame(OP['cuInit'], seq=3)
    # Images the driver reads past: cuModuleLoadData has no length, so the driver takes the
    # extent an ELF header declares (section headers at 64 KiB of a 64-byte image) ...
    elf = bytearray(b'\x7fELF\x02\x01\x01' + bytes(57))
    struct.pack_into('<QHHH', elf, 0x28, 0x10000, 64, 16, 0)
    s = context(Session()).call('cuModuleLoadData', fv(1, 1), bulk=bytes(elf))
    s.call('cuModuleLoadData', fv(1, 2), bulk=b'')
    seeds['regress-image-elf-extent'] = s.data
    # ... or follows the pointer of a fatbin wrapper (__fatBinC_Wrapper_t: magic, version, data).
    wrapper = struct.pack('<IIQQ', 0x466243B1, 1, 0x4141414141414141, 0)
    # NCCL on the test NCCL (remora.NcclCall): a communicator of one rank (handle 2), its
    # queries, collectives alone and in a group, then destroyed; one left for the release.
    def nccl_comm(s):
        s.call('cuMemAlloc_v2', fv(1, 4096)).call('rmNcclGetVersion').call('rmNcclGetUniqueId')
        return s.call('rmNcclCommInitRank', fb(10, bytes([7]) + bytes(127)) + fv(11, 1))
    s = nccl_comm(context(Session()))
    for what in (1, 2, 3, 4):
        s.call('rmNcclCommQuery', fv(1, alias(2)) + fv(9, what))
    coll = fv(1, alias(2)) + fv(2, alias(1)) + fv(3, alias(1, 1024)) + fv(4, 16) + fv(5, 7)
    s.call('rmNcclCollective', coll + fv(9, 1)).call('rmNcclCollective', coll + fv(9, 4))
    s.call('rmNcclGroupStart').call('rmNcclCollective', coll + fv(9, 5)).call('rmNcclGroupEnd')
    s.call('rmNcclGetLastError', fv(1, alias(2))).call('rmNcclCommFinalize', fv(1, alias(2)))
    s.call('rmNcclCommDestroy', fv(1, alias(2)))
    seeds['nccl-one-rank'] = s.data
    seeds['nccl-left-open'] = nccl_comm(context(Session())).data
    # A group left open: its held calls go with the channel's thread; then one of a send
    # (on the communicator) beside a collective (on its blocking twin), which runs on the parent.
    s = nccl_comm(context(Session()))
    s.call('rmNcclGroupStart').call('rmNcclCollective', coll + fv(9, 1)).call('rmNcclCollective', coll + fv(9, 1))
    seeds['nccl-group-left-open'] = s.data
    s = nccl_comm(context(Session()))
    s.call('rmNcclCollective', coll + fv(9, 1))
    s.call('rmNcclGroupStart').call('rmNcclCollective', coll + fv(9, 6)).call('rmNcclCollective', coll + fv(9, 1))
    s.call('rmNcclGroupEnd')
    seeds['nccl-group-mixed'] = s.data
    # Counts whose bytes overflow, a buffer past the allocation, a datatype NCCL has not.
    s = nccl_comm(context(Session()))
    s.call('rmNcclCollective', fv(1, alias(2)) + fv(2, alias(1)) + fv(3, alias(1)) + fv(4, 1 << 62) + fv(5, 8) + fv(9, 4))
    s.call('rmNcclCollective', fv(1, alias(2)) + fv(2, alias(1)) + fv(3, alias(1, 4000)) + fv(4, 64) + fv(5, 7) + fv(9, 1))
    s.call('rmNcclCollective', fv(1, alias(2)) + fv(2, alias(1)) + fv(3, alias(1)) + fv(4, 1) + fv(5, 99) + fv(9, 1))
    seeds['regress-nccl-bounds'] = s.data
    seeds['regress-image-fatbin-wrapper'] = context(Session()).call('cuModuleLoadData', fv(1, 3), bulk=wrapper).data
    return seeds


def frame_seeds():
    key = bytes(range(16))
    params = struct.pack('<QQQI', 0x7f0000001000, 0x7f0000002000, 0x7f0000003000, 16)
    gpu = fv(1, 0) + fb(2, 'Remora test GPU') + fb(3, 'GPU-00000000-0000-0000-0000-000000000000') + \
        fv(4, 64 << 20) + fv(5, 60 << 20) + fv(6, 1)
    client = fv(1, 3) + fb(2, 'anonymous') + fb(3, 'prog') + fb(4, '10.0.0.2:5000') + fv(5, 42) + fv(6, 1) + \
        fv(7, 4096) + fv(8, 1700000000)
    return {
        'hello': frame(OP_HELLO, fv(1, 1) + fv(2, 13000) + fb(3, 'token') + fb(4, 'prog') + fv(5, 42) +
                       fb(6, varint(0) + varint(1))),
        'hello-reply': frame(OP_HELLO, fv(1, 1) + fv(2, 13000) + fv(3, 7) + fb(5, key), flags=F_REPLY),
        'attach': frame(OP_ATTACH, fv(1, 7) + fb(2, key) + fv(3, 1)),
        'memcpy-htod': frame(OP['cuMemcpyHtoD_v2'], fv(1, 0x7f0000001000) + fv(3, 1) + fv(4, 64), bulk_len=64),
        'memcpy-dtoh': frame(OP['cuMemcpyDtoH_v2'], fv(1, 0x7f0000001000) + fv(2, 64) + fv(4, 2)),
        'module-load': frame(OP['cuModuleLoadData'], fv(1, 2), bulk_len=len(PTX)),
        'launch-kernel': frame(OP['cuLaunchKernel'], fv(1, 0x7f0000009000) + fv(2, 1) + fv(3, 1) + fv(4, 1) +
                               fv(5, 256) + fv(6, 1) + fv(7, 1) + fb(10, params) + fb(11, bytes(16)),
                               flags=F_ASYNC),
        'status-reply': frame(OP_STATUS, fb(1, 'gpu-host-1') + fb(2, 'tcp://10.0.0.1:7700') + fv(3, 0) +
                              fb(4, 'registered') + fv(5, 13000) + fb(6, gpu) + fb(7, client), flags=F_REPLY),
        'regress-htod-links-0x80000001': frame(OP['cuMemcpyHtoD_v2'],
                                               fv(1, 0x7f0000001000) + fv(3, 0x80000001) + fv(4, 16), bulk_len=16),
        'regress-memsetd16-n-4611686018427387905': frame(OP['cuMemsetD16Async'],
                                            fv(1, 0x7f0000001000) + fv(2, 1) + fv(3, (1 << 62) + 1), flags=F_ASYNC),
        'regress-empty-message': frame(OP['cuCtxSynchronize']),
        'regress-lengths-max': FRAME.pack(MAGIC, 1, 1, 1 << 20, 0, 1 << 40, 0, 0, 0),
    }


def b64(s):
    return base64.b64encode(s.encode()).decode()


MEMBER = {'host': 'gpu-host-1', 'address': 'tcp://10.0.0.1:7700', 'state': 'serving', 'clients': 2, 'pid': 4242,
          'updated': 1700000000, 'gpus': [{'index': 0, 'name': 'NVIDIA H200', 'uuid': 'GPU-1234',
                                           'total': 150000000000, 'free': 140000000000, 'clients': 2}]}


def range_reply(kvs):
    return json.dumps({'header': {'cluster_id': '14841639068965178418', 'member_id': '10276657743932975437',
                                  'revision': '5', 'raft_term': '2'},
                       'kvs': [{'key': k, 'create_revision': '4', 'mod_revision': '5', 'version': '1', 'value': v}
                               for k, v in kvs],
                       'count': str(len(kvs))})


def etcd_seeds():
    def call(n, status, body):
        return bytes([n, status]) + body.encode()
    members = [(b64('/remora/members/gpu-host-1'), b64(json.dumps(MEMBER))),
               (b64('/remora/admin/gpu-host-2'), b64('{"decision":"draining"}'))]
    return {
        'lease-grant': call(0, 0, '{"header":{"revision":"5"},"ID":"7587869524155433998","TTL":"10"}'),
        'keepalive': call(1, 0, '{"result":{"header":{},"ID":"7587869524155433998","TTL":"10"}}'),
        'lease-not-found': call(1, 1, '{"error":"etcdserver: requested lease not found","code":5,'
                                      '"message":"etcdserver: requested lease not found"}'),
        'put': call(3, 0, '{"header":{"revision":"6"}}'),
        'get': call(4, 0, range_reply([(b64('/remora/members/h'), b64('{"host":"h","address":"a"}'))])),
        'get-prefix': call(5, 0, range_reply(members)),
        'delete': call(6, 0, '{"header":{},"deleted":"1"}'),
        'pool-list': call(7, 0, range_reply(members)),
        'pool-find': call(8, 0, range_reply(members)),
        'get-admin': call(9, 0, range_reply([(b64('/remora/admin/h'), b64('{"decision":"removed"}'))])),
        'member': call(10, 0, json.dumps(MEMBER)),
        'server-error': call(5, 2, '{"error":"etcdserver: too many requests","code":14}'),
        # An admin record whose key is shorter than the admin prefix (pool.c took the host
        # name from past the key's end).
        'regress-short-admin-key': call(7, 0, range_reply([(b64('x'), b64('{"decision":"draining"}'))])),
        # Unpadded base64 of lengths 4k+2 and 4k+3, as a gateway may send them.
        'regress-unpadded-base64': call(5, 0, range_reply([('QQ', 'QUI'), ('QUJDRA', 'QUJDREU')])),
        # With a user (bit 7 of byte 0): the same body answers /v3/auth/authenticate and the call.
        'auth-token': call(0x80 | 7, 0, json.dumps(dict(json.loads(range_reply(members)), token='aBcDeF.42'))),
        'auth-token-bad': call(0x80 | 4, 0, '{"token":"a b\\r\\nX-Evil: 1","kvs":[]}'),
        'auth-failed': call(0x80 | 5, 2, '{"error":"etcdserver: authentication failed, invalid user ID or password",'
                                          '"code":3,"message":"etcdserver: authentication failed, invalid user ID or password"}'),
        'invalid-token': call(0x80 | 3, 3, '{"error":"etcdserver: invalid auth token","code":16,'
                                            '"message":"etcdserver: invalid auth token"}'),
        'permission-denied': call(3, 2, '{"error":"etcdserver: permission denied","code":7,'
                                        '"message":"etcdserver: permission denied"}'),
        'user-empty': call(5, 2, '{"error":"etcdserver: user name is empty","code":3,'
                                 '"message":"etcdserver: user name is empty"}'),
        # What the removed hand-written parser was fed: escapes, deep nesting, big numbers.
        'member-escapes': call(10, 0, json.dumps(dict(MEMBER, host='h\u00e9\ud83d\ude00\u0000x',
                                                      clients=12345678901234567890))),
        'too-deep': call(5, 0, '{"kvs":' + '[' * 40 + ']' * 40 + '}'),
        'trailing': call(4, 0, range_reply([]) + ' x'),
    }


def base64_seeds():
    return {
        'regress-4k+2': 'QQ', 'regress-4k+3': 'QUI', 'regress-4k+2-long': 'QUJDRA', 'padded': 'QUJDRA==',
        'text': 'L3JlbW9yYS9tZW1iZXJzL2dwdS1ob3N0LTE=', 'empty': '', 'padding-only': '==',
        'bad-4k+1': 'QUJDR', 'data-after-padding': 'QQ==QQ==', 'nul': 'AA==',
    }


def config_seeds():
    """remorad configuration files: the documented keys and sections, and refusals."""
    return {
        'defaults': 'listen = tcp://0.0.0.0:7700\nallow_anonymous = yes\n',
        'tenants': ('# two tenants\nclient_memory_limit = 8G\ntenant_memory_limit = 0\n'
                    '[tenant research]\ntoken = "r-secret"\nmemory_limit = 40G\n'
                    '[tenant lab.2]\ntoken = l-secret # a comment\nclient_memory_limit = 1G\n'),
        'hashed': ('admin_token = pbkdf2-sha256$20000$xjfBnwXAdsT0+eQIxUFwhg==$'
                   'GBMOEaY6NtKRlKN61orN9Bk5YB9SqUh8kwOg8I3k4PU=\n[tenant a]\ntoken = x\n'),
        'everything': ('listen = unix:/run/remora.sock\nmax_clients_per_gpu = 16\nhardware_queues = 8\n'
                       'queue_sharing = direct\nqueue_idle_after = 30\nmodule_loading = lazy\n'
                       'tenant_isolation = shared\npeer_timeout = 60\nmax_channels = 4\n'
                       'shared_pinned_limit = 1G\nkernel_timing = no\nhello_timeout = 3\n'
                       'pool = http://etcd1:2379,https://etcd2:2379\nlease_ttl = 20\n'
                       'metrics_listen = 127.0.0.1:9400\nshutdown_grace = 5\ngpu_wait_spin_us = 0\n'),
        'mps': ('tenant_isolation = mps\nmps_control = /usr/bin/nvidia-cuda-mps-control\nmps_directory = /run/remora-mps\n'
                'workers_per_tenant = 2\n[tenant a]\ntoken = x\ncompute_share = 25\npriority = low\n'),
        'refused-section': '[tenants x]\ntoken = y\n',
        'refused-twice': 'hardware_queues = 4\nhardware_queues = 8\n',
        'refused-shared-token': '[tenant a]\ntoken = t\n[tenant b]\ntoken = t\n',
        'refused-range': 'queue_idle_after = 0\nlease_ttl = 99999\ngpu_wait_spin_us = 1001\n',
        'unterminated-quote': 'host_name = "gpu1\n',
        'empty': '',
    }


def status_seeds():
    """StatusReply messages, behind the byte that picks JSON (odd) or the table (even)."""
    usage = fv(1, 3) + fv(1, 5) + fv(2, 1) + fv(3, 4096) + fv(5, 1500000) + fv(7, 20)
    gpu = fb(6, fv(1, 0) + fb(2, 'NVIDIA H100 80GB HBM3') + fb(3, 'GPU-da688053') + fv(4, 85 << 30) + fv(5, 80 << 30)
             + fv(6, 2))
    client = fb(7, fv(1, 7) + fb(2, 'research') + fb(3, 'python3') + fb(4, '10.0.0.5:41234') + fv(5, 4242)
                + fv(6, 1) + fv(7, 1 << 30) + fv(8, 1795464000) + fb(9, usage) + fv(10, 8 << 30))
    tenant = fb(9, fb(1, 'research') + fv(2, 1) + fv(3, 12) + fv(4, 1 << 30) + fb(6, usage))
    finished = fb(10, fv(1, 3) + fb(2, 'anonymous') + fb(3, 'drv_spin') + fv(4, 99) + fv(5, 1795463000)
                  + fv(6, 1795463100) + fb(7, usage))
    reply = (fb(1, 'gpu-host-1') + fb(2, 'tcp://gpu-host-1:7700') + fv(3, 0) + fb(4, 'registered') + fv(5, 13000)
             + gpu + client + fb(8, 'launch') + fb(8, 'copy') + tenant + finished)
    odd = fb(1, 'h\x01"\\\x7f\xc3\xa9') + fb(7, fb(2, '\ttab') + fb(9, fv(1, 1) * 40)) + fv(3, 1)
    return {'json': b'\x01' + reply, 'table': b'\x00' + reply, 'json-escapes': b'\x01' + odd,
            'table-escapes': b'\x00' + odd, 'empty-json': b'\x01', 'empty-table': b'\x00'}


def status_request_seeds():
    """StatusRequest messages, behind the byte that picks the daemon (bit 0: anonymous
    allowed) and the connection's certificate (bits 1-2: none, beta, ops, gamma)."""
    seeds = {}
    for name, cred in (('admin', b'admin-token'), ('tenant', b'alpha-token'), ('wrong', b'alpha-tokeN'),
                       ('none', b''), ('long', b'x' * 300)):
        for flags in range(8):
            seeds[f'{name}-{flags}'] = bytes([flags]) + (fb(1, cred) if cred else b'')
    seeds['unknown-field'] = b'\x01' + fv(2, 5) + fb(1, b'alpha-token')
    seeds['truncated'] = b'\x00' + fb(1, b'admin-token')[:-3]
    seeds['oversized'] = b'\x00' + fb(1, b'a' * 600)
    return seeds


def rdma_wire_seeds():
    """transport/rdma/rdma_wire.h: byte 0 picks the decoder (fuzz_rdma_wire.c)."""
    chunk = lambda kind, length: bytes([kind, 0, 0, 0]) + struct.pack('<I', length)
    geometry = struct.pack('<II', 16, 65536)
    return {
        'chunk-data': b'\x00' + chunk(1, 48),
        'chunk-upgrade': b'\x04' + chunk(2, 28),
        'chunk-switch': b'\x08' + chunk(3, 0),
        'offer': b'\x01' + bytes([0x4e, 0x20, 0, 0]) + bytes(range(16)) + geometry,
        'offer-reads': b'\x01' + bytes([0x4e, 0x20, 1, 0]) + bytes(range(16)) + geometry,
        'answer': b'\x02' + bytes(range(16)) + geometry + bytes(32),  # padded, as IB delivers it
        'answer-reads': b'\x02' + bytes(range(16)) + geometry + struct.pack('<I', 1) + bytes(28),
        'msg-data': b'\x03' + struct.pack('<H', 64) + struct.pack('<I', 5) + bytes([3, 0, 0, 0]) + b'hello',
        'msg-credit-only': b'\x03' + struct.pack('<H', 64) + struct.pack('<I', 0) + bytes([8, 0, 1, 0]),
        'msg-read-offer': b'\x03' + struct.pack('<H', 64) + struct.pack('<I', 16) + bytes([2, 0, 0, 1])
                          + struct.pack('<QII', 0x7f0000001000, 0x1234, 1 << 20),
        'msg-read-done': b'\x03' + struct.pack('<H', 64) + struct.pack('<I', 0) + bytes([0, 0, 0, 2]),
    }


# fuzz_client.c's calls: those written by hand, then every generated stub (class gen of
# proto/api.spec, in its order, as scripts/gen_api.py writes client_calls.c).
CLIENT_HAND = ['context', 'module', 'library', 'launch', 'names', 'copies', 'pointers', 'pool', 'occupancy',
               'capture', 'graph', 'nvml']
CUDA_ERROR_INVALID_VALUE = 1


def generated_calls():
    import re
    names = []
    with open(os.path.join(HERE, '..', '..', 'proto', 'api.spec')) as f:
        for line in f:
            m = re.match(r'\s*(\d+|-)\s+(\w+)\s+(\w+)', line.split('#', 1)[0])
            if m and m.group(3) == 'gen':
                names.append(m.group(2))
    return names


def reply(call, msg=b'', bulk=b'', result=0):
    """A reply frame of the client target: op and seq (0) are the request's, ctx names the call."""
    return FRAME.pack(MAGIC, 0, 0, len(msg), F_REPLY, len(bulk), call, result, 0) + msg + bulk


def client_seeds():
    """The server's side of fuzz_client.c's calls: a hello, then answers a daemon might give."""
    hand = {n: i for i, n in enumerate(CLIENT_HAND)}
    gen = generated_calls()

    def hello(call, driver=13000):
        return reply(call, fv(1, 1) + fv(2, driver) + fv(3, 7) + fv(6, 0))

    def session(name, *answers):
        return hello(hand[name]) + b''.join(reply(hand[name], *a) if isinstance(a, tuple) else reply(hand[name], a)
                                            for a in answers)

    def param_info(offset, size):
        return fv(1, offset) + fv(2, size)

    def layout(params, too_many=False, packed=True):
        """rmFuncGetParamLayout's reply: (offset, size) pairs, as the daemon packs them or not."""
        if packed:
            return (fb(1, b''.join(varint(o) for o, _ in params)) + fb(2, b''.join(varint(n) for _, n in params))
                    + (fv(3, 1) if too_many else b''))
        return b''.join(fv(1, o) for o, _ in params) + b''.join(fv(2, n) for _, n in params) + fv(3, too_many)

    honest = layout([(0, 8), (8, 4), (16, 8)])
    seeds = {
        'context': session('context', b'', fv(1, 0x7000)),
        'module': session('module', fv(1, 0x7100), fv(1, 0x7200)),
        'library': session('library', fv(1, 0x7100), fv(1, 0x7300), fv(1, 0x7200)),
        'launch': session('launch', param_info(0, 8), honest, b''),
        'names': session('names', fb(1, 'k')),
        'copies': session('copies', fv(1, 0x100000), b'', (b'', bytes(100)), (b'', bytes(37)), b'', b''),
        'pointers': session('pointers', fb(1, struct.pack('<QQ', 2, 0)), fv(1, 1) + fb(2, bytes(5 * 16)),
                            fb(1, bytes(4))),
        'pool': session('pool', fv(1, 1 << 20), fv(1, 1)),
        'occupancy': session('occupancy', fv(1, 2)),
        'capture': session('capture', fv(1, 0x7400), b'', fv(1, 1), fv(1, 1) + fv(2, 5) + fv(3, 0x7500) + fv(4, 0x7600),
                           fv(1, 0x7500)),
        'graph': session('graph', fv(1, 2) + fv(2, 0x7600) + fv(2, 0x7601), fb(1, bytes(24)), honest, fv(1, 0x7700)),
        'nvml': session('nvml', fv(1, 0xff) + fv(2, 2 << 30) + fv(3, 1 << 30) + fb(11, '580.65')),
        # Issue 37: layouts no kernel has, which the client must refuse without reading past;
        # replies no daemon sends: more parameters than the bound, offsets without sizes.
        'regress-param-endless': session('launch', param_info(0, 8), layout([], too_many=True)),
        'regress-param-overlap': session('launch', param_info(0, 8), layout([(0, 8), (0, 8)], packed=False)),
        'regress-param-huge': session('launch', param_info(0, 32764), layout([(0, 32764)])),
        'regress-param-count': session('launch', param_info(0, 8), layout([(8 * i, 8) for i in range(520)])),
        'regress-param-unpaired': session('launch', param_info(0, 8), fb(1, bytes([0, 8])) + fb(2, bytes([8]))),
        'regress-name-unterminated': hello(len(CLIENT_HAND) + gen.index('cuDeviceGetName'))
                                     + reply(0, fb(1, b'EVIL')),
        'regress-dtoh-longer': session('copies', fv(1, 0x100000), b'', (b'', bytes(164))),
    }
    # Every generated stub, sixteen to a file: two answers each, empty (every output 0).
    for first in range(0, len(gen), 16):
        calls = range(len(CLIENT_HAND) + first, len(CLIENT_HAND) + min(first + 16, len(gen)))
        seeds['generated-%03d' % first] = hello(calls[0]) + b''.join(reply(c) + reply(c) for c in calls)
    return seeds


def param_layout_seeds():
    """fuzz_param_layout.c's inputs: a byte saying the driver (even: 12.1 or later), then the reply."""
    def reply_of(params, too_many=False):
        return fb(1, b''.join(varint(o) for o, _ in params)) + fb(2, b''.join(varint(n) for _, n in params)) + \
            (fv(3, 1) if too_many else b'')
    return {
        'honest': b'\0' + reply_of([(0, 8), (8, 4), (16, 8)]),
        'gap': b'\0' + reply_of([(48, 2880)]),
        'none': b'\0',
        'old-driver-huge': b'\1' + reply_of([(0, 8192)]),
        'overlap': b'\0' + reply_of([(0, 8), (0, 8)]),
        'too-many': b'\0' + fv(3, 1),
        'count': b'\0' + reply_of([(8 * i, 8) for i in range(513)]),
        'unpaired': b'\0' + fb(1, bytes([0, 8])) + fb(2, bytes([8])),
    }


def nccl_reply_seeds():
    """fuzz_nccl_reply.c's inputs: a byte picking the call (low bits: rmNcclGetVersion 0 .. rmNcclRedOpDestroy
    14; high bits: ncclCommInitAll's devices), then the reply."""
    version, unique_id, init_rank, init_all, split, last_error = 0, 1, 2, 3, 4, 9
    return {
        'version': bytes([version]) + fv(2, 22809),
        'unique-id': bytes([unique_id]) + fb(3, bytes(range(128))),
        'init-rank': bytes([init_rank]) + fv(4, 0x5000),
        'init-all': bytes([init_all | 2 << 4]) + fb(4, varint(0x5000) + varint(0x5001)),
        'split-none': bytes([split]),
        'last-error': bytes([last_error]) + fb(5, 'remote process exited'),
        'failed': bytes([init_rank]) + fv(1, 2),
        'regress-comms-on-error': bytes([init_rank]) + fv(1, 6) + fv(4, 0x5000),
        'regress-short-id': bytes([unique_id]) + fb(3, bytes(127)),
        'regress-too-many': bytes([init_all | 2 << 4]) + fb(4, b''.join(varint(0x5000 + i) for i in range(70))),
        'regress-null-comm': bytes([init_rank]) + fv(4, 0),
        'regress-in-progress': bytes([init_rank]) + fv(1, 7),
    }


def migrate_state_seeds():
    """fuzz_migrate_state.c's inputs: a moving client's state (backend/worker/migrate_wire.h)."""
    def rec(t, p):
        return struct.pack('<IIQ', t, 0, len(p)) + p

    def state(recs):
        return rec(1, struct.pack('<II', 0x32474d52, len(recs))) + b''.join(recs) + rec(0, b'')
    ctx = rec(2, struct.pack('<QiI', 0x5555deadbeef, 0, 0))
    span = rec(8, struct.pack('<QQII', 0x7f0000200000, 2 << 20, 0, 0))
    mem = rec(3, struct.pack('<QQII', 0x7f0000200000, 64, 0, 0) + bytes(range(64)))
    mod = rec(4, struct.pack('<QII', 0x1111, 0, 0) + b'\x7fELF' + bytes(60))
    fn = rec(5, struct.pack('<QQii', 0x2222, 0x1111, 49152, -1) + b'step')
    st = rec(6, struct.pack('<QIIiI', 0x3333, 0, 1, -1, 0))
    ev = rec(7, struct.pack('<QII', 0x4444, 0, 2))
    lib = rec(9, struct.pack('<QQ', 0x6666, 0) + b'\x7fELF' + bytes(60))
    ker = rec(10, struct.pack('<QQii', 0x7777, 0x6666, 0, -1) + b'matmul')
    kf = rec(11, struct.pack('<QQII', 0x8888, 0x7777, 0, 0))
    var = rec(12, struct.pack('<QIIQ', 0x1111, 9, 0, 0x7f0000400000) + b'constants' + bytes(range(16)))
    va = rec(13, struct.pack('<QQ', 0x7f2000000000, 1 << 30))
    return {'full': state([ctx, span, mem, mod, fn, st, ev]), 'memory': state([ctx, span, mem]),
            'empty': state([]), 'library': state([ctx, lib, ker, kf]), 'variable': state([ctx, mod, var]), 'va-range': state([ctx, va, span, mem])}


def zstd(data):
    """A zstd frame of data at level 1 with its size in the frame, as common/zchunk.c makes them."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'raw')
        with open(path, 'wb') as f:
            f.write(data)
        return subprocess.run(['zstd', '-1', '-q', '-c', path], check=True, capture_output=True).stdout


def zchunk_seeds():
    """fuzz_zchunk.c's inputs: the raw length expected, then a compressed copy's chunks
    (common/zchunk.h), zstd frames made by the zstd tool (level 1, the size in the frame)."""
    def chunk(raw, payload):
        return struct.pack('<II', raw, len(payload)) + payload

    zeros = zstd(bytes(8192))
    pattern = zstd(bytes(i // 64 % 256 for i in range(65536)))
    return {'stored': struct.pack('<I', 16) + chunk(16, b'0123456789abcdef'),
            'compressed': struct.pack('<I', 8192) + chunk(8192, zeros),
            'two': struct.pack('<I', 8192 + 65536) + chunk(8192, zeros) + chunk(65536, pattern),
            'mixed': struct.pack('<I', 8192 + 5) + chunk(8192, zeros) + chunk(5, b'hello'),
            'lying-size': struct.pack('<I', 8000) + chunk(8000, zeros)}


def write(target, seeds):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), 'wb') as f:
            f.write(data.encode() if isinstance(data, str) else data)


def main():
    write('request', request_seeds())
    write('frame', frame_seeds())
    write('etcd', etcd_seeds())
    write('base64', base64_seeds())
    write('config', config_seeds())
    write('status', status_seeds())
    write('status_request', status_request_seeds())
    write('rdma_wire', rdma_wire_seeds())
    write('client', client_seeds())
    write('param_layout', param_layout_seeds())
    write('nccl_reply', nccl_reply_seeds())
    write('migrate_state', migrate_state_seeds())
    write('zchunk', zchunk_seeds())
    write('image', image_seeds(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, '..', '..', 'build')))


def image_seeds(build):
    """tests/unit's images from build, and fatbins compressed with zstd (nvcc's size mode) and
    LZ4 (speed mode: the PTX entry) where nvcc is found."""
    images = {'ptx-vecadd': PTX, 'ptx-stateful': PTX_STATEFUL}
    nvcc = shutil.which('nvcc') or shutil.which('/usr/local/cuda/bin/nvcc')
    with tempfile.TemporaryDirectory() as tmp:
        for src in ('stateless', 'stateful'):
            for kind in ('cubin', 'ptx', 'fatbin'):
                path = os.path.join(build, 'tests', 'unit', src + '.' + kind)
                if os.path.exists(path):
                    with open(path, 'rb') as f:
                        images[src + '.' + kind] = f.read()
            for mode, name in (('size', 'zstd'), ('speed', 'lz4')) if nvcc else ():
                out = os.path.join(tmp, src + '.' + name + '.fatbin')
                subprocess.run([nvcc, '-fatbin', '--compress-mode=' + mode, '-o', out,
                                os.path.join(HERE, '..', 'unit', 'images', src + '.cu')], check=True)
                with open(out, 'rb') as f:
                    images[src + '.' + name + '.fatbin'] = f.read()
    return images


if __name__ == '__main__':
    main()
