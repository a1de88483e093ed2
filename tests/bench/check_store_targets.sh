#!/usr/bin/env bash
# Runs the trace-store benchmarks (tests/bench/store_bench.cpp) and compares them with their
# targets: ingest at least 3 million spans/s; on a 10-million-span run, a whole 16-lane screen at
# 1600 px under 5 ms (the first after opening, and the next ones) and one lane's folded window
# under 20 ms at any zoom.
# Usage: tests/bench/check_store_targets.sh [BUILD_DIR]   (a Release or RelWithDebInfo build)
set -euo pipefail
build="${1:-build}"
bench="$build/tests/pipetune_bench"
[ -x "$bench" ] || { echo "check_store_targets: $bench not built" >&2; exit 2; }
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$bench" --benchmark_filter='BM_Store' --benchmark_repetitions=3 \
  --benchmark_report_aggregates_only=true --benchmark_format=json >"$out" 2>/dev/null
python3 - "$out" <<'PY'
import json, sys
data = json.load(open(sys.argv[1]))
ok = True
for b in data["benchmarks"]:
    if b.get("aggregate_name") != "median":
        continue
    name = b["run_name"]
    if name.startswith("BM_StoreIngest"):
        rate = b["items_per_second"]
        good = rate >= 3e6
        print(f"{name}: {rate/1e6:.2f} M spans/s (target >= 3.00) {'ok' if good else 'BELOW TARGET'}")
    else:
        unit = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]]
        ms = b["real_time"] * unit * 1e3
        target = 5.0 if name.startswith("BM_StoreFoldedScreen") else 20.0
        good = ms < target
        print(f"{name}: {ms:.2f} ms (target < {target:g}) {'ok' if good else 'ABOVE TARGET'}")
    ok &= good
sys.exit(0 if ok else 1)
PY
