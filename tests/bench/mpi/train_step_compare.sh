#!/usr/bin/env bash
# The training step with 2 ranks as processes (mpirun, MPI communicator) against 2 ranks as
# threads (thread communicator), for the tiny model and GPT-2-small (sequence 256), pp=2 and
# dp=2, one thread per rank: steady tokens/s of each. Then the tiny model's
# 4 ranks (pp=2 dp=2) as 4 threads, 4 processes, and 2 processes x 2 rank threads (hybrid).
# Usage: tests/bench/mpi/train_step_compare.sh [BUILD_DIR] [STEPS]
set -euo pipefail
build="${1:-build}"
steps="${2:-6}"
here="$(cd "$(dirname "$0")/.." && pwd)"
pipetune="$build/cli/pipetune"
[ -x "$pipetune" ] || { echo "train_step_compare: $pipetune not built" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tokens() { tr -d ' \n' | grep -o '"tokens_per_s":[0-9.e+]*' | tail -1 | cut -d: -f2; }  # the run's, after the steps'
printf "%-14s %-6s %14s %14s\n" model plan "threads tok/s" "processes tok/s"
for model in tiny "$here/gpt2-small-256.toml"; do
  name="$(basename "$model" .toml)"
  for plan in "--pp 2 --dp 1" "--pp 1 --dp 2"; do
    # shellcheck disable=SC2086
    t="$("$pipetune" train --model "$model" --tp 1 $plan --steps "$steps" --threads 1 --no-db \
      --json | tokens)"
    # shellcheck disable=SC2086
    p="$(mpirun --oversubscribe -np 2 "$pipetune" train --model "$model" --tp 1 $plan \
      --steps "$steps" --threads 1 --no-db --json | tokens)"
    printf "%-14s %-6s %14.0f %14.0f\n" "$name" "$(echo "$plan" | awk '{print ($2 == 2 ? "pp=2" : "dp=2")}')" "$t" "$p"
  done
done

printf "\n%-14s %-10s %14s %16s %16s\n" model plan "4 threads" "4 processes" "2 x 2 (hybrid)"
run4() {  # run4 EXTRA_TRAIN_OPTIONS LAUNCH...
  local extra="$1"
  shift
  # shellcheck disable=SC2086
  "$@" train --model tiny --tp 1 --pp 2 --dp 2 --steps "$steps" --threads 1 --no-db --json \
    $extra | tokens
}
t="$(run4 "" "$pipetune")"
p="$(run4 "" mpirun --oversubscribe -np 4 "$pipetune")"
h="$(run4 "--ranks-per-process 2" mpirun --oversubscribe -np 2 "$pipetune")"
printf "%-14s %-10s %14.0f %16.0f %16.0f\n" tiny "pp=2 dp=2" "$t" "$p" "$h"
