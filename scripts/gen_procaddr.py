#!/usr/bin/env python3
"""Generate the cuGetProcAddress table of libcuda.so.1 from the toolkit headers.

Sources of truth, nothing kept by hand:
  * the versioned typedefs of cudaTypedefs.h and, unless --no-siblings, of the other
    cuda*Typedefs.h in its directory (cudaGL, cudaEGL, cudaVDPAU, cudaProfiler):
    PFN_<base>_v<ver>[_ptds|_ptsz] says that <base> got a new ABI variant in CUDA <ver>;
  * the names the toolkit's stub libcuda.so exports (nm -D --defined-only), which are the
    names our libcuda.so.1 defines.

Naming rule (what the driver does; checked against the real driver on all 440 requests of
cudart 13.0, tests/data/gpa_real_vec_static.txt):
  * the legacy variants of a base, sorted by version, are <base>, <base>_v2, <base>_v3, ...;
  * a per-thread variant PFN_<base>_v<ver>_ptds (or _ptsz) is the per-thread twin of the legacy
    variant current at <ver>: cuMemcpyHtoD_v7000_ptds -> cuMemcpyHtoD_v2_ptds, because
    cuMemcpyHtoD_v3020 (= cuMemcpyHtoD_v2) is the legacy variant in force at 7000.
Every derived name is checked against the exports: a base of which some variants are exported
but another is not means the rule no longer fits the headers, and the script fails. A base
of which no variant is exported (the OpenGL, EGL and VDPAU interop, which the stub does not
export) is kept in the table with a NULL address, so that lookups still name the variant.

Output: a C file with rm_procaddr_table[] (struct rm_procaddr_entry, frontend/procaddr.h),
sorted by (name, per_thread, min_version) as strcmp orders names, for binary search. It does
not include cuda.h: every symbol is declared `extern void SYM(void);`.

Usage:
  gen_procaddr.py --typedefs PATH/cudaTypedefs.h [--no-siblings] [--typedefs OTHER.h ...]
                  (--exports EXPORTS.txt | --stub-lib libcuda.so) --out procaddr_table.c
                  [--dummies dummies.c]
--dummies writes weak empty definitions of every exported symbol the table references, for
tests that link the table without the whole library.
"""
import argparse
import glob
import os
import re
import subprocess
import sys
import textwrap

# typedef CUresult (CUDAAPI *PFN_cuMemcpyHtoD_v7000_ptds)(...);  (spacing varies in the headers)
TYPEDEF_RE = re.compile(
    r"typedef\s+\w+\s*\(\s*CUDAAPI\s*\*\s*PFN_(cu\w+?)_v(\d+)(_ptds|_ptsz)?\s*\)")
# CUDA 12 headers also alias the current variant: #define PFN_cuCtxCreate PFN_cuCtxCreate_v3020.
# Those add no information beyond the typedefs; they are only counted, for the summary.
DEFINE_RE = re.compile(r"#\s*define\s+PFN_(cu\w+)\s+(?:PFN_|__API_TYPEDEF_)")


def fail(msg):
    print(f"gen_procaddr.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def read_typedefs(paths):
    """{(base, suffix): set(versions)} from the PFN typedefs; suffix is '', '_ptds' or '_ptsz'."""
    versions = {}
    ndefines = 0
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError as e:
            fail(f"cannot read {path}: {e.strerror}")
        found = TYPEDEF_RE.findall(text)
        if not found:
            fail(f"{path}: no PFN_cu*_v<version> typedefs")
        for base, ver, sfx in found:
            versions.setdefault((base, sfx), set()).add(int(ver))
        ndefines += len(DEFINE_RE.findall(text))
    return versions, ndefines


def parse_exports(lines):
    """Symbol names from one-per-line text or from raw nm output (last field, @version cut)."""
    names = set()
    for line in lines:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        name = fields[-1].split("@", 1)[0]
        if name.startswith("cu"):
            names.add(name)
    return names


def typedef_headers(given, siblings):
    """The headers given, and with siblings every other cuda*Typedefs.h beside them: cuGetProcAddress
    also gives the OpenGL, EGL, VDPAU and profiler functions, typed in cudaGLTypedefs.h etc."""
    headers = list(dict.fromkeys(given))
    if siblings:
        for d in dict.fromkeys(os.path.dirname(os.path.abspath(h)) for h in given):
            for h in sorted(glob.glob(os.path.join(d, "cuda*Typedefs.h"))):
                if not any(os.path.samefile(h, g) for g in headers if os.path.exists(g)):
                    headers.append(h)
    return headers


def read_exports(args):
    if args.exports:
        try:
            with open(args.exports, encoding="utf-8") as f:
                names = parse_exports(f)
        except OSError as e:
            fail(f"cannot read {args.exports}: {e.strerror}")
    else:
        try:
            nm = subprocess.run([args.nm, "-D", "--defined-only", args.stub_lib],
                                capture_output=True, text=True, check=True)
        except (OSError, subprocess.CalledProcessError) as e:
            fail(f"{args.nm} -D --defined-only {args.stub_lib} failed: {e}")
        names = parse_exports(nm.stdout.splitlines())
    if not names:
        fail("no exported cu* names")
    return names


def variant_name(base, index, sfx):
    return base + ("" if index == 0 else f"_v{index + 1}") + sfx


def derive(versions):
    """[(base, min_version, per_thread, symbol)] for every versioned typedef."""
    rows = []
    for (base, sfx), vers in versions.items():
        legacy = sorted(versions.get((base, ""), ()))
        own = sorted(vers)
        for v in own:
            if sfx:
                current = [lv for lv in legacy if lv <= v]
                # per-thread twin of the legacy variant in force at v; a base without legacy
                # typedefs (none in CUDA 13) would number its per-thread variants by themselves
                index = legacy.index(current[-1]) if current else own.index(v)
            else:
                index = own.index(v)
            rows.append((base, v, 1 if sfx else 0, variant_name(base, index, sfx)))
    return rows


def check(rows, exports):
    """Fail where the naming rule contradicts the exports; return the bases not exported at all."""
    by_base = {}
    for base, _, _, sym in rows:
        by_base.setdefault(base, []).append(sym)
    absent_bases = []
    errors = []
    for base, syms in sorted(by_base.items()):
        missing = [s for s in syms if s not in exports]
        if not missing:
            continue
        if len(missing) == len(syms):
            absent_bases.append(base)
        else:
            errors.append(f"{base}: derived {', '.join(missing)} not exported, "
                          f"though {', '.join(s for s in syms if s in exports)} are")
    if errors:
        fail("the naming rule does not fit these headers:\n  " + "\n  ".join(errors))
    return absent_bases


def c_string(s):
    if not re.fullmatch(r"\w+", s):
        fail(f"unexpected symbol name {s!r}")
    return f'"{s}"'


def write_table(path, rows, exports, sources, absent_bases):
    provided = sorted({sym for _, _, _, sym in rows if sym in exports})
    out = [
        "/* Generated by scripts/gen_procaddr.py; do not edit.",
        " * From: " + ", ".join(os.path.basename(s) for s in sources) + ".",
        f" * {len(rows)} variants of {len({r[0] for r in rows})} driver functions; "
        f"{len(provided)} exported symbols referenced.",
        " * Sorted by (name, per_thread, min_version), names in strcmp order. */",
        "#define RM_PROCADDR_NO_CUDA_H /* the declarations below would clash with cuda.h */",
        '#include "procaddr.h"',
        "",
        "#include <stddef.h>",
        "",
    ]
    out += [f"extern void {sym}(void);" for sym in provided]
    out.append("")
    if absent_bases:
        text = ("Not exported by the stub libcuda.so, so not defined by our library; kept so that "
                "lookups name the variant, resolved to NULL: " + ", ".join(absent_bases) + ".")
        lines = textwrap.wrap(text, 96)
        out += ["/* " + lines[0]] + [" * " + l for l in lines[1:]]
        out[-1] += " */"
    out.append("const struct rm_procaddr_entry rm_procaddr_table[] = {")
    for base, ver, pt, sym in rows:
        addr = sym if sym in exports else "NULL"
        out.append(f"    {{ {c_string(base)}, {ver}, {pt}, {c_string(sym)}, {addr} }},")
    out.append("};")
    out.append("const size_t rm_procaddr_table_len = sizeof rm_procaddr_table / sizeof rm_procaddr_table[0];")
    write(path, out)


def write_dummies(path, rows, exports):
    provided = sorted({sym for _, _, _, sym in rows if sym in exports})
    out = ["/* Generated by scripts/gen_procaddr.py --dummies; do not edit.",
           " * Weak empty definitions of the symbols procaddr_table.c references, for tests",
           " * that link the table without the library; real definitions win over these. */"]
    for sym in provided:
        out += [f"void {sym}(void);", f"__attribute__((weak)) void {sym}(void) {{}}"]
    write(path, out)


def write(path, lines):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--typedefs", action="append", required=True, metavar="HEADER",
                    help="cudaTypedefs.h (repeatable); the other cuda*Typedefs.h beside it are read too")
    ap.add_argument("--no-siblings", dest="siblings", action="store_false",
                    help="read only the --typedefs files given, not the cuda*Typedefs.h beside them")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--exports", metavar="TXT", help="exported names, one a line (nm output also accepted)")
    src.add_argument("--stub-lib", metavar="SO", help="stub libcuda.so; runs nm -D --defined-only on it")
    ap.add_argument("--nm", default="nm", help="nm program for --stub-lib (default: nm)")
    ap.add_argument("--out", required=True, metavar="C", help="table to write")
    ap.add_argument("--dummies", metavar="C", help="also write weak dummy definitions here")
    args = ap.parse_args()

    headers = typedef_headers(args.typedefs, args.siblings)
    versions, ndefines = read_typedefs(headers)
    exports = read_exports(args)
    rows = sorted(derive(versions), key=lambda r: (r[0].encode(), r[2], r[1]))
    absent = check(rows, exports)
    keys = [(r[0], r[2], r[1]) for r in rows]
    if len(set(keys)) != len(keys):
        fail("duplicate (name, per_thread, min_version)")

    reachable = {r[3] for r in rows}
    unreachable = sorted(exports - reachable)
    if unreachable:
        fail("exported but named by no typedef, so cuGetProcAddress could not give them (a typedefs "
             "header missing?): " + " ".join(unreachable))
    write_table(args.out, rows, exports, headers + [args.exports or args.stub_lib], absent)
    if args.dummies:
        write_dummies(args.dummies, rows, exports)
    print(f"gen_procaddr.py: {len(rows)} variants, {len(exports)} exports, "
          f"{len(absent)} bases not exported (NULL), {ndefines} PFN aliases ignored", file=sys.stderr)


if __name__ == "__main__":
    main()
