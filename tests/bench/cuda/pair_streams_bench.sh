#!/usr/bin/env bash
# DualPipeV's overlapped pairs on a GPU: `pipetune train --backend cuda --schedule dualpipe-v`
# with each pair's second op on a second stream of its rank (the default) against
# `--serial-pairs` (both ops on the rank's one stream), ranks as streams of one GPU. Runs the two
# alternately (REPS rounds), takes the median step time of each run (train --json's steps after
# the first two, optimizer included), and prints a table and the ratio.
# Usage (on a GPU machine, from the checkout's root, after scripts/device_bundle; device_check.sh
# runs it as its step pair_streams_bench):
#   bash tests/bench/cuda/pair_streams_bench.sh
# Environment: PIPETUNE (default build-device/cli/pipetune, else build/cli/pipetune),
# PIPETUNE_LIBRARY_PATH (device_check.sh's library path, used as LD_LIBRARY_PATH), MODEL (default
# tests/bench/gpt2-small-256.toml), PLANS (default "pp2 pp4"), MB (micro-batch size, default 8),
# M (micro-batches, default 8), STEPS (default 6), REPS (default 2), PRECISION (default bf16),
# OUT (the table and the JSON go there when set).
# Exit status: 0, 1 when a run failed, 2 on a usage error.
set -uo pipefail
root="$(cd "$(dirname "$0")/../../.." && pwd)"
cd "$root" || exit 2
pt="${PIPETUNE:-}"
if [ -z "$pt" ]; then
  pt=build-device/cli/pipetune
  [ -x "$pt" ] || pt=build/cli/pipetune
fi
[ -x "$pt" ] || { echo "pair_streams_bench: no pipetune binary at $pt" >&2; exit 2; }
model="${MODEL:-tests/bench/gpt2-small-256.toml}"
plans="${PLANS:-pp2 pp4}"
mb="${MB:-8}"
m="${M:-8}"
steps="${STEPS:-6}"
reps="${REPS:-2}"
precision="${PRECISION:-bf16}"
for v in mb m steps reps; do
  [[ "${!v}" =~ ^[1-9][0-9]*$ ]] || { echo "pair_streams_bench: $v must be a positive count" >&2; exit 2; }
done
[ "$steps" -ge 3 ] || { echo "pair_streams_bench: STEPS must be at least 3" >&2; exit 2; }
work="$(mktemp -d /tmp/pair_streams_bench.XXXXXX)"
failed=0
: >"$work/rows.tsv"

run() {  # PLAN MODE REP
  local pp="${1#pp}" mode="$2" f="$work/$1-$2-$3"
  local extra=()
  [ "$mode" = serial ] && extra+=(--serial-pairs)
  if LD_LIBRARY_PATH="${PIPETUNE_LIBRARY_PATH:-${LD_LIBRARY_PATH:-}}" timeout 300 "$pt" train \
    --backend cuda --precision "$precision" --no-gpu-capture --no-db --json --model "$model" \
    --tp 1 --pp "$pp" --dp 1 --schedule dualpipe-v --microbatches "$m" \
    --micro-batch-size "$mb" --steps "$steps" "${extra[@]}" >"$f.json" 2>"$f.err"; then
    python3 - "$f.json" "$1" "$mode" >>"$work/rows.tsv" <<'EOF'
import json, statistics, sys
j = json.load(open(sys.argv[1]))
times = [s["seconds"] for s in j["steps"][2:]]
pairs = sum(r.get("pairs_run_at_once", 0) for r in j["ranks"])
print(f"{sys.argv[2]}\t{sys.argv[3]}\t{statistics.median(times):.6f}\t{j['tokens_per_s']:.0f}\t{pairs}")
EOF
  else
    echo "pair_streams_bench: $1 $mode failed: $(tail -n 1 "$f.err")" >&2
    failed=1
  fi
}

for plan in $plans; do
  for rep in $(seq 1 "$reps"); do
    run "$plan" paired "$rep"
    run "$plan" serial "$rep"
  done
done

python3 - "$work/rows.tsv" "$model" "$precision" "$mb" "$m" <<'EOF' | tee "$work/table.txt"
import collections, statistics, sys
rows = collections.defaultdict(list)
pairs = {}
for line in open(sys.argv[1]):
    plan, mode, t, tps, p = line.split("\t")
    rows[(plan, mode)].append((float(t), float(tps)))
    pairs[(plan, mode)] = int(p)
print(f"dualpipe-v on one GPU, {sys.argv[2]}, {sys.argv[3]}, micro-batch {sys.argv[4]}, {sys.argv[5]} micro-batches")
print(f"{'plan':6} {'mode':8} {'step ms (median of runs)':>30} {'tokens/s':>10} {'pairs at once':>14}")
for (plan, mode), v in sorted(rows.items()):
    print(f"{plan:6} {mode:8} {1e3 * statistics.median(t for t, _ in v):30.2f} "
          f"{statistics.median(x for _, x in v):10.0f} {pairs[(plan, mode)]:14d}")
for plan in sorted({p for p, _ in rows}):
    if (plan, "paired") in rows and (plan, "serial") in rows:
        a = statistics.median(t for t, _ in rows[(plan, "paired")])
        b = statistics.median(t for t, _ in rows[(plan, "serial")])
        print(f"{plan}: two streams / one stream = {a / b:.3f}")
EOF
if [ -n "${OUT:-}" ]; then
  cp "$work/table.txt" "$OUT/pair_streams_bench.txt"
  cp "$work/rows.tsv" "$OUT/pair_streams_bench.tsv"
fi
exit "$failed"
