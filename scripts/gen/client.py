"""The client's generated entry points (client_stubs.c/.h) and a call of each for the fuzz target (client_calls.c)."""
import re

from .cuda_header import c_args
from .proto import Msg, elem_size, gen_attribute_sizes, message_fields

# Each generated call's request field numbers of its handle parameters, by parameter name:
# what a narrows= forget matches in another call's kept requests (gen_client_files fills it).
HANDLE_FIELDS = {}


def forget_lines(entry, fields, indent="\t"):
    """The lines that forget what entry's call makes stale: every answer of each call it
    forgets, or with narrows=P, of a call with a handle parameter P, only the answers whose
    request names the same handle."""
    lines = []
    mine = next((f.field for f in fields if f.p.name == entry.narrows), None)
    for f in entry.forgets:
        number = HANDLE_FIELDS.get(f, {}).get(entry.narrows) if mine else None
        if number:
            lines.append(f"{indent}rm_query_cache_forget_naming(RM_OP_{f}, {number}, req.{mine});")
        else:
            lines.append(f"{indent}rm_query_cache_forget(RM_OP_{f});")
    return lines

def order_handles(fn):
    """An async call's stream and event parameters as C expressions ("0" for none), or None
    when it has no stream: what it is ordered against among other threads' calls."""
    def first(base):
        return next((f"(uint64_t)(uintptr_t){p.name}" for p in fn.params if p.base == base and not p.stars), "0")
    stream, event = first("CUstream"), first("CUevent")
    return (stream, event) if stream != "0" else None


def wait_order_handles(fn):
    """A synchronizing call's stream and event as C expressions, when it waits for one stream
    or event (cuStreamSynchronize, cuEventQuery): the stream is RM_ORDER_NO_STREAM where it names
    only an event. None for any other call, which waits for every other thread's work."""
    handles = [p for p in fn.params if p.base in ("CUstream", "CUevent") and not p.stars]
    if len(handles) != 1:
        return None
    h = f"(uint64_t)(uintptr_t){handles[0].name}"
    return (h, "0") if handles[0].base == "CUstream" else ("RM_ORDER_NO_STREAM", h)


def gen_client_stub(fn, entry, fields):
    m_req, m_rep = Msg(fn.name + "_Req"), Msg(fn.name + "_Rep")
    o = [f"RM_EXPORT CUresult CUDAAPI {fn.name}({c_args(fn)})", "{"]
    o.append(f"\t{m_req.ctype} req = {m_req.init};")
    checks = []
    for f in fields:
        p = f.p
        if f.dir == "out":
            if not f.optional:
                checks.append(f"!{p.name}")
            if f.kind == "buf":
                o.append(f"\treq.{f.field}_len = (uint64_t)({f.len_expr});")
                checks.append(f"(uint64_t)({f.len_expr}) > RM_MAX_OUT_BUF / {elem_size(f)}")
                if f.attr:
                    checks.append(f"!{f.len_expr}")  # an attribute this library does not know
            continue
        if f.kind == "handle":
            o.append(f"\treq.{f.field} = (uint64_t)(uintptr_t){p.name};")
        elif f.kind == "string":
            checks.append(f"!{p.name}")
            o.append(f"\treq.{f.field} = (char *){p.name};")
        elif f.kind == "struct" and f.optional:  # NULL travels as no bytes
            o.append(f"\tif ({p.name}) {{\n\t\treq.{f.field}.data = (uint8_t *){p.name};")
            o.append(f"\t\treq.{f.field}.len = sizeof(*{p.name});\n\t}}")
        elif f.kind == "struct":
            if p.stars:  # a struct passed by value is never NULL
                checks.append(f"!{p.name}")
                o.append(f"\treq.{f.field}.data = (uint8_t *){p.name};")
                o.append(f"\treq.{f.field}.len = sizeof(*{p.name});")
            else:
                o.append(f"\treq.{f.field}.data = (uint8_t *)&{p.name};")
                o.append(f"\treq.{f.field}.len = sizeof({p.name});")
        elif f.kind == "buf":
            if f.attr:  # a value, of an attribute this library knows
                checks.append(f"!{p.name} || !{f.len_expr}")
            else:
                checks.append(f"(!{p.name} && ({f.len_expr}) != 0)")  # NULL only for no elements
            o.append(f"\treq.{f.field}.data = (uint8_t *){p.name};")
            o.append(f"\treq.{f.field}.len = (size_t)({f.len_expr}) * {elem_size(f)};")
        else:
            o.append(f"\treq.{f.field} = {'*' if p.stars else ''}{p.name};")
    if checks:
        o.append(f"\tif ({' || '.join(checks)})")
        o.append("\t\treturn CUDA_ERROR_INVALID_VALUE;")
    if entry.syncpoint:
        # Before it, what the host wrote to mapped memory goes up (frontend/host_memory.c).
        o += ["\tCUresult pushed = rm_mapped_before_sync();", "\tif (pushed != CUDA_SUCCESS)",
              "\t\treturn pushed;"]
    outs = [f for f in fields if f.dir == "out"]
    rpc = "rm_rpc_cached" if entry.cached else "rm_rpc_simple"
    # After a synchronizing call, mapped host memory is brought up to date (frontend/host_memory.c).
    if not outs and entry.syncpoint:
        if not entry.cached and (order := wait_order_handles(fn)):
            # Fenced against other threads' calls on its stream or event only (rpc.c).
            o.append(f"\tCUresult r = rm_rpc_ordered(RM_OP_{fn.name}, &req.base, {order[0]}, {order[1]});")
        else:
            o.append(f"\tCUresult r = {rpc}(RM_OP_{fn.name}, &req.base, NULL, NULL);")
        o += forget_lines(entry, fields)
        o.append("\treturn r == CUDA_SUCCESS ? rm_mapped_after_sync() : r;")
        o.append("}")
        return "\n".join(o)
    if entry.sets:
        if outs:
            entry.fail(f"sets={entry.sets}: a setting call has no outputs")
        field = next(f.field for f in fields if f.p.name == entry.sets)
        o.append("\tint sent;")
        o.append(f"\tCUresult r = rm_rpc_setting(RM_OP_{fn.name}, &req.base, &req.{field}, sizeof(req.{field}), &sent);")
        if entry.forgets:
            o.append("\tif (sent) {")
            o += forget_lines(entry, fields, "\t\t")
            o.append("\t}")
        o.append("\treturn r;")
        o.append("}")
        return "\n".join(o)
    if not outs:
        if entry.forgets:
            o.append(f"\tCUresult r = {rpc}(RM_OP_{fn.name}, &req.base, NULL, NULL);")
            o += forget_lines(entry, fields)
            o.append("\treturn r;")
        elif entry.async_ and not entry.cached and (order := order_handles(fn)):
            # Fenced against other threads' calls on the same stream and event only (rpc.c).
            o.append(f"\treturn rm_rpc_ordered(RM_OP_{fn.name}, &req.base, {order[0]}, {order[1]});")
        else:
            o.append(f"\treturn {rpc}(RM_OP_{fn.name}, &req.base, NULL, NULL);")
        o.append("}")
        return "\n".join(o)
    o.append(f"\t{m_rep.ctype} *rep = NULL;")
    o.append(f"\tCUresult r = {rpc}(RM_OP_{fn.name}, &req.base, &{m_rep.desc}, (ProtobufCMessage **)&rep);")
    o += forget_lines(entry, fields)
    # The reply is the server's word: a struct or buffer that does not fit is refused whole.
    for f in outs:
        p, data = f.p, f"rep->{f.field}"
        if f.kind == "struct":
            cond = f"{data}.len != sizeof(*{p.name})"
            what, size = "is %zu bytes, not %zu", f"sizeof(*{p.name})"
        elif f.kind == "buf":
            size = f"(size_t)({f.len_expr}) * {elem_size(f)}"
            cond, what = f"{data}.len > {size}", "is %zu bytes, for a buffer of %zu"
            if p.base == "char":  # a string: the driver ends it inside the buffer
                cond += f" || ({size} > 0 && (!{data}.len || !memchr({data}.data, 0, {data}.len)))"
                what = "is %zu bytes, or not a string, for a buffer of %zu"
        else:
            continue
        o.append(f"\tif (r == CUDA_SUCCESS && rep && ({cond}))")
        o.append(f"\t\tr = rm_rpc_bad_reply(\"{fn.name}: the reply's {f.field} {what}\", {data}.len, {size});")
    o.append("\tif (r == CUDA_SUCCESS && rep) {")
    for f in outs:
        p = f.p
        if f.kind == "struct":
            o.append(f"\t\tmemcpy({p.name}, rep->{f.field}.data, sizeof(*{p.name}));")
        elif f.kind == "buf":
            o.append(f"\t\tif (rep->{f.field}.len)\n\t\t\tmemcpy({p.name}, rep->{f.field}.data, rep->{f.field}.len);")
        elif f.kind == "handle":
            o.append(f"\t\t{'if (' + p.name + ') ' if f.optional else ''}*{p.name} = ({p.base})(uintptr_t)rep->{f.field};")
        else:
            o.append(f"\t\t{'if (' + p.name + ') ' if f.optional else ''}*{p.name} = ({p.base})rep->{f.field};")
    o.append("\t}")
    o.append("\trm_rpc_free(rep ? &rep->base : NULL);")
    if entry.syncpoint:
        o.append("\tif (r == CUDA_SUCCESS)\n\t\tr = rm_mapped_after_sync();")
    o.append("\treturn r;")
    o.append("}")
    return "\n".join(o)


def gen_fuzz_call(fn, fields):
    """A call of fn's generated stub with arguments its own checks pass: handles and device
    pointers made up, scalars 4, enums and devices 0, outputs zeroed, buffers allocated to
    exactly their length (so that AddressSanitizer sees a write past one). The server's
    reply decides the rest."""
    o = [f"static CUresult call_{fn.name}(void)", "{"]
    args, bufs = [], []
    for f in fields:
        p = f.p
        if f.kind == "buf":
            q = "const " if p.const else ""
            o.append(f"\t{q}{p.base} *{p.name};")
            bufs.append(f)
            args.append(p.name)
        elif f.dir == "out" or (f.kind == "struct" and p.stars):
            o.append(f"\t{p.base} {p.name};")
            o.append(f"\tmemset(&{p.name}, 0, sizeof({p.name}));")
            args.append(f"&{p.name}")
        elif f.kind == "struct":
            o.append(f"\t{p.base} {p.name};")
            o.append(f"\tmemset(&{p.name}, 0, sizeof({p.name}));")
            args.append(p.name)
        elif f.kind == "string":
            args.append('"x"')
        elif f.kind == "handle":
            o.append(f"\t{p.base} {p.name} = ({p.base})(uintptr_t)0x1000;")
            args.append(p.name)
        elif f.kind == "dptr":
            o.append(f"\tCUdeviceptr {p.name} = 0x100000;")
            args.append(p.name)
        elif f.kind in ("enum", "device"):
            o.append(f"\t{p.ctype} {p.name} = ({p.ctype})0;")
            args.append(p.name)
        else:
            o.append(f"\t{p.ctype} {p.name} = ({p.ctype})4;")
            args.append(p.name)
    for f in bufs:
        elem = "1" if f.p.base == "void" else f"sizeof({f.p.base})"
        n = "64" if f.attr else f"(size_t)({f.len_expr})"  # 64: more than any attribute's value
        o.append(f"\tvoid *{f.p.name}_mem = calloc({n} ? {n} : 1, {elem});")
        o.append(f"\tif (!{f.p.name}_mem)\n\t\tabort();")
        o.append(f"\t{f.p.name} = {f.p.name}_mem;")
    o.append(f"\tCUresult r = {fn.name}({', '.join(args)});")
    o += [f"\tfree({f.p.name}_mem);" for f in bufs]
    o.append("\treturn r;")
    o.append("}")
    return "\n".join(o)


def gen_fuzz_calls(generated):
    c = ["/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */",
         "/* A call of every generated client stub (gen_fuzz_call), for the fuzz target that plays",
         " * the server (tests/fuzz/fuzz_client.c): rm_fuzz_calls[i] makes the i-th. */",
         "#include <cuda.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>", ""]
    names = []
    for fn, e, fields in generated:
        if e.cls == "gen":
            c.append(gen_fuzz_call(fn, fields))
            c.append("")
            names.append(fn.name)
    c.append("CUresult (*const rm_fuzz_calls[])(void) = {")
    c += [f"\tcall_{n}," for n in names]
    c.append("};")
    c.append("const char *const rm_fuzz_call_names[] = {")
    c += [f'\t"{n}",' for n in names]
    c.append("};")
    c.append(f"const unsigned int rm_fuzz_ncalls = {len(names)};")
    return "\n".join(c) + "\n"


def gen_client_files(entries, generated, funcs, exports):
    """client_stubs.c (every exported entry point but the hand-written ones) and client_stubs.h."""
    listed = {e.name for e in entries}
    for fn, e, fields in generated:
        HANDLE_FIELDS[fn.name] = {f.p.name: n for f, _, _, n in message_fields(fields, "in") if f.kind == "handle"}
    c = ['/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */',
         '#include "client.h"', '#include "client_stubs.h"', '#include "query_cache.h"', '#include "api.pb-c.h"',
         "#include <string.h>", ""]
    for fn, e, fields in generated:
        if e.cls == "gen":
            c.append(gen_client_stub(fn, e, fields))
            c.append("")
    for name in exports:
        base = re.sub(r"_pt(ds|sz)$", "", name)
        if base != name and base in listed and name not in listed:
            fn = funcs.get(name) or funcs.get(base)
            args = ", ".join(p.name for p in fn.params)
            c.append(f"RM_EXPORT CUresult CUDAAPI {name}({c_args(fn)})\n{{\n\trm_per_thread_enter();\n\tCUresult r = {base}({args});\n\trm_per_thread_leave();\n\treturn r;\n}}\n")
    unsupported = [n for n in exports if n not in listed and not (re.sub(r"_pt(ds|sz)$", "", n) in listed)]
    for name in unsupported:
        fn = funcs.get(name)
        if fn is None:
            c.append(f"RM_EXPORT CUresult CUDAAPI {name}(void)\n{{\n\treturn rm_unsupported(\"{name}\");\n}}\n")
        else:
            c.append(f"RM_EXPORT CUresult CUDAAPI {name}({c_args(fn)})\n{{\n" +
                     "".join(f"\t(void){p.name};\n" for p in fn.params) +
                     f"\treturn rm_unsupported(\"{name}\");\n}}\n")
    # Hand-written client stubs whose annotations promise the client something: the entry
    # point is generated, does the promised part and calls the typed hand-written body.
    ch = ["/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */",
          "#ifndef REMORA_CLIENT_STUBS_H", "#define REMORA_CLIENT_STUBS_H", "", "#include <cuda.h>",
          "#include <stddef.h>", ""] + gen_attribute_sizes() + [
          "/* Hand-written client bodies (frontend/) of calls whose annotations the generated entry",
          " * point honours: syncpoint (mapped host memory sent up before, brought up to date after success). */"]
    for e in entries:
        if e.cls in ("hand", "client") and e.syncpoint:
            fn = funcs[e.name]
            ch.append(f"CUresult rm_client_body_{e.name}({c_args(fn)});")
            c.append(f"/* proto/api.spec: syncpoint */\nRM_EXPORT CUresult CUDAAPI {e.name}({c_args(fn)})\n{{\n"
                     f"\tCUresult r = rm_mapped_before_sync();\n\tif (r != CUDA_SUCCESS)\n\t\treturn r;\n"
                     f"\tr = rm_client_body_{e.name}({', '.join(p.name for p in fn.params)});\n"
                     f"\treturn r == CUDA_SUCCESS ? rm_mapped_after_sync() : r;\n}}\n")
    ch += ["", "#endif", ""]
    return "\n".join(c), "\n".join(ch)
