#!/usr/bin/env bash
# Runs the trace-store benchmarks (tests/bench/store_bench.cpp) and compares them with their
# targets: ingest at least 1 million spans/s; a folded window query on a 10-million-span run
# under 20 ms (one lane at any zoom, and a whole 16-lane screen at 1600 px).
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
        good = rate >= 1e6
        print(f"{name}: {rate/1e6:.2f} M spans/s (target >= 1.00) {'ok' if good else 'BELOW TARGET'}")
    else:
        unit = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9}[b["time_unit"]]
        ms = b["real_time"] * unit * 1e3
        good = ms < 20.0
        print(f"{name}: {ms:.2f} ms (target < 20) {'ok' if good else 'ABOVE TARGET'}")
    ok &= good
sys.exit(0 if ok else 1)
PY
