#!/usr/bin/env bash
# Predicted against measured on this machine. Measures a CPU hardware profile
# (`calibrate --local`), refines it on short training runs of two calibration models
# (`calibrate --hardware`), then for 1f1b, zb-h1, interleaved-1f1b and v-half + vocab-2, and 1f1b
# and zb-h1 with full and selective activation recomputation, 1f1b on tp=2 with and without
# sequence parallelism, and on dp=2 with ZeRO 1, 2 and 3 (the collectives' calibrated bus
# bandwidths), on
# tests/bench/cpu-prediction-model.toml trains the plan (`train --config`) and simulates the same
# run file (`simulate --config`, the schedule train executes), and prints per stage the predicted
# and measured busy time and the iteration time, with the error. Target: within 10% per stage.
#
# Usage: tests/bench/cpu_prediction.sh [BUILD_DIR] [WORK_DIR]
#   Two pipeline ranks of one thread each: run it on an otherwise idle machine with >= 2 cores.
#   WORK_DIR keeps the profiles, run files and JSON (default: a temporary directory).
#   PIPETUNE_STEPS (default 8) training steps per plan; the measured figures are the mean over
#   the steps after the first (`pipetune report --iteration K`: compute per stage, iteration).
#   The last lines give the spread between plans the model gives the same work per stage
#   (1f1b, zb-h1, interleaved-1f1b): the machine's noise in that run.
set -euo pipefail
build="${1:-build}"
work="${2:-$(mktemp -d)}"
here="$(cd "$(dirname "$0")" && pwd)"
pipetune="$build/cli/pipetune"
steps="${PIPETUNE_STEPS:-8}"
[ -x "$pipetune" ] || { echo "cpu_prediction: $pipetune not built" >&2; exit 2; }
command -v python3 >/dev/null || { echo "cpu_prediction: python3 is needed" >&2; exit 2; }
mkdir -p "$work"
cores="$(nproc)"
[ "$cores" -ge 2 ] || echo "cpu_prediction: warning: $cores core(s) for 2 ranks" >&2

echo "== calibrate --local (2 devices of 1 thread)"
"$pipetune" calibrate --local --devices 2 --threads 1 -o "$work/cpu-local.toml" --force

echo "== calibration runs: 1f1b and zb-h1 on cpu-calibration-model-a and -b"
rm -f "$work/calibration.db"
for model in a b; do
  for schedule in 1f1b zb-h1; do
    "$pipetune" train --model "$here/cpu-calibration-model-$model.toml" --tp 1 --pp 2 --dp 1 \
      --schedule "$schedule" --chunks 1 --vocab none --microbatches 8 --micro-batch-size 2 \
      --threads 1 --steps "$steps" --db "$work/calibration.db" \
      --name "calibration-$model-$schedule" >/dev/null
  done
done
# The compute curves only: the op durations carry no transfers to fit the bus factors with.
"$pipetune" calibrate --hardware "$work/cpu-local.toml" --db "$work/calibration.db" \
  --fit gemm,gemm_half_flops,attention,memory -o "$work/cpu-fitted.toml" --force | head -5

# schedule, chunks, vocabulary mode, recomputation, tp, sequence parallel, dp, ZeRO stage
# (pp = 2 / (tp * dp): two ranks)
plans=("1f1b 1 none none 1 false 1 0" "zb-h1 1 none none 1 false 1 0"
  "interleaved-1f1b 2 none none 1 false 1 0" "v-half 2 vocab-2 none 1 false 1 0"
  "1f1b 1 none full 1 false 1 0" "zb-h1 1 none selective 1 false 1 0"
  "1f1b 1 none none 2 false 1 0" "1f1b 1 none none 2 true 1 0"
  "1f1b 1 none none 1 false 2 1" "1f1b 1 none none 1 false 2 2" "1f1b 1 none none 1 false 2 3")
plan_name() {
  local name="$1-$3-recompute-$4"
  [ "$5" -eq 1 ] || name="$name-tp$5"
  [ "$6" = false ] || name="$name-sp"
  [ "$7" -eq 1 ] || name="$name-dp$7-zero$8"
  echo "$name"
}
for plan in "${plans[@]}"; do
  read -r schedule chunks vocab recompute tp sp dp zero <<<"$plan"
  name="$(plan_name $plan)"
  cat >"$work/$name.toml" <<RUN
description = "cpu_prediction: $schedule, $vocab, recompute $recompute"
model = "$here/cpu-prediction-model.toml"
[cluster]
hardware = "$work/cpu-fitted.toml"
devices = 2
[plan]
tp = $tp
pp = $((2 / (tp * dp)))
dp = $dp
zero_stage = $zero
sequence_parallel = $sp
chunks = $chunks
vocab = "$vocab"
recompute = "$recompute"
micro_batch_size = 2
microbatches = 8
schedule = "$schedule"
RUN
  echo "== $name: train and simulate"
  "$pipetune" simulate --config "$work/$name.toml" --json --no-db >"$work/$name.predicted.json"
  rm -f "$work/$name.db"
  "$pipetune" train --config "$work/$name.toml" --threads 1 --steps "$steps" --json \
    --db "$work/$name.db" --name "$name" >"$work/$name.measured.json"
done

names=()
for plan in "${plans[@]}"; do names+=("$(plan_name $plan)"); done
python3 - "$pipetune" "$work" "$steps" "${names[@]}" <<'PY'
import json, subprocess, sys
pipetune, work, steps, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4:]

def mean(xs):
    return sum(xs) / len(xs)

def measured(name):
    """Per-stage compute and iteration time, mean over iterations 2..steps of the stored run."""
    busy, iteration = {}, []
    for k in range(2, steps + 1):
        out = subprocess.run([pipetune, "report", name, "--db", f"{work}/{name}.db",
                              "--iteration", str(k), "--json"],
                             check=True, capture_output=True, text=True).stdout
        rep = json.loads(out)
        iteration.append(rep["iteration_time"])
        for st in rep["stages"]:
            busy.setdefault(st["stage"], {}).setdefault(st["rank"], []).append(st["compute"])
    per_stage = {s: mean([mean(v) for v in ranks.values()]) for s, ranks in busy.items()}
    return per_stage, mean(iteration)

worst = 0.0
same_work = {}  # predicted busy per stage (to 0.1 ms) -> [(plan, measured busy per stage)]
print(f"\n{'plan':<36} {'stage':>5} {'predicted':>12} {'measured':>12} {'error':>8}")
for name in names:
    pred = json.load(open(f"{work}/{name}.predicted.json"))
    busy, iteration = measured(name)
    key = tuple(round(st["busy"] * 1e4) for st in pred["stages"])
    same_work.setdefault(key, []).append((name, [busy[st["stage"]] for st in pred["stages"]]))
    for st in pred["stages"]:
        p, m = st["busy"], busy[st["stage"]]
        err = (p - m) / m
        worst = max(worst, abs(err))
        print(f"{name:<36} {st['stage']:>5} {p*1e3:>9.1f} ms {m*1e3:>9.1f} ms {100*err:>7.1f}%")
    p = pred["iteration"]["iteration_time"]  # pipeline + optimizer, as the report's
    m = iteration
    err = (p - m) / m
    print(f"{name:<36} {'iter':>5} {p*1e3:>9.1f} ms {m*1e3:>9.1f} ms {100*err:>7.1f}%")
print(f"\nworst per-stage error {100*worst:.1f}% (target 10%): "
      f"{'met' if worst <= 0.10 else 'NOT met'}")
# Plans the model gives the same work per stage (e.g. 1f1b, zb-h1 and interleaved-1f1b: the same
# ops, ordered otherwise) measured apart by this much: the machine's noise in this run, a floor
# under the errors above that no prediction can beat.
for group in same_work.values():
    if len(group) < 2:
        continue
    spreads = []
    for s in range(len(group[0][1])):
        ms = [b[s] for _, b in group]
        spreads.append(f"stage {s} {' / '.join(f'{m*1e3:.1f}' for m in ms)} ms "
                       f"(spread {100 * (max(ms) / min(ms) - 1):.1f}%)")
    print(f"same predicted work, measured: {', '.join(n for n, _ in group)}: " + "; ".join(spreads))
PY
