#!/usr/bin/env bash
# The round-trip budget of the PyTorch steps over emulated links (docs/performance.md "The
# round-trip budget"): runs `remora bench --only torch --json --link SPEC` for each SPEC (as
# root, on the GPU host) and prints, per step and link, the waiting round trips and bytes
# moved per step, native and remote step time, and the link's limit: native step time +
# bytes / rate + round trips x round trip, with the link as measured.
#
# usage: scripts/link-budget.sh [--build DIR] [--quick] SPEC...   e.g. rtt=50us,rate=25gbit
#        scripts/link-budget.sh --from BENCH.json...               the table of earlier runs
# The JSON of each run is kept as link-budget-SPEC.json in the current folder.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$SRC/build-bench QUICK='' FROM=''
while (($#)); do
	case $1 in
	--build) BUILD=$2; shift 2 ;;
	--quick) QUICK=--quick; shift ;;
	--from) FROM=1; shift; break ;;
	-h | --help) sed -n '2,10s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) break ;;
	esac
done
(($#)) || { echo "link-budget: which links? (try --help)" >&2; exit 2; }
FILES=()
if [[ -n $FROM ]]; then
	FILES=("$@")
else
	for spec in "$@"; do
		out=link-budget-${spec//[^A-Za-z0-9=.]/_}.json
		"$BUILD/cli/remora" bench --only torch --json $QUICK --link "$spec" >"$out"
		FILES+=("$out")
	done
fi
python3 - "${FILES[@]}" <<'EOF'
import json
import sys

METRICS = {"cnn_train": "CNN training step (batch 32, 32x32)", "cnn_train_loss": "CNN training step reading its loss",
           "resnet50_b1": "ResNet-50 fp16 inference, batch 1", "gpt_train": "GPT-style training step (4 layers, d=256)"}
print("| step | link (measured) | round trips / step | MB / step (sent + received) | native ms | remote ms "
      "| remote / native | link's limit ms | remote / limit |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for path in sys.argv[1:]:
    doc = json.load(open(path))
    run = doc["run"]
    rtt_us, gbps = run.get("link_rtt_us"), run.get("link_gbps")
    link = f'{run.get("link", "loopback")} ({rtt_us} us, {gbps} Gbit/s)'
    for part, metric in METRICS.items():
        fig = next((f for f in doc["figures"] if f["section"] == "torch" and f["metric"] == metric), None)
        rts, sent, recv = (run.get(f"torch_{part}_{k}_per_step") for k in ("round_trips", "bytes_sent", "bytes_received"))
        if not fig or fig["native"] is None or rts is None or sent is None or recv is None:
            continue
        nbytes = sent + recv
        limit = None
        if rtt_us and gbps:
            limit = fig["native"] + nbytes * 8 / (gbps * 1e9) * 1e3 + rts * rtt_us / 1e3
        rem = fig["remote"]
        cell = lambda v, f: "-" if v is None else format(v, f)
        print(f"| {part} | {link} | {rts:.1f} | {nbytes / 1e6:.3f} | {fig['native']:.3f} | {cell(rem, '.3f')} "
              f"| {cell(rem / fig['native'] if rem else None, '.2f')} | {cell(limit, '.3f')} "
              f"| {cell(rem / limit if rem and limit else None, '.2f')} |")
EOF
