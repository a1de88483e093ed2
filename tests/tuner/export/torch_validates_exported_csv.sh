#!/usr/bin/env bash
# The schedule CSVs the torchtitan export writes (pipetune_schedule.csv, for the schedules torch
# has no class for: zb-h1, zb-h2, zb-v, v-half, v-min) pass torch.distributed.pipelining's own
# checks: _validate_schedule, the lowering _PipelineScheduleRuntime runs when it loads a
# compute-only CSV, and its simulation (check_pipelining_csv_with_torch.py beside this file).
#   torch_validates_exported_csv.sh PIPETUNE
# For each schedule, a search for llama3-8b on 8 H100s, and for each pipeline degree the search
# found for that schedule, its best plan exported with --format torchtitan-toml into a folder of
# its own. The pipeline degree, stage count (pp x chunks) and micro-batch count come from the
# search's JSON, and must agree with the exported TOML (pipeline_parallel_degree,
# local_batch_size / pipeline_parallel_microbatch_size, which is how torchtitan counts
# micro-batches) and with the CSV itself (one row per rank, stage and micro-batch ids from 0).
# Python: $PIPETUNE_PYTHON, else python3. Exits 77 (skipped) with one line "SKIP: <reason>" when
# there is no python3 or it has no torch with _validate_schedule; after the exports, so that
# those are checked even then. Exits 1 when an export or a check fails.
set -uo pipefail
pipetune="${1:?usage: torch_validates_exported_csv.sh PIPETUNE}"
here="$(cd "$(dirname "$0")" && pwd)"
python="${PIPETUNE_PYTHON:-python3}"
if ! command -v "$python" >/dev/null 2>&1; then
  echo "SKIP: no python3"
  exit 77
fi
if [ ! -x "$pipetune" ]; then
  echo "FAIL: no pipetune binary at $pipetune"
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
fail() {
  echo "FAIL $*"
  failures=$((failures + 1))
}

# toml_value FILE KEY: the value of a top-level `KEY = VALUE` line, quotes removed.
toml_value() {
  sed -n "s/^$2 = \"\{0,1\}\([^\"]*\)\"\{0,1\}\$/\1/p" "$1" | head -n 1
}

# csv_shape FILE: "ROWS STAGES MAX_STAGE+1 MAX_MICROBATCH+1" over its <stage><F|I|W|B><mb> cells
# (what is not such a cell is left to torch's parser to report).
csv_shape() {
  awk -F, 'BEGIN { ms = -1; mm = -1 }
    { rows++
      for (i = 1; i <= NF; i++) {
        c = $i; gsub(/^[ \t]+|[ \t\r]+$/, "", c)
        if (c !~ /^[0-9]+[FIWB][0-9]+$/) continue
        match(c, /[FIWB]/)
        s = substr(c, 1, RSTART - 1) + 0; m = substr(c, RSTART + 1) + 0
        seen[s] = 1; if (s > ms) ms = s; if (m > mm) mm = m
      } }
    END { n = 0; for (s in seen) n++; print rows + 0, n, ms + 1, mm + 1 }' "$1"
}

checks=()
for schedule in zb-h1 zb-h2 zb-v v-half v-min; do
  db="$work/$schedule.db"
  if ! "$pipetune" tune --model llama3-8b --hardware h100-sxm --gpus 8 --global-batch 64 \
    --schedules "$schedule" --vocab-modes none --no-sparse-embedding --db "$db" --top 100 --json \
    >"$work/$schedule.json" 2>"$work/err"; then
    fail "$schedule: pipetune tune failed: $(head -c 500 "$work/err")"
    continue
  fi
  # The best result (its rank, from 1) for each pipeline degree above 1 that runs $schedule:
  # "RANK PP CHUNKS MICROBATCHES" lines.
  if ! picks="$("$python" - "$work/$schedule.json" "$schedule" 2>"$work/err" <<'EOF'
import json, sys
results = json.load(open(sys.argv[1]))["results"]
seen = set()
for rank, result in enumerate(results, 1):
    plan = result["plan"]
    if plan["schedule"] == sys.argv[2] and plan["pp"] > 1 and plan["pp"] not in seen:
        seen.add(plan["pp"])
        print(rank, plan["pp"], plan["chunks"], plan["microbatches"])
EOF
  )"; then
    fail "$schedule: reading the search's JSON failed: $(head -c 500 "$work/err")"
    continue
  fi
  if [ -z "$picks" ]; then
    fail "$schedule: the search found no $schedule plan with pp > 1"
    continue
  fi
  while read -r rank pp chunks microbatches; do
    what="$schedule pp=$pp (search result $rank)"
    dir="$work/$schedule-pp$pp"
    mkdir -p "$dir"
    if ! "$pipetune" export --format torchtitan-toml --db "$db" --rank "$rank" \
      -o "$dir/job.toml" >/dev/null 2>"$work/err"; then
      fail "$what: pipetune export failed: $(head -c 500 "$work/err")"
      continue
    fi
    csv="$dir/pipetune_schedule.csv"
    if [ ! -s "$csv" ]; then
      fail "$what: the export wrote no pipetune_schedule.csv beside job.toml"
      continue
    fi
    stages=$((pp * chunks))
    toml="$dir/job.toml"
    toml_pp="$(toml_value "$toml" pipeline_parallel_degree)"
    local_batch="$(toml_value "$toml" local_batch_size)"
    mbs="$(toml_value "$toml" pipeline_parallel_microbatch_size)"
    toml_csv="$(toml_value "$toml" pipeline_parallel_schedule_csv)"
    toml_microbatches=""
    if [[ "$local_batch" =~ ^[0-9]+$ && "$mbs" =~ ^[1-9][0-9]*$ ]] &&
      [ $((local_batch % mbs)) -eq 0 ]; then
      toml_microbatches=$((local_batch / mbs))
    fi
    read -r rows distinct stage_ids microbatch_ids < <(csv_shape "$csv")
    problems=()
    grep -q "^# pipetune_schedule.csv: pipetune's $schedule order" "$toml" ||
      problems+=("job.toml does not say the CSV is pipetune's $schedule order")
    [ "$toml_csv" = pipetune_schedule.csv ] ||
      problems+=("pipeline_parallel_schedule_csv is '$toml_csv'")
    [ "$toml_pp" = "$pp" ] || problems+=("pipeline_parallel_degree is '$toml_pp', the plan's pp $pp")
    [ "$toml_microbatches" = "$microbatches" ] ||
      problems+=("local_batch_size $local_batch / pipeline_parallel_microbatch_size $mbs is not the plan's $microbatches micro-batches")
    [ "$rows" = "$pp" ] || problems+=("the CSV has $rows rows, not $pp")
    [ "$distinct" = "$stages" ] && [ "$stage_ids" = "$stages" ] ||
      problems+=("the CSV has $distinct stages with ids up to $((stage_ids - 1)), not $stages (pp $pp x $chunks chunks)")
    [ "$microbatch_ids" = "$microbatches" ] ||
      problems+=("the CSV's micro-batch ids go up to $((microbatch_ids - 1)), not $((microbatches - 1))")
    if [ ${#problems[@]} -gt 0 ]; then
      fail "$what: $(printf '%s; ' "${problems[@]}" | sed 's/; $//')"
      continue
    fi
    echo "exported $what: $pp ranks, $stages stages, $microbatches micro-batches"
    checks+=(--schedule "$csv" "$pp" "$stages" "$microbatches")
  done <<<"$picks"
done

rc=0
if [ ${#checks[@]} -gt 0 ]; then
  "$python" "$here/check_pipelining_csv_with_torch.py" "${checks[@]}"
  rc=$?
fi
if [ "$failures" -gt 0 ]; then
  echo "$failures export check(s) failed"
  exit 1
fi
exit "$rc"
