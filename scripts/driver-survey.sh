#!/bin/sh
# On a GPU host: runs a program natively under the cudaprobe pass-through logger (a
# libcuda.so.1 that logs every driver call, export-table slot and cuGetProcAddress
# answer, then calls the real driver) and summarizes what it asked for: each driver
# function called and how often, each export table and its slots. For issue 13's list
# of what to forward.
#   scripts/driver-survey.sh CUDAPROBE_DIR OUTDIR -- PROGRAM [ARGS...]
# CUDAPROBE_DIR holds interpose.c and mkexports.sh (../shared/tools/cudaprobe).
set -eu
probe=$1 out=$2
shift 3
mkdir -p "$out/lib"
real=$(readlink -f "$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')")
sh "$probe/mkexports.sh" "$real" >"$out/exports.s"
gcc -O1 -shared -fPIC -o "$out/lib/libcuda.so.1" -Wl,-soname,libcuda.so.1 "$probe/interpose.c" "$out/exports.s" -ldl
status=0
REAL_LIBCUDA=$real IPC_INPLACE=6bd5fb6c IPC_PASS=d4082055 LD_LIBRARY_PATH="$out/lib:${LD_LIBRARY_PATH:-}" \
	"$@" >"$out/stdout.txt" 2>"$out/calls.log" || status=$?
# Functions called (not cuGetProcAddress answers), most frequent first.
grep -v 'GPA(' "$out/calls.log" | sed -n 's/^\[ipc [0-9]* t[0-9]*\] \(cu[A-Za-z0-9_]*\)(.*/\1/p' |
	sort | uniq -c | sort -rn >"$out/functions.txt"
# Export tables asked for, with the answer, and the slots called.
grep -o 'cuGetExportTable({[^}]*}) -> [^t]*' "$out/calls.log" | sort | uniq -c >"$out/tables.txt"
grep -o 'ET{[0-9a-f]*}\[[0-9]*\]' "$out/calls.log" | sort | uniq -c | sort -rn >"$out/slots.txt"
echo "driver-survey: exit $status; $(wc -l <"$out/functions.txt") functions, $(wc -l <"$out/tables.txt") tables, $(wc -l <"$out/slots.txt") slots"
exit $status
