#!/usr/bin/env python3
"""The CLI's error lines and completion (issue 38 items 2 and 5): `remora hash-token`
refuses a flag-like argument instead of hashing it; an option without its value says
so ("option --server needs a value"), not "unknown option"; `remora run --server X`
with REMORA_POOL set says once on stderr that the flag wins, and the program gets no
REMORA_POOL; bash completion offers exactly the words of remora's command table
(`remora help --words`): every command, its subcommands and flags, and the table's
flags are exactly those of each command's usage, so that none of the three can drift;
`remora bench` with a bad, missing or no argument (on a host without a CUDA driver) says
why in one line and prints its usage line.

usage: messages.py REMORA COMPLETION
"""
import ctypes
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from verdict import check, failures  # noqa: E402

remora, completion = sys.argv[1:3]
ENV = {k: v for k, v in os.environ.items() if not k.startswith("REMORA_")}


def run(*args, env=None, stdin=""):
    return subprocess.run([remora, *args], capture_output=True, text=True, timeout=30, input=stdin,
                          env=env or ENV)


# hash-token and flag-like input.
for arg in ("--bogus", "-x"):
    p = run("hash-token", arg)
    check(p.returncode == 2 and not p.stdout and "is not a token" in p.stderr and p.stderr.count("\n") == 1,
          f"hash-token {arg}: refused in one line, nothing hashed ({p.returncode}, {p.stdout!r}, {p.stderr!r})")
p = run("hash-token", "alice.secret")
check(p.returncode == 0 and p.stdout.strip(), f"hash-token alice.secret still hashes ({p.returncode}, {p.stderr!r})")

# A missing option value.
for args in (["run", "--server"], ["run", "--token"], ["run", "--server", "h:1", "--token"], ["status", "--server"],
             ["status", "--token"], ["pool", "list", "--pool"], ["pool", "list", "--pool-ca"], ["bench", "--only"]):
    p = run(*args)
    want = f"option {args[-1]} needs a value"
    check(p.returncode == 2 and want in p.stderr and "unknown option" not in p.stderr,
          f"remora {' '.join(args)}: says {want!r} ({p.returncode}, {p.stderr!r})")

# remora bench: a bad or missing argument is one line naming it, then the usage line, and
# nothing starts; with no argument on a host without a CUDA driver, one line says so.
bench_cases = [(["bench", "--frob"], "unknown option --frob"), (["bench", "foo"], "unexpected argument foo"),
               (["bench", "--only"], "option --only needs a value"),
               (["bench", "--transport", "xyz"], "--transport wants"), (["bench", "--spin-iters", "0"], "--spin-iters"),
               (["bench", "--concurrency", "0"], "--concurrency wants"), (["bench", "--only", "nope"], "unknown section")]
try:
    ctypes.CDLL("libcuda.so.1")
except OSError:
    bench_cases.append((["bench"], "no CUDA driver to measure"))
for args, want in bench_cases:
    p = run(*args)
    lines = p.stderr.splitlines()
    check(p.returncode == 2 and not p.stdout and len(lines) == 2 and want in lines[0] and
          lines[1].startswith("usage: remora bench "),
          f"remora {' '.join(args)}: {want!r}, then the usage line ({p.returncode}, {p.stdout!r}, {p.stderr!r})")

# A flag that wins over an environment variable says so, once.
env = dict(ENV, REMORA_POOL="http://pool.invalid:2379")
p = run("run", "--server", "10.9.8.7:7700", "--", "env", env=env)
said = [line for line in p.stderr.splitlines() if "wins over REMORA_POOL" in line]
check(p.returncode == 0 and len(said) == 1 and "--server 10.9.8.7:7700" in said[0],
      f"run --server with REMORA_POOL: the flag wins, said once ({p.returncode}, {p.stderr!r})")
check("REMORA_SERVER=10.9.8.7:7700" in p.stdout.splitlines() and "REMORA_POOL=" not in p.stdout,
      "and the program gets REMORA_SERVER, not REMORA_POOL")
p = run("run", "--", "env", env=env)
check(p.returncode == 0 and "wins over" not in p.stderr and "REMORA_POOL=http://pool.invalid:2379" in p.stdout,
      f"without --server, REMORA_POOL is kept, nothing said ({p.stderr!r})")

# The command table, the completion and the usage agree.
p = run("help", "--words")
check(p.returncode == 0, f"remora help --words ({p.returncode}, {p.stderr!r})")
table = {}
for line in p.stdout.splitlines():
    name, _, words = line.partition(":")
    table[name] = set(words.split())
check({"run", "status", "pool", "bench", "hash-token", "help"} <= set(table),
      f"the table names every command ({sorted(table)})")
script = f'''source {completion}
complete_words() {{ COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=(); _remora; printf '%s\\n' "${{COMPREPLY[@]}}"; }}
'''


def completed(*words):
    out = subprocess.run(["bash", "-c", script + "complete_words " + " ".join(f"'{w}'" for w in words)],
                         capture_output=True, text=True, timeout=30)
    check(out.returncode == 0, f"completion of {words} runs ({out.stderr!r})")
    return set(out.stdout.split())


top = completed("remora", "")
check(top - {"--help", "--version"} == set(table), f"completion's commands are the table's: "
      f"missing {sorted(set(table) - top)}, extra {sorted(top - set(table) - {'--help', '--version'})}")
for name, words in table.items():
    got = completed("remora", name, "")
    if name == "pool":
        got |= completed("remora", "pool", "list", "")
    got.discard("--help")
    check(got == words, f"completion of `remora {name}` offers the table's words: missing {sorted(words - got)}, "
          f"extra {sorted(got - words)}")
    p = run(name, "--help")
    usage = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", p.stdout)) - {"--help"}
    flags = {w for w in words if w.startswith("--") and w != "--"}
    check(p.returncode == 0 and usage == flags, f"the flags of `remora {name} --help` are the table's: "
          f"missing {sorted(flags - usage)}, extra {sorted(usage - flags)}")
    for w in words - flags - {"--"}:
        check(re.search(rf"\b{w}\b", p.stdout), f"`remora {name} --help` names its subcommand {w}")
check("hash-token" in top and "--token" in completed("remora", "status", ""),
      "completion covers hash-token and status --token (issue 38)")
sys.exit(1 if failures else 0)
