#!/usr/bin/env bash
# Runs the simulator benchmarks and compares them with their targets:
# generate + simulate at >= 10 million ops/s on one core (1f1b p=64 m=1024, v-half p=32 m=512).
# Usage: tests/bench/check_targets.sh [BUILD_DIR]   (a Release or RelWithDebInfo build)
set -euo pipefail
build="${1:-build}"
bench="$build/tests/pipetune_bench"
[ -x "$bench" ] || { echo "check_targets: $bench not built" >&2; exit 2; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
taskset -c 0 "$bench" --benchmark_filter='GenerateSimulate_(1F1B_p64_m1024|VHalf_p32_m512)$' \
  --benchmark_repetitions=3 --benchmark_report_aggregates_only=true \
  --benchmark_format=json >"$out" 2>/dev/null || "$bench" --benchmark_format=json \
  --benchmark_filter='GenerateSimulate_(1F1B_p64_m1024|VHalf_p32_m512)$' >"$out"
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
target = 10e6
ok = True
for b in data["benchmarks"]:
    if b.get("aggregate_name", "median") != "median":
        continue
    rate = b["items_per_second"]
    status = "ok" if rate >= target else "BELOW TARGET"
    ok &= rate >= target
    print(f"{b['name']}: {rate/1e6:.1f} M ops/s (target {target/1e6:.0f} M) {status}")
sys.exit(0 if ok else 1)
PY
