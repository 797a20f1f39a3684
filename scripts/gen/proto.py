"""The messages of generated calls (api.proto), the opcode tables (api_ops.h/.c) and the error table."""
from .cuda_header import HANDLE_KINDS, SCALARS, Unmappable, resolve
from .spec import ATTRIBUTE_SIZES

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
        notes = entry.ann.get(p.name, [])
        buf = [n for n in notes if n.startswith(("out[", "in["))]
        span = [n for n in notes if n.startswith("dptr[")]
        base = resolve(p.base, aliases)
        self.base = base
        self.len_expr = None
        self.kind = None
        self.attr = None  # in[@A], out[@A]: the attribute parameter whose value's size it is
        if buf:
            self.dir = "out" if buf[0].startswith("out[") else "in"
            self.len_expr = buf[0][buf[0].index("[") + 1:-1]
            self.kind = "buf"
            self.elem = p.base
            if self.len_expr.startswith("@"):  # bytes of the value of attribute parameter len_expr[1:]
                self.attr = self.len_expr[1:]
                self.attr_type = next(q.base for q in fn.params if q.name == self.attr)
                self.len_expr = f"rm_size_of_{self.attr_type}({self.attr})"
        elif p.stars == 0:
            self.dir = "in"
            self.kind = self.scalar_kind(p.base, base, enums, structs, fn)
            if span:
                self.len_expr = span[0][5:-1]
        elif p.stars == 1 and p.const and p.base == "char":
            self.dir, self.kind = "in", "string"
        elif p.stars == 1:
            self.dir = "in" if p.const else "out"
            self.kind = self.scalar_kind(p.base, base, enums, structs, fn)
        else:
            raise Unmappable(f"{fn.name}: parameter {p.name} ({p.ctype}) needs a hand-written call")
        self.field = p.name.lower()  # protobuf-c lowercases field names
        self.optional = "opt" in notes  # an output the caller may pass as NULL; an input handle that may be 0
        self.new = "new" in notes       # an output the handler records as the client's
        self.delete = "del" in notes    # an input the handler stops recording as the client's
        self.unchecked = "unchecked" in notes or "del:body" in notes  # a device pointer the body checks
        self.nosubmit = "nosubmit" in notes  # a stream the body submits to, if it does
        self.handles = "handles" in notes  # an in[LEN] buffer of handles, each checked as the client's

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


def message_fields(fields, direction):
    """The fields of a call's request ("in") or reply ("out"): (field, proto name, type,
    number), numbered from 1 in parameter order; a request also carries each output
    buffer's length."""
    out, n = [], 1
    for f in fields:
        if f.dir == direction or (direction == "in" and f.kind == "buf" and f.dir == "out"):
            name = f.field if f.dir == direction else f.field + "_len"
            ptype = f.proto_type() if f.dir == direction else "uint64"
            out.append((f, name, ptype, n))
            n += 1
    return out


def gen_proto(calls):
    out = ['// Generated by scripts/gen_api.py from proto/api.spec. Do not edit.',
           'syntax = "proto3";', "package remora;", ""]
    for fn, entry, fields in calls:
        for suffix, direction in (("_Req", "in"), ("_Rep", "out")):
            out.append(f"message {fn.name}{suffix} {{")
            out += [f"  {ptype} {name} = {n};" for _, name, ptype, n in message_fields(fields, direction)]
            out.append("}")
    return "\n".join(out) + "\n"


def gen_ops_header(entries):
    out = ["/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */",
           "#ifndef REMORA_API_OPS_H", "#define REMORA_API_OPS_H", "", "#include <stdint.h>", "",
           '#include "wire.h"', "", "enum rm_op {"]
    remote = [e for e in entries if e.opcode is not None]
    for e in remote:
        out.append(f"\tRM_OP_{e.name} = {e.opcode},")
    top = max(e.opcode for e in remote)
    out += ["};", "", f"#define RM_OP_LIMIT {top + 1}", "",
            "/* Per-op flags: RM_OPF_ASYNC for calls sent without waiting for a reply (it is the frame",
            " * flag RM_F_ASYNC), RM_OPF_SYNCPOINT for calls whose reply reports earlier async errors,",
            " * RM_OPF_STRIPED for calls whose bulk may travel over the session's copy links too,",
            " * RM_OPF_DROPS_REPLAYS for calls after which the session's launch replays may not hold",
            " * (backend/worker/launch_replay.h). */",
            "enum { RM_OPF_ASYNC = RM_F_ASYNC, RM_OPF_SYNCPOINT = 1u << 8, RM_OPF_STRIPED = 1u << 9,",
            "       RM_OPF_DROPS_REPLAYS = 1u << 10 };",
            "extern const uint32_t rm_op_flags[RM_OP_LIMIT];",
            "extern const char *const rm_op_names[RM_OP_LIMIT];", "", "#endif", ""]
    return "\n".join(out)


def gen_ops_table(entries):
    out = ['/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */',
           '#include "api_ops.h"', '#include "wire.h"', "",
           "const uint32_t rm_op_flags[RM_OP_LIMIT] = {"]
    for e in entries:
        flags = ((["RM_OPF_ASYNC"] if e.async_ else []) + (["RM_OPF_SYNCPOINT"] if e.syncpoint else []) +
                 (["RM_OPF_STRIPED"] if e.striped else []) + (["RM_OPF_DROPS_REPLAYS"] if e.drops_replays else []))
        if e.opcode is not None and flags:
            out.append(f"\t[RM_OP_{e.name}] = {' | '.join(flags)},")
    out += ["};", "", "const char *const rm_op_names[RM_OP_LIMIT] = {", '\t[RM_OP_HELLO] = "hello",']
    for e in entries:
        if e.opcode is not None:
            out.append(f'\t[RM_OP_{e.name}] = "{e.name}",')
    out += ["};", ""]
    return "\n".join(out)


def gen_errors(errors):
    o = ["/* Generated by scripts/gen_api.py from cuda.h. Do not edit. */", '#include "errors.h"', "",
         "const struct rm_error_desc rm_errors[] = {"]
    for name, value, doc in errors:
        o.append(f'\t{{{value}, "{name}", "{doc}"}},')
    o += ["};", "", f"const int rm_nerrors = {len(errors)};", ""]
    return "\n".join(o)


def elem_size(f):
    """C expression of the bytes of one element of buffer field f (a void * counts bytes)."""
    return "1" if f.p.base == "void" else f"sizeof(*{f.p.name})"


def gen_attribute_sizes():
    """The size function of every attribute type the spec's size lines size, for the generated
    headers of both sides: static inline size_t rm_size_of_TYPE(int a), 0 for a value no size
    line lists."""
    o = ["/* Bytes of the value of attribute a (proto/api.spec: size), 0 for one not listed. */"]
    for t in sorted(ATTRIBUTE_SIZES):
        o += [f"static inline size_t rm_size_of_{t}(int a)", "{", "\tswitch (a) {"]
        by_type = {}
        for v, ctype in ATTRIBUTE_SIZES[t]["values"].items():
            by_type.setdefault(ctype, []).append(v)
        for ctype, values in by_type.items():
            o += [f"\tcase {v}:" for v in values]
            o.append(f"\t\treturn sizeof({ctype});")
        o += ["\tdefault:", "\t\treturn 0;", "\t}", "}", ""]
    return o
