#!/usr/bin/env bash
# Every GPU check in one command, for a machine with one GPU, CUDA 13 and PyTorch but
# no compiler or package registry. Made ready on a build machine by scripts/device_bundle, whose
# build-device/ and device-libs/ travel with the checkout; run in its root:
#   bash tests/gpu/device_check.sh
# In order, each under its own time limit, a failing step reported and the next one run:
#   1. cuda_fast_tests        the CUDA parts' host-side tests
#   2. gpu_tests              the GPU tests (ctest label gpu), run as a binary: the ctest files
#                             name the build machine's paths
#   2a. op_tests              the op tests' CUDA cases (engine_fast_tests, filter
#                             Backends/*/cuda: every op on the CUDA backend with the CPU's inputs
#                             and checks, tests/engine/tensor/*_op_test.cpp)
#   2a'. pair_streams_bench   dualpipe-v trained with each overlapped pair on two streams of its
#                             rank against one stream (--serial-pairs), pp 2 and 4
#                             (tests/bench/cuda/pair_streams_bench.sh; PAIR_PLANS="pp2" for fewer)
#   2b. nccl_np1              the NCCL communicator's GPU tests under `mpirun -np 1`, when
#                             device-mpi/ (scripts/device_bundle_mpi: the tests and Open MPI)
#                             is carried too
#   2c. nccl_np2_hosts, nccl_np4_hosts  the same under `mpirun -np 2` and `-np 4`, the processes
#                             sharing the GPU, each its own NCCL host (tests/gpu/as_nccl_hosts.sh):
#                             collectives, transfers and training across processes through NCCL
#   2d. nccl_train_np2_hosts  `mpirun -np 2 ... pipetune train --backend cuda --pp 2` that way,
#                             into a workspace, its losses against the CPU single-rank run
#   3. cuda_capture_bench     capture overhead (Google Benchmark, 3 runs each), by default off /
#                             nvtx / cupti (forced flush) / cupti flushing completed buffers only /
#                             the engine's hub (completed, forced when the check fails) / cupti
#                             routed by the bench / cupti after a stream id query / the hub of a
#                             process of one rank (no stream id) / the hub taking every fourth
#                             step / the hub at train's default cadence (auto), at 12 layers,
#                             interleaved;
#                             CAPTURE_ARGS='--benchmark_filter=.' for every mode and 24 layers,
#                             '--cupti-timestamps=pinned' or '--cupti-timestamp-buffer-kib=256' to
#                             move CUPTI's timestamps (measured on an H100: no gain beyond noise)
#   4. cuda_attention_bench   the stored and flash attention kernels at GPT-2's shape
#   4'. torch_attention_bench PyTorch's fused attention kernels (cuDNN, FlashAttention-2, memory-
#                             efficient) at the same shape, batch 8 and 64: the reference for
#                             pipetune's own (tests/bench/cuda/torch_attention_bench.py)
#   4b. cuda_gemm_bench       the linear layers' GEMMs at GPT-2's shapes: fp32, bf16 from copies,
#                             bf16 rounded inside cuBLASLt; the MLP's GELU after its GEMM or in
#                             cuBLASLt's epilogues
#                             (4, 4' and 4b: skipped unless SKIP is set, as both measured already and
#                             the budget goes to the GPT-2 step)
#   5. gpt2_gpu_bench.sh      GPT-2 124M tokens/s and MFU, pipetune (fp32, bf16) and PyTorch, and
#                             the pp=4 1F1B run against its prediction
# then a summary. About 9 minutes on an H100 with device-mpi/ (BUDGET seconds, default 540, caps
# it: the GPT-2 step gets what is left).
# Before the steps: nvidia-smi, and ldd of the binaries with LD_LIBRARY_PATH = device-libs (its
# .xz libraries unpacked to a temporary folder; its fallback/ libstdc++ only when this machine's
# lacks a version the binaries need), the CUDA library folders found (/usr/local/cuda, PyTorch's
# nvidia wheels); a library not found stops it there, naming it. PyTorch runs with the caller's
# LD_LIBRARY_PATH, never device-libs.
# Writes to $OUT (default: a new folder under /tmp, printed): device_check.log,
# cuda_fast_tests.xml, gpu_tests.xml, op_tests.xml, cuda_capture_bench.json, cuda_attention_bench.json,
# cuda_gemm_bench.json, and what
# gpt2_gpu_bench.sh writes (gpt2_gpu_bench.log, gpt2_gpu_bench.json, gpt2_pp4.db.gz, and the
# capture runs' workspaces gpt2_capture-fp32.db.gz / gpt2_capture-bf16.db.gz when small).
# GPT2_ARGS (environment): more options for gpt2_gpu_bench.sh, split as the shell splits words,
# e.g. GPT2_ARGS='--batches "8 4" --steps 3 --no-pp' for a short first look; CAPTURE_ARGS: more
# options for cuda_capture_bench (default '--benchmark_filter=:(0|1|2|5|7|9|10|11|12|13)/layers:12';
# e.g. CAPTURE_ARGS='--benchmark_filter=:[0123]/' for the first four modes only); CAPTURE_REPS: runs
# of each capture mode (default 3); GPU_TESTS_CAP: seconds gpu_tests may take (default 300: the
# matrix has 52 plans, each also trained on the CPU for reference; 200 was set for 31), and
# GPU_TESTS_FILTER a --gtest_filter for it (default all); GEMM_ARGS:
# cuda_gemm_bench's options (default '--benchmark_filter=-operands:2', without in-GEMM rounding); NCCL_HOSTS_NP: the process counts of step 2c (default "2 4", "" for none);
# NCCL_TRAIN_PLANS: the training plans of steps 2b and 2c, names of
# tests/engine/runtime/plan_matrix.hpp (each runs under the process count of its world size), or
# "all" for the whole matrix (default: one plan of each kind, as fits the budget: single pp2_1f1b
# dp2_zero1 tp2 pp2_zbv pp2_1f1b_vocab1 moe_ep2_dp2 pp4_1f1b tp2_pp2_vocab1 moe_pp2_ep2_dp2_zbh1 tp2_sp
# pp2_dp2_zero3_vocab1);
# SKIP: step names
# not to run (e.g. SKIP="cuda_capture_bench cuda_attention_bench" to rerun the rest; default
# "cuda_attention_bench torch_attention_bench cuda_gemm_bench", SKIP="" runs every step).
# Exit status: 0 when every step passed, 1 when one failed, 2 without a GPU (after the steps that
# need none) or with a library missing.
set -uo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$root" || exit 2
build="${BUILD:-build-device}"
libs="${LIBS:-device-libs}"
mpi="${MPI_BUNDLE:-device-mpi}"
budget="${BUDGET:-540}"
case "${1:-}" in
  -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
  "") ;;
  *) echo "device_check: no arguments (BUILD, LIBS, BUDGET and OUT are read from the environment)" >&2; exit 2 ;;
esac
# positive NAME VALUE WHAT: exits 2 with one line unless VALUE is a positive whole number.
positive() {
  [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "device_check: $1 must be $3, not '$2'" >&2; exit 2; }
}
positive BUDGET "$budget" seconds
capture_reps="${CAPTURE_REPS:-3}"
positive CAPTURE_REPS "$capture_reps" "a positive count"
gpu_tests_cap="${GPU_TESTS_CAP:-300}"
positive GPU_TESTS_CAP "$gpu_tests_cap" seconds
out="${OUT:-}"
[ -n "$out" ] || out="$(mktemp -d /tmp/device_check.XXXXXX)"
mkdir -p "$out" || { echo "device_check: cannot create $out" >&2; exit 2; }
export OUT="$out"
# Working files live outside $OUT (what comes back from a GPU machine is a handful of files).
scratch="$(mktemp -d /tmp/device_check_scratch.XXXXXX)"
export SCRATCH="$scratch"
start=$SECONDS

declare -a summary=()
failed=0
no_gpu=""
missing=""
unpacked=""

note() { summary+=("$(printf '%-22s %s' "$1" "$2")"); }

# unpack_xz SRC DEST: xz, or Python's lzma where xz is missing.
unpack_xz() {
  if command -v xz >/dev/null; then
    xz -dc "$1" >"$2"
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
      "$1" "$2"
  fi || { echo "device_check: cannot unpack $1"; return 1; }
}

# Runs one step: NAME CAP_SECONDS LOG COMMAND... under timeout, within what is left of the
# budget, its output shown and kept in LOG.
step() {
  local name="$1" cap="$2" log="$3" t left rc t0
  shift 3
  left=$((budget - (SECONDS - start)))
  t=$((left < cap ? left : cap))
  echo
  echo "================ $name (limit ${t} s) ================"
  if [ "$t" -lt 10 ]; then
    echo "skipped: the budget of $budget s is spent"
    note "$name" "SKIPPED (budget spent)"
    failed=1
    return
  fi
  if [[ " ${SKIP-cuda_attention_bench torch_attention_bench cuda_gemm_bench} " == *" $name "* ]]; then
    echo "skipped: SKIP names it"
    note "$name" "skipped (SKIP)"
    : >"$log"
    return 0
  fi
  t0=$SECONDS
  timeout -k 10 "$t" "$@" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if [ "$rc" -eq 0 ]; then
    note "$name" "ok ($((SECONDS - t0)) s)"
  elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    note "$name" "TIMEOUT after $((SECONDS - t0)) s"
    failed=1
  else
    note "$name" "FAILED (exit $rc, $((SECONDS - t0)) s)"
    failed=1
  fi
  return "$rc"
}

# gtest's closing lines of a log, for the summary.
gtest_counts() {
  local log="$1" plain p s f
  # Without colours: under mpirun gtest writes to a terminal (Open MPI's pty) and colours them.
  plain="$(sed 's/\x1b\[[0-9;]*m//g' "$log" 2>/dev/null)"
  p="$(grep -o '\[  PASSED  \] [0-9]* test' <<<"$plain" | tail -n 1 | grep -o '[0-9]*')"
  s="$(grep -o '\[  SKIPPED \] [0-9]* test' <<<"$plain" | tail -n 1 | grep -o '[0-9]*')"
  f="$(grep -o '\[  FAILED  \] [0-9]* test' <<<"$plain" | tail -n 1 | grep -o '[0-9]*')"
  echo "passed ${p:-0}, skipped ${s:-0}, failed ${f:-0}"
}

# every_test_skipped LOG: on a GPU machine, a gtest run that passed nothing and skipped its tests
# is a failure, named in the step's summary line.
every_test_skipped() {
  local counts
  counts="$(gtest_counts "$1")"
  if [[ "$counts" == "passed 0, skipped "[1-9]* ]]; then
    summary[-1]="${summary[-1]} (every test skipped: $(sed 's/\x1b\[[0-9;]*m//g' "$1" |
      grep -o 'not testable here: .*' | head -n 1 | cut -c1-200))"
    failed=1
  fi
}

checks() {
  echo "== device_check: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n) ($(uname -srm)), $root"
  echo "== output: $out"
  # The bundle's binaries come xz-compressed (scripts/device_bundle): unpacked in place once.
  local packed
  for packed in "$build"/cli/*.xz "$build"/tests/*.xz; do
    [ -f "$packed" ] || continue
    if [ ! -f "${packed%.xz}" ]; then
      unpack_xz "$packed" "${packed%.xz}" && chmod +x "${packed%.xz}"
    fi
  done
  if [ -f "$build/bundle-info.txt" ]; then
    sed 's/^/   /' "$build/bundle-info.txt"
  else
    echo "device_check: $build/bundle-info.txt missing: was scripts/device_bundle run and $build carried?" >&2
  fi
  echo "   glibc here: $(ldd --version 2>/dev/null | head -n 1)"

  # --- libraries: device-libs first, then the CUDA folders this machine has --------------------
  local paths=() d sp f
  [ -d "$libs" ] && paths+=("$root/$libs") || echo "device_check: warning: no $libs folder (carry it)"
  unpacked="$(mktemp -d /tmp/device_libs.XXXXXX)"
  for f in "$libs"/*.xz; do
    [ -f "$f" ] || continue
    unpack_xz "$f" "$unpacked/$(basename "$f" .xz)"
  done
  paths+=("$unpacked")
  # device-mpi/'s binaries (scripts/device_bundle_mpi compresses them) into $unpacked/mpi-bin.
  local name
  for name in nccl_gpu_tests pipetune; do
    if [ -f "$mpi/$name.xz" ]; then
      mkdir -p "$unpacked/mpi-bin"
      unpack_xz "$mpi/$name.xz" "$unpacked/mpi-bin/$name" && chmod +x "$unpacked/mpi-bin/$name"
    elif [ -x "$mpi/$name" ]; then  # a bundle from before the compression
      mkdir -p "$unpacked/mpi-bin"
      cp "$mpi/$name" "$unpacked/mpi-bin/$name"
    fi
  done
  for d in /usr/local/cuda/lib64 /usr/local/cuda/extras/CUPTI/lib64 \
    /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -d "$d" ] && paths+=("$d")
  done
  sp="$(timeout 60 python3 -c 'import nvidia, os; print(os.path.dirname(list(nvidia.__path__)[0]))' 2>/dev/null)"
  if [ -n "$sp" ] && [ -d "$sp/nvidia" ]; then
    for d in "$sp"/nvidia/*/lib "$sp"/nvidia/*/*/lib; do
      [ -d "$d" ] && paths+=("$d")
    done
  fi
  local joined
  joined="$(IFS=:; echo "${paths[*]}")"
  export PIPETUNE_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # This machine's libstdc++ when it has what the binaries need, else the bundle's (which needs
  # glibc 2.36).
  if [ -d "$libs/fallback" ] &&
    LD_LIBRARY_PATH="$PIPETUNE_LIBRARY_PATH" ldd "$build/cli/pipetune" 2>&1 |
    grep -E 'not found' | grep -qE 'GLIBCXX|CXXABI|libstdc\+\+|libgcc_s'; then
    echo "== this machine's libstdc++ is older than the binaries need: using $libs/fallback"
    paths=("$root/$libs/fallback" "${paths[@]}")
    joined="$(IFS=:; echo "${paths[*]}")"
    export PIPETUNE_LIBRARY_PATH="$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  export PIPETUNE_PRESETS_DIR="$root/presets"
  echo "== library path for pipetune's binaries:"
  printf '   %s\n' "${paths[@]}"

  # --- the GPU -----------------------------------------------------------------------------------
  echo
  echo "== nvidia-smi"
  if ! command -v nvidia-smi >/dev/null; then
    no_gpu="nvidia-smi not found"
  elif ! timeout 60 nvidia-smi; then
    no_gpu="nvidia-smi failed"
  else
    timeout 60 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit,compute_mode \
      --format=csv || true
  fi
  [ -z "$no_gpu" ] || echo "device_check: no GPU: $no_gpu"
  echo "== PyTorch: $(timeout 120 python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n 1)"
  # The pipeline-schedule names this torch's profiler ranges carry (the importers' name table says
  # from which release torch emits "PP:" ranges; each GPU session adds a release it has seen).
  echo "== torch.distributed.pipelining names: $(timeout 60 python3 -c 'import inspect, re, torch, torch.distributed.pipelining.schedules as s; src = inspect.getsource(s); print(torch.__version__, "PP: ranges" if re.search(r"[\"\x27]PP:", src) else "no PP: ranges", "| Forward/Backward ranges" if "record_function(f\"Forward" in src else "")' 2>&1 | tail -n 1)"

  # --- ldd: every library found? ------------------------------------------------------------------
  echo
  echo "== ldd"
  local bin line
  local binaries=("$build/cli/pipetune" "$build/tests/cuda_fast_tests" "$build/tests/gpu_tests"
                  "$build/tests/engine_fast_tests" "$build/tests/cuda_capture_bench"
                  "$build/tests/cuda_attention_bench" "$build/tests/cuda_gemm_bench")
  for bin in "${binaries[@]}"; do
    if [ ! -f "$bin" ]; then
      missing="$missing $bin (not in the bundle)"
      continue
    fi
    [ -x "$bin" ] || chmod +x "$bin" 2>/dev/null
    echo "-- $bin"
    LD_LIBRARY_PATH="$PIPETUNE_LIBRARY_PATH" ldd "$bin" 2>&1 | sed 's/^/   /' | tee "$scratch/.ldd"
    while read -r line; do
      missing="$missing $(echo "$line" | cut -c1-160) [$(basename "$bin")];"
    done < <(grep 'not found' "$scratch/.ldd")
  done
  rm -f "$scratch/.ldd"
  if [ -n "${missing// /}" ]; then
    echo "device_check: libraries not found, nothing run:$missing" >&2
    note "ldd" "MISSING:$missing"
    return 2
  fi
  note "ldd" "ok (every library found)"
  local run_env=(env "LD_LIBRARY_PATH=$PIPETUNE_LIBRARY_PATH")

  # --- 1. host-side tests (no GPU needed) -----------------------------------------------------------
  step cuda_fast_tests 60 "$scratch/.fast.log" "${run_env[@]}" "$build/tests/cuda_fast_tests" \
    "--gtest_output=xml:$out/cuda_fast_tests.xml"
  summary[-1]="${summary[-1]}; $(gtest_counts "$scratch/.fast.log")"

  if [ -n "$no_gpu" ]; then
    for s in gpu_tests op_tests pair_streams_bench cuda_capture_bench cuda_attention_bench \
      torch_attention_bench cuda_gemm_bench \
      gpt2_gpu_bench; do
      echo "$s: skipped, no GPU ($no_gpu)"
      note "$s" "SKIPPED (no GPU: $no_gpu)"
    done
    return 2
  fi

  # --- 2. GPU tests ---------------------------------------------------------------------------------
  step gpu_tests "$gpu_tests_cap" "$scratch/.gpu.log" "${run_env[@]}" "$build/tests/gpu_tests" \
    "--gtest_output=xml:$out/gpu_tests.xml" ${GPU_TESTS_FILTER:+"--gtest_filter=$GPU_TESTS_FILTER"}
  summary[-1]="${summary[-1]}; $(gtest_counts "$scratch/.gpu.log")"
  if ! grep -q '\[  PASSED  \] [1-9]' "$scratch/.gpu.log" && grep -q '\[  SKIPPED \]' "$scratch/.gpu.log"; then
    summary[-1]="${summary[-1]} (every test skipped: the CUDA runtime finds no device)"
    failed=1
  fi

  # --- 2a. the op tests' CUDA cases -----------------------------------------------------------------
  step op_tests 120 "$scratch/.ops.log" "${run_env[@]}" "$build/tests/engine_fast_tests" \
    "--gtest_output=xml:$out/op_tests.xml" "--gtest_filter=Backends/*/cuda"
  summary[-1]="${summary[-1]}; $(gtest_counts "$scratch/.ops.log")"
  if ! grep -q '\[  PASSED  \] [1-9]' "$scratch/.ops.log" && grep -q '\[  SKIPPED \]' "$scratch/.ops.log"; then
    summary[-1]="${summary[-1]} (every test skipped: $(grep -o 'no CUDA device usable.*' \
      "$scratch/.ops.log" | head -n 1 | cut -c1-200))"
    failed=1
  fi

  # --- 2a'. DualPipeV's pairs on two streams against one (tests/bench/cuda/pair_streams_bench.sh)
  step pair_streams_bench 180 "$scratch/.pairs.log" env "PIPETUNE=$build/cli/pipetune" \
    "PLANS=${PAIR_PLANS:-pp2 pp4}" bash "$root/tests/bench/cuda/pair_streams_bench.sh"

  # --- 2b. the NCCL communicator in one process, when scripts/device_bundle_mpi's folder came ---
  local mpi_bin="$unpacked/mpi-bin"
  # The communicator's tests, and the training plans asked for (every process runs the same list).
  local plan nccl_filter="*"
  if [ "${NCCL_TRAIN_PLANS:-}" != all ]; then
    nccl_filter="NcclCommunicatorGpu.*"
    for plan in ${NCCL_TRAIN_PLANS:-single pp2_1f1b dp2_zero1 tp2 pp2_zbv pp2_1f1b_vocab1 \
      moe_ep2_dp2 pp4_1f1b tp2_pp2_vocab1 moe_pp2_ep2_dp2_zbh1 tp2_sp pp2_dp2_zero3_vocab1}; do
      nccl_filter="$nccl_filter:Plans/NcclTraining.*/$plan"
    done
  fi
  if [ -x "$mpi_bin/nccl_gpu_tests" ] && [ -f "$mpi/env.sh" ]; then
    [ -f "$mpi/bundle-info.txt" ] && sed 's/^/   /' "$mpi/bundle-info.txt"
    step nccl_np1 120 "$scratch/.nccl.log" bash -c \
      '. "$1/env.sh" "$1" && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$2" &&
       mpirun -np 1 "$4" "--gtest_output=xml:$3/nccl_gpu_tests.xml" "--gtest_filter=$5"' \
      nccl_np1 "$root/$mpi" "$PIPETUNE_LIBRARY_PATH" "$out" "$mpi_bin/nccl_gpu_tests" \
      "$nccl_filter"
    summary[-1]="${summary[-1]}; $(gtest_counts "$scratch/.nccl.log")"
    every_test_skipped "$scratch/.nccl.log"
    # --- 2c. the same tests across processes sharing the GPU, each its own NCCL host (NCCL's
    # socket transport over loopback): the communicator with ranks as processes on one GPU.
    # A first count that fails (NCCL cannot run this way here) stops the others: they would
    # spend their time limits on the same failure, out of the GPT-2 step's.
    local np hosts_ok=1
    for np in ${NCCL_HOSTS_NP-2 4}; do
      if [ "$hosts_ok" -eq 0 ]; then
        note "nccl_np${np}_hosts" "skipped (an earlier hosts step failed)"
        continue
      fi
      step "nccl_np${np}_hosts" $((60 + 15 * np)) "$scratch/.nccl$np.log" bash -c \
        '. "$1/env.sh" "$1" && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$2" &&
         mpirun -np "$5" --oversubscribe bash tests/gpu/as_nccl_hosts.sh "$4" \
           "--gtest_output=xml:$3/nccl_gpu_tests_np$5_hosts.xml" "--gtest_filter=$6"' \
        "nccl_np${np}_hosts" "$root/$mpi" "$PIPETUNE_LIBRARY_PATH" "$out" \
        "$mpi_bin/nccl_gpu_tests" "$np" "$nccl_filter" || hosts_ok=0
      summary[-1]="${summary[-1]}; $(gtest_counts "$scratch/.nccl$np.log")"
      every_test_skipped "$scratch/.nccl$np.log"
    done
    # --- 2d. `pipetune train --backend cuda` as 2 processes (a 2-stage pipeline) on the GPU,
    # each its own NCCL host, stored in a workspace, against the CPU single-rank run.
    if [ "$hosts_ok" -eq 0 ]; then
      note nccl_train_np2_hosts "skipped (an earlier hosts step failed)"
    elif [ -x "$mpi_bin/pipetune" ] && [ -n "${NCCL_HOSTS_NP-2 4}" ]; then
      step nccl_train_np2_hosts 90 "$scratch/.nccltrain.log" bash -c \
        '. "$1/env.sh" "$1" && export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$2" &&
         rm -f "$4" && mpirun -np 2 --oversubscribe bash tests/gpu/as_nccl_hosts.sh "$3" train \
           --backend cuda --tp 1 --pp 2 --dp 1 --microbatches 4 --steps 6 --db "$4" \
           --name nccl-pp2-hosts \
           --json' \
        nccl_train_np2_hosts "$root/$mpi" "$PIPETUNE_LIBRARY_PATH" "$mpi_bin/pipetune" \
        "$scratch/nccl_train.db"
      if [ -s "$scratch/nccl_train.db" ]; then
        "${run_env[@]}" "$build/cli/pipetune" train --backend cpu --tp 1 --pp 1 --dp 1 \
          --microbatches 4 --steps 6 --no-db --json >"$scratch/.cpu_train.json" 2>/dev/null
        python3 - "$scratch/.nccltrain.log" "$scratch/.cpu_train.json" >"$scratch/.nccltrain" <<'PY' ||
import json, sys
def last_object(text):  # the JSON object rank 0 printed, among mpirun's and NCCL's lines
    starts = [i for i in range(len(text)) if text.startswith("{\n", i) and (i == 0 or text[i - 1] == "\n")]
    for i in reversed(starts):
        try:
            return json.JSONDecoder().raw_decode(text, i)[0]
        except ValueError:
            continue
    raise SystemExit("no JSON object in the run's output")
got = last_object(open(sys.argv[1]).read())
want = json.load(open(sys.argv[2]))
g, w = got["losses"], want["losses"]
worst = max(abs(a - b) / b for a, b in zip(g, w)) if len(g) == len(w) else float("inf")
cap = got.get("gpu_capture", {})
print(f"{len(got['ranks'])} ranks; losses vs the CPU single-rank run: max relative difference "
      f"{worst:.2e}{'' if worst <= 1e-3 else ' (OVER 1e-3)'}; GPU records {cap.get('activities', 0)}"
      f", {cap.get('attributed', 0)} launched inside ops, {cap.get('forced_flushes', 0)} of "
      f"{cap.get('flushes', 0)} flushes forced ({cap.get('flush_ms', 0):.1f} ms flushing, "
      f"{cap.get('route_ms', 0):.1f} ms routing, {cap.get('waiting_launch_calls', 0)} launch calls "
      f"waiting at most); {got['tokens_per_s']:.0f} tokens/s")
sys.exit(0 if worst <= 1e-3 and cap.get("activities", 0) > 0 else 1)
PY
          { failed=1; summary[-1]="${summary[-1]}; CHECK FAILED"; }
        summary[-1]="${summary[-1]}; $(cat "$scratch/.nccltrain" 2>/dev/null)"
        "${run_env[@]}" "$build/cli/pipetune" report --db "$scratch/nccl_train.db" nccl-pp2-hosts || true
        gzip -c "$scratch/nccl_train.db" >"$out/nccl_train_np2_hosts.db.gz"
      fi
    fi
  else
    note nccl_np1 "skipped ($mpi not carried: scripts/device_bundle_mpi makes it)"
  fi

  # --- 3. capture overhead --------------------------------------------------------------------------
  # CAPTURE_ARGS split as the shell splits words, as before; the default filter is one word.
  # About 11 s a mode on an H100 (setup, the iteration count found, 3 runs of 1 s). The modes'
  # runs are interleaved in random order: a drift of the GPU's clock over the minute (off ranged
  # 31.83 to 32.05 ms between runs) then spreads over every mode instead of favouring the first.
  local capture_args=('--benchmark_filter=:(0|1|2|5|7|9|10|11|12|13)/layers:12')
  [ -n "${CAPTURE_ARGS:-}" ] && read -r -a capture_args <<<"$CAPTURE_ARGS"
  step cuda_capture_bench 150 "$scratch/.capture.log" "${run_env[@]}" \
    "$build/tests/cuda_capture_bench" "${capture_args[@]}" "--benchmark_repetitions=$capture_reps" \
    --benchmark_enable_random_interleaving=true \
    "--benchmark_out=$out/cuda_capture_bench.json" --benchmark_out_format=json
  if grep -q '^cuda_capture_bench: skipped' "$scratch/.capture.log"; then
    summary[-1]="${summary[-1]}; SKIPPED by the program: no usable device"
    failed=1
  fi
  # The summary's line: each mode's overhead against off.
  if [ -s "$out/cuda_capture_bench.json" ]; then
    python3 - "$out/cuda_capture_bench.json" <<'PY' && summary[-1]="${summary[-1]}; $(cat "$scratch/.overhead")"
import json, os, re, sys
text = open(sys.argv[1]).read()
try:
    runs = json.loads(text)["benchmarks"]
except ValueError:  # cut short (a timeout): the benchmarks written before it, one object each
    runs = []
    for m in re.finditer(r'\{[^{}]*"run_name"[^{}]*\}', text):
        try:
            runs.append(json.loads(m.group(0)))
        except ValueError:
            pass
mean, take, flush, route, waiting, records, calls, forced, unchecked, per_take = (
    {} for _ in range(10))
# The runs are interleaved (--benchmark_enable_random_interleaving), so the means come at the end:
# a run cut short has its repetitions only, averaged here.
means = [r for r in runs if r.get("aggregate_name") == "mean"]
if not means:
    by_mode = {}
    for r in runs:
        if r.get("run_type") == "iteration" and "error_occurred" not in r:
            by_mode.setdefault(r["run_name"], []).append(r)
    for name, reps in by_mode.items():
        avg = {"run_name": name}
        for key in reps[0]:
            if isinstance(reps[0][key], (int, float)) and all(key in x for x in reps):
                avg[key] = sum(x[key] for x in reps) / len(reps)
        means.append(avg)
for r in means:
    m = re.search(r"\):(\d+)/layers:(\d+)", r["run_name"])
    mode = (int(m.group(1)), int(m.group(2)))
    mean[mode] = r["real_time"]
    for key, into in (("take_ms", take), ("flush_ms", flush), ("route_ms", route),
                      ("waiting_calls", waiting), ("records/step", records),
                      ("api_calls/step", calls), ("forced_flushes/step", forced),
                      ("failed_checks/step", unchecked), ("steps/take", per_take)):
        if key in r:
            into[mode] = r[key]
names = {0: "off", 1: "nvtx", 2: "cupti", 3: "cupti-device", 4: "cupti-launches",
         5: "cupti-completed", 6: "cupti-cupti-zeroes", 7: "hub", 8: "hub-forced",
         9: "cupti-routed", 10: "cupti-stream-id", 11: "hub-sole", 12: "hub-every-4",
         13: "hub-auto"}
parts = []
for mode in sorted(m for m in mean if m[0] > 0):
    off = (0, mode[1])
    if off in mean:
        extra = ""
        if mode in take:
            split = (f" = flush {flush[mode]:.3f} + route {route[mode]:.3f}, "
                     f"{waiting[mode]:.0f} calls waiting at the end" if mode in route else "")
            extra = (f" (take {take[mode]:.3f} ms{split}; {records[mode]:.0f} records"
                     + (f" and {calls[mode]:.0f} API calls" if mode in calls else "")
                     + (f", {forced[mode]:.2f} forced flushes" if mode in forced else "")
                     + (f", {unchecked[mode]:.2f} failed checks" if mode in unchecked else "")
                     + " a step"
                     + (f"; a take every {per_take[mode]:.2f} steps" if per_take.get(mode, 1) != 1
                        else "")
                     + ")")
        layers = "" if mode[1] == 12 else f" at {mode[1]} layers (off {mean[off]:.3f} ms)"
        parts.append(f"{names.get(mode[0], mode[0])}{layers} "
                     f"{100 * (mean[mode] / mean[off] - 1):+.2f}%{extra}")
line = (f"step {mean.get((0, 12), 0):.3f} ms off; overhead " + ", ".join(parts)) if parts else "no means"
print("capture overhead (mean of each mode's runs):", line)
open(os.path.join(os.environ["SCRATCH"], ".overhead"), "w").write(line)
PY
    rm -f "$scratch/.overhead"
  fi

  # --- 4. attention kernels -------------------------------------------------------------------------
  step cuda_attention_bench 90 "$scratch/.attention.log" "${run_env[@]}" \
    "$build/tests/cuda_attention_bench" "--benchmark_out=$out/cuda_attention_bench.json" \
    --benchmark_out_format=json
  if [ -s "$out/cuda_attention_bench.json" ]; then
    python3 - "$out/cuda_attention_bench.json" <<'PY' && summary[-1]="${summary[-1]}; $(cat "$scratch/.attention")"
import json, os, re, sys
parts = []
for r in json.load(open(sys.argv[1]))["benchmarks"]:
    m = re.search(r"kernel:(\d)/T:(\d+)/pass:(\d)", r["name"])
    if not m:
        continue
    kernel = {"0": "stored", "1": "flash-tiles", "2": "flash-rows", "3": "flash-tc",
              "4": "flash-tc-registers"}[m.group(1)]
    p = "bwd" if m.group(3) == "1" else "fwd"
    parts.append(f"{kernel} T={m.group(2)} {p} {r['real_time']:.2f} ms ({r.get('TFLOP/s', 0) / 1e12 if r.get('TFLOP/s', 0) > 1e6 else r.get('TFLOP/s', 0):.2f} TFLOP/s)")
line = "; ".join(parts) if parts else "no results"
print("attention kernels:", line)
open(os.path.join(os.environ["SCRATCH"], ".attention"), "w").write(line)
PY
    rm -f "$scratch/.attention"
  fi

  # --- 4'. PyTorch's fused attention at the same shape (PyTorch's own libraries, not device-libs)
  step torch_attention_bench 90 "$scratch/.torch_attention.log" python3 \
    "$root/tests/bench/cuda/torch_attention_bench.py" --batches "8 64"

  # --- 4b. the linear layers' GEMMs: are bf16 copies worth their traffic? -----------------------
  # Without in-GEMM rounding (operands:2) unless GEMM_ARGS says otherwise: it measured -15.8%
  # end to end on an H100, and its LM-head forward there did not finish within this step's limit.
  step cuda_gemm_bench 90 "$scratch/.gemm.log" "${run_env[@]}" \
    "$build/tests/cuda_gemm_bench" "--benchmark_out=$out/cuda_gemm_bench.json" \
    --benchmark_out_format=json ${GEMM_ARGS:---benchmark_filter=-operands:2}
  if [ -s "$out/cuda_gemm_bench.json" ]; then
    python3 - "$out/cuda_gemm_bench.json" <<'PY' && summary[-1]="${summary[-1]}; $(cat "$scratch/.gemm")"
import json, os, re, sys
try:
    runs = json.load(open(sys.argv[1]))["benchmarks"]
except (ValueError, KeyError):
    runs = []  # cut off while writing: no figure to show
names = ["fp32", "bf16 copies", "bf16 in GEMM"]
ms, gelu = {}, {}
for r in runs:
    m = re.search(r"BM_Linear/operands:(\d)/layer:(\d)/pass:(\d)", r["name"])
    if m:
        ms[tuple(int(g) for g in m.groups())] = r["real_time"]
    m = re.search(r"LinearGelu/operands:(\d)/epilogue:(\d)/pass:(\d)", r["name"])
    if m:
        gelu[tuple(int(g) for g in m.groups())] = r["real_time"]
modes = sorted({k[0] for k in ms})  # the operand modes that ran
layers, passes = ["qkv", "fc", "proj", "head"], ["fwd", "dx", "dw"]
parts, total = [], {o: 0.0 for o in modes}
for l in range(4):
    for p in range(3):
        row = [ms.get((o, l, p)) for o in modes]
        if not row or None in row:
            continue
        for o, t in zip(modes, row):
            total[o] += t
        parts.append(f"{layers[l]} {passes[p]} " + "/".join(f"{t:.2f}" for t in row))
for o in range(3):
    for p, what in enumerate(["fc+gelu", "proj dx+gelu'"]):
        if (o, 0, p) in gelu and (o, 1, p) in gelu:
            parts.append(f"{names[o]} {what} kernel/epilogue {gelu[(o, 0, p)]:.2f}/{gelu[(o, 1, p)]:.2f}")
line = ("ms " + "/".join(names[o] for o in modes) + ": " + "; ".join(parts) + "; sum " +
        "/".join(f"{total[o]:.1f}" for o in modes)) if parts else "no results"
print("linear layers:", line)
open(os.path.join(os.environ["SCRATCH"], ".gemm"), "w").write(line)
PY
    rm -f "$scratch/.gemm"
  fi

  # --- 5. GPT-2 ------------------------------------------------------------------------------------
  local left=$((budget - (SECONDS - start) - 15))
  [ "$left" -gt 30 ] || left=30
  # The bf16 options compared end to end on an H100 (flash-mma, now the default; in-GEMM rounding;
  # the GELU epilogue: README) run no more by default; GPT2_ARGS='--also "FLAGS"' adds such a run.
  local extra=()
  eval "extra+=(${GPT2_ARGS:-})" || { echo "device_check: GPT2_ARGS does not parse: $GPT2_ARGS"; return 2; }
  step gpt2_gpu_bench $((left + 10)) "$scratch/.gpt2.log" bash tests/bench/cuda/gpt2_gpu_bench.sh \
    --build "$build" --budget "$left" "${extra[@]}"
  grep -A 12 '^framework ' "$scratch/.gpt2.log" | grep -v '^$' | head -n 12 >"$scratch/.table" || true
  grep '^-- --' "$scratch/.gpt2.log" | cut -c1-160 >>"$scratch/.table" || true
  grep -E '^-- capture (on|at the default)' "$scratch/.gpt2.log" | cut -c1-260 >>"$scratch/.table" || true
  return 0
}

main() {
  checks
  local rc=$?
  [ -z "$unpacked" ] || rm -rf "$unpacked"
  echo
  echo "================ summary ($((SECONDS - start)) s) ================"
  printf '%s\n' "${summary[@]}"
  if [ -s "$scratch/.table" ]; then
    echo "GPT-2 124M:"
    sed 's/^/  /' "$scratch/.table"
  fi
  rm -rf "$scratch"
  if [ "$rc" -eq 2 ]; then
    if [ -n "${missing// /}" ]; then
      echo "device_check: libraries not found (put them on LD_LIBRARY_PATH):$missing exit 2"
    else
      echo "device_check: no GPU ($no_gpu): exit 2"
    fi
    return 2
  fi
  [ "$failed" -eq 0 ] && echo "device_check: every step passed" || echo "device_check: a step failed (above)"
  echo "output in $out: $(cd "$out" && ls | tr '\n' ' ')"
  return "$failed"
}

main 2>&1 | tee "$out/device_check.log"
exit "${PIPESTATUS[0]}"
