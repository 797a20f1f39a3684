"""cuda.h read for the generator: functions, types, errors; the handle kinds of proto/handle_kinds.def."""
import os
import re
import subprocess
import sys

# Driver handle type -> its enum rm_handle_kind, filled by read_handle_kinds.
HANDLE_KINDS = {}


SCALARS = {
    "int": "int32", "unsigned int": "uint32", "unsigned": "uint32", "size_t": "uint64", "unsigned long long": "uint64",
    "cuuint64_t": "uint64", "cuuint32_t": "uint32", "float": "float", "CUdevice": "int32",
    "CUdeviceptr": "uint64", "long long": "int64", "unsigned char": "uint32", "short": "int32",
    "unsigned short": "uint32", "unsigned long": "uint64", "long": "int64",
    "CUmemGenericAllocationHandle": "uint64",
    "CUtexObject": "uint64", "CUsurfObject": "uint64", "unsigned": "uint32", "CUgraphConditionalHandle": "uint64",
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
    # A struct's members may nest structs and unions two levels deep (CUmemAllocationProp;
    # CUDA_RESOURCE_DESC, a union of structs). A union travels as its bytes, as a struct
    # does (CUlaunchAttributeValue).
    structs = set(re.findall(r"typedef (?:struct|union) \w+ \{(?:[^{}]|\{(?:[^{}]|\{[^{}]*\})*\})*\} (\w+);", flat))
    # typedef chains such as CUuuid -> struct CUuuid_st, CUdevprop -> CUdevprop_v1
    aliases = dict((b, a) for a, b in re.findall(r"typedef (?:struct |enum )?(\w+) (\w+);", flat))
    handles = set(re.findall(r"typedef struct \w+ \*(\w+);", flat))  # CUcontext -> struct CUctx_st *
    return funcs, enums, structs, aliases, handles


def read_handle_kinds(path, handle_types, known_types):
    """Fills HANDLE_KINDS from path (proto/handle_kinds.def): each line RM_HANDLE_KIND(RM_H_NAME,
    C_TYPE[, ...]) (the daemon's release columns follow); a kind whose type is a driver handle type of cuda.h is the kind of that type."""
    text = re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"), open(path).read(), flags=re.S)
    kinds = set()
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        k = re.fullmatch(r"\s*RM_HANDLE_KIND\(\s*(RM_H_\w+)\s*,\s*(\w+)\s*(?:,[^()]*)?\)\s*", line)
        if not k:
            sys.exit(f"{path}:{n}: expected RM_HANDLE_KIND(RM_H_NAME, C_TYPE, ...)")
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


def resolve(t, aliases):
    seen = set()
    while t in aliases and t not in seen and t not in SCALARS and t not in HANDLE_KINDS:
        seen.add(t)
        t = aliases[t]
    return t


def read_exports(path):
    with open(path) as f:
        return sorted(set(x.split()[-1] for x in f if x.strip()))


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


def c_args(fn):
    return ", ".join(p.ctype + (" " if not p.ctype.endswith("*") else "") + p.name for p in fn.params) or "void"
