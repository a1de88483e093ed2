#!/usr/bin/env bash
# Hostile inputs through the CLI, counted: every numeric option of every command given values no
# plan takes (0 where 0 means nothing, negatives, nan, inf, 1e308, beyond int64, words, empty),
# every path option given what is not the file it wants (a directory, a FIFO, a device, a
# dangling link, a missing folder, an empty name, a SQLite URI), and stored runs compared with
# unlike ones. Each case runs in a scratch folder with a prepared workspace, under a timeout.
#
#   tests/cli/hostile_sweep.sh [--bin build/cli/pipetune] [--timeout 60] [--list]
#
# A case is refused cleanly when it exits 1 or 2 with one line on stderr and no sanitizer or
# terminate report; a crash is a signal (or exit >= 128); a hang is the timeout. A case that
# should be refused but exits 0 is a wrong answer. After the cases, the prepared runs, files and
# special files are checked to be as they were (data lost otherwise). Prints the counts and each
# case that is not a clean refusal; exits 1 when any crash, hang, wrong answer or loss is found.
set -uo pipefail
cd "$(dirname "$0")/../.."
bin="$(pwd)/build/cli/pipetune"
limit=60
list_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$(realpath "${2:?--bin needs a path}")"; shift 2 ;;
    --timeout) limit="${2:?--timeout needs seconds}"; shift 2 ;;
    --list) list_only=1; shift ;;
    -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "hostile_sweep.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "hostile_sweep.sh: no pipetune binary at $bin" >&2; exit 2; }

scratch="$(mktemp -d /tmp/pipetune_sweep_XXXXXX)"
trap 'rm -rf "$scratch"' EXIT
cd "$scratch"

# --- the prepared workspace and files --------------------------------------------------------
setup() {
  "$bin" "$@" >/dev/null 2>"$scratch/setup.err" || {
    echo "hostile_sweep.sh: setup failed: pipetune $*" >&2
    cat "$scratch/setup.err" >&2
    exit 1
  }
}
setup train --steps 3 --name measured --db w.db
setup simulate --schedule 1f1b --stages 4 --microbatches 8 --name costunits --db w.db
setup simulate --config default --name seconds --db w.db
setup tune --model tiny --hardware h100-sxm --gpus 8 --global-batch 64 --db w.db
setup export-trace 1 -o measured.json --db w.db
setup import-trace measured.json --name reimported --db w.db
mkdir adir nonempty
echo x >nonempty/file
echo keep >regular.txt
mkfifo fifo
mknod chardev c 1 3 2>/dev/null || ln -s /dev/null chardev  # a device of our own, not /dev/null
ln -s regular.txt link_to_file
ln -s adir link_to_dir
ln -s missing_target dangling
printf 'layers = 2\nhidden = 64\nheads = 4\nvocab = 1\nseq_len = 32\n' >one_token.toml
printf '\xff\xfe{"traceEvents": [' >bad.json
runs_before="$("$bin" runs --db w.db --json 2>/dev/null | tr -d ' \n')"

# --- the cases -------------------------------------------------------------------------------
# Each case: "want|arg1|arg2|..."; want = err (must be refused) or any (either is right).
cases=()
# (A last field of '.' keeps a trailing empty argument: read drops an empty last field.)
add() { local IFS='|'; cases+=("$*|."); }

numeric_bad=(-1 nan inf -inf 1e308 99999999999999999999 abc "" 2.5x)
with_zero=(0 "${numeric_bad[@]}")

# Options whose 0 means something (off, auto, all, the terminal's width, the default seed; a
# simulated op kind of no cost: every cost but --cost-f, the time base, may be 0).
zero_means_something=" --max-candidates --threads --width --seed --watchdog --checkpoint-every --device-cache-mib \
  --gpu-capture-every --keep --zero --comm --cost-b --cost-w --cost-s --cost-t --cost-barrier --train-iters \
  --ep --search --devices --rank "

base_simulate=(simulate --schedule interleaved-1f1b --stages 4 --microbatches 8 --chunks 2 --no-db)
base_train=(train --steps 1 --no-db)
base_predict=(predict --model tiny --hardware h100-sxm --gpus 8 --global-batch 64 --tp 1 --pp 2)
base_tune=(tune --model tiny --hardware h100-sxm --gpus 8 --global-batch 64 --no-db)

# Limits where a count past int64 is "no limit" (saturated), as 0 is; and real numbers for
# which 1e20 is a value like any other (a learning rate that large trains one step, then the run
# fails naming the non-finite loss).
no_limit_when_huge=" --max-candidates --keep --lr "

numeric_cases() {
  local flag="$1"
  shift
  local values=("${with_zero[@]}")
  [[ "$zero_means_something" == *" $flag "* ]] && values=("${numeric_bad[@]}")
  local v
  for v in "${values[@]}"; do
    if [ "$v" = 99999999999999999999 ] && [[ "$no_limit_when_huge" == *" $flag "* ]]; then
      add any "$@" "$flag" "$v"
    else
      add err "$@" "$flag" "$v"
    fi
  done
}
for f in --stages --microbatches --chunks --group-size --cost-f --cost-b --cost-w --cost-s \
  --cost-t --comm --cost-barrier --memory-limit --width; do
  numeric_cases "$f" "${base_simulate[@]}"
done
for f in --tp --pp --dp --ep --chunks --microbatches --micro-batch-size --zero --steps --seed \
  --lr --checkpoint-every --threads --watchdog --ranks-per-process --device-cache-mib; do
  numeric_cases "$f" "${base_train[@]}"
done
for f in --gpus --nodes-of --global-batch --seq --tp --pp --dp --ep --chunks --micro-batch-size \
  --zero; do
  numeric_cases "$f" "${base_predict[@]}"
done
for f in --gpus --nodes-of --global-batch --seq --max-candidates --top --keep --threads; do
  numeric_cases "$f" "${base_tune[@]}"
done
for f in --iteration; do numeric_cases "$f" report 1 --db w.db; done
for f in --iteration --width; do numeric_cases "$f" timeline 1 --db w.db; done
for f in --iteration-a --iteration-b; do numeric_cases "$f" diff 1 3 --db w.db; done
for f in --rank --search --train-iters; do
  numeric_cases "$f" export --format megatron -o out.sh --force --db w.db
done

# Words where a name from a list is wanted.
for v in "" zzz "1f1b,1f1b" "ZB-V" "1f1b " $'1f1b\t'; do
  add err "${base_simulate[@]}" --schedule "$v"
  add err "${base_train[@]}" --schedule "$v"
done
for v in "" zzz vocab; do
  add err "${base_simulate[@]}" --vocab "$v"
  add err "${base_train[@]}" --vocab "$v"
done
for v in "" zzz; do
  add err "${base_train[@]}" --recompute "$v"
  add err "${base_train[@]}" --backend "$v"
  add err "${base_train[@]}" --precision "$v"
  add err "${base_tune[@]}" --schedules "$v"
  add err "${base_tune[@]}" --vocab-modes "$v"
  add err export --format "$v" -o out.x --force --db w.db
done
for v in "rank=0,rank=1" "rank=99" "step=99" "kind=zzz" "rank=0,step=-1" "=" ""; do
  add err train --steps 2 --no-db --fault "$v"
done

# Files that are not what is wanted, for every input path.
for v in "" adir fifo /dev/zero dangling missing.toml bad.json nonempty; do
  add err "${base_train[@]}" --model "$v"
  add err "${base_train[@]}" --config "$v"
  add err "${base_predict[@]}" --model "$v"
  add err simulate --config "$v" --no-db
  add err import-trace "$v" --db w.db
  add err import-nsys "$v" --db w.db
  add err train --steps 1 --no-db --resume "$v"
  add err train --steps 1 --no-db --data "$v"
done
add err "${base_predict[@]}" --model one_token.toml
add err "${base_tune[@]/tiny/one_token.toml}"

# Output paths that are not a regular file, with and without --force; missing folders.
for v in "" adir fifo chardev dangling/x nodir/x.json link_to_dir; do
  for force in "" --force; do
    add err train --steps 1 --no-db --trace "$v" $force
    add err "${base_simulate[@]}" --trace "$v" $force
    add err export-trace 1 -o "$v" $force --db w.db
    add err export --format megatron -o "$v" $force --db w.db
    add err calibrate --hardware h100-sxm --runs 1 -o "$v" $force --db w.db
  done
done
for v in "" nodir/sub/ck regular.txt nonempty fifo; do
  add err train --steps 1 --no-db --checkpoint "$v"
done
add any train --steps 1 --no-db --trace link_to_file --force

# Workspaces that are not a workspace file.
for v in "" adir fifo regular.txt bad.json "file:uri.db" "file:x?mode=memory" nodir/w.db \
  /dev/zero; do
  add err runs --db "$v"
  add err report 1 --db "$v"
done

# Stored runs that do not exist, and comparisons of unlike runs.
for v in 0 -1 999 "" zzz 1e3 "1 "; do
  add err report "$v" --db w.db
  add err timeline "$v" --db w.db
  add err export-trace "$v" -o x.json --force --db w.db
done
add err diff 1 2 --db w.db
add err diff 2 1 --db w.db
add err predict --model llama3-8b --hardware h100-sxm --gpus 8 --global-batch 16 --tp 2 --pp 4 \
  --against 1 --db w.db
add err calibrate --hardware h100-sxm --runs 2 --db w.db
add err calibrate --hardware h100-sxm --runs 1,1,1 --db w.db
add err "${base_tune[@]}" --schedules zb-v --vocab-modes vocab-1

# Names that cannot be stored as text.
for v in $'\xff\xfe' $'a\x1b[31mred' $'two\tcolumns' $'\r' ""; do
  add err simulate --schedule 1f1b --stages 2 --microbatches 2 --db w.db --name "$v"
done

if [ "$list_only" = 1 ]; then
  printf '%s\n' "${cases[@]%|.}"
  exit 0
fi

# --- running them ----------------------------------------------------------------------------
tried=0 clean=0 accepted=0 crashes=0 hangs=0 wrong=0 unclean=0
report=()
for c in "${cases[@]}"; do
  IFS='|' read -r -a parts <<<"$c"
  want="${parts[0]}"
  args=("${parts[@]:1:${#parts[@]}-2}")
  tried=$((tried + 1))
  timeout -s KILL "$limit" "$bin" "${args[@]}" </dev/null >out.txt 2>err.txt
  rc=$?
  lines=$(wc -l <err.txt)
  shown="$(printf '%q ' "${args[@]}")"
  if [ $rc -eq 137 ]; then
    hangs=$((hangs + 1))
    report+=("HANG    pipetune $shown")
  elif [ $rc -ge 128 ] || grep -qE 'Sanitizer|terminate called|Segmentation|Aborted' err.txt; then
    crashes=$((crashes + 1))
    report+=("CRASH   pipetune $shown(exit $rc): $(head -c 300 err.txt)")
  elif [ $rc -eq 0 ]; then
    accepted=$((accepted + 1))
    if [ "$want" = err ]; then
      wrong=$((wrong + 1))
      report+=("ACCEPTED pipetune $shown")
    fi
  elif [ "$lines" -eq 1 ]; then
    clean=$((clean + 1))
  else
    unclean=$((unclean + 1))
    report+=("UNCLEAN pipetune $shown(exit $rc, $lines lines): $(head -c 300 err.txt)")
  fi
  # A case must not remove or rewrite what it was not asked to write.
  [ -c chardev ] || [ -L chardev ] || { report+=("LOST    chardev replaced by: pipetune $shown");
    rm -rf chardev; mknod chardev c 1 3; }
  [ -p fifo ] || { report+=("LOST    fifo replaced by: pipetune $shown"); rm -rf fifo; mkfifo fifo; }
  [ -d adir ] || { report+=("LOST    adir replaced by: pipetune $shown"); rm -rf adir; mkdir adir; }
  [ -L link_to_file ] || { report+=("LOST    link_to_file replaced by: pipetune $shown");
    rm -f link_to_file; ln -s regular.txt link_to_file; }
  [ -L link_to_dir ] || { report+=("LOST    link_to_dir replaced by: pipetune $shown");
    rm -f link_to_dir; ln -s adir link_to_dir; }
  [ "$(cat regular.txt 2>/dev/null)" = keep ] || [ "$(cat regular.txt 2>/dev/null | head -c 1)" = "{" ] ||
    report+=("LOST    regular.txt changed by: pipetune $shown")
  echo keep >regular.txt
done

lost=0
runs_after="$("$bin" runs --db w.db --json 2>/dev/null | tr -d ' \n')"
if [ -z "$runs_after" ]; then
  wrong=$((wrong + 1))
  report+=("BROKEN  pipetune runs --db w.db --json fails after the cases: $("$bin" runs --db w.db --json 2>&1 >/dev/null | head -c 200)")
  runs_after="$("$bin" runs --db w.db 2>/dev/null)"
  runs_before="$runs_after"  # compared in the table below instead
fi
for id in 1 2 3 4; do
  before="$(printf '%s' "$runs_before" | grep -o "\"id\":$id,[^}]*" | head -1)"
  after="$(printf '%s' "$runs_after" | grep -o "\"id\":$id,[^}]*" | head -1)"
  if [ "$before" != "$after" ]; then
    report+=("LOST    run $id: was $before, now $after")
  fi
done
[ -f nonempty/file ] || report+=("LOST    nonempty/file")
for r in "${report[@]}"; do
  case "$r" in LOST*) lost=$((lost + 1)) ;; esac
done

printf '%s\n' "${report[@]}"
echo "hostile sweep: $tried inputs tried: $clean refused cleanly, $accepted accepted" \
  "($wrong of them should have been refused), $unclean refused uncleanly, $crashes crashes," \
  "$hangs hangs, $lost losses"
[ $((crashes + hangs + wrong + lost)) -eq 0 ]
