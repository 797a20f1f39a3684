#!/usr/bin/env python3
"""The API generator, scripts/gen_api.py, on the small cuda.h, handle kinds and spec of
tests/data/gen: what it writes must equal the files of tests/data/gen/expected, and it
must refuse each file of tests/data/gen/reject with the message that file's first line
gives after 'expect:' (SPEC standing for the file's path). A reject/*.spec is read as the
spec, a reject/*.def as the handle kinds.

  test_gen_api.py GEN_API DATA_DIR            check
  test_gen_api.py GEN_API DATA_DIR --update   rewrite DATA_DIR/expected (then review the diff)
"""
import os
import subprocess
import sys
import tempfile


def generate(gen_api, data, outdir, spec=None, kinds=None):
    cmd = [sys.executable, gen_api, "--cuda-root", data, "--spec", spec or os.path.join(data, "api.spec"),
           "--handle-kinds", kinds or os.path.join(data, "handle_kinds.def"),
           "--reserved-ops", os.path.join(data, "reserved_ops.def"),
           "--exports", os.path.join(data, "exports.txt"), "--outdir", outdir]
    return subprocess.run(cmd, capture_output=True, text=True)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    gen_api, data, update = sys.argv[1], sys.argv[2], "--update" in sys.argv[3:]
    expected = os.path.join(data, "expected")
    failures = []
    with tempfile.TemporaryDirectory() as out:
        p = generate(gen_api, data, out)
        if p.returncode:
            sys.exit(f"FAIL the generator refused {data}/api.spec:\n{p.stderr}")
        made = sorted(os.listdir(out))
        if update:
            os.makedirs(expected, exist_ok=True)
            for name in os.listdir(expected):
                os.remove(os.path.join(expected, name))
            for name in made:
                with open(os.path.join(out, name)) as src, open(os.path.join(expected, name), "w") as dst:
                    dst.write(src.read())
            print(f"rewrote {expected}: {', '.join(made)}")
            return
        want = sorted(os.listdir(expected))
        if made != want:
            failures.append(f"files written {made}, expected {want}")
        for name in sorted(set(made) & set(want)):
            got, exp = open(os.path.join(out, name)).read(), open(os.path.join(expected, name)).read()
            if got != exp:
                diff = subprocess.run(["diff", "-u", os.path.join(expected, name), os.path.join(out, name)],
                                      capture_output=True, text=True).stdout
                failures.append(f"{name} differs from expected/{name}:\n{diff}")
            else:
                print(f"ok   {name}")

    reject = os.path.join(data, "reject")
    for name in sorted(os.listdir(reject)):
        path = os.path.join(reject, name)
        first = open(path).readline()
        if "expect:" not in first:
            failures.append(f"reject/{name}: its first line gives no 'expect:' message")
            continue
        msg = first.split("expect:", 1)[1].strip().removesuffix("*/").strip().replace("SPEC", path)
        with tempfile.TemporaryDirectory() as out:
            p = generate(gen_api, data, out, **({"spec": path} if name.endswith(".spec") else {"kinds": path}))
        if p.returncode == 0:
            failures.append(f"reject/{name}: accepted; expected: {msg}")
        elif p.stderr.strip() != msg:
            failures.append(f"reject/{name}: refused with\n  {p.stderr.strip()}\nexpected\n  {msg}")
        else:
            print(f"ok   reject/{name}")

    for f in failures:
        print("FAIL " + f)
    if failures:
        print(f"\n{len(failures)} failures; if the generator's new output is intended, review it with:\n"
              f"  {sys.argv[0]} {gen_api} {data} --update && git diff {expected}")
        sys.exit(1)


if __name__ == "__main__":
    main()
