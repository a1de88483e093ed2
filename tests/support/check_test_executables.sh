#!/usr/bin/env bash
# Fails when the build lacks a test executable that the source tree and this configuration imply,
# so a part that configure quietly dropped cannot pass as a shorter, green test run.
#   check_test_executables.sh SOURCE_DIR BUILD_DIR gui=ON|OFF cuda=AUTO|ON|OFF bench=ON|OFF
#                             mpi=ON|OFF
# Expected, derived from the tree rather than from CMake's logic:
#   tests/<folder>/**/*_test.cpp       -> <folder>_fast_tests
#   tests/<folder>/**/*_slow_test.cpp  -> <folder>_slow_tests
#   tests/gui/**                       -> only when gui=ON
#   tests/gpu/*.cu                     -> gpu_tests, when nvcc is on this machine and cuda != OFF
#   tests/cuda/**/*_test.cpp           -> cuda_fast_tests, on the same condition
#   tests/mpi/*.cpp                    -> mpi_tests (run under mpirun), when mpi=ON
#   tests/bench/*.cpp                  -> pipetune_bench, when bench=ON
#   tests/bench/gui/*.cpp              -> gui_bench, when bench=ON and gui=ON
#   tests/bench/gui/frame/*.cpp        -> timeline_frame_bench, when bench=ON and gui=ON
#   tests/bench/mpi/*.cpp              -> mpi_comm_bench, when bench=ON and mpi=ON
# Under CI=true an opted-out part is itself a failure: CI must build everything.
set -euo pipefail
src="$1"
bin="$2"
shift 2
declare -A opt=([gui]=ON [cuda]=AUTO [bench]=ON [mpi]=ON)
for kv in "$@"; do opt["${kv%%=*}"]="${kv#*=}"; done

if [ "${CI:-}" = "true" ]; then
  for part in gui bench mpi; do
    if [ "${opt[$part]}" = "OFF" ]; then
      echo "FAIL: CI=true but the configuration opts out of '$part' (-DPIPETUNE_${part^^}=OFF)"
      exit 1
    fi
  done
fi

expected=()
for dir in "$src"/tests/*/; do
  folder="$(basename "$dir")"
  case "$folder" in support | bench | gpu | mpi | cuda) continue ;; esac
  if [ "$folder" = gui ] && [ "${opt[gui]}" = OFF ]; then continue; fi
  if find "$dir" -name '*_test.cpp' ! -name '*_slow_test.cpp' | grep -q .; then
    expected+=("${folder}_fast_tests")
  fi
  if find "$dir" -name '*_slow_test.cpp' | grep -q .; then
    expected+=("${folder}_slow_tests")
  fi
done
if [ "${opt[cuda]}" != OFF ]; then
  if command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || [ -n "${CUDACXX:-}" ]; then
    ls "$src"/tests/gpu/*.cu >/dev/null 2>&1 && expected+=(gpu_tests)
    find "$src/tests/cuda" -name '*_test.cpp' 2>/dev/null | grep -q . && expected+=(cuda_fast_tests)
  fi
fi
if [ "${opt[mpi]}" != OFF ] && ls "$src"/tests/mpi/*.cpp >/dev/null 2>&1; then
  expected+=(mpi_tests)
fi
if [ "${opt[bench]}" != OFF ] && ls "$src"/tests/bench/*.cpp >/dev/null 2>&1; then
  expected+=(pipetune_bench)
  if [ "${opt[gui]}" != OFF ] && ls "$src"/tests/bench/gui/*.cpp >/dev/null 2>&1; then
    expected+=(gui_bench)
  fi
  if [ "${opt[gui]}" != OFF ] && ls "$src"/tests/bench/gui/frame/*.cpp >/dev/null 2>&1; then
    expected+=(timeline_frame_bench)
  fi
  if [ "${opt[mpi]}" != OFF ] && ls "$src"/tests/bench/mpi/*.cpp >/dev/null 2>&1; then
    expected+=(mpi_comm_bench)
  fi
fi

missing=0
for exe in "${expected[@]}"; do
  if [ ! -x "$bin/tests/$exe" ]; then
    echo "FAIL: test executable $exe is missing from $bin/tests (the tree and configuration imply it)"
    missing=$((missing + 1))
  fi
done
echo "${#expected[@]} test executables expected, $((${#expected[@]} - missing)) present: ${expected[*]}"
[ "$missing" -eq 0 ]
