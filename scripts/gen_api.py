#!/usr/bin/env python3
"""Generates Remora's API surface from cuda.h, the stub libcuda's exports and proto/api.spec.

Outputs (into --outdir):
  api.proto          request/reply messages of the generated calls
  api_ops.h          opcodes and per-op flags, shared by client and daemon
  client_stubs.c     client entry points: generated calls, _ptds/_ptsz wrappers, unsupported stubs,
                     and the entry points of hand-written stubs whose annotations promise something
  client_stubs.h     the hand-written client bodies those entry points call
  client_calls.c     a call of every generated client stub, for tests/fuzz/fuzz_client.c
  daemon_dispatch.c  the daemon's handler of every call but the hand ones, and the dispatch table
  daemon_handlers.h  what people write for the daemon: the typed bodies, the hand handlers
  driver_table.h/.c  the daemon's table of every driver function, filled by dlsym

The driver's handle types the daemon tracks come from proto/handle_kinds.def (--handle-kinds),
the one list of them; the reserved opcodes from proto/reserved_ops.def (--reserved-ops).

The work is done by the modules of scripts/gen/, one per job: cuda_header (cuda.h and the
handle kinds), spec (the spec, read and checked), proto (messages and opcode tables), client
(client entry points) and daemon (handlers, dispatch and driver table).
"""
import argparse
import os
import subprocess
import sys

from gen.client import gen_client_files, gen_fuzz_calls
from gen.cuda_header import SCALARS, Unmappable, parse_errors, parse_header, read_exports, read_handle_kinds
from gen.daemon import gen_daemon_dispatch, gen_daemon_header, gen_driver_table
from gen.proto import fields_of, gen_errors, gen_ops_header, gen_ops_table, gen_proto
from gen.spec import ATTRIBUTE_SIZES, SpecError, check_entry, read_reserved_ops, read_spec


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cuda-root", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--exports", help="file of exported names, one a line")
    ap.add_argument("--stub-lib", help="the toolkit's stub libcuda.so, read with nm")
    ap.add_argument("--handle-kinds", required=True, help="the handle kinds, proto/handle_kinds.def")
    ap.add_argument("--reserved-ops", required=True, help="the reserved opcodes, proto/reserved_ops.def")
    ap.add_argument("--outdir", required=True)
    a = ap.parse_args()

    funcs, enums, structs, aliases, handle_types = parse_header(a.cuda_root)
    read_handle_kinds(a.handle_kinds, handle_types, set(SCALARS) | set(aliases) | enums | structs)
    if a.exports:
        exports = read_exports(a.exports)
    else:
        nm = subprocess.run(["nm", "-D", "--defined-only", a.stub_lib], capture_output=True, text=True, check=True)
        exports = sorted(set(l.split()[-1] for l in nm.stdout.splitlines() if l.strip()))
    entries = read_spec(a.spec)
    reserved = read_reserved_ops(a.reserved_ops)
    ctx = (enums, structs, aliases)

    for t, table in ATTRIBUTE_SIZES.items():
        if t not in enums:
            raise SpecError(f"{table['where']}: size {t}: not an enum type of cuda.h")
    by_name = {e.name: e for e in entries}
    for e in entries:
        if e.name in funcs:
            check_entry(e, funcs[e.name], by_name, funcs, exports)
        elif not (e.name.startswith("rm") and e.cls == "hand"):
            raise SpecError(f"{e.where}: {e.name} is not declared in cuda.h (a call of Remora's own, "
                            "named rm..., is of class hand)")
        elif (e.ann or e.body or e.via or e.async_ or e.syncpoint or e.cached or e.forgets or e.sets
              or e.striped):
            e.fail("a call of Remora's own is written by hand on both sides: nothing would honour its annotations")
        elif not e.msg:
            e.fail("a hand call names its messages of proto/remora.proto: msg=REQUEST[,REPLY]")
    generated = []  # (function, entry, fields) of every call whose messages are generated
    for e in entries:
        if e.cls == "local" or e.name not in funcs:
            continue
        try:
            generated.append((funcs[e.name], e, fields_of(funcs[e.name], e, ctx)))
        except Unmappable as err:
            if e.cls != "hand":
                raise SpecError(f"{e.where}: {err}")

    os.makedirs(a.outdir, exist_ok=True)

    def write(name, text):
        path = os.path.join(a.outdir, name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            with open(path, "w") as f:
                f.write(text)

    write("api.proto", gen_proto(generated))
    write("errors_table.c", gen_errors(parse_errors(a.cuda_root)))
    write("api_ops.h", gen_ops_header(entries))
    write("api_ops.c", gen_ops_table(entries))

    client_c, client_h = gen_client_files(entries, generated, funcs, exports)
    write("client_stubs.c", client_c)
    write("client_stubs.h", client_h)
    write("client_calls.c", gen_fuzz_calls(generated))
    write("daemon_dispatch.c", gen_daemon_dispatch(entries, generated, reserved))
    write("daemon_handlers.h", gen_daemon_header(entries, funcs, reserved))
    table_h, table_c = gen_driver_table(funcs, exports)
    write("driver_table.h", table_h)
    write("driver_table.c", table_c)


if __name__ == "__main__":
    try:
        main()
    except SpecError as err:
        sys.exit(str(err))
