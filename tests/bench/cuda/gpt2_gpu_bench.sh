#!/usr/bin/env bash
# GPT-2 124M on one GPU, in one command:
#  1. pipetune `train --backend cuda` on tests/bench/gpt2-small-1024.toml (12 layers, hidden 768,
#     12 heads, vocabulary 50257 in tables padded to 50304 rows, sequence 1024) in fp32 and in
#     bf16 (`--precision bf16`: bf16
#     GEMM inputs, fp32 accumulation and master weights), each at the largest micro-batch of the
#     list that runs (a run that fails, e.g. out of device memory, moves on to the next size);
#     tokens/s = the JSON's tokens_per_s (mean over the steps after the first). The throughput
#     runs use --no-gpu-capture (NVTX ranges only, as PyTorch runs without a profiler).
#     Each is repeated into a workspace, NVTX only and then with CUPTI capture on (capture keeps
#     its records there): the capture run's step time against the NVTX-only one into a workspace
#     is what capture costs the engine (against the run without a workspace, what
#     capture and the workspace cost together), and its kernels say where the GPU time goes. That
#     run takes the capture at every step end (--gpu-capture-every 1); once more with train's
#     default cadence (auto: as rarely as keeps the takes within 1% of the steps' time).
#  2. PyTorch on the same model, dtype and batch (tests/bench/torch_gpt_step.py --device cuda; a
#     batch that does not fit there moves on to the next smaller one, and the table says so).
#  3. One table: framework, dtype, batch, tokens/s, model TFLOP/s and MFU, with the model FLOPs
#     of torch_gpt_step.py (6N + 12 L T C per token) and the peak of the GPU's hardware preset
#     (bf16: its peak_flops; fp32: its fp32_peak_flops, and no fp32 MFU where it has none).
#  4. pp=4 1F1B as 4 streams of the GPU (tests/bench/cuda/gpt2-pp4-1f1b.toml, stored in a
#     workspace with its GPU activity), then `pipetune report` of that run and
#     `pipetune predict --config RUN --against ID`: the per-stage error of the simulated run
#     (4 GPUs of the hardware, costed as the CUDA engine runs it) against the measured one (4
#     stages sharing one GPU); then `calibrate` on that run and the same prediction with the
#     fitted efficiency table.
#
# Usage: tests/bench/cuda/gpt2_gpu_bench.sh [BUILD_DIR] [options]
#   BUILD_DIR / --build DIR  build folder with cli/pipetune (default: build-device)
#   --steps N           pipetune steps per throughput run (default 6)
#   --torch-steps N     timed PyTorch steps, after 2 warm-up steps (default 5)
#   --pp-steps N        steps of the pp=4 run (default 6)
#   --batches "LIST"    micro-batch sizes to try, largest first (default
#                       "64 48 32 24 16 12 8 4 2 1")
#   --precisions "LIST" default "fp32 bf16"
#   --budget S          seconds for everything (default 330): each run is killed past what is
#                       left, and runs that no longer fit are skipped, saying so
#   --no-torch, --no-pp skip the PyTorch runs, the pp=4 run
#   --attention K       pipetune's attention kernel in the throughput runs (train --attention:
#                       flash, or flash-tc / flash-mma with --precisions bf16; default: train's)
#   --also "FLAGS"      once bf16 has its batch, one more bf16 run at that batch with these
#                       train flags added, and its tokens/s against the first; repeatable, e.g.
#                       --also "--attention flash-mma" --also "--gemm-inputs in-gemm"; not in
#                       the table
#   --also-attention K  the same as --also "--attention K"
#   --cpu-check         the script's plumbing without a GPU: the cpu backend, fp32 only, the
#                       smaller tests/bench/cpu-prediction-model.toml, PyTorch on the CPU, the
#                       cpu-dev-2core peak (no figure of it means anything for a GPU)
#   -h, --help
# Environment: OUT (when set, also writes $OUT/gpt2_gpu_bench.log, $OUT/gpt2_gpu_bench.json and
#   the pp=4 workspace as $OUT/gpt2_pp4.db.gz, the capture runs' as gpt2_capture-PREC.db.gz
#   when under 15 MiB gzipped), PIPETUNE_LIBRARY_PATH (LD_LIBRARY_PATH for the
#   pipetune binary only, set by tests/gpu/device_check.sh; PyTorch keeps the caller's), PYTHON
#   (default python3).
# Exit status: 0 when every part ran, 1 when a part failed, 2 on a usage error or without a GPU
# (nvidia-smi missing or failing, or `train --backend cuda` finding no usable device).
set -uo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
build="build-device"
steps=6
torch_steps=5
pp_steps=6
batches="64 48 32 24 16 12 8 4 2 1"
precisions="fp32 bf16"
budget=330
do_torch=1
attention=""
also_runs=()
do_pp=1
cpu_check=0
py="${PYTHON:-python3}"

usage_error() {
  echo "gpt2_gpu_bench: $1 (--help for the usage)" >&2
  exit 2
}
positive() {  # NAME VALUE
  [[ "$2" =~ ^[1-9][0-9]*$ ]] || usage_error "$1 needs a positive integer, not '$2'"
}
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    --build) [ $# -ge 2 ] || usage_error "--build needs a folder"; build="$2"; shift 2 ;;
    --steps) [ $# -ge 2 ] || usage_error "--steps needs a value"; positive --steps "$2"; steps="$2"; shift 2 ;;
    --torch-steps) [ $# -ge 2 ] || usage_error "--torch-steps needs a value"; positive --torch-steps "$2"; torch_steps="$2"; shift 2 ;;
    --pp-steps) [ $# -ge 2 ] || usage_error "--pp-steps needs a value"; positive --pp-steps "$2"; pp_steps="$2"; shift 2 ;;
    --batches) [ $# -ge 2 ] || usage_error "--batches needs a list"; batches="$2"; shift 2 ;;
    --precisions) [ $# -ge 2 ] || usage_error "--precisions needs a list"; precisions="$2"; shift 2 ;;
    --budget) [ $# -ge 2 ] || usage_error "--budget needs seconds"; positive --budget "$2"; budget="$2"; shift 2 ;;
    --no-torch) do_torch=0; shift ;;
    --attention) [ $# -ge 2 ] || usage_error "--attention needs a kernel"; attention="$2"; shift 2 ;;
    --also-attention) [ $# -ge 2 ] || usage_error "--also-attention needs a kernel"; also_runs+=("--attention $2"); shift 2 ;;
    --also) [ $# -ge 2 ] || usage_error "--also needs train flags"; also_runs+=("$2"); shift 2 ;;
    --no-pp) do_pp=0; shift ;;
    --cpu-check) cpu_check=1; shift ;;
    -*) usage_error "unknown option '$1'" ;;
    *) build="$1"; shift ;;
  esac
done
for b in $batches; do positive "--batches" "$b"; done
[ -n "${batches// /}" ] || usage_error "--batches is empty"
for p in $precisions; do
  case "$p" in fp32 | bf16) ;; *) usage_error "--precisions: '$p' is not fp32 or bf16" ;; esac
done
[ -n "${precisions// /}" ] || usage_error "--precisions is empty"
if [ "$cpu_check" = 1 ]; then
  for p in $precisions; do
    [ "$p" = fp32 ] || usage_error "--cpu-check runs fp32 only (--precisions fp32)"
  done
fi
case "$build" in /*) ;; *) build="$PWD/$build" ;; esac
pipetune="$build/cli/pipetune"
[ -x "$pipetune" ] || usage_error "$pipetune is not built (scripts/device_bundle builds it)"
command -v timeout >/dev/null || usage_error "timeout (coreutils) is needed"
command -v "$py" >/dev/null || usage_error "$py is needed (the table is computed with it)"

# The presets of this checkout, wherever the build was configured (its compiled-in path may not
# exist on this machine).
export PIPETUNE_PRESETS_DIR="${PIPETUNE_PRESETS_DIR:-$root/presets}"

work="$(mktemp -d "${TMPDIR:-/tmp}/gpt2_gpu_bench.XXXXXX")"
trap 'rm -rf "$work"' EXIT
out="${OUT:-}"
[ -z "$out" ] || mkdir -p "$out" || usage_error "cannot create OUT=$out"

start=$SECONDS
remaining() { echo $((budget - (SECONDS - start))); }
# Seconds a run may take: its cap, or what is left of the budget (0: skip it).
limit_for() {
  local cap="$1" left
  left=$(($(remaining) - 5))
  [ "$left" -ge 15 ] || { echo 0; return; }
  [ "$left" -lt "$cap" ] && echo "$left" || echo "$cap"
}
# pipetune with its own libraries (device-libs), never PyTorch's process.
pt() { LD_LIBRARY_PATH="${PIPETUNE_LIBRARY_PATH:-${LD_LIBRARY_PATH:-}}" "$pipetune" "$@"; }
pt_limited() {  # SECONDS ARGS...: pt under timeout
  local t="$1"
  shift
  LD_LIBRARY_PATH="${PIPETUNE_LIBRARY_PATH:-${LD_LIBRARY_PATH:-}}" timeout -k 10 "$t" "$pipetune" "$@"
}
last_line() { [ -s "$1" ] && grep -v '^[[:space:]]*$' "$1" | tail -n 1 | cut -c1-300; }

main() {
  local failed=0 backend=cuda model="$root/tests/bench/gpt2-small-1024.toml"
  local pp_model="$root/tests/bench/gpt2-small-256.toml" gpu_name hw torch_device=cuda
  echo "== gpt2_gpu_bench: $(date -u +%Y-%m-%dT%H:%M:%SZ), build $build, budget ${budget}s"
  if [ "$cpu_check" = 1 ]; then
    backend=cpu
    torch_device=cpu
    model="$root/tests/bench/cpu-prediction-model.toml"
    pp_model="$model"
    gpu_name="cpu (--cpu-check)"
    hw=cpu-dev-2core
    echo "-- --cpu-check: the cpu backend on $(basename "$model"); no figure here is a GPU's"
  else
    if ! command -v nvidia-smi >/dev/null; then
      echo "gpt2_gpu_bench: no GPU: nvidia-smi not found" >&2
      return 2
    fi
    if ! gpu_name="$(timeout 60 nvidia-smi --query-gpu=name --format=csv,noheader 2>&1)"; then
      echo "gpt2_gpu_bench: no GPU: nvidia-smi failed: $(echo "$gpu_name" | head -n 1)" >&2
      return 2
    fi
    gpu_name="$(echo "$gpu_name" | head -n 1)"
    case "$gpu_name" in
      *H200*) hw=h200 ;;
      *H100*) hw=h100-sxm ;;
      *A100*80GB*) hw=a100-80gb ;;
      *A100*) hw=a100-40gb ;;
      *B200*) hw=b200 ;;
      *) hw="" ;;
    esac
    if [ -n "$hw" ]; then
      echo "-- GPU 0: $gpu_name; peaks from presets/hardware/$hw.toml"
    else
      echo "-- GPU 0: $gpu_name; no hardware preset for it: MFU not computed, pp=4 predicted for h100-sxm"
    fi
    case "$gpu_name" in *H100*PCIe* | *H100*NVL*) echo "-- note: the H100 SXM preset's peaks are used for a $gpu_name" ;; esac
    # Does the engine find the device? (one line, exit 2, when it does not)
    pt_limited 120 train --backend cuda --steps 1 --no-db --tp 1 --pp 1 --dp 1 --microbatches 1 \
      --json >"$work/probe.json" 2>"$work/probe.err"
    local rc=$?
    if [ "$rc" -ne 0 ]; then
      if [ "$rc" -eq 2 ] && grep -q "backend cuda:" "$work/probe.err"; then
        echo "gpt2_gpu_bench: no GPU for pipetune: $(last_line "$work/probe.err")" >&2
        return 2
      fi
      echo "gpt2_gpu_bench: pipetune's probe run on the GPU failed (exit $rc): $(last_line "$work/probe.err")" >&2
      failed=1
    else
      echo "-- pipetune sees the GPU (probe: tiny model, 1 step)"
    fi
  fi
  {
    echo "gpu=$gpu_name"
    echo "hardware=$hw"
    echo "model=$model"
    echo "cpu_check=$cpu_check"
  } >"$work/meta.txt"
  : >"$work/rows.tsv"  # framework dtype batch status file note

  # --- 1. pipetune, largest micro-batch that runs, per precision -------------------------------
  local prec b t rc tried
  declare -A chosen=()
  for prec in $precisions; do
    echo
    echo "== pipetune train --backend $backend --precision $prec, $(basename "$model"), batch: first of ($batches) that runs"
    tried=""
    for b in $batches; do
      t="$(limit_for 150)"
      if [ "$t" -eq 0 ]; then
        echo "-- batch $b: skipped (budget spent)"
        echo -e "pipetune\t$prec\t$b\tskipped\t-\tbudget spent" >>"$work/rows.tsv"
        failed=1
        break
      fi
      local f="$work/pipetune-$prec-b$b"
      local extra=(--precision "$prec")
      [ "$backend" = cuda ] && extra+=(--no-gpu-capture)
      [ -n "$attention" ] && extra+=(--attention "$attention")
      local t0=$SECONDS
      pt_limited "$t" train --backend "$backend" "${extra[@]}" --model "$model" --tp 1 --pp 1 \
        --dp 1 --microbatches 1 --micro-batch-size "$b" --steps "$steps" --no-db --json \
        >"$f.json" 2>"$f.err"
      rc=$?
      if [ "$rc" -eq 0 ]; then
        echo "-- batch $b: ran ${steps} steps in $((SECONDS - t0)) s"
        echo -e "pipetune\t$prec\t$b\tok\t$f.json\t${tried:+larger batches failed:$tried}" >>"$work/rows.tsv"
        chosen[$prec]=$b
        break
      fi
      if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        echo "-- batch $b: killed after ${t} s"
      else
        echo "-- batch $b: failed (exit $rc): $(last_line "$f.err")"
      fi
      if [ "$rc" -eq 2 ] && grep -q "backend cuda:" "$f.err"; then
        echo "gpt2_gpu_bench: no GPU for pipetune: $(last_line "$f.err")" >&2
        return 2
      fi
      tried="$tried $b"
    done
    if [ -z "${chosen[$prec]:-}" ]; then
      echo "-- pipetune $prec: no batch of ($batches) ran"
      grep -q "^pipetune"$'\t'"$prec"$'\t' "$work/rows.tsv" ||
        echo -e "pipetune\t$prec\t-\tfailed\t-\tno batch of ($batches) ran" >>"$work/rows.tsv"
      failed=1
    fi
  done

  # --- 1a. bf16 with other engine options (--also), at the batch bf16 ran ---------------------
  local flags n=0
  for flags in "${also_runs[@]}"; do
    [ -n "${chosen[bf16]:-}" ] || break
    b="${chosen[bf16]}"
    n=$((n + 1))
    echo
    echo "== pipetune bf16 batch $b again with $flags"
    t="$(limit_for 150)"
    if [ "$t" -eq 0 ]; then
      echo "-- skipped (budget spent)"
      continue
    fi
    # shellcheck disable=SC2086 # the flags are words, split as the shell splits them
    pt_limited "$t" train --backend "$backend" --precision bf16 --no-gpu-capture --model "$model" \
      --tp 1 --pp 1 --dp 1 --microbatches 1 --micro-batch-size "$b" --steps "$steps" --no-db \
      --json $flags >"$work/also-$n.json" 2>"$work/also-$n.err"
    rc=$?
    if [ "$rc" -ne 0 ]; then
      echo "-- failed (exit $rc): $(last_line "$work/also-$n.err")"
      failed=1
      continue
    fi
    "$py" - "$work/pipetune-bf16-b$b.json" "$work/also-$n.json" "$flags" <<'PY'
import json, sys
first, other = (json.load(open(p)) for p in sys.argv[1:3])
def how(j):
    return (f"attention {j.get('attention')}, gemm inputs {j.get('gemm_inputs', 'copies')}, "
            f"gelu epilogue {j.get('gelu_epilogue', False)}")
print(f"-- {sys.argv[3]}: {other['tokens_per_s']:.0f} tokens/s against {first['tokens_per_s']:.0f} "
      f"({100 * (other['tokens_per_s'] / first['tokens_per_s'] - 1):+.1f}%); {how(other)} against "
      f"{how(first)}")
PY
  done

  # --- 1b. the same runs with CUPTI capture on: what capture costs the engine's step, and where
  # the GPU time goes ---------------------------------------------------------------------------
  for prec in $precisions; do
    [ "$backend" = cuda ] && [ -n "${chosen[$prec]:-}" ] || continue
    echo
    b="${chosen[$prec]}"
    echo "== pipetune $prec batch $b again into a workspace, NVTX only and then with CUPTI capture on"
    echo "   (kernels and copies under their ops)"
    # Capture keeps its records in a workspace, and streaming a run's trace there costs the step
    # too: the capture's own cost is against the same run into a workspace without it.
    local run ok=1
    for run in nvtx capture; do
      t="$(limit_for 150)"
      if [ "$t" -eq 0 ]; then
        echo "-- $run run skipped (budget spent)"
        ok=0
        break
      fi
      local run_flags=(--gpu-capture-every 1)
      [ "$run" = nvtx ] && run_flags=(--no-gpu-capture)
      rm -f "$work/$run-$prec.db"
      pt_limited "$t" train --backend "$backend" --precision "$prec" \
        ${attention:+--attention "$attention"} --model "$model" --tp 1 --pp 1 --dp 1 \
        --microbatches 1 --micro-batch-size "$b" --steps "$steps" "${run_flags[@]}" \
        --db "$work/$run-$prec.db" --json >"$work/$run-$prec.json" 2>"$work/$run.err"
      rc=$?
      if [ "$rc" -ne 0 ]; then
        echo "-- $run run failed (exit $rc): $(last_line "$work/$run.err")"
        rm -f "$work/$run-$prec.json"
        failed=1
        ok=0
        break
      fi
    done
    rm -f "$work/nvtx-$prec.db"
    [ "$ok" = 1 ] || continue
    "$py" - "$work/pipetune-$prec-b$b.json" "$work/nvtx-$prec.json" "$work/capture-$prec.json" <<'PY'
import json, sys
bare, nvtx, on = (json.load(open(p)) for p in sys.argv[1:4])
g = on.get("gpu_capture", {})
def cost(base):
    return 100 * (base["tokens_per_s"] / on["tokens_per_s"] - 1)
print(f"-- capture on: {on['tokens_per_s']:.0f} tokens/s against {nvtx['tokens_per_s']:.0f} with NVTX "
      f"only into a workspace: {cost(nvtx):+.2f}% step time (against {bare['tokens_per_s']:.0f} "
      f"without a workspace: {cost(bare):+.2f}%); "
      f"{g.get('activities', 0)} activities, {g.get('attributed', 0)} inside ops; "
      f"{g.get('flushes', 0)} step-end flushes, {g.get('forced_flushes', 0)} forced; their host "
      f"time {g.get('flush_ms', 0):.1f} ms flushing, {g.get('route_ms', 0):.1f} ms routing in all; "
      f"{g.get('waiting_launch_calls', 0)} launch calls waiting at most")
PY
    # Taken at train's default cadence (auto): each take's CUPTI flush spread over as many steps
    # as keep the takes within 1% of the steps' time.
    t="$(limit_for 150)"
    if [ "$t" -gt 0 ] && [ "$backend" = cuda ]; then
      rm -f "$work/capture-auto-$prec.db"
      if pt_limited "$t" train --backend "$backend" --precision "$prec" \
        ${attention:+--attention "$attention"} --model "$model" --tp 1 --pp 1 --dp 1 \
        --microbatches 1 --micro-batch-size "$b" --steps "$steps" \
        --db "$work/capture-auto-$prec.db" --json >"$work/capture-auto-$prec.json" \
        2>"$work/capture-auto.err"; then
        "$py" - "$work/nvtx-$prec.json" "$work/capture-auto-$prec.json" <<'PY'
import json, sys
nvtx, on = (json.load(open(p)) for p in sys.argv[1:3])
g = on.get("gpu_capture", {})
print(f"-- capture at the default cadence (auto): {on['tokens_per_s']:.0f} tokens/s, "
      f"{100 * (nvtx['tokens_per_s'] / on['tokens_per_s'] - 1):+.2f}% step time against NVTX only "
      f"into a workspace; {g.get('activities', 0)} activities, {g.get('attributed', 0)} inside "
      f"ops; taken at {g.get('takes', 0)} step ends, up to {g.get('most_steps_per_take', 0)} "
      f"steps a take, {g.get('flushes', 0)} flushes")
PY
      else
        echo "-- capture at the default cadence (auto): failed: $(last_line "$work/capture-auto.err")"
        rm -f "$work/capture-auto-$prec.json"
        failed=1
      fi
      rm -f "$work/capture-auto-$prec.db"
    fi
    # Where the GPU time of that run goes: the kernels table of the stored run.
    "$py" - "$work/capture-$prec.db" <<'PY' || true
import sqlite3, sys
db = sqlite3.connect(sys.argv[1])
rows = db.execute(
    "select substr(n.text, 1, 70), count(*), sum(k.end_ns - k.start_ns) from kernels k "
    "join names n on n.run = k.run and n.id = k.name group by n.text order by 3 desc").fetchall()
total = sum(r[2] for r in rows) or 1
print(f"-- GPU time by kernel, all {len(rows)} kinds, {total / 1e6:.1f} ms over the run; the top 12:")
for name, count, ns in rows[:12]:
    print(f"   {ns / 1e6:9.2f} ms {100 * ns / total:5.1f}% {count:6d}x  {name}")
# Between the run's last two steps (one micro-batch a step, so a step's kernels run F then BW):
# from the last backward kernel to the next forward one, and how busy the GPU was in that window
# (the optimizer's launches and readbacks, the step end, the next batch).
phases = db.execute("select start_ns, end_ns, phase from kernels order by start_ns").fetchall()
boundary, last_bw = None, None
for i, (_, _, phase) in enumerate(phases):
    if phase == "BW":
        last_bw = i
    elif phase == "F" and last_bw is not None:
        boundary, last_bw = (last_bw, i), None
if boundary:
    bw, f = boundary
    window = phases[bw + 1:f]
    busy = sum(e - s for s, e, _ in window)
    print(f"-- between the last two steps: {len(window)} records, "
          f"{(phases[f][0] - phases[bw][1]) / 1e6:.2f} ms from the last backward kernel to the "
          f"next forward one, the GPU busy {busy / 1e6:.2f} ms of it")
PY
  done

  # --- 2. PyTorch at the same batch (or the next smaller one that fits) ------------------------
  if [ "$do_torch" = 1 ]; then
    local dims
    dims="$("$py" - "$model" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
def key(k):
    m = re.search(r"^\s*" + k + r"\s*=\s*([0-9_]+)", text, re.M)
    return m.group(1).replace("_", "") if m else ""
print(" ".join(f"--{a} {key(k)}" for a, k in
               (("layers", "layers"), ("hidden", "hidden"), ("heads", "heads"),
                ("seq", "seq_len"), ("vocab", "vocab"))))
PY
)"
    for prec in $precisions; do
      echo
      local start_b="${chosen[$prec]:-}"
      if [ -z "$start_b" ]; then
        echo "== PyTorch $prec: skipped (pipetune ran no batch to compare with)"
        continue
      fi
      echo "== PyTorch $torch_device $prec at batch $start_b ($py tests/bench/torch_gpt_step.py $dims)"
      local started=0 ok=0
      tried=""
      for b in $batches; do
        [ "$b" = "$start_b" ] && started=1
        [ "$started" = 1 ] || continue
        t="$(limit_for 150)"
        if [ "$t" -eq 0 ]; then
          echo "-- batch $b: skipped (budget spent)"
          echo -e "pytorch\t$prec\t$b\tskipped\t-\tbudget spent" >>"$work/rows.tsv"
          failed=1
          ok=1
          break
        fi
        local f="$work/torch-$prec-b$b" targs=()
        [ "$cpu_check" = 1 ] && targs=(--threads "$(nproc)")
        # shellcheck disable=SC2086  # dims is a list of options
        timeout -k 10 "$t" "$py" "$root/tests/bench/torch_gpt_step.py" --device "$torch_device" \
          --dtype "$prec" --batch "$b" $dims --steps "$torch_steps" --warmup 2 "${targs[@]}" \
          >"$f.json" 2>"$f.err"
        rc=$?
        if [ "$rc" -eq 0 ]; then
          echo "-- batch $b: $(last_line "$f.json" | cut -c1-160)..."
          echo -e "pytorch\t$prec\t$b\tok\t$f.json\t${tried:+larger batches failed:$tried}" >>"$work/rows.tsv"
          ok=1
          break
        fi
        echo "-- batch $b: failed (exit $rc): $(last_line "$f.err")"
        if [ "$rc" -eq 2 ] || grep -q "PyTorch not found" "$f.err"; then
          echo -e "pytorch\t$prec\t$b\tfailed\t-\t$(last_line "$f.err" | tr '\t' ' ')" >>"$work/rows.tsv"
          failed=1
          ok=1
          break
        fi
        tried="$tried $b"
      done
      if [ "$ok" = 0 ]; then
        echo -e "pytorch\t$prec\t-\tfailed\t-\tno batch from $start_b down ran" >>"$work/rows.tsv"
        failed=1
      fi
    done
  fi

  # --- 3. pp=4 1F1B as 4 streams, against its prediction --------------------------------------
  local pp_status=skipped run_id=""
  if [ "$do_pp" = 1 ]; then
    echo
    local runfile="$work/gpt2-pp4-1f1b.toml"
    sed -e "s|^model = .*|model = \"$pp_model\"|" \
      -e "s|^hardware = .*|hardware = \"${hw:-h100-sxm}\"|" \
      "$here/gpt2-pp4-1f1b.toml" >"$runfile"
    if [ "$cpu_check" = 1 ]; then  # a smaller pipeline for 2 cores
      sed -i -e 's|^backend = .*|backend = "cpu"|' -e 's|^micro_batch_size = .*|micro_batch_size = 2|' \
        "$runfile"
    fi
    echo "== pp=4 1F1B: train --config tests/bench/cuda/gpt2-pp4-1f1b.toml (model $(basename "$pp_model"), hardware ${hw:-h100-sxm}), 4 stages on one $backend device, $pp_steps steps"
    t="$(limit_for 200)"
    if [ "$t" -eq 0 ]; then
      echo "-- skipped (budget spent)"
      failed=1
    else
      pt_limited "$t" train --config "$runfile" --steps "$pp_steps" --db "$work/pp4.db" \
        --name gpt2-pp4-1f1b --json >"$work/pp4-train.json" 2>"$work/pp4-train.err"
      rc=$?
      run_id="$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("run_id",""))' \
        "$work/pp4-train.json" 2>/dev/null)"
      if [ "$rc" -ne 0 ] || [ -z "$run_id" ]; then
        echo "-- failed (exit $rc): $(last_line "$work/pp4-train.err")"
        pp_status=failed
        failed=1
      else
        "$py" - "$work/pp4-train.json" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
print(f"-- stored as run {j['run_id']}: {j['tokens_per_s']:.0f} tokens/s over steps 2.., "
      f"last iteration {j['iteration_time'] * 1e3:.1f} ms")
for k in j["ranks"]:
    print(f"   stage {k['stage']}: compute {k['compute'] * 1e3:8.2f} ms, bubble "
          f"{100 * k['bubble_ratio']:5.1f}%")
PY
        echo
        echo "== pipetune report $run_id"
        pt_limited 60 report "$run_id" --db "$work/pp4.db" 2>&1 | tee "$work/pp4-report.txt"
        pt_limited 60 report "$run_id" --db "$work/pp4.db" --json >"$work/pp4-report.json" 2>/dev/null
        echo
        echo "== pipetune predict --config gpt2-pp4-1f1b.toml --against $run_id (simulated for 4 GPUs, measured as 4 streams of one)"
        pt_limited 60 predict --config "$runfile" --against "$run_id" --db "$work/pp4.db" 2>&1 |
          tee "$work/pp4-against.txt"
        rc=${PIPESTATUS[0]}
        pt_limited 60 predict --config "$runfile" --against "$run_id" --db "$work/pp4.db" --json \
          >"$work/pp4-against.json" 2>/dev/null
        if [ "$rc" -eq 0 ]; then pp_status=ok; else pp_status=failed; failed=1; fi
        # The loop closed: the hardware's efficiency table fitted to this run's kernel times,
        # then the same prediction with the fitted table.
        echo
        echo "== pipetune calibrate --hardware ${hw:-h100-sxm} --runs $run_id, then predict --against $run_id with the fitted table"
        if pt_limited 60 calibrate --hardware "${hw:-h100-sxm}" --runs "$run_id" --db "$work/pp4.db" \
          -o "$work/fitted.toml" 2>&1 | tee "$work/pp4-calibrate.txt"; then
          sed -e "s|^hardware = .*|hardware = \"$work/fitted.toml\"|" "$runfile" >"$work/fitted-run.toml"
          pt_limited 60 predict --config "$work/fitted-run.toml" --against "$run_id" \
            --db "$work/pp4.db" 2>&1 | tee "$work/pp4-against-fitted.txt"
          pt_limited 60 predict --config "$work/fitted-run.toml" --against "$run_id" \
            --db "$work/pp4.db" --json >"$work/pp4-against-fitted.json" 2>/dev/null
        else
          echo "-- calibrate failed"
          failed=1
        fi
      fi
    fi
  fi

  # --- 4. the table --------------------------------------------------------------------------
  echo
  "$py" - "$work" "$root" "$out" "$pp_status" <<'PY'
import json, os, re, sys
work, root, out, pp_status = sys.argv[1:5]
meta = dict(line.rstrip("\n").split("=", 1) for line in open(os.path.join(work, "meta.txt")))
model_text = open(meta["model"]).read()
def model_key(k):
    m = re.search(r"^\s*" + k + r"\s*=\s*([0-9_]+)", model_text, re.M)
    return int(m.group(1).replace("_", ""))
L, C, T, V = (model_key(k) for k in ("layers", "hidden", "seq_len", "vocab"))
# torch_gpt_step.py's model FLOPs per trained token (forward + backward)
flops_per_token = 6 * (12 * L * C * C + V * C) + 12 * L * T * C

# Peaks: the hardware preset's peak_flops is dense BF16 (fp32 for a CPU preset), its
# fp32_peak_flops the FP32 (non-tensor) figure; no fp32 MFU without one.
hw = meta["hardware"]
peaks = {}
if hw:
    path = f"presets/hardware/{hw}.toml"
    text = open(os.path.join(root, path)).read()
    def key(k):
        m = re.search(r"^\s*" + k + r"\s*=\s*([0-9._eE+]+)", text, re.M)
        return float(m.group(1).replace("_", "")) if m else None
    if meta["cpu_check"] == "1":
        peaks["fp32"] = (key("peak_flops"), f"{path} peak_flops")
    else:
        peaks["bf16"] = (key("peak_flops"), f"{path} peak_flops")
        if key("fp32_peak_flops"):
            peaks["fp32"] = (key("fp32_peak_flops"), f"{path} fp32_peak_flops")

rows = []
for line in open(os.path.join(work, "rows.tsv")):
    framework, dtype, batch, status, path, note = line.rstrip("\n").split("\t")
    row = {"framework": framework, "dtype": dtype, "batch": None if batch == "-" else int(batch),
           "status": status, "note": note}
    if status == "ok":
        text = open(path).read()
        j = json.loads(text if framework == "pipetune" else text.strip().splitlines()[-1])
        tps = float(j["tokens_per_s"])
        row["tokens_per_s"] = tps
        row["model_flops_per_s"] = flops_per_token * tps
        if framework == "pipetune":
            steps = j.get("steps", [])
            later = [s["seconds"] for s in steps[1:]] or [s["seconds"] for s in steps]
            row["step_ms"] = 1e3 * sum(later) / len(later) if later else None
            row["first_step_ms"] = 1e3 * steps[0]["seconds"] if steps else None
            row["loss"] = j["losses"][-1] if j.get("losses") else None
            row["engine_bytes"] = sum(k["parameter_bytes"] + k["gradient_bytes"] +
                                      k["optimizer_bytes"] + k["peak_activation_bytes"]
                                      for k in j.get("ranks", []))
        else:
            row["step_ms"] = j.get("step_ms")
            row["loss"] = j.get("loss")
            row["peak_memory_bytes"] = j.get("peak_memory_bytes")
            row["torch"] = j.get("torch")
            row["attention"] = j.get("attention")
        peak = peaks.get(dtype)
        if peak and peak[0]:
            row["peak_flops"], row["peak_source"] = peak
            row["mfu"] = row["model_flops_per_s"] / peak[0]
    rows.append(row)

print(f"GPT-2 {L} layers, hidden {C}, seq {T}, vocab {V}: {flops_per_token / 1e6:.1f} MFLOP per "
      f"token (6N + 12LTC); GPU: {meta['gpu']}")
head = (f"{'framework':<10} {'dtype':<5} {'batch':>5} {'tokens/s':>10} {'step ms':>9} "
        f"{'TFLOP/s':>8} {'MFU':>6}  memory")
print(head)
print("-" * len(head))
def gib(x):
    return f"{x / 2**30:.1f} GiB" if x else "n/a"
for r in rows:
    if r["status"] != "ok":
        b = r["batch"] if r["batch"] is not None else "-"
        print(f"{r['framework']:<10} {r['dtype']:<5} {b:>5} {r['status']:>10}  {r['note']}")
        continue
    mfu = f"{100 * r['mfu']:5.1f}%" if "mfu" in r else "   n/a"
    mem = (f"engine {gib(r.get('engine_bytes'))}" if r["framework"] == "pipetune"
           else f"peak {gib(r.get('peak_memory_bytes'))}")
    step = f"{r['step_ms']:9.1f}" if r.get("step_ms") else f"{'':>9}"
    print(f"{r['framework']:<10} {r['dtype']:<5} {r['batch']:>5} {r['tokens_per_s']:10.0f} {step} "
          f"{r['model_flops_per_s'] / 1e12:8.2f} {mfu}  {mem}" +
          (f"  ({r['note']})" if r["note"] else ""))
for dtype, (value, src) in sorted(peaks.items()):
    print(f"peak {dtype}: {value / 1e12:.1f} TFLOP/s from {src}")
for dtype in sorted({r["dtype"] for r in rows}):
    by = {r["framework"]: r for r in rows if r["dtype"] == dtype and r["status"] == "ok"}
    if "pipetune" in by and "pytorch" in by:
        p, t = by["pipetune"], by["pytorch"]
        same = "" if p["batch"] == t["batch"] else f" (batches {p['batch']} / {t['batch']})"
        print(f"{dtype}: pipetune / PyTorch = {p['tokens_per_s'] / t['tokens_per_s']:.2f}x{same}")
print("pipetune memory: the engine's own accounting (weights, gradients, optimizer state, peak "
      "activations); PyTorch's: torch.cuda.max_memory_allocated")

if out:
    result = {"gpu": meta["gpu"], "hardware": hw, "model": os.path.relpath(meta["model"], root),
              "flops_per_token": flops_per_token, "rows": rows,
              "peaks": {d: {"flops": v, "source": s} for d, (v, s) in peaks.items()},
              "pp4": {"status": pp_status}}
    for name, key in (("pp4-train.json", "train"), ("pp4-report.json", "report"),
                      ("pp4-against.json", "against"),
                      ("pp4-against-fitted.json", "against_fitted")):
        p = os.path.join(work, name)
        try:
            result["pp4"][key] = json.load(open(p))
        except (OSError, ValueError):
            pass
    result["capture"] = {}
    for dtype in ("fp32", "bf16"):
        try:
            on = json.load(open(os.path.join(work, f"capture-{dtype}.json")))
            nvtx = json.load(open(os.path.join(work, f"nvtx-{dtype}.json")))
            off = next(r for r in rows if r["framework"] == "pipetune" and r["dtype"] == dtype)
            result["capture"][dtype] = {
                "batch": off["batch"], "tokens_per_s_nvtx_only": off["tokens_per_s"],
                "tokens_per_s_nvtx_only_into_workspace": nvtx["tokens_per_s"],
                "tokens_per_s_capture": on["tokens_per_s"],
                # capture's own cost: against the same run into a workspace without it
                "overhead": nvtx["tokens_per_s"] / on["tokens_per_s"] - 1,
                "overhead_with_workspace": off["tokens_per_s"] / on["tokens_per_s"] - 1,
                "gpu_capture": on.get("gpu_capture", {})}
            auto = os.path.join(work, f"capture-auto-{dtype}.json")
            if os.path.exists(auto):
                on_auto = json.load(open(auto))
                result["capture"][dtype]["tokens_per_s_capture_auto"] = on_auto["tokens_per_s"]
                result["capture"][dtype]["overhead_auto"] = (
                    nvtx["tokens_per_s"] / on_auto["tokens_per_s"] - 1)
                result["capture"][dtype]["gpu_capture_auto"] = on_auto.get("gpu_capture", {})
        except (OSError, ValueError, StopIteration, KeyError):
            pass
    runfile = os.path.join(work, "gpt2-pp4-1f1b.toml")
    if os.path.exists(runfile):
        result["pp4"]["run_file"] = open(runfile).read()
    with open(os.path.join(out, "gpt2_gpu_bench.json"), "w") as f:
        json.dump(result, f, indent=1)
PY
  [ $? -eq 0 ] || failed=1
  # The capture runs' workspaces too (their kernels and the gaps between them), when small.
  for db in "$work"/capture-*.db; do
    [ -n "$out" ] && [ -f "$db" ] || continue
    name="gpt2_$(basename "$db" .db).db.gz"
    gzip -c "$db" >"$work/$name"
    if [ "$(stat -c %s "$work/$name")" -lt $((15 * 1024 * 1024)) ]; then
      cp "$work/$name" "$out/$name"
    else
      echo "-- $(basename "$db") is $(du -h "$work/$name" | cut -f1) gzipped: not copied to \$OUT"
    fi
  done
  if [ -n "$out" ] && [ -f "$work/pp4.db" ]; then
    gzip -c "$work/pp4.db" >"$work/pp4.db.gz"
    if [ "$(stat -c %s "$work/pp4.db.gz")" -lt $((15 * 1024 * 1024)) ]; then
      cp "$work/pp4.db.gz" "$out/gpt2_pp4.db.gz"
    else
      echo "-- the pp=4 workspace is $(du -h "$work/pp4.db.gz" | cut -f1) gzipped: not copied to \$OUT"
    fi
  fi
  echo
  echo "== gpt2_gpu_bench: done in $((SECONDS - start)) s$([ "$failed" = 0 ] || echo ', with failures (above)')"
  return "$failed"
}

if [ -n "$out" ]; then
  main 2>&1 | tee "$out/gpt2_gpu_bench.log"
  exit "${PIPESTATUS[0]}"
fi
main
