#!/usr/bin/env bash
# Runs the test suite under the sanitizers : an ASan+UBSan build of every
# fast test (and the MPI tests), and a TSan build of the multi-threaded parts (the engine's and
# the store's tests, and the MPI tests), each in its own build folder (build-asan, build-tsan). Prints one summary line per build and exits 1 when either fails.
#
# Usage: tests/sanitizers/run.sh [asan|tsan]...   (default: both)
# Do not edit sources while it builds: objects compiled before and after a header change end up in
# one binary and the sanitizers then report the mismatch, not a bug.
# CI runs neither (two more full builds do not fit CI's 2 cores within its time); run it before
# calling a concurrency change done.
set -uo pipefail
cd "$(dirname "$0")/../.."

jobs=${JOBS:-2}
wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=(asan tsan)
status=0
summary=()

run_build() {  # name, sanitizers, ctest arguments...
  local name=$1 san=$2
  shift 2
  local dir="build-$name" start
  start=$(date +%s)
  mkdir -p "$dir"  # its logs live inside it (git ignores build folders)
  if ! cmake -S . -B "$dir" -DPIPETUNE_SANITIZE="$san" -DPIPETUNE_GUI=OFF -DPIPETUNE_BENCH=OFF \
      >"$dir/sanitizers.configure.log" 2>&1; then
    summary+=("$name: configure failed (see $dir/sanitizers.configure.log)")
    status=1
    return
  fi
  if ! cmake --build "$dir" -j"$jobs" >"$dir/sanitizers.build.log" 2>&1; then
    summary+=("$name: build failed (see $dir/sanitizers.build.log)")
    status=1
    return
  fi
  local log="$dir/sanitizers.test.log" rc=0 line
  if [ "$1" = "--executables" ]; then  # gtest executables run directly, then ctest's MPI tests
    shift
    : >"$log"
    for exe in "$@"; do
      "$dir/tests/$exe" >>"$log" 2>&1 || rc=1
    done
    ctest --test-dir "$dir" -L mpi --output-on-failure >>"$log" 2>&1 || rc=1
    line="$(grep -cE '^\[  PASSED  \]' "$log") executables passed, $(grep -cE '^\[  FAILED  \] [0-9]+ test' "$log") failed; $(grep -E 'tests passed|tests failed' "$log" | tail -1)"
  else
    ctest --test-dir "$dir" -j"$jobs" --output-on-failure "$@" >"$log" 2>&1 || rc=1
    line=$(grep -E "tests passed|tests failed" "$log" | tail -1)
  fi
  summary+=("$name ($san): ${line:-no ctest summary} in $(( $(date +%s) - start )) s (log: $log)")
  [ $rc -ne 0 ] && status=1
}

for w in "${wanted[@]}"; do
  case "$w" in
    asan) run_build asan "address;undefined" -L "fast|mpi" ;;
    # TSan: the multi-threaded parts (engine ranks, the store's writer thread, MPI routers).
    tsan) run_build tsan thread --executables engine_fast_tests db_fast_tests ;;
    *)
      echo "tests/sanitizers/run.sh: unknown build '$w' (asan, tsan)" >&2
      exit 2
      ;;
  esac
done
printf '%s\n' "${summary[@]}"
exit $status
