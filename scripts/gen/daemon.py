"""The daemon's generated side: the handler of every gen and client call, the dispatch of every
opcode (daemon_dispatch.c), the declarations people implement (daemon_handlers.h) and the
driver table with its fallback (driver_table.h/.c)."""
import re

from .cuda_header import HANDLE_KINDS, c_args
from .proto import Msg, gen_attribute_sizes

def gen_daemon_handler(fn, entry, fields):
    """The daemon's handler of a call: unpacks the request; checks and translates each
    parameter as its annotations say (streams last: selecting one orders work); calls the
    driver, the call's typed body or its stream-ordered twin (via); on success records new
    outputs and forgets del inputs; packs the reply and frees."""
    m_req, m_rep = Msg(fn.name + "_Req"), Msg(fn.name + "_Rep")
    o = [f"static void handle_{fn.name}(struct rm_channel *s, struct rm_request *rq)", "{"]
    o.append(f"\t{m_req.ctype} *req = ({m_req.ctype} *)rm_request_unpack(rq, &{m_req.desc});")
    o.append("\tif (!req)")
    o.append("\t\treturn;")
    o.append(f"\t{m_rep.ctype} rep = {m_rep.init};")
    o.append("\tCUresult r = CUDA_SUCCESS;")

    def step(call, cond="r == CUDA_SUCCESS"):
        return f"\tif ({cond})\n\t\tr = {call};"

    args = {}     # parameter -> the expression passed for it
    streams = []  # stream selections, made after every other check
    cleanup = []
    lens = {f.len_expr: f for f in fields if f.kind == "buf" and f.dir == "out"}
    for f in fields:
        p, v = f.p, f"a_{f.p.name}"
        esz = "1" if p.base == "void" else f"sizeof({p.base})"  # bytes of one element
        if f.dir == "out" and f.kind == "buf" and f.attr:
            # Sized by its attribute, as the client sized it; an attribute of no size is refused.
            o.append(f"\tuint64_t n_{p.name} = {request_expr(fn, f.len_expr)};")
            o.append(f"\tif (!n_{p.name} || req->{f.field}_len != n_{p.name})\n\t\tr = CUDA_ERROR_INVALID_VALUE;")
            o.append(f"\tvoid *{v} = r == CUDA_SUCCESS ? calloc(n_{p.name}, 1) : NULL;")
            o.append(f"\tif (r == CUDA_SUCCESS && !{v})\n\t\tr = CUDA_ERROR_OUT_OF_MEMORY;")
            cleanup.append(f"\tfree({v});")
            args[p.name] = v
        elif f.dir == "out" and f.kind == "buf":
            # The client sends the buffer's length; its length parameter takes that value.
            o.append(f"\tuint64_t n_{p.name} = req->{f.field}_len;")
            o.append(f"\tif (n_{p.name} > RM_MAX_OUT_BUF / {esz})\n\t\tr = CUDA_ERROR_INVALID_VALUE;")
            if f.len_expr in [q.name for q in fn.params] and any(
                    g is not f and g.dir == "in" and g.kind == "buf" and g.len_expr == f.len_expr for g in fields):
                # A length an input array shares: the driver reads that many of it, so the
                # buffer's length must be the one the input was checked against.
                o.append(f"\tif (n_{p.name} != (uint64_t)({request_expr(fn, f.len_expr)}))\n"
                         f"\t\tr = CUDA_ERROR_INVALID_VALUE;")
            if f.len_expr not in [q.name for q in fn.params]:
                # A length no parameter takes (a constant: what the driver writes): the client's must be it.
                o.append(f"\tif (n_{p.name} != (uint64_t)({request_expr(fn, f.len_expr)}))\n"
                         f"\t\tr = CUDA_ERROR_INVALID_VALUE;")
            o.append(f"\t{p.base} *{v} = r == CUDA_SUCCESS ? calloc(n_{p.name} ? n_{p.name} : 1, {esz}) : NULL;")
            o.append(f"\tif (r == CUDA_SUCCESS && !{v})\n\t\tr = CUDA_ERROR_OUT_OF_MEMORY;")
            cleanup.append(f"\tfree({v});")
            args[p.name] = v
        elif f.dir == "out":
            o.append(f"\t{p.base} {v};")
            o.append(f"\tmemset(&{v}, 0, sizeof({v}));")
            args[p.name] = f"&{v}"
        elif f.kind == "handle":
            o.append(f"\t{p.base} {v} = NULL;")
            args[p.name] = v
            if p.base == "CUstream" and not f.delete:
                select = "rm_session_stream_submit" if entry.async_ and not f.nosubmit else "rm_session_stream"
                streams.append(step(f"{select}(s, req->{f.field}, rq->frame.flags, &{v})"))
            else:
                cond = f"r == CUDA_SUCCESS && req->{f.field}" if f.optional else "r == CUDA_SUCCESS"
                o.append(step(f"rm_session_use(s, {HANDLE_KINDS[p.base]}, req->{f.field}, (void **)&{v})", cond))
        elif f.kind == "dptr":
            args[p.name] = f"(CUdeviceptr)req->{f.field}"
            if not f.unchecked:  # the client's memory, at its address here (variable_alias.h)
                count, unit = dptr_length(fn, f.len_expr)
                o.append(step(f"rm_session_check_dptr(s, req->{f.field}, {count}, {unit})"))
                args[p.name] = f"(CUdeviceptr)rm_session_real_dptr(s, req->{f.field})"
        elif f.kind == "device":
            o.append(f"\tCUdevice {v} = 0;")
            o.append(step(f"rm_session_device(s, req->{f.field}, &{v})"))
            args[p.name] = v
        elif f.kind == "string":
            args[p.name] = f"req->{f.field}"
        elif f.kind == "struct" and f.optional:  # no bytes: NULL
            o.append(f"\tif (r == CUDA_SUCCESS && req->{f.field}.len && req->{f.field}.len != sizeof({p.base}))\n"
                     f"\t\tr = CUDA_ERROR_INVALID_VALUE;")
            args[p.name] = f"req->{f.field}.len ? (const {p.base} *)req->{f.field}.data : NULL"
        elif f.kind == "struct":
            o.append(f"\tif (r == CUDA_SUCCESS && req->{f.field}.len != sizeof({p.base}))\n\t\tr = CUDA_ERROR_INVALID_VALUE;")
            args[p.name] = f"(const {p.base} *)req->{f.field}.data" if p.stars else f"*({p.base} *)req->{f.field}.data"
        elif f.kind == "buf" and f.attr:
            n = request_expr(fn, f.len_expr)
            o.append(f"\tif (r == CUDA_SUCCESS && (!req->{f.field}.len || req->{f.field}.len != {n}))\n"
                     f"\t\tr = CUDA_ERROR_INVALID_VALUE;")
            args[p.name] = f"({p.ctype})req->{f.field}.data"
        elif f.kind == "buf":
            n = request_expr(fn, f.len_expr)
            o.append(f"\tif (r == CUDA_SUCCESS && (req->{f.field}.len % {esz} ||\n"
                     f"\t\t\t\t  req->{f.field}.len / {esz} != (uint64_t)({n})))\n"
                     f"\t\tr = CUDA_ERROR_INVALID_VALUE;")
            if f.handles:  # each element a handle the client owns
                o.append(f"\tfor (size_t i = 0; r == CUDA_SUCCESS && i < req->{f.field}.len / {esz}; i++) {{\n"
                         f"\t\t{p.base} h;\n\t\tmemcpy(&h, req->{f.field}.data + i * {esz}, {esz});\n"
                         f"\t\tr = rm_session_use(s, {HANDLE_KINDS[p.base]}, (uint64_t)(uintptr_t)h, &(void *){{NULL}});\n\t}}")
            args[p.name] = f"({p.ctype})req->{f.field}.data"
        elif p.name in lens:
            args[p.name] = f"({p.base})n_{lens[p.name].p.name}"
        else:
            args[p.name] = f"({p.base})req->{f.field}"
    o += streams

    call_args = [args[p.name] for p in fn.params]
    if entry.via:
        # A synchronous call: issued as its stream-ordered twin to the client's NULL stream, then waited for.
        o.append("\tCUstream null_stream = NULL;")
        o.append(step("rm_session_stream_submit(s, 0, rq->frame.flags, &null_stream)"))
        o.append(step(driver_call(entry.via, call_args + ["null_stream"])))
        o.append(step("rm_drv.cuStreamSynchronize(null_stream)"))
    elif entry.body:
        if entry.body_args is not None:
            names = "|".join(p.name for p in fn.params) or "(?!)"
            call_args = [re.sub(r"\b(" + names + r")\b", lambda m: "(" + args[m.group(1)] + ")", a)
                         for a in entry.body_args]
        o.append(step(f"rm_body_{entry.body}({', '.join(['s'] + call_args)})"))
    else:
        o.append(step(driver_call(fn.name, call_args)))

    for f in fields:
        p, v = f.p, f"a_{f.p.name}"
        if f.dir == "out" and f.kind == "device":  # the host's GPU, as the client's ordinal for it
            o.append(step(f"rm_session_device_out(s, {v}, &{v})"))
    for f in fields:
        p, v = f.p, f"a_{f.p.name}"
        if f.new:
            parents = [g for g in fields if g.dir == "in" and g.kind == "handle"]
            # the parent's real handle (rm_session_use's), not the client's value: a moved
            # client's value may be another real handle's here (handle_alias.h)
            parent = f"(uint64_t)(uintptr_t)a_{parents[0].p.name}" if parents else "0"
            o.append(f"\tif (r == CUDA_SUCCESS)\n\t\trm_session_own(s, {HANDLE_KINDS[p.base]}, {v}, {parent});")
        if f.delete:
            o.append(f"\tif (r == CUDA_SUCCESS)\n\t\trm_session_disown(s, {HANDLE_KINDS[p.base]}, {v});")
    for f in fields:
        p, v = f.p, f"a_{f.p.name}"
        esz = "1" if p.base == "void" else f"sizeof({p.base})"
        if f.dir != "out":
            continue
        if f.kind == "buf":
            o.append(f"\tif (r == CUDA_SUCCESS) {{\n\t\trep.{f.field}.data = (uint8_t *){v};\n"
                     f"\t\trep.{f.field}.len = n_{p.name}{'' if f.attr else f' * {esz}'};\n\t}}")
        elif f.kind == "struct":
            o.append(f"\trep.{f.field}.data = (uint8_t *)&{v};\n\trep.{f.field}.len = sizeof({v});")
        elif f.kind == "handle" and p.base in HANDLE_KINDS:  # the client's value of it (handle_alias.h)
            o.append(f"\trep.{f.field} = rm_session_out_value(s, {HANDLE_KINDS[p.base]}, (uint64_t)(uintptr_t){v});")
        elif f.kind == "handle":
            o.append(f"\trep.{f.field} = (uint64_t)(uintptr_t){v};")
        else:
            o.append(f"\trep.{f.field} = {v};")
    o.append("\trm_request_finish(s, rq, r, &rep.base);")
    o += cleanup
    o.append("\tprotobuf_c_message_free_unpacked(&req->base, NULL);")
    o.append("}")
    return "\n".join(o)


def driver_call(name, args):
    return f"rm_drv_{name}({', '.join(args)})"


def dptr_length(fn, expr):
    """A dptr[LEN] annotation's length as (count, unit) over the request's fields: LEN is a
    parameter, a parameter times a constant or a constant (check_param), so that the daemon
    can check it for overflow. No annotation: one byte."""
    if expr is None:
        return "1", "1"
    m = re.fullmatch(r"\s*(\w+)\s*(?:\*\s*(\d+)\s*)?", expr)
    if m.group(1).isdigit():  # a constant: the bytes of a value (cuStreamWriteValue32)
        return f"(uint64_t){m.group(1)}", m.group(2) or "1"
    return f"(uint64_t)req->{m.group(1).lower()}", m.group(2) or "1"


def request_expr(fn, expr):
    """Rewrites a C expression over parameters into one over the request's fields."""
    names = "|".join(p.name for p in fn.params) or "(?!)"
    return re.sub(r"\b(" + names + r")\b", lambda m: "req->" + m.group(1).lower(), expr)


def gen_body_decls(entries, funcs):
    """The typed bodies the spec's body annotations name, for daemon_handlers.h."""
    o = ["/* Typed bodies (proto/api.spec: body): the daemon's part of a call that is more than a",
         " * driver call. The generated handler has checked every parameter: handles are the",
         " * driver's, owned by the client (or NULL where opt); devices are the host's; device",
         " * pointers lie in the client's memory unless unchecked (checked ones are given at their",
         " * address here: variable_alias.h); outputs point at zeroed",
         " * storage. The handler records new outputs and forgets del inputs after CUDA_SUCCESS,",
         " * except those annotated :body, which the body records or forgets itself. */"]
    for e in entries:
        if e.body != e.name:
            continue
        also = [x.name for x in entries if x.body == e.name and x is not e]
        if also:
            o.append(f"/* also the body of {', '.join(also)} */")
        params = ", ".join(["struct rm_channel *s"] + ([c_args(funcs[e.name])] if funcs[e.name].params else []))
        o.append(f"CUresult rm_body_{e.name}({params});")
    return o


def gen_reserved_dispatch(reserved):
    """The daemon's handler of any opcode, generated or reserved, and which ones are one-way."""
    o = ["rm_op_handler rm_op_handler_of(uint32_t op)", "{", "\tif (op < RM_OP_LIMIT)",
         "\t\treturn rm_op_handlers[op];", "\tswitch (op) {"]
    for r in reserved:
        if r.served_by.startswith("rm_handle_"):
            o.append(f"\tcase {r.name}: return {r.served_by};")
    o += ["\tdefault: return NULL;", "\t}", "}", "", "int rm_op_one_way(uint32_t op)", "{", "\tswitch (op) {"]
    for r in reserved:
        if r.one_way:
            o.append(f"\tcase {r.name}:")
    o += ["\t\treturn 1;", "\tdefault: return 0;", "\t}", "}"]
    return o


def gen_message_handler(e):
    """The handler of a hand call with messages of proto/remora.proto (msg=REQ[,REP]): unpacks,
    calls the typed body, replies unless the body did (bulk) or the request is fatal, frees."""
    req, rep = Msg(e.msg[0]), Msg(e.msg[1]) if len(e.msg) > 1 else None
    o = [f"static void handle_{e.name}(struct rm_channel *s, struct rm_request *rq)", "{",
         f"\t{req.ctype} *req = ({req.ctype} *)rm_request_unpack(rq, &{req.desc});", "\tif (!req)", "\t\treturn;"]
    if rep:
        o.append(f"\t{rep.ctype} rep = {rep.init};")
    o.append(f"\tCUresult r = rm_body_{e.name}(s, rq, req{', &rep' if rep else ''});")
    o += ["\tif (!rq->replied && !rq->fatal)", f"\t\trm_request_finish(s, rq, r, {'&rep.base' if rep else 'NULL'});",
          "\tfree(rq->reply_mem);", "\trq->reply_mem = NULL;",
          "\tprotobuf_c_message_free_unpacked(&req->base, NULL);", "}"]
    return "\n".join(o)


def gen_daemon_dispatch(entries, generated, reserved):
    """daemon_dispatch.c: the handler of every gen and client call, and the dispatch."""
    d = ['/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */',
         '#include "dispatch.h"', '#include "handle_alias.h"', '#include "variable_alias.h"', '#include "api.pb-c.h"', '#include "remora.pb-c.h"', "#include <stdlib.h>",
         "#include <string.h>", ""]
    for fn, e, fields in generated:
        if e.cls in ("gen", "client"):
            d.append(gen_daemon_handler(fn, e, fields))
            d.append("")
    for e in entries:
        if e.msg:
            d.append(gen_message_handler(e))
            d.append("")
    d.append("const rm_op_handler rm_op_handlers[RM_OP_LIMIT] = {")
    for e in entries:
        if e.opcode is None:
            continue
        d.append(f"\t[RM_OP_{e.name}] = handle_{e.name},")
    d.append("};")
    d.append("")
    d += gen_reserved_dispatch(reserved)
    return "\n".join(d) + "\n"


def gen_daemon_header(entries, funcs, reserved):
    """daemon_handlers.h: what people write for the daemon, the typed bodies and the handlers
    of hand calls and reserved opcodes."""
    h = ["/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */",
         "#ifndef REMORA_DAEMON_HANDLERS_H", "#define REMORA_DAEMON_HANDLERS_H", "", "#include <cuda.h>",
         "#include <stddef.h>", "", "struct rm_channel;", "struct rm_request;", ""] + gen_attribute_sizes()
    h += gen_body_decls(entries, funcs)
    h += ["", "/* Typed bodies of hand calls with messages of proto/remora.proto (msg=REQ[,REP]): the",
          " * generated handler has unpacked the request; the body checks and translates what it",
          " * names, does the call and fills rep. Its result is the reply's, unless it replied",
          " * itself (bulk) or made the request fatal; memory rep points into goes in rq->reply_mem,",
          " * freed once the reply is sent. */"]
    h += [f"struct {t};" for t in sorted({Msg(m).ctype for e in entries if e.msg for m in e.msg})]
    for e in entries:
        if e.msg:
            rep = f", struct {Msg(e.msg[1]).ctype} *rep" if len(e.msg) > 1 else ""
            h.append(f"CUresult rm_body_{e.name}(struct rm_channel *s, struct rm_request *rq, "
                     f"const struct {Msg(e.msg[0]).ctype} *req{rep});")
    h += ["", "/* Handlers of reserved opcodes (proto/reserved_ops.def). */"]
    h += [f"void {r.served_by}(struct rm_channel *s, struct rm_request *rq);" for r in reserved
          if r.served_by.startswith("rm_handle_")]
    h += ["", "#endif", ""]
    return "\n".join(h)


def gen_driver_table(funcs, exports):
    """driver_table.h/.c: every function cuda.h declares, so that hand-written code may call
    any, each through rm_drv_NAME, which answers for a function the loaded driver lacks."""
    names = sorted(n for n in funcs if n in exports)
    t = ["/* Generated by scripts/gen_api.py. Do not edit. */", "#ifndef REMORA_DRIVER_TABLE_H",
         "#define REMORA_DRIVER_TABLE_H", "", "#include <cuda.h>", "#include <cudaProfiler.h>", "", "struct rm_driver {"]
    for n in names:
        t.append(f"\tCUresult (CUDAAPI *{n})({c_args(funcs[n])});")
    t += ["};", "", "extern struct rm_driver rm_drv;", "",
          "/* Fills rm_drv from the library handle lib; a function it lacks stays NULL. Returns how many were found. */",
          "int rm_driver_table_load(void *lib);", "",
          "/* What rm_drv_NAME returns where the loaded driver lacks NAME: CUDA_ERROR_NOT_SUPPORTED,",
          " * logged once per name (backend/calls/request.c). */",
          "CUresult rm_unsupported_by_driver(const char *name);", "",
          "/* rm_drv_NAME: the loaded driver's NAME, or rm_unsupported_by_driver where it lacks it. */"]
    for n in names:
        fn = funcs[n]
        args = ", ".join(p.name for p in fn.params)
        t.append(f"static inline CUresult rm_drv_{n}({c_args(fn)})\n{{\n"
                 f"\treturn rm_drv.{n} ? rm_drv.{n}({args}) : rm_unsupported_by_driver(\"{n}\");\n}}")
    t += ["", "#endif", ""]
    tc = ["/* Generated by scripts/gen_api.py. Do not edit. */", '#include "driver_table.h"', "#include <dlfcn.h>", "",
          "struct rm_driver rm_drv;", "", "int rm_driver_table_load(void *lib)", "{", "\tint found = 0;"]
    for n in names:
        tc.append(f'\tif ((*(void **)&rm_drv.{n} = dlsym(lib, "{n}")))\n\t\tfound++;')
    tc += ["\treturn found;", "}", ""]
    return "\n".join(t), "\n".join(tc)
