#!/usr/bin/env python3
"""Generates Remora's API surface from cuda.h, the stub libcuda's exports and proto/api.spec.

Outputs (into --outdir):
  api.proto          request/reply messages of the generated calls
  api_ops.h          opcodes and per-op flags, shared by client and daemon
  client_stubs.c     client entry points: generated calls, _ptds/_ptsz wrappers, unsupported stubs
  daemon_dispatch.c  daemon handlers of generated calls and the dispatch table
  driver_table.h/.c  the daemon's table of every driver function, filled by dlsym
"""
import argparse
import os
import re
import subprocess
import sys

HANDLE_KINDS = {
    "CUcontext": "RM_H_CONTEXT",
    "CUstream": "RM_H_STREAM",
    "CUevent": "RM_H_EVENT",
    "CUmodule": "RM_H_MODULE",
    "CUfunction": "RM_H_FUNCTION",
    "CUlibrary": "RM_H_LIBRARY",
    "CUkernel": "RM_H_KERNEL",
}

SCALARS = {
    "int": "int32", "unsigned int": "uint32", "size_t": "uint64", "unsigned long long": "uint64",
    "cuuint64_t": "uint64", "cuuint32_t": "uint32", "float": "float", "CUdevice": "int32",
    "CUdeviceptr": "uint64", "long long": "int64", "unsigned char": "uint32", "short": "int32",
    "unsigned short": "uint32", "unsigned long": "uint64", "long": "int64",
}


class Unmappable(Exception):
    """A parameter the generator cannot put on the wire by itself."""


class Param:
    def __init__(self, text):
        text = " ".join(text.split())
        m = re.match(r"^(.*?)(\w+)$", text)
        if not m:
            raise ValueError(f"cannot parse parameter {text!r}")
        self.ctype = m.group(1).strip()
        self.name = m.group(2)
        self.const = self.ctype.startswith("const ")
        base = self.ctype[6:] if self.const else self.ctype
        self.stars = base.count("*")
        self.base = base.replace("*", "").strip()


class Func:
    def __init__(self, name, ret, params):
        self.name, self.ret, self.params = name, ret, params


def parse_header(cuda_root):
    src = '#include <cuda.h>\n#include <cudaProfiler.h>\n'
    pp = subprocess.run(["cc", "-E", "-P", "-D__CUDA_API_VERSION_INTERNAL", f"-I{cuda_root}/include", "-"],
                        input=src, capture_output=True, text=True, check=True).stdout
    flat = " ".join(pp.split())
    funcs = {}
    for m in re.finditer(r"\b(CUresult)\s+(cu\w+)\s*\(([^()]*)\)\s*;", flat):
        name, args = m.group(2), m.group(3).strip()
        params = [] if args in ("", "void") else [Param(a) for a in args.split(",")]
        funcs[name] = Func(name, m.group(1), params)
    enums = set(re.findall(r"typedef enum \w+ \{[^}]*\} (\w+);", flat))
    structs = set(re.findall(r"typedef struct \w+ \{[^}]*\} (\w+);", flat))
    # typedef chains such as CUuuid -> struct CUuuid_st, CUdevprop -> CUdevprop_v1
    aliases = dict((b, a) for a, b in re.findall(r"typedef (?:struct |enum )?(\w+) (\w+);", flat))
    return funcs, enums, structs, aliases


def resolve(t, aliases):
    seen = set()
    while t in aliases and t not in seen and t not in SCALARS and t not in HANDLE_KINDS:
        seen.add(t)
        t = aliases[t]
    return t


def read_exports(path):
    with open(path) as f:
        return sorted(set(x.split()[-1] for x in f if x.strip()))


class SpecEntry:
    def __init__(self, opcode, name, cls, notes):
        self.opcode, self.name, self.cls = opcode, name, cls
        self.async_ = "async" in notes
        self.syncpoint = "syncpoint" in notes
        self.ann = {}
        for n in notes:
            if "=" in n:
                k, v = n.split("=", 1)
                self.ann[k] = v


def read_spec(path):
    entries, seen_ops, seen_names = [], set(), set()
    for lineno, line in enumerate(open(path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        f = line.split()
        if len(f) < 3 or f[2] not in ("gen", "client", "daemon", "hand", "local"):
            sys.exit(f"{path}:{lineno}: expected OPCODE NAME CLASS [ANNOTATION...]")
        op = None if f[0] == "-" else int(f[0])
        if (op is None) != (f[2] == "local"):
            sys.exit(f"{path}:{lineno}: local functions, and only they, have no opcode")
        if op is not None and (op in seen_ops or op <= 0):
            sys.exit(f"{path}:{lineno}: opcode {op} repeated or reserved")
        if f[1] in seen_names:
            sys.exit(f"{path}:{lineno}: {f[1]} listed twice")
        seen_ops.add(op)
        seen_names.add(f[1])
        entries.append(SpecEntry(op, f[1], f[2], f[3:]))
    return entries


def pb_lower(name):
    """protobuf-c's CamelToLower of a message's full name part."""
    out, was_upper = [], True
    for c in name:
        if c.isupper():
            if not was_upper:
                out.append("_")
            out.append(c.lower())
            was_upper = True
        else:
            out.append(c)
            was_upper = False
    return "".join(out)


def pb_cname(name):
    """protobuf-c's FullNameToC of a message name: drop '_' and capitalise what follows."""
    out, cap = [], True
    for c in name:
        if c == "_":
            cap = True
            continue
        out.append(c.upper() if cap else c)
        cap = False
    return "".join(out)


class Msg:
    """Names protobuf-c gives the message NAME in package remora."""

    def __init__(self, name):
        self.proto = name
        self.ctype = "Remora__" + pb_cname(name)
        low = pb_lower(name[0].upper() + name[1:])
        self.desc = f"remora__{low}__descriptor"
        self.init = f"REMORA__{low.upper()}__INIT"


class Field:
    """One parameter's part in the generated code."""

    def __init__(self, fn, p, entry, ctx):
        enums, structs, aliases = ctx
        self.p = p
        ann = entry.ann.get(p.name)
        base = resolve(p.base, aliases)
        self.base = base
        self.ann = ann
        self.len_expr = None
        self.kind = None
        if ann and (ann.startswith("out[") or ann.startswith("in[")):
            self.dir = "out" if ann.startswith("out[") else "in"
            self.len_expr = ann[ann.index("[") + 1:-1]
            self.kind = "buf"
            self.elem = p.base
        elif p.stars == 0:
            self.dir = "in"
            self.kind = self.scalar_kind(p.base, base, enums, structs, fn)
            if ann and ann.startswith("dptr["):
                self.len_expr = ann[5:-1]
        elif p.stars == 1 and p.const and p.base == "char":
            self.dir, self.kind = "in", "string"
        elif p.stars == 1:
            self.dir = "in" if p.const else "out"
            self.kind = self.scalar_kind(p.base, base, enums, structs, fn)
        else:
            raise Unmappable(f"{fn.name}: parameter {p.name} ({p.ctype}) needs a hand-written call")
        self.field = p.name.lower()  # protobuf-c lowercases field names
        self.optional = ann == "opt"  # an output the caller may pass as NULL
        self.new = ann == "new"
        self.delete = ann == "del"

    @staticmethod
    def scalar_kind(t, base, enums, structs, fn):
        if t in HANDLE_KINDS:
            return "handle"
        if t == "CUdeviceptr":
            return "dptr"
        if t == "CUdevice":
            return "device"
        if t in SCALARS:
            return "scalar"
        if t in enums or base in enums:
            return "enum"
        if t in structs or base in structs or base.endswith("_st"):
            return "struct"
        raise Unmappable(f"{fn.name}: cannot map type {t}")

    def proto_type(self):
        if self.kind in ("handle", "dptr"):
            return "uint64"
        if self.kind in ("enum", "device"):
            return "int32"
        if self.kind == "scalar":
            return SCALARS[self.p.base]
        if self.kind == "string":
            return "string"
        return "bytes"


def fields_of(fn, entry, ctx):
    return [Field(fn, p, entry, ctx) for p in fn.params]


def gen_proto(calls):
    out = ['// Generated by scripts/gen_api.py from proto/api.spec. Do not edit.',
           'syntax = "proto3";', "package remora;", ""]
    for fn, entry, fields in calls:
        for suffix, direction in (("_Req", "in"), ("_Rep", "out")):
            out.append(f"message {fn.name}{suffix} {{")
            n = 1
            for f in fields:
                if f.dir == direction or (direction == "in" and f.kind == "buf" and f.dir == "out"):
                    name = f.field if f.dir == direction else f.field + "_len"
                    ptype = f.proto_type() if f.dir == direction else "uint64"
                    out.append(f"  {ptype} {name} = {n};")
                    n += 1
            out.append("}")
    return "\n".join(out) + "\n"


def c_args(fn):
    return ", ".join(p.ctype + (" " if not p.ctype.endswith("*") else "") + p.name for p in fn.params) or "void"


def gen_ops_header(entries):
    out = ["/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */",
           "#ifndef REMORA_API_OPS_H", "#define REMORA_API_OPS_H", "", "#include <stdint.h>", "", "enum rm_op {"]
    remote = [e for e in entries if e.opcode is not None]
    for e in remote:
        out.append(f"\tRM_OP_{e.name} = {e.opcode},")
    top = max(e.opcode for e in remote)
    out += ["};", "", f"#define RM_OP_LIMIT {top + 1}", "",
            "/* Per-op flags: RM_OPF_ASYNC for calls sent without waiting for a reply (the frame flag",
            " * RM_F_ASYNC), RM_OPF_SYNCPOINT for calls whose reply reports earlier async errors. */",
            "enum { RM_OPF_ASYNC = 1u << 1, RM_OPF_SYNCPOINT = 1u << 8 };",
            "extern const uint32_t rm_op_flags[RM_OP_LIMIT];",
            "extern const char *const rm_op_names[RM_OP_LIMIT];", "", "#endif", ""]
    return "\n".join(out)


def gen_ops_table(entries):
    out = ['/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */',
           '#include "api_ops.h"', '#include "wire.h"', "",
           "const uint32_t rm_op_flags[RM_OP_LIMIT] = {"]
    for e in entries:
        flags = (["RM_OPF_ASYNC"] if e.async_ else []) + (["RM_OPF_SYNCPOINT"] if e.syncpoint else [])
        if e.opcode is not None and flags:
            out.append(f"\t[RM_OP_{e.name}] = {' | '.join(flags)},")
    out += ["};", "", "const char *const rm_op_names[RM_OP_LIMIT] = {", '\t[RM_OP_HELLO] = "hello",']
    for e in entries:
        if e.opcode is not None:
            out.append(f'\t[RM_OP_{e.name}] = "{e.name}",')
    out += ["};", ""]
    return "\n".join(out)


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
                checks.append(f"(uint64_t)({f.len_expr}) > RM_MAX_OUT_BUF / sizeof(*{p.name})")
            continue
        if f.kind == "handle":
            o.append(f"\treq.{f.field} = (uint64_t)(uintptr_t){p.name};")
        elif f.kind == "string":
            checks.append(f"!{p.name}")
            o.append(f"\treq.{f.field} = (char *){p.name};")
        elif f.kind == "struct":
            checks.append(f"!{p.name}")
            if p.stars:
                o.append(f"\treq.{f.field}.data = (uint8_t *){p.name};")
                o.append(f"\treq.{f.field}.len = sizeof(*{p.name});")
            else:
                o.append(f"\treq.{f.field}.data = (uint8_t *)&{p.name};")
                o.append(f"\treq.{f.field}.len = sizeof({p.name});")
        elif f.kind == "buf":
            checks.append(f"!{p.name}")
            o.append(f"\treq.{f.field}.data = (uint8_t *){p.name};")
            o.append(f"\treq.{f.field}.len = (size_t)({f.len_expr}) * sizeof(*{p.name});")
        else:
            o.append(f"\treq.{f.field} = {'*' if p.stars else ''}{p.name};")
    if checks:
        o.append(f"\tif ({' || '.join(checks)})")
        o.append("\t\treturn CUDA_ERROR_INVALID_VALUE;")
    outs = [f for f in fields if f.dir == "out"]
    if not outs:
        o.append(f"\treturn rm_rpc_simple(RM_OP_{fn.name}, &req.base, NULL, NULL);")
        o.append("}")
        return "\n".join(o)
    o.append(f"\t{m_rep.ctype} *rep = NULL;")
    o.append(f"\tCUresult r = rm_rpc_simple(RM_OP_{fn.name}, &req.base, &{m_rep.desc}, (ProtobufCMessage **)&rep);")
    # The reply is the server's word: a struct or buffer that does not fit is refused whole.
    for f in outs:
        p, data = f.p, f"rep->{f.field}"
        if f.kind == "struct":
            cond = f"{data}.len != sizeof(*{p.name})"
            what, size = "is %zu bytes, not %zu", f"sizeof(*{p.name})"
        elif f.kind == "buf":
            size = f"(size_t)({f.len_expr}) * sizeof(*{p.name})"
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
    o.append("\treturn r;")
    o.append("}")
    return "\n".join(o)


def gen_daemon_handler(fn, entry, fields):
    m_req, m_rep = Msg(fn.name + "_Req"), Msg(fn.name + "_Rep")
    o = [f"static void handle_{fn.name}(struct rm_session *s, struct rm_request *rq)", "{"]
    o.append(f"\t{m_req.ctype} *req = ({m_req.ctype} *)rm_request_unpack(rq, &{m_req.desc});")
    o.append("\tif (!req)")
    o.append("\t\treturn;")
    o.append(f"\t{m_rep.ctype} rep = {m_rep.init};")
    o.append("\tCUresult r = CUDA_SUCCESS;")
    call_args = []
    cleanup = []
    for f in fields:
        p = f.p
        v = f"a_{p.name}"
        if f.dir == "in":
            if f.kind == "handle":
                o.append(f"\t{p.base} {v} = NULL;")
                if p.base == "CUstream":
                    fnc = "rm_session_stream_submit" if entry.async_ else "rm_session_stream"
                    o.append(f"\tif (r == CUDA_SUCCESS)\n\t\tr = {fnc}(s, req->{f.field}, rq->frame.flags, &{v});")
                else:
                    o.append(f"\tif (r == CUDA_SUCCESS)\n\t\tr = rm_session_use(s, {HANDLE_KINDS[p.base]}, req->{f.field}, (void **)&{v});")
                call_args.append(v)
            elif f.kind == "dptr":
                count, unit = dptr_length(fn, f.len_expr)
                o.append(f"\tif (r == CUDA_SUCCESS)\n\t\tr = rm_session_check_span(s, req->{f.field}, {count}, {unit});")
                call_args.append(f"(CUdeviceptr)req->{f.field}")
            elif f.kind == "device":
                o.append(f"\tCUdevice {v} = 0;")
                o.append(f"\tif (r == CUDA_SUCCESS)\n\t\tr = rm_session_device(s, req->{f.field}, &{v});")
                call_args.append(v)
            elif f.kind == "string":
                call_args.append(f"req->{f.field}")
            elif f.kind == "struct":
                o.append(f"\tif (r == CUDA_SUCCESS && req->{f.field}.len != sizeof({p.base}))\n\t\tr = CUDA_ERROR_INVALID_VALUE;")
                if p.stars:
                    call_args.append(f"(const {p.base} *)req->{f.field}.data")
                else:
                    call_args.append(f"*({p.base} *)req->{f.field}.data")
            elif f.kind == "buf":
                call_args.append(f"({p.ctype})req->{f.field}.data")
            else:
                cast = p.base
                call_args.append(f"({cast})req->{f.field}")
        else:
            if f.kind == "buf":
                o.append(f"\tuint64_t n_{p.name} = req->{f.field}_len;")
                o.append(f"\tif (n_{p.name} * sizeof({p.base}) > RM_MAX_OUT_BUF)\n\t\tr = CUDA_ERROR_INVALID_VALUE;")
                o.append(f"\t{p.base} *{v} = r == CUDA_SUCCESS ? calloc(n_{p.name} ? n_{p.name} : 1, sizeof({p.base})) : NULL;")
                o.append(f"\tif (r == CUDA_SUCCESS && !{v})\n\t\tr = CUDA_ERROR_OUT_OF_MEMORY;")
                call_args.append(v)
                cleanup.append(f"\tfree({v});")
                # the length parameter comes from the request's _len field
            else:
                typ = p.base
                o.append(f"\t{typ} {v};")
                o.append(f"\tmemset(&{v}, 0, sizeof({v}));")
                call_args.append(f"&{v}")
    # Out-buffer length parameters (e.g. name, len) take the value the client sent.
    lens = {f.len_expr: f for f in fields if f.kind == "buf" and f.dir == "out"}
    final_args = []
    for f, a in zip(fields, call_args):
        if f.dir == "in" and f.kind == "scalar" and f.p.name in lens:
            final_args.append(f"({f.p.base})n_{lens[f.p.name].p.name}")
        else:
            final_args.append(a)
    o.append("\tif (r == CUDA_SUCCESS)")
    o.append(f"\t\tr = rm_drv.{fn.name} ? rm_drv.{fn.name}({', '.join(final_args)}) : rm_unsupported_by_driver(\"{fn.name}\");")
    for f in fields:
        p = f.p
        v = f"a_{p.name}"
        if f.dir == "out":
            if f.kind == "buf":
                o.append(f"\tif (r == CUDA_SUCCESS) {{\n\t\trep.{f.field}.data = (uint8_t *){v};\n\t\trep.{f.field}.len = n_{p.name} * sizeof({p.base});\n\t}}")
            elif f.kind == "struct":
                o.append(f"\trep.{f.field}.data = (uint8_t *)&{v};\n\trep.{f.field}.len = sizeof({v});")
            elif f.kind == "handle":
                o.append(f"\trep.{f.field} = (uint64_t)(uintptr_t){v};")
                if f.new:
                    parents = [g for g in fields if g.dir == "in" and g.kind == "handle"]
                    parent = f"req->{parents[0].field}" if parents else "0"
                    o.append(f"\tif (r == CUDA_SUCCESS)\n\t\trm_session_own(s, {HANDLE_KINDS[p.base]}, {v}, {parent});")
            elif f.kind == "device":
                o.append(f"\tif (r == CUDA_SUCCESS)\n\t\tr = rm_session_device_out(s, {v}, &{v});")
                o.append(f"\trep.{f.field} = {v};")
            else:
                o.append(f"\trep.{f.field} = {v};")
        if f.delete and r_ok_del(f):
            kind = HANDLE_KINDS.get(p.base)
            o.append(f"\tif (r == CUDA_SUCCESS)\n\t\trm_session_disown(s, {kind}, a_{p.name});")
    o.append("\trm_request_finish(s, rq, r, &rep.base);")
    o += cleanup
    o.append("\tprotobuf_c_message_free_unpacked(&req->base, NULL);")
    o.append("}")
    return "\n".join(o)


def dptr_length(fn, expr):
    """A dptr[LEN] annotation's length as (count, unit) over the request's fields: LEN is a
    parameter or a parameter times a constant, so that the daemon can check it for overflow."""
    if expr is None:
        return "1", "1"
    m = re.fullmatch(r"\s*(\w+)\s*(?:\*\s*(\d+)\s*)?", expr)
    if not m or m.group(1) not in {p.name for p in fn.params}:
        sys.exit(f"gen_api: {fn.name}: dptr[{expr}] must be a parameter, or a parameter times a constant")
    return f"(uint64_t)req->{m.group(1).lower()}", m.group(2) or "1"


def request_expr(fn, expr):
    """Rewrites a C expression over parameters into one over the request's fields."""
    names = "|".join(p.name for p in fn.params)
    return re.sub(r"\b(" + names + r")\b", lambda m: "req->" + m.group(1).lower(), expr)


def r_ok_del(f):
    return f.kind == "handle"


def parse_errors(cuda_root):
    """(name, value, description) of every CUresult, the description from cuda.h's doc comment."""
    text = open(os.path.join(cuda_root, "include", "cuda.h")).read()
    body = re.search(r"typedef enum cudaError_enum \{(.*?)\} CUresult;", text, re.S).group(1)
    out = []
    for m in re.finditer(r"/\*\*(.*?)\*/\s*(CUDA_\w+)\s*=\s*(\d+)", body, re.S):
        doc = " ".join(m.group(1).replace("*", " ").split())
        doc = re.sub(r"\\p\s+|::", "", doc)
        first = re.split(r"(?<=[a-z0-9)])\.\s", doc + " ")[0].strip().rstrip(".")
        out.append((m.group(2), int(m.group(3)), first.replace("\\", "").replace('"', "'")))
    return out


def gen_errors(errors):
    o = ["/* Generated by scripts/gen_api.py from cuda.h. Do not edit. */", '#include "errors.h"', "",
         "const struct rm_error_desc rm_errors[] = {"]
    for name, value, doc in errors:
        o.append(f'\t{{{value}, "{name}", "{doc}"}},')
    o += ["};", "", f"const int rm_nerrors = {len(errors)};", ""]
    return "\n".join(o)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--cuda-root", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--exports", help="file of exported names, one a line")
    ap.add_argument("--stub-lib", help="the toolkit's stub libcuda.so, read with nm")
    ap.add_argument("--outdir", required=True)
    a = ap.parse_args()

    funcs, enums, structs, aliases = parse_header(a.cuda_root)
    if a.exports:
        exports = read_exports(a.exports)
    else:
        nm = subprocess.run(["nm", "-D", "--defined-only", a.stub_lib], capture_output=True, text=True, check=True)
        exports = sorted(set(l.split()[-1] for l in nm.stdout.splitlines() if l.strip()))
    entries = read_spec(a.spec)
    ctx = (enums, structs, aliases)

    for e in entries:
        if e.name not in funcs:
            sys.exit(f"{a.spec}: {e.name} is not declared in cuda.h")
    generated = []  # (function, entry, fields) of every call whose messages are generated
    for e in entries:
        if e.cls == "local":
            continue
        try:
            generated.append((funcs[e.name], e, fields_of(funcs[e.name], e, ctx)))
        except Unmappable as err:
            if e.cls != "hand":
                sys.exit(f"{a.spec}: {err}")
    listed = {e.name for e in entries}

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

    # Client side.
    c = ['/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */',
         '#include "client.h"', '#include "api.pb-c.h"', "#include <string.h>", ""]
    for fn, e, fields in generated:
        if e.cls in ("gen", "daemon"):
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
    write("client_stubs.c", "\n".join(c))

    # Daemon side.
    d = ['/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */',
         '#include "dispatch.h"', '#include "api.pb-c.h"', "#include <stdlib.h>", "#include <string.h>", ""]
    for fn, e, fields in generated:
        if e.cls in ("gen", "client"):
            d.append(gen_daemon_handler(fn, e, fields))
            d.append("")
    d.append("const rm_op_handler rm_op_handlers[RM_OP_LIMIT] = {")
    for e in entries:
        if e.opcode is None:
            continue
        h = f"handle_{e.name}" if e.cls in ("gen", "client") else f"rm_handle_{e.name}"
        d.append(f"\t[RM_OP_{e.name}] = {h},")
    d.append("};")
    write("daemon_dispatch.c", "\n".join(d) + "\n")

    # Hand-written daemon handlers are declared for the dispatch table.
    h = ["/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */",
         "#ifndef REMORA_DAEMON_HANDLERS_H", "#define REMORA_DAEMON_HANDLERS_H", "",
         "struct rm_session;", "struct rm_request;", ""]
    for e in entries:
        if e.cls in ("daemon", "hand"):
            h.append(f"void rm_handle_{e.name}(struct rm_session *s, struct rm_request *rq);")
    h += ["", "#endif", ""]
    write("daemon_handlers.h", "\n".join(h))

    # Driver table: every function cuda.h declares, so hand-written handlers may call any.
    names = sorted(n for n in funcs if n in exports)
    t = ["/* Generated by scripts/gen_api.py. Do not edit. */", "#ifndef REMORA_DRIVER_TABLE_H",
         "#define REMORA_DRIVER_TABLE_H", "", "#include <cuda.h>", "#include <cudaProfiler.h>", "", "struct rm_driver {"]
    for n in names:
        t.append(f"\tCUresult (CUDAAPI *{n})({c_args(funcs[n])});")
    t += ["};", "", "extern struct rm_driver rm_drv;", "",
          "/* Fills rm_drv from the library handle lib; a function it lacks stays NULL. Returns how many were found. */",
          "int rm_driver_table_load(void *lib);", "", "#endif", ""]
    write("driver_table.h", "\n".join(t))
    tc = ["/* Generated by scripts/gen_api.py. Do not edit. */", '#include "driver_table.h"', "#include <dlfcn.h>", "",
          "struct rm_driver rm_drv;", "", "int rm_driver_table_load(void *lib)", "{", "\tint found = 0;"]
    for n in names:
        tc.append(f'\tif ((*(void **)&rm_drv.{n} = dlsym(lib, "{n}")))\n\t\tfound++;')
    tc += ["\treturn found;", "}", ""]
    write("driver_table.c", "\n".join(tc))


if __name__ == "__main__":
    main()
