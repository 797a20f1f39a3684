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
the one list of them.
"""
import argparse
import os
import re
import subprocess
import sys

# Driver handle type -> its enum rm_handle_kind, filled by read_handle_kinds.
HANDLE_KINDS = {}

SCALARS = {
    "int": "int32", "unsigned int": "uint32", "size_t": "uint64", "unsigned long long": "uint64",
    "cuuint64_t": "uint64", "cuuint32_t": "uint32", "float": "float", "CUdevice": "int32",
    "CUdeviceptr": "uint64", "long long": "int64", "unsigned char": "uint32", "short": "int32",
    "unsigned short": "uint32", "unsigned long": "uint64", "long": "int64",
    "CUmemGenericAllocationHandle": "uint64",
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
    # A struct's members may hold one level of nested struct or union (CUmemAllocationProp).
    structs = set(re.findall(r"typedef struct \w+ \{(?:[^{}]|\{[^{}]*\})*\} (\w+);", flat))
    # typedef chains such as CUuuid -> struct CUuuid_st, CUdevprop -> CUdevprop_v1
    aliases = dict((b, a) for a, b in re.findall(r"typedef (?:struct |enum )?(\w+) (\w+);", flat))
    handles = set(re.findall(r"typedef struct \w+ \*(\w+);", flat))  # CUcontext -> struct CUctx_st *
    return funcs, enums, structs, aliases, handles


def read_handle_kinds(path, handle_types, known_types):
    """Fills HANDLE_KINDS from path (proto/handle_kinds.def): each line RM_HANDLE_KIND(RM_H_NAME,
    C_TYPE); a kind whose type is a driver handle type of cuda.h is the kind of that type."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), open(path).read(), flags=re.S)
    kinds = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        k = re.fullmatch(r"\s*RM_HANDLE_KIND\(\s*(RM_H_\w+)\s*,\s*(\w+)\s*\)\s*", line)
        if not k:
            sys.exit(f"{path}:{n}: expected RM_HANDLE_KIND(RM_H_NAME, C_TYPE)")
        name, t = k.groups()
        if name in kinds:
            sys.exit(f"{path}:{n}: {name} listed twice")
        kinds.add(name)
        if t in handle_types:
            if t in HANDLE_KINDS:
                sys.exit(f"{path}:{n}: {t} has two kinds, {HANDLE_KINDS[t]} and {name}")
            HANDLE_KINDS[t] = name
        elif t not in known_types:
            sys.exit(f"{path}:{n}: {t} is not a type of cuda.h")
    if not HANDLE_KINDS:
        sys.exit(f"{path}: no kind of a driver handle type (RM_HANDLE_KIND(RM_H_X, CUx))")


class ReservedOp:
    """A line of proto/reserved_ops.def: RM_RESERVED_OP(NAME, VALUE, SERVED_BY, DIRECTION)."""

    def __init__(self, name, value, served_by, one_way):
        self.name, self.value, self.served_by, self.one_way = name, value, served_by, one_way


def read_reserved_ops(path):
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), open(path).read(), flags=re.S)
    ops, names, values = [], set(), set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        m = re.fullmatch(r"\s*RM_RESERVED_OP\(\s*(RM_OP_[A-Z0-9_]+)\s*,\s*(0|0x[0-9A-Fa-f]+)\s*,\s*(\w+)\s*,"
                         r"\s*(\w+)\s*\)\s*", line)
        if not m:
            sys.exit(f"{path}:{n}: expected RM_RESERVED_OP(RM_OP_NAME, VALUE, SERVED_BY, DIRECTION)")
        name, value, served_by, direction = m.group(1), int(m.group(2), 0), m.group(3), m.group(4)
        if name in names or value in values:
            sys.exit(f"{path}:{n}: {name} or its value {m.group(2)} listed twice")
        if value != 0 and value < 0x10000:
            sys.exit(f"{path}:{n}: {name}: a reserved opcode is 0 or from 0x10000 (proto/api.spec numbers below)")
        if served_by not in ("server", "worker", "client") and not served_by.startswith("rm_handle_"):
            sys.exit(f"{path}:{n}: {name}: SERVED_BY is server, worker, client or a handler rm_handle_NAME")
        if direction not in ("reply", "oneway"):
            sys.exit(f"{path}:{n}: {name}: DIRECTION is reply or oneway")
        if direction == "oneway" and served_by in ("server", "client"):
            sys.exit(f"{path}:{n}: {name}: only a request of a session's worker is oneway")
        names.add(name)
        values.add(value)
        ops.append(ReservedOp(name, value, served_by, direction == "oneway"))
    return ops


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


def resolve(t, aliases):
    seen = set()
    while t in aliases and t not in seen and t not in SCALARS and t not in HANDLE_KINDS:
        seen.add(t)
        t = aliases[t]
    return t


def read_exports(path):
    with open(path) as f:
        return sorted(set(x.split()[-1] for x in f if x.strip()))


class SpecError(Exception):
    """An entry of the spec the generator cannot honour: the message names file:line and why."""


# What a parameter's annotation may say (proto/api.spec's header comment has their meaning).
PARAM_NOTES = ("new", "new:body", "del", "del:body", "opt", "unchecked", "nosubmit")
PARAM_LENGTHS = ("in[", "out[", "dptr[")


def split_outside(text, is_sep, opening="([", closing=")]"):
    """text cut where is_sep(c) holds outside brackets; empty pieces dropped."""
    out, cur, depth = [], "", 0
    for c in text:
        depth += (c in opening) - (c in closing)
        if depth == 0 and is_sep(c):
            out.append(cur)
            cur = ""
        else:
            cur += c
    return [w for w in out + [cur] if w]


class SpecEntry:
    """One line of the spec: OPCODE NAME CLASS [ANNOTATION ...]."""

    def __init__(self, where, opcode, name, cls, notes):
        self.where, self.opcode, self.name, self.cls = where, opcode, name, cls
        self.async_ = "async" in notes
        self.syncpoint = "syncpoint" in notes
        self.cached = "cached" in notes
        self.forgets = []      # forgets=NAME,...: cached calls whose answers this call makes stale
        self.sets = None       # sets=PARAM: the setting's value; a repeat of a set that holds is not sent
        self.body = None       # the body its handler calls: its own name (body), or another call's
        self.body_args = None  # body=NAME(ARG, ...): the arguments it passes to NAME's body
        self.via = None        # via=NAME: the stream-ordered call that does its work
        self.ann = {}          # parameter -> its annotations
        for n in notes:
            if notes.count(n) > 1:
                self.fail(f"{n} given twice")
            if n in ("async", "syncpoint", "cached"):
                continue
            if n == "body":
                self.body = name
                continue
            k, eq, v = n.partition("=")
            if not eq or not re.fullmatch(r"\w+", k):
                self.fail(f"unknown annotation {n!r}")
            if k == "body":
                m = re.fullmatch(r"(\w+)(?:\((.*)\))?", v)
                if not m:
                    self.fail(f"{n}: expected body=NAME or body=NAME(ARG, ...)")
                self.body = m.group(1)
                if m.group(2) is not None:
                    self.body_args = [a.strip() for a in split_outside(m.group(2), lambda c: c == ",")]
            elif k == "forgets":
                self.forgets = v.split(",")
                if not all(re.fullmatch(r"\w+", f) for f in self.forgets):
                    self.fail(f"{n}: expected forgets=NAME,...")
            elif k == "sets":
                if not re.fullmatch(r"\w+", v):
                    self.fail(f"{n}: expected sets=PARAM")
                self.sets = v
            elif k == "via":
                if not re.fullmatch(r"\w+", v):
                    self.fail(f"{n}: expected via=NAME")
                self.via = v
            else:
                if k in self.ann:
                    self.fail(f"{k}: annotated twice: write {k}=A,B")
                self.ann[k] = split_outside(v, lambda c: c == ",", "[", "]")
                for a in self.ann[k]:
                    if a not in PARAM_NOTES and not (a.startswith(PARAM_LENGTHS) and a.endswith("]")):
                        self.fail(f"{k}={a}: unknown annotation (known: {', '.join(PARAM_NOTES)}, "
                                  "in[LEN], out[LEN], dptr[LEN])")
                    if self.ann[k].count(a) > 1:
                        self.fail(f"{k}={a} given twice")

    def fail(self, why):
        raise SpecError(f"{self.where}: {self.name}: {why}")


def read_spec(path):
    """The spec's entries, their forgets= lists with every cache group spelled out."""
    entries, seen_ops, seen_names, groups = [], set(), set(), {}
    for lineno, line in enumerate(open(path), 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        where = f"{path}:{lineno}"
        f = split_outside(line, str.isspace)
        if f[0] == "group":
            if len(f) != 3 or not re.fullmatch(r"[a-z][a-z0-9_]*", f[1]) or not re.fullmatch(r"\w+(,\w+)*", f[2]):
                raise SpecError(f"{where}: expected group NAME MEMBER,... (NAME in lower case)")
            if f[1] in groups:
                raise SpecError(f"{where}: group {f[1]} defined twice")
            members = []
            for m in f[2].split(","):
                if m in groups:
                    members += [x for x in groups[m] if x not in members]
                elif re.fullmatch(r"[a-z][a-z0-9_]*", m):
                    raise SpecError(f"{where}: group {f[1]}: no group {m} defined above")
                elif m not in members:
                    members.append(m)
            groups[f[1]] = members
            continue
        if len(f) >= 3 and f[2] == "daemon":
            raise SpecError(f"{where}: class daemon is gone: the daemon's part of a call is a typed body "
                            "(class gen or client, annotation body)")
        if len(f) < 3 or f[2] not in ("gen", "client", "hand", "local") or not re.fullmatch(r"-|\d+", f[0]):
            raise SpecError(f"{where}: expected OPCODE NAME CLASS [ANNOTATION...]")
        op = None if f[0] == "-" else int(f[0])
        if (op is None) != (f[2] == "local"):
            raise SpecError(f"{where}: local functions, and only they, have no opcode")
        if op is not None and (op in seen_ops or op <= 0):
            raise SpecError(f"{where}: opcode {op} repeated or reserved")
        if f[1] in seen_names:
            raise SpecError(f"{where}: {f[1]} listed twice")
        seen_ops.add(op)
        seen_names.add(f[1])
        entries.append(SpecEntry(where, op, f[1], f[2], f[3:]))
    for e in entries:
        forgets = []
        for n in e.forgets:
            if re.fullmatch(r"[a-z][a-z0-9_]*", n) and n not in groups:
                e.fail(f"forgets={n}: no group {n} defined (group NAME MEMBER,...)")
            # A group names the calls a change makes stale; the call making it is not among them.
            forgets += [x for x in groups.get(n, [n]) if x not in forgets and (x != e.name or n not in groups)]
        e.forgets = forgets
    return entries


def check_entry(e, fn, by_name, funcs, exports):
    """Refuses what the generator cannot honour in entry e of function fn, saying why."""
    params = {p.name: p for p in fn.params}
    if e.cls in ("hand", "local") and (e.ann or e.body or e.via):
        e.fail(f"a {e.cls} call's daemon side is not generated: nothing would honour its annotations")
    if e.cls == "local" and (e.async_ or e.syncpoint):
        e.fail("a local call sends nothing: async and syncpoint mean nothing for it")
    if e.async_ and e.syncpoint:
        e.fail("an async call has no reply to carry earlier errors: async and syncpoint")
    if e.body and e.via:
        e.fail("body and via both say what does the call's work: give one")
    if (e.cached or e.forgets or e.sets) and e.cls != "gen":
        e.fail("cached, forgets=... and sets=... are honoured by a generated client stub: class gen only")
    if e.cached and e.async_:
        e.fail("an async call has no answer to keep: async and cached")
    if e.sets:
        p = params.get(e.sets)
        if p is None or p.stars or e.cached or e.async_ or e.syncpoint:
            e.fail(f"sets={e.sets}: expected a parameter passed by value, of a call that waits and is not cached")
    for f in e.forgets:
        t = by_name.get(f)
        if t is None or not (t.cached or t.sets):
            e.fail(f"forgets={f}: no entry named {f} is annotated cached or sets=...")
    for k, notes in e.ann.items():
        if k not in params:
            e.fail(f"{k}={','.join(notes)}: {e.name} has no parameter {k} "
                   f"(its parameters: {', '.join(params) or 'none'})")
        check_param(e, fn, params[k], notes)
    if e.via:
        v = funcs.get(e.via)
        if v is None or e.via not in exports:
            e.fail(f"via={e.via}: not a function of cuda.h the stub libcuda exports")
        want = [p.ctype for p in fn.params] + ["CUstream"]
        if [p.ctype for p in v.params] != want:
            e.fail(f"via={e.via}: its parameters must be {e.name}'s and a CUstream, ({', '.join(want)}), "
                   f"not ({', '.join(p.ctype for p in v.params)})")
        if e.async_:
            e.fail(f"via={e.via}: makes a synchronous call of a stream-ordered one, and {e.name} is async")
    if e.body and e.body != e.name:
        t = by_name.get(e.body)
        if t is None or t.body != t.name:
            e.fail(f"body={e.body}: no entry has a body of that name (annotation body on {e.body})")
        theirs = funcs[t.name].params
        if e.body_args is None and [p.ctype for p in fn.params] != [p.ctype for p in theirs]:
            e.fail(f"body={e.body}: the parameters differ, ({', '.join(p.ctype for p in fn.params)}) and "
                   f"({', '.join(p.ctype for p in theirs)}): pass them, body={e.body}(ARG, ...)")
        if e.body_args is not None:
            if len(e.body_args) != len(theirs):
                n, m = len(e.body_args), len(theirs)
                e.fail(f"body={e.body}(...): {n} argument{'s' * (n != 1)} for {m} parameter{'s' * (m != 1)}")
            for w in re.findall(r"\b[A-Za-z_]\w*", " ".join(e.body_args)):
                if w not in params and w != "NULL" and not re.fullmatch(r"[A-Z][A-Z0-9_]*", w):
                    e.fail(f"body={e.body}(...): {w} is not a parameter of {e.name}, NULL or a constant")
    if e.body and e.cls not in ("gen", "client"):
        e.fail(f"body: a {e.cls} call has no generated daemon handler to call it")


def check_param(e, fn, p, notes):
    """Refuses annotations of parameter p that do not fit its type and direction."""
    what = f"{p.name} is {'an output' if p.stars == 1 and not p.const else 'an input'} {p.ctype}"
    lengths = [n for n in notes if n.startswith(PARAM_LENGTHS)]
    if len(lengths) > 1:
        e.fail(f"{p.name}: {' and '.join(lengths)}: one length per parameter")
    is_out = p.stars == 1 and not p.const
    handle = not p.stars and p.base in HANDLE_KINDS
    for n in notes:
        if n.startswith(("in[", "out[")):
            if p.stars != 1 or p.base == "void" or (n.startswith("out[") and p.const):
                e.fail(f"{p.name}={n}: {what}, not a {'const ' if n[0] == 'i' else ''}pointer to elements")
            for w in re.findall(r"\b[A-Za-z_]\w*", n[n.index("[") + 1:-1]):
                if w not in [q.name for q in fn.params]:
                    e.fail(f"{p.name}={n}: {w} is not a parameter of {e.name}")
        elif n.startswith("dptr["):
            if p.stars or p.base != "CUdeviceptr":
                e.fail(f"{p.name}={n}: {what}, not a CUdeviceptr")
            m = re.fullmatch(r"\s*(\w+)\s*(?:\*\s*(\d+)\s*)?", n[5:-1])
            if not m or m.group(1) not in [q.name for q in fn.params]:
                e.fail(f"{p.name}={n}: the length must be a parameter, or a parameter times a constant")
        elif n in ("new", "new:body"):
            if not is_out:
                e.fail(f"{p.name}={n}: {what}: only an output becomes owned")
            if p.base == "CUdeviceptr" and n == "new":
                e.fail(f"{p.name}=new: device memory is owned with its size and quota: new:body")
            if p.base == "CUcontext" and n == "new":
                e.fail(f"{p.name}=new: a context is the session's through rm_session_add_ctx: new:body")
            if p.base not in HANDLE_KINDS and p.base != "CUdeviceptr":
                e.fail(f"{p.name}={n}: {what}, not a handle or device pointer")
        elif n in ("del", "del:body"):
            if p.stars:
                e.fail(f"{p.name}={n}: {what}: only an input is given up")
            if p.base == "CUdeviceptr" and n == "del":
                e.fail(f"{p.name}=del: device memory goes with its size and quota: del:body")
            if p.base == "CUcontext" and n == "del":
                e.fail(f"{p.name}=del: a context is the session's until it ends: del:body")
            if not handle and p.base != "CUdeviceptr":
                e.fail(f"{p.name}={n}: {what}, not a handle or device pointer")
        elif n == "opt":
            if not is_out and not (handle and p.base != "CUstream"):
                e.fail(f"{p.name}=opt: {what}: only an output, or an input handle but a stream, may be NULL")
        elif n == "unchecked":
            if p.stars or p.base != "CUdeviceptr":
                e.fail(f"{p.name}=unchecked: {what}, not an input CUdeviceptr")
            if lengths or "del:body" in notes:
                e.fail(f"{p.name}=unchecked: and checked, {(lengths + ['del:body'])[0]}")
        elif n == "nosubmit":
            if p.stars or p.base != "CUstream":
                e.fail(f"{p.name}=nosubmit: {what}, not an input CUstream")
            if not e.async_:
                e.fail(f"{p.name}=nosubmit: only an async call's stream is selected for submission")
        if (n.endswith(":body") or n in ("unchecked", "nosubmit")) and e.body is None:
            e.fail(f"{p.name}={n}: leaves it to the body, and {e.name} has none (annotation body)")


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
        if buf:
            self.dir = "out" if buf[0].startswith("out[") else "in"
            self.len_expr = buf[0][buf[0].index("[") + 1:-1]
            self.kind = "buf"
            self.elem = p.base
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
           "#ifndef REMORA_API_OPS_H", "#define REMORA_API_OPS_H", "", "#include <stdint.h>", "",
           '#include "wire.h"', "", "enum rm_op {"]
    remote = [e for e in entries if e.opcode is not None]
    for e in remote:
        out.append(f"\tRM_OP_{e.name} = {e.opcode},")
    top = max(e.opcode for e in remote)
    out += ["};", "", f"#define RM_OP_LIMIT {top + 1}", "",
            "/* Per-op flags: RM_OPF_ASYNC for calls sent without waiting for a reply (it is the frame",
            " * flag RM_F_ASYNC), RM_OPF_SYNCPOINT for calls whose reply reports earlier async errors. */",
            "enum { RM_OPF_ASYNC = RM_F_ASYNC, RM_OPF_SYNCPOINT = 1u << 8 };",
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
            checks.append(f"(!{p.name} && ({f.len_expr}) != 0)")  # NULL only for no elements
            o.append(f"\treq.{f.field}.data = (uint8_t *){p.name};")
            o.append(f"\treq.{f.field}.len = (size_t)({f.len_expr}) * sizeof(*{p.name});")
        else:
            o.append(f"\treq.{f.field} = {'*' if p.stars else ''}{p.name};")
    if checks:
        o.append(f"\tif ({' || '.join(checks)})")
        o.append("\t\treturn CUDA_ERROR_INVALID_VALUE;")
    outs = [f for f in fields if f.dir == "out"]
    rpc = "rm_rpc_cached" if entry.cached else "rm_rpc_simple"
    # After a synchronizing call, mapped host memory is brought up to date (frontend/host_memory.c).
    if not outs and entry.syncpoint:
        if not entry.cached and (order := wait_order_handles(fn)):
            # Fenced against other threads' calls on its stream or event only (rpc.c).
            o.append(f"\tCUresult r = rm_rpc_ordered(RM_OP_{fn.name}, &req.base, {order[0]}, {order[1]});")
        else:
            o.append(f"\tCUresult r = {rpc}(RM_OP_{fn.name}, &req.base, NULL, NULL);")
        o += [f"\trm_query_cache_forget(RM_OP_{f});" for f in entry.forgets]
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
            o += [f"\t\trm_query_cache_forget(RM_OP_{f});" for f in entry.forgets]
            o.append("\t}")
        o.append("\treturn r;")
        o.append("}")
        return "\n".join(o)
    if not outs:
        if entry.forgets:
            o.append(f"\tCUresult r = {rpc}(RM_OP_{fn.name}, &req.base, NULL, NULL);")
            o += [f"\trm_query_cache_forget(RM_OP_{f});" for f in entry.forgets]
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
    o += [f"\trm_query_cache_forget(RM_OP_{f});" for f in entry.forgets]
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
        o.append(f"\tvoid *{f.p.name}_mem = calloc((size_t)({f.len_expr}) ? (size_t)({f.len_expr}) : 1, {elem});")
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


def gen_daemon_handler(fn, entry, fields):
    """The daemon's handler of a call: unpacks the request; checks and translates each
    parameter as its annotations say (streams last: selecting one orders work); calls the
    driver, the call's typed body or its stream-ordered twin (via); on success records new
    outputs and forgets del inputs; packs the reply and frees."""
    m_req, m_rep = Msg(fn.name + "_Req"), Msg(fn.name + "_Rep")
    o = [f"static void handle_{fn.name}(struct rm_session *s, struct rm_request *rq)", "{"]
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
        if f.dir == "out" and f.kind == "buf":
            # The client sends the buffer's length; its length parameter takes that value.
            o.append(f"\tuint64_t n_{p.name} = req->{f.field}_len;")
            o.append(f"\tif (n_{p.name} > RM_MAX_OUT_BUF / sizeof({p.base}))\n\t\tr = CUDA_ERROR_INVALID_VALUE;")
            o.append(f"\t{p.base} *{v} = r == CUDA_SUCCESS ? calloc(n_{p.name} ? n_{p.name} : 1, sizeof({p.base})) : NULL;")
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
            if not f.unchecked:
                count, unit = dptr_length(fn, f.len_expr)
                o.append(step(f"rm_session_check_span(s, req->{f.field}, {count}, {unit})"))
            args[p.name] = f"(CUdeviceptr)req->{f.field}"
        elif f.kind == "device":
            o.append(f"\tCUdevice {v} = 0;")
            o.append(step(f"rm_session_device(s, req->{f.field}, &{v})"))
            args[p.name] = v
        elif f.kind == "string":
            args[p.name] = f"req->{f.field}"
        elif f.kind == "struct":
            o.append(f"\tif (r == CUDA_SUCCESS && req->{f.field}.len != sizeof({p.base}))\n\t\tr = CUDA_ERROR_INVALID_VALUE;")
            args[p.name] = f"(const {p.base} *)req->{f.field}.data" if p.stars else f"*({p.base} *)req->{f.field}.data"
        elif f.kind == "buf":
            n = request_expr(fn, f.len_expr)
            o.append(f"\tif (r == CUDA_SUCCESS && (req->{f.field}.len % sizeof({p.base}) ||\n"
                     f"\t\t\t\t  req->{f.field}.len / sizeof({p.base}) != (uint64_t)({n})))\n"
                     f"\t\tr = CUDA_ERROR_INVALID_VALUE;")
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
            parent = f"req->{parents[0].field}" if parents else "0"
            o.append(f"\tif (r == CUDA_SUCCESS)\n\t\trm_session_own(s, {HANDLE_KINDS[p.base]}, {v}, {parent});")
        if f.delete:
            o.append(f"\tif (r == CUDA_SUCCESS)\n\t\trm_session_disown(s, {HANDLE_KINDS[p.base]}, {v});")
    for f in fields:
        p, v = f.p, f"a_{f.p.name}"
        if f.dir != "out":
            continue
        if f.kind == "buf":
            o.append(f"\tif (r == CUDA_SUCCESS) {{\n\t\trep.{f.field}.data = (uint8_t *){v};\n"
                     f"\t\trep.{f.field}.len = n_{p.name} * sizeof({p.base});\n\t}}")
        elif f.kind == "struct":
            o.append(f"\trep.{f.field}.data = (uint8_t *)&{v};\n\trep.{f.field}.len = sizeof({v});")
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
    parameter or a parameter times a constant (check_param), so that the daemon can check
    it for overflow. No annotation: one byte."""
    if expr is None:
        return "1", "1"
    m = re.fullmatch(r"\s*(\w+)\s*(?:\*\s*(\d+)\s*)?", expr)
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
         " * pointers lie in the client's memory unless unchecked; outputs point at zeroed",
         " * storage. The handler records new outputs and forgets del inputs after CUDA_SUCCESS,",
         " * except those annotated :body, which the body records or forgets itself. */"]
    for e in entries:
        if e.body != e.name:
            continue
        also = [x.name for x in entries if x.body == e.name and x is not e]
        if also:
            o.append(f"/* also the body of {', '.join(also)} */")
        params = ", ".join(["struct rm_session *s"] + ([c_args(funcs[e.name])] if funcs[e.name].params else []))
        o.append(f"CUresult rm_body_{e.name}({params});")
    return o


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

    by_name = {e.name: e for e in entries}
    for e in entries:
        if e.name not in funcs:
            raise SpecError(f"{e.where}: {e.name} is not declared in cuda.h")
        check_entry(e, funcs[e.name], by_name, funcs, exports)
    generated = []  # (function, entry, fields) of every call whose messages are generated
    for e in entries:
        if e.cls == "local":
            continue
        try:
            generated.append((funcs[e.name], e, fields_of(funcs[e.name], e, ctx)))
        except Unmappable as err:
            if e.cls != "hand":
                raise SpecError(f"{e.where}: {err}")
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
          "#ifndef REMORA_CLIENT_STUBS_H", "#define REMORA_CLIENT_STUBS_H", "", "#include <cuda.h>", "",
          "/* Hand-written client bodies (frontend/) of calls whose annotations the generated entry",
          " * point honours: syncpoint (mapped host memory brought up to date after success). */"]
    for e in entries:
        if e.cls in ("hand", "client") and e.syncpoint:
            fn = funcs[e.name]
            ch.append(f"CUresult rm_client_body_{e.name}({c_args(fn)});")
            c.append(f"/* proto/api.spec: syncpoint */\nRM_EXPORT CUresult CUDAAPI {e.name}({c_args(fn)})\n{{\n"
                     f"\tCUresult r = rm_client_body_{e.name}({', '.join(p.name for p in fn.params)});\n"
                     f"\treturn r == CUDA_SUCCESS ? rm_mapped_after_sync() : r;\n}}\n")
    ch += ["", "#endif", ""]
    write("client_stubs.h", "\n".join(ch))
    write("client_stubs.c", "\n".join(c))
    write("client_calls.c", gen_fuzz_calls(generated))

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
    d.append("")
    d += gen_reserved_dispatch(reserved)
    write("daemon_dispatch.c", "\n".join(d) + "\n")

    # What people write for the daemon: the typed bodies, and the handlers of hand calls.
    h = ["/* Generated by scripts/gen_api.py from proto/api.spec. Do not edit. */",
         "#ifndef REMORA_DAEMON_HANDLERS_H", "#define REMORA_DAEMON_HANDLERS_H", "", "#include <cuda.h>", "",
         "struct rm_session;", "struct rm_request;", ""]
    h += gen_body_decls(entries, funcs)
    h += ["", "/* Handlers of hand calls: each unpacks, checks, replies and frees itself. */"]
    for e in entries:
        if e.cls == "hand":
            h.append(f"void rm_handle_{e.name}(struct rm_session *s, struct rm_request *rq);")
    h += ["", "/* Handlers of reserved opcodes (proto/reserved_ops.def). */"]
    h += [f"void {r.served_by}(struct rm_session *s, struct rm_request *rq);" for r in reserved
          if r.served_by.startswith("rm_handle_")]
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
          "int rm_driver_table_load(void *lib);", "",
          "/* What rm_drv_NAME returns where the loaded driver lacks NAME: CUDA_ERROR_NOT_SUPPORTED,",
          " * logged once per name (backend/request.c). */",
          "CUresult rm_unsupported_by_driver(const char *name);", "",
          "/* rm_drv_NAME: the loaded driver's NAME, or rm_unsupported_by_driver where it lacks it. */"]
    for n in names:
        fn = funcs[n]
        args = ", ".join(p.name for p in fn.params)
        t.append(f"static inline CUresult rm_drv_{n}({c_args(fn)})\n{{\n"
                 f"\treturn rm_drv.{n} ? rm_drv.{n}({args}) : rm_unsupported_by_driver(\"{n}\");\n}}")
    t += ["", "#endif", ""]
    write("driver_table.h", "\n".join(t))
    tc = ["/* Generated by scripts/gen_api.py. Do not edit. */", '#include "driver_table.h"', "#include <dlfcn.h>", "",
          "struct rm_driver rm_drv;", "", "int rm_driver_table_load(void *lib)", "{", "\tint found = 0;"]
    for n in names:
        tc.append(f'\tif ((*(void **)&rm_drv.{n} = dlsym(lib, "{n}")))\n\t\tfound++;')
    tc += ["\treturn found;", "}", ""]
    write("driver_table.c", "\n".join(tc))


if __name__ == "__main__":
    try:
        main()
    except SpecError as err:
        sys.exit(str(err))
