"""proto/api.spec and proto/reserved_ops.def read and checked: every entry the generator cannot honour is refused
with file:line and why."""
import re
import sys

from .cuda_header import HANDLE_KINDS

# Attribute sizes (size lines): enum type -> {"where": file:line, "values": {VALUE: C type}}.
ATTRIBUTE_SIZES = {}


class SpecError(Exception):
    """An entry of the spec the generator cannot honour: the message names file:line and why."""


# What a parameter's annotation may say (proto/api.spec's header comment has their meaning).
PARAM_NOTES = ("new", "new:body", "del", "del:body", "opt", "unchecked", "nosubmit", "handles")


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
        self.striped = "striped" in notes  # its bulk may travel over the copy links too
        self.drops_replays = "drops_replays" in notes  # the daemon's replay graphs may no longer hold
        self.msg = None        # msg=REQ[,REP]: a hand call's messages of proto/remora.proto
        self.syncpoint = "syncpoint" in notes
        self.cached = "cached" in notes
        self.forgets = []      # forgets=NAME,...: cached calls whose answers this call makes stale
        self.sets = None       # sets=PARAM: the setting's value; a repeat of a set that holds is not sent
        self.narrows = None    # narrows=PARAM: forgets only the answers naming this PARAM's value
        self.body = None       # the body its handler calls: its own name (body), or another call's
        self.body_args = None  # body=NAME(ARG, ...): the arguments it passes to NAME's body
        self.via = None        # via=NAME: the stream-ordered call that does its work
        self.ann = {}          # parameter -> its annotations
        for n in notes:
            if notes.count(n) > 1:
                self.fail(f"{n} given twice")
            if n in ("async", "syncpoint", "cached", "striped", "drops_replays"):
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
            elif k == "narrows":
                if not re.fullmatch(r"\w+", v):
                    self.fail(f"{n}: expected narrows=PARAM")
                self.narrows = v
            elif k == "via":
                if not re.fullmatch(r"\w+", v):
                    self.fail(f"{n}: expected via=NAME")
                self.via = v
            elif k == "msg":
                if not re.fullmatch(r"[A-Z]\w*(,[A-Z]\w*)?", v):
                    self.fail(f"{n}: expected msg=REQUEST or msg=REQUEST,REPLY (messages of proto/remora.proto)")
                self.msg = v.split(",")
            else:
                if k in self.ann:
                    self.fail(f"{k}: annotated twice: write {k}=A,B")
                self.ann[k] = split_outside(v, lambda c: c == ",", "[", "]")
                for a in self.ann[k]:
                    if a not in PARAM_NOTES and not (a.startswith(PARAM_LENGTHS) and a.endswith("]")):
                        self.fail(f"{k}={a}: unknown annotation (known: {', '.join(PARAM_NOTES)}, "
                                  "in[LEN], out[LEN], in[@ATTR], out[@ATTR], dptr[LEN])")
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
        if f[0] == "size":
            if len(f) != 4 or not re.fullmatch(r"\w+", f[1]) or not re.fullmatch(r"\w+(,\w+)*", f[3]):
                raise SpecError(f"{where}: expected size ENUM_TYPE C_TYPE VALUE,...")
            table = ATTRIBUTE_SIZES.setdefault(f[1], {"where": where, "values": {}})
            for v in f[3].split(","):
                if v in table["values"]:
                    raise SpecError(f"{where}: {v} sized twice")
                table["values"][v] = f[2]
            continue
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
    if (e.msg or e.striped) and e.cls != "hand":
        e.fail("msg=... and striped are a hand call's: the others' messages are generated")
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
    if e.narrows:
        p = params.get(e.narrows)
        if not e.forgets or p is None or p.stars or p.base not in HANDLE_KINDS:
            e.fail(f"narrows={e.narrows}: expected a handle parameter passed by value, of a call that forgets=...")
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
    if e.cls == "hand" and not e.msg:
        e.fail("a hand call names its messages of proto/remora.proto: msg=REQUEST[,REPLY]")


def check_param(e, fn, p, notes):
    """Refuses annotations of parameter p that do not fit its type and direction."""
    what = f"{p.name} is {'an output' if p.stars == 1 and not p.const else 'an input'} {p.ctype}"
    lengths = [n for n in notes if n.startswith(PARAM_LENGTHS)]
    if len(lengths) > 1:
        e.fail(f"{p.name}: {' and '.join(lengths)}: one length per parameter")
    is_out = p.stars == 1 and not p.const
    handle = not p.stars and p.base in HANDLE_KINDS
    for n in notes:
        if n.startswith(("in[@", "out[@")):
            a = next((q for q in fn.params if q.name == n[n.index("@") + 1:-1]), None)
            if p.stars != 1 or p.base != "void" or (n.startswith("out[") and p.const):
                e.fail(f"{p.name}={n}: {what}, not a void * (a value sized by an attribute)")
            if a is None or a.stars or a.base not in ATTRIBUTE_SIZES:
                e.fail(f"{p.name}={n}: {n[n.index('@') + 1:-1]} is not a parameter of a type that size lines size")
        elif n.startswith(("in[", "out[")):
            if p.stars != 1 or (n.startswith("out[") and p.const):  # elements of a void * are bytes
                e.fail(f"{p.name}={n}: {what}, not a {'const ' if n[0] == 'i' else ''}pointer to elements")
            for w in re.findall(r"\b[A-Za-z_]\w*", n[n.index("[") + 1:-1]):
                if w not in [q.name for q in fn.params]:
                    e.fail(f"{p.name}={n}: {w} is not a parameter of {e.name}")
        elif n.startswith("dptr["):
            if p.stars or p.base != "CUdeviceptr":
                e.fail(f"{p.name}={n}: {what}, not a CUdeviceptr")
            m = re.fullmatch(r"\s*(\w+)\s*(?:\*\s*(\d+)\s*)?", n[5:-1])
            if not m or (m.group(1) not in [q.name for q in fn.params] and not m.group(1).isdigit()):
                e.fail(f"{p.name}={n}: the length must be a parameter, a parameter times a constant, or a constant")
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
            in_struct = p.stars == 1 and p.const and p.base not in ("char", "void") and not lengths
            if not is_out and not (handle and p.base != "CUstream") and not in_struct:
                e.fail(f"{p.name}=opt: {what}: only an output, an input handle but a stream, or a const "
                       "pointer to one input value may be NULL")
        elif n == "handles":
            elem = p.base
            if not [x for x in notes if x.startswith("in[") and not x.startswith("in[@")] or elem not in HANDLE_KINDS:
                e.fail(f"{p.name}=handles: {what}, not an in[LEN] buffer of handles")
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
