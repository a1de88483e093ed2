#!/usr/bin/env bash
# Compares the engine's CPU training step with PyTorch on this machine, GPT-2 small shaped
# (12 layers, hidden 768, 12 heads, seq 256, batch 4, vocabulary 50257), 1 rank, fp32.
#
# Prints the machine's sgemm peak (BM_Sgemm, n 4096, THREADS BLAS threads), the PyTorch step
# (tests/bench/torch_gpt_step.py) and, when the build has one, the engine's step: a benchmark in
# pipetune_bench whose name contains "GptTrainStep" and which reports the counters tokens_per_s
# (and model_flops_per_s, with the FLOP formula of torch_gpt_step.py). Exit status: 0, or 1 when
# the engine's step is slower than PyTorch's, 2 on a usage or setup error.
#
# Usage: tests/bench/compare_torch.sh [--build DIR] [--threads N] [--steps N]
#   --build    a Release build with -DPIPETUNE_BUILD_BENCH=ON (default: build)
#   --threads  BLAS / PyTorch / backend pool threads (default: all cores)
#   --steps    timed PyTorch steps (default 5)
# Needs Debian's PyTorch (scripts/setup --bench).
set -euo pipefail

build=build
threads="$(nproc)"
steps=5
while [ $# -gt 0 ]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "compare_torch: unknown argument '$1'" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "$0")" && pwd)"
bench="$build/tests/pipetune_bench"
py=/usr/bin/python3  # Debian's interpreter, where python3-torch lives (not a pyenv one)
[ -x "$bench" ] || { echo "compare_torch: $bench not built" >&2; exit 2; }
"$py" -c 'import torch' 2>/dev/null ||
  { echo "compare_torch: no PyTorch for $py (scripts/setup --bench)" >&2; exit 2; }

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

"$bench" --benchmark_filter="BM_Sgemm/n:4096/blas_threads:$threads/real_time\$" \
  --benchmark_format=json >"$tmp/sgemm.json" 2>/dev/null || true
"$py" "$here/torch_gpt_step.py" --threads "$threads" --steps "$steps" >"$tmp/torch.json"
cpp_filter="$("$bench" --benchmark_list_tests 2>/dev/null | grep -m1 GptTrainStep || true)"
if [ -n "$cpp_filter" ]; then
  OPENBLAS_NUM_THREADS="$threads" "$bench" --benchmark_filter="^${cpp_filter}\$" \
    --benchmark_format=json >"$tmp/cpp.json"
fi

"$py" - "$tmp" "$threads" <<'PY'
import json, os, sys
tmp, threads = sys.argv[1], sys.argv[2]
def bench_json(name):
    path = os.path.join(tmp, name)
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return None
    runs = json.load(open(path)).get("benchmarks", [])
    return runs[0] if runs else None
sgemm = bench_json("sgemm.json")
peak = sgemm["FLOP/s"] if sgemm else None
if peak:
    print(f"sgemm peak (n 4096, {threads} BLAS threads): {peak / 1e9:.1f} GFLOP/s")
def share(flops):
    return f" = {100 * flops / peak:.0f}% of sgemm peak" if peak else ""
torch = json.loads(open(os.path.join(tmp, "torch.json")).read().strip().splitlines()[-1])
print(f"pytorch {torch['torch']} ({torch['threads']} threads): {torch['tokens_per_s']:.1f} tokens/s,"
      f" {torch['step_ms']:.0f} ms/step, {torch['model_flops_per_s'] / 1e9:.1f} GFLOP/s model"
      + share(torch['model_flops_per_s']))
cpp = bench_json("cpp.json")
if cpp is None:
    print("engine: no GptTrainStep benchmark in this build")
    sys.exit(0)
tps = cpp.get("tokens_per_s")
if tps is None:
    print(f"engine: {cpp['name']} reports no tokens_per_s counter", file=sys.stderr)
    sys.exit(2)
mfs = cpp.get("model_flops_per_s", 0.0)
ratio = tps / torch["tokens_per_s"]
print(f"engine {cpp['name']}: {tps:.1f} tokens/s, {mfs / 1e9:.1f} GFLOP/s model" + share(mfs)
      + f" -> {ratio:.2f}x pytorch")
sys.exit(0 if ratio >= 1.0 else 1)
PY
