#!/usr/bin/env bash
# The GPU checks pending since the last GPU session (docs/gpu.md, "Not yet run on a GPU"), as one
# device call of about 9 minutes: run in the checkout's root on the GPU machine, with the bundles
# of scripts/device_bundle and scripts/device_bundle_mpi carried (build-device, device-libs,
# device-mpi):
#   bash tests/gpu/pending_checks.sh
# It runs tests/gpu/device_check.sh with
#  - the GPU tests but for the parallel-equivalence matrix, which since b6ac2fd load cuBLASLt,
#    CUPTI and NCCL at first use and link the CUDA runtime statically, with the matrix plans added
#    since its last GPU run (Tutel's two-phase all-to-all, per-stage layouts and recomputation,
#    adaptive expert layouts) and one plan of each older kind;
#  - the op tests, NCCL under mpirun -np 1 and 2 processes, the capture bench's off / hub /
#    hub-auto modes, the attention kernels beside PyTorch's fused ones (cuDNN, FlashAttention-2),
#    and the GPT-2 124M bf16 step at batch 64 against PyTorch with its CUPTI capture (the step's
#    breakdown by kernel, issue 49 item 2's "before").
# Each setting can be overridden from the environment as device_check.sh reads it (BUDGET,
# GPU_TESTS_FILTER, SKIP, ...). What comes back ($OUT): device_check.log, results.tgz (the XML,
# JSON and logs) and gpt2_capture-bf16.db.gz (load it with `pipetune report --db`).
set -u
cd "$(dirname "$0")/../.." || exit 2
real="${OUT:-$(mktemp -d /tmp/pending_checks.XXXXXX)}"
mkdir -p "$real" || exit 2
work="$(mktemp -d /tmp/pending_checks_work.XXXXXX)"
echo "== pending_checks: results into $real"
echo "== cudnn: $(ls /usr/local/cuda/lib64 2>/dev/null | grep -c cudnn) files in /usr/local/cuda/lib64; $(python3 -c 'import torch; print(torch.backends.cudnn.version())' 2>&1)"
plans='*2dh*:*stage_*:*adaptive*:*/single:*/pp2_1f1b:*/tp2:*/pp2_dualpipev:*/moe_ep2_dp2:*/tp2_pp2_vocab1:*/pp2_terapipe'
filter="Cuda*:Cupti*:GpuActivityHub*:*/CudaPairStreams.*:*/CuptiCollectorGpu.*:*/GpuActivityHubGpu.*"
IFS=: read -r -a plan_list <<<"$plans"
for p in "${plan_list[@]}"; do filter="$filter:Plans/CudaTraining.$p"; done
OUT="$work" BUDGET=${BUDGET:-500} GPU_TESTS_CAP=${GPU_TESTS_CAP:-170} GPU_TESTS_FILTER="${GPU_TESTS_FILTER:-$filter}" \
  SKIP="${SKIP-pair_streams_bench cuda_gemm_bench}" CAPTURE_REPS=${CAPTURE_REPS:-2} \
  CAPTURE_ARGS="${CAPTURE_ARGS:---benchmark_filter=:(0|7|13)/layers:12}" \
  NCCL_HOSTS_NP="${NCCL_HOSTS_NP-2}" \
  GPT2_ARGS="${GPT2_ARGS:---precisions bf16 --batches 64 --steps 5 --torch-steps 4 --no-pp}" \
  bash tests/gpu/device_check.sh
rc=$?
cp "$work/device_check.log" "$real/" 2>/dev/null
for f in "$work"/gpt2_capture-bf16.db.gz; do [ -f "$f" ] && cp "$f" "$real/"; done
tar czf "$real/results.tgz" -C "$work" --exclude='*.db.gz' . 2>/dev/null
ls -la "$real"
exit $rc
