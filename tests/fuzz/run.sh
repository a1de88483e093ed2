#!/usr/bin/env bash
# Builds the libFuzzer targets (clang, ASan + UBSan) in build-fuzz/ and fuzzes each in turn.
#   tests/fuzz/run.sh [--seconds N | --runs N] [TARGET...]
#     --seconds N  fuzz each target N seconds (default 60)
#     --runs N     or N executions each
#     TARGET       spec_toml, plan_schedule, workspace_read, nsys_import, chrome_import,
#                  checkpoint_read (default all: tests/fuzz/*_fuzz.cpp)
# Each target starts from a working corpus in build-fuzz/fuzz/<target>/corpus, seeded from
# tests/fuzz/corpus/<target> and regressions/<target> (the checked-in seeds are never written),
# runs one process (-jobs=1 is the same) with -timeout=10 -rss_limit_mb=2048, and keeps what it
# finds in build-fuzz/fuzz/<target>/artifacts. Prints executions and executions/s per target;
# exits 1 when any target found a crash, timeout, leak or out-of-memory input, naming the file
# and how to keep it as a regression test.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$(pwd)"
build="$root/build-fuzz"

limit=(-max_total_time=60)
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) limit=(-max_total_time="${2:?--seconds needs a number}"); shift 2 ;;
    --runs) limit=(-runs="${2:?--runs needs a number}"); shift 2 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "tests/fuzz/run.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  for src in tests/fuzz/*_fuzz.cpp; do
    name="$(basename "$src" .cpp)"
    targets+=("${name%_fuzz}")
  done
fi
for t in "${targets[@]}"; do
  if [ ! -f "tests/fuzz/${t}_fuzz.cpp" ]; then
    echo "tests/fuzz/run.sh: no target '$t' (tests/fuzz/${t}_fuzz.cpp)" >&2
    exit 2
  fi
done

if ! command -v clang++ >/dev/null; then
  echo "tests/fuzz/run.sh: clang++ not found: install clang libfuzzer-14-dev (scripts/setup)" >&2
  exit 2
fi
mkdir -p "$build"
CXX=clang++ cmake -S "$root" -B "$build" -DPIPETUNE_FUZZ=ON -DPIPETUNE_GUI=OFF \
  -DPIPETUNE_BENCH=OFF -DPIPETUNE_MPI=OFF -DPIPETUNE_CUDA=OFF >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log" >&2; exit 1; }
build_targets=()
for t in "${targets[@]}"; do build_targets+=(--target "fuzz_$t"); done
cmake --build "$build" -j2 "${build_targets[@]}"

found=()
summary=()
for t in "${targets[@]}"; do
  work="$build/fuzz/$t"
  mkdir -p "$work/corpus" "$work/artifacts"
  for seeds in "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t"; do
    [ -d "$seeds" ] && find "$seeds" -type f ! -name '.*' -exec cp -n {} "$work/corpus/" \;
  done
  before="$(ls "$work/artifacts" | wc -l)"
  echo "== fuzz_$t ${limit[*]}"
  rc=0
  "$build/tests/fuzz/fuzz_$t" "$work/corpus" -timeout=10 -rss_limit_mb=2048 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 "${limit[@]}" \
    >"$work/log.txt" 2>&1 || rc=$?
  runs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log.txt" | tail -1)"
  speed="$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log.txt" | tail -1)"
  line="$(printf '%-16s %12s executions %8s exec/s' "$t" "${runs:-?}" "${speed:-?}")"
  after="$(ls "$work/artifacts" | wc -l)"
  if [ "$rc" -ne 0 ] || [ "$after" -gt "$before" ]; then
    artifact="$(ls -t "$work/artifacts" | head -1)"
    line="$line   FOUND ${artifact:-a failure (exit $rc)}"
    found+=("$t:$work/artifacts/$artifact")
    grep -E -m 12 'ERROR|SUMMARY|fuzz: escaped|Test unit written|runtime error' "$work/log.txt" >&2 || true
  fi
  echo "$line"
  summary+=("$line")
done

echo
echo "fuzzing summary (${limit[*]}, build-fuzz/fuzz/<target>/log.txt):"
printf '  %s\n' "${summary[@]}"
if [ ${#found[@]} -gt 0 ]; then
  echo
  echo "failing inputs:"
  for f in "${found[@]}"; do
    t="${f%%:*}"
    a="${f#*:}"
    echo "  $t: $a"
    echo "    reproduce: build-fuzz/tests/fuzz/fuzz_$t $a"
    echo "    minimise:  build-fuzz/tests/fuzz/fuzz_$t -minimize_crash=1 -runs=100000 -exact_artifact_path=$a.min $a"
    echo "    keep it:   cp $a.min tests/fuzz/regressions/$t/<what-it-is> (ctest replays it in every build)"
  done
  exit 1
fi
