#!/usr/bin/env bash
# `mpirun -np N pipetune train` (one rank per process over the MPI communicator, or K ranks as
# threads per process with --ranks-per-process K) gives the losses of the same run with its
# ranks as threads, bit for bit: the communicators fold every reduction in the same order. Also: a world size that differs from the plan's is refused with
# exit 2 naming both numbers; checkpoints move between threads and processes; every process's
# spans land in one workspace run; a killed process ends the run within 30 s and leaves it
# interrupted; a hung one is caught by the watchdog and the run fails; a process whose rank fails
# tells rank 0's process, which marks the run failed.
#   train_processes_test.sh PIPETUNE MPIEXEC NP
set -uo pipefail
pipetune="$1"
mpiexec="$2"
np="$3"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
failures=0

losses() { tr -d ' \n' | grep -o '"losses":\[[^]]*\]'; }

# check_plan WHAT [--ranks-per-process K] PLAN...: np processes against threads.
check_plan() {
  local what="$1"
  shift
  local threads processes per_process=()
  if [ "$1" = --ranks-per-process ]; then
    per_process=("$1" "$2")
    shift 2
  fi
  threads="$("$pipetune" train --steps 3 --threads 1 --no-db --json "$@" | losses)"
  processes="$("$mpiexec" -np "$np" "$pipetune" train --steps 3 --threads 1 --no-db --json \
    "${per_process[@]}" "$@" | losses)"
  if [ -z "$threads" ] || [ "$threads" != "$processes" ]; then
    echo "FAIL $what: threads $threads, processes ${processes:-(no output)}"
    failures=$((failures + 1))
  else
    echo "ok   $what: $threads"
  fi
}

if [ "$np" -eq 2 ]; then
  check_plan "pp=2 1f1b" --tp 1 --pp 2 --dp 1 --schedule 1f1b
  check_plan "pp=2 zb-h1" --tp 1 --pp 2 --dp 1 --schedule zb-h1
  check_plan "pp=2 gpipe" --tp 1 --pp 2 --dp 1 --schedule gpipe
  check_plan "pp=2 zb-h2" --tp 1 --pp 2 --dp 1 --schedule zb-h2
  check_plan "pp=2 1f1b vocab-1" --tp 1 --pp 2 --dp 1 --schedule 1f1b --vocab vocab-1
  check_plan "pp=2 v-half vocab-2" --tp 1 --pp 2 --dp 1 --schedule v-half --vocab vocab-2
  check_plan "tp=2" --tp 2 --pp 1 --dp 1
  check_plan "tp=2 sequence parallel, full recompute" --tp 2 --pp 1 --dp 1 --sequence-parallel \
    --recompute full
  check_plan "dp=2 zero-1" --tp 1 --pp 1 --dp 2 --zero 1
  check_plan "dp=2 zero-2" --tp 1 --pp 1 --dp 2 --zero 2
  check_plan "dp=2 zero-3 full recompute" --tp 1 --pp 1 --dp 2 --zero 3 --recompute full
  check_plan "moe dp=2 ep=2" --model tiny-moe --tp 1 --pp 1 --dp 2 --ep 2
  # Layered reduction: each process's R ops on its reduction thread, over the MPI channel.
  check_plan "dp=2 layered" --tp 1 --pp 1 --dp 2 --schedule layered --chunks 4
  check_plan "dp=2 1f1b layered reduction" --tp 1 --pp 1 --dp 2 --schedule 1f1b \
    --layered-reduction
  # Under ZeRO-2 and 3 the R ops reduce-scatter the held groups over the channel.
  check_plan "dp=2 layered zero-2" --tp 1 --pp 1 --dp 2 --schedule layered --chunks 4 --zero 2
  check_plan "dp=2 layered zero-3" --tp 1 --pp 1 --dp 2 --schedule layered --chunks 4 --zero 3
  if "$mpiexec" -np 2 "$pipetune" train --steps 1 --threads 1 --no-db --json --tp 1 --pp 1 \
    --dp 2 --schedule layered --chunks 4 | tr -d ' \n' | grep -q '"reductions_overlapped":true'; then
    echo "ok   dp=2 layered: rank 0's R ops ran on its reduction thread"
  else
    echo "FAIL dp=2 layered: rank 0's R ops did not run on a reduction thread"
    failures=$((failures + 1))
  fi
  # The chunked MoE all-to-all: each process's chunks on its collective stream, over the channel.
  check_plan "moe dp=2 ep=2 all-to-all in 4 chunks" --model tiny-moe --tp 1 --pp 1 --dp 2 --ep 2 \
    --moe-chunks 4
  if "$mpiexec" -np 2 "$pipetune" train --steps 1 --threads 1 --no-db --json --model tiny-moe \
    --tp 1 --pp 1 --dp 2 --ep 2 --moe-chunks 4 | tr -d ' \n' |
    grep -q '"moe_all_to_all_overlapped":true'; then
    echo "ok   moe 4 chunks: rank 0's all-to-alls ran on its collective stream"
  else
    echo "FAIL moe 4 chunks: rank 0's all-to-alls did not run on a collective stream"
    failures=$((failures + 1))
  fi
  # Hybrid: 2 ranks as threads in each of the 2 processes (groups inside and across processes).
  check_plan "2x2 tp=2 pp=2 zb-h1" --ranks-per-process 2 --tp 2 --pp 2 --dp 1 --schedule zb-h1
  check_plan "2x2 pp=2 dp=2 vocab-1" --ranks-per-process 2 --tp 1 --pp 2 --dp 2 --vocab vocab-1
  check_plan "2x4 moe tp=2 dp=4 ep=2 zero-1" --ranks-per-process 4 --model tiny-moe --tp 2 \
    --pp 1 --dp 4 --ep 2 --zero 1
  check_plan "2x2 moe dp=4 ep=2 zero-2" --ranks-per-process 2 --model tiny-moe --tp 1 --pp 1 \
    --dp 4 --ep 2 --zero 2
elif [ "$np" -eq 4 ]; then
  check_plan "tp=2 pp=2" --tp 2 --pp 2 --dp 1
  # Per-stage layouts: stages of tp 2, 1 and 1 (ranks 0-1, 2 and 3), from a run file.
  cat >stage-tp-211.toml <<'TOML'
model = "tiny"
[cluster]
hardware = "cpu-dev-2core"
devices = 4
[plan]
pp = 3
dp = 1
stage_tp = [2, 1, 1]
micro_batch_size = 2
microbatches = 6
schedule = "1f1b"
TOML
  check_plan "stage_tp=2,1,1 pp=3 1f1b (run file)" --config stage-tp-211.toml
  check_plan "tp=2 pp=2 1f1b sequence parallel vocab-1" --tp 2 --pp 2 --dp 1 --schedule 1f1b \
    --vocab vocab-1 --sequence-parallel
  check_plan "pp=2 dp=2 interleaved zero-1" --tp 1 --pp 2 --dp 2 --schedule interleaved-1f1b \
    --chunks 2 --zero 1
  check_plan "pp=2 dp=2 vocab-1 zero-2" --tp 1 --pp 2 --dp 2 --vocab vocab-1 --zero 2
  check_plan "pp=2 dp=2 v-half vocab-2 zero-3" --tp 1 --pp 2 --dp 2 --schedule v-half \
    --vocab vocab-2 --zero 3
  check_plan "moe dp=4 ep=2 zero-3" --model tiny-moe --tp 1 --pp 1 --dp 4 --ep 2 --zero 3
  # EmbRace under ZeRO: the touched rows to their owners (MPI's all-to-all with uneven counts).
  check_plan "dp=4 zero-1 sparse embedding" --tp 1 --pp 1 --dp 4 --zero 1 --sparse-embedding-grad
  check_plan "dp=4 zero-2 sparse embedding" --tp 1 --pp 1 --dp 4 --zero 2 --sparse-embedding-grad
  # Tutel's two-phase all-to-all: its node and cross groups declared up front with the others.
  check_plan "moe dp=4 ep=4 two-phase all-to-all in nodes of 2" --model tiny-moe --tp 1 --pp 1 \
    --dp 4 --ep 4 --moe-a2a-node-ranks 2
  check_plan "moe dp=4 ep=4 two-phase all-to-all, 3 chunks on the stream" --model tiny-moe \
    --tp 1 --pp 1 --dp 4 --ep 4 --moe-a2a-node-ranks 2 --moe-chunks 3
  check_plan "pp=4 zb-v" --tp 1 --pp 4 --dp 1 --schedule zb-v
  check_plan "pp=4 v-min" --tp 1 --pp 4 --dp 1 --schedule v-min
  check_plan "pp=4 dualpipe-v" --tp 1 --pp 4 --dp 1 --schedule dualpipe-v
  check_plan "pp=4 1f1b interlaced vocab" --tp 1 --pp 4 --dp 1 --schedule 1f1b --vocab interlaced
  check_plan "4x2 tp=2 pp=2 dp=2 (tiny-train)" --ranks-per-process 2 --tp 2 --pp 2 --dp 2
  # Adaptive experts: the choice follows each run's own timing, so the losses are not compared
  # with the threads'; every process must choose alike (or the run would hang on its collectives)
  # and the run lists one choice per MoE layer.
  adaptive="$("$mpiexec" -np 4 "$pipetune" train --steps 3 --threads 1 --no-db --json \
    --model tiny-moe --tp 2 --pp 1 --dp 2 --ep 2 --expert-layout adaptive | tr -d ' \n')"
  if [ "$(grep -o '"chosen":"[a-z]*"' <<<"$adaptive" | wc -l)" -eq 8 ]; then
    echo "ok   moe tp=2 dp=2 ep=2 adaptive experts: 8 choices, alike in every process"
  else
    echo "FAIL moe tp=2 dp=2 ep=2 adaptive experts: ${adaptive:-(no output)}"
    failures=$((failures + 1))
  fi
  check_plan "4x2 pp=4 dp=2 v-half vocab-2" --ranks-per-process 2 --tp 1 --pp 4 --dp 2 \
    --schedule v-half --vocab vocab-2
elif [ "$np" -eq 8 ]; then
  check_plan "tp=2 pp=2 dp=2 (tiny-train)" --tp 2 --pp 2 --dp 2
  check_plan "tp=2 pp=2 dp=2 sequence parallel, selective recompute" --tp 2 --pp 2 --dp 2 \
    --sequence-parallel --recompute selective
  check_plan "tp=2 pp=2 dp=2 zb-h1 sequence parallel zero-2" --tp 2 --pp 2 --dp 2 \
    --schedule zb-h1 --sequence-parallel --zero 2
  check_plan "tp=2 pp=2 dp=2 interleaved zero-3" --tp 2 --pp 2 --dp 2 \
    --schedule interleaved-1f1b --chunks 2 --zero 3
  check_plan "pp=4 dp=2 v-half vocab-2" --tp 1 --pp 4 --dp 2 --schedule v-half --vocab vocab-2
  check_plan "moe tp=2 dp=4 ep=2 zero-1" --model tiny-moe --tp 2 --pp 1 --dp 4 --ep 2 --zero 1
fi

# Against the single-rank run of the same global batch (the reference the thread runs are
# tested against in the engine's suite): equal within 1e-5 relative, whatever the split.
close() {  # close A B: the two loss lists agree within 1e-5 relative, value by value
  awk -v a="$1" -v b="$2" 'BEGIN {
    gsub(/[^0-9.,e+-]/, "", a); gsub(/[^0-9.,e+-]/, "", b)
    n = split(a, x, ","); m = split(b, y, ",")
    if (n != m || n == 0) exit 1
    for (i = 1; i <= n; i++) { d = x[i] - y[i]; if (d < 0) d = -d; if (d > 1e-5 * (x[i] < 0 ? -x[i] : x[i])) exit 1 }
  }'
}
single="$("$pipetune" train --steps 3 --threads 1 --no-db --json --tp 1 --pp 1 --dp 1 | losses)"
case "$np" in
  2) split=(--tp 1 --pp 2 --dp 1) ;;
  4) split=(--tp 2 --pp 2 --dp 1) ;;
  *) split=(--tp 2 --pp 2 --dp 2 --microbatches 4) ;;  # 2 replicas x 4 = the single run's 8
esac
processes="$("$mpiexec" -np "$np" "$pipetune" train --steps 3 --threads 1 --no-db --json \
  "${split[@]}" | losses)"
if close "$single" "$processes"; then
  echo "ok   ${split[*]} as $np processes matches the single-rank run: $processes"
else
  echo "FAIL ${split[*]} as $np processes: $processes, single rank $single"
  failures=$((failures + 1))
fi

# The plan's world must be the launcher's, in every process, with nothing written.
out="$("$mpiexec" -np "$np" "$pipetune" train --steps 1 --tp 1 --pp 1 --dp 1 --db w.db 2>&1)"
code=$?
if [ "$code" -ne 2 ] || ! grep -q "with $np processes, but the plan has tp\*pp\*dp = 1 ranks" <<<"$out" ||
  [ -e w.db ]; then
  echo "FAIL world-size mismatch: exit $code, w.db $([ -e w.db ] && echo written || echo absent)"
  echo "$out" | head -5
  failures=$((failures + 1))
else
  echo "ok   world-size mismatch refused (exit 2), nothing written"
fi
# Checkpoints: written by processes, resumed by threads, and the other way round, each giving
# the uninterrupted run's losses for the steps after the checkpoint.
plan=(--tp 1 --pp "$np" --dp 1 --threads 1 --no-db --json)
last_two() { tr -d '"losses:[]' | tr ',' '\n' | tail -2 | paste -sd, -; }
full="$("$pipetune" train --steps 4 "${plan[@]}" | losses | last_two)"
"$mpiexec" -np "$np" "$pipetune" train --steps 2 "${plan[@]}" --checkpoint by-processes >/dev/null
by_threads="$("$pipetune" train --steps 4 "${plan[@]}" --resume by-processes | losses | last_two)"
"$pipetune" train --steps 2 "${plan[@]}" --checkpoint by-threads >/dev/null
by_processes="$("$mpiexec" -np "$np" "$pipetune" train --steps 4 "${plan[@]}" --resume by-threads |
  losses | last_two)"
if [ -z "$full" ] || [ "$by_threads" != "$full" ] || [ "$by_processes" != "$full" ]; then
  echo "FAIL checkpoints: uninterrupted $full, processes->threads $by_threads," \
    "threads->processes $by_processes"
  failures=$((failures + 1))
else
  echo "ok   checkpoints across threads and processes resume to the uninterrupted losses $full"
fi

# One workspace run from all processes: complete, with the spans of the same run as threads
# (also with 2 ranks per process).
spans() { "$pipetune" runs --db "$1" | awk 'NR == 2 { print $2, $3, $6 }'; }
# final_status DB: the run's status once its writer (rank 0's process) is gone. The launcher can
# return while a process it killed is still ending (a slow disk's sync under CI's load), and a
# run whose writer lives is rightly still 'running'; a writer alive after 20 s is reported as is.
final_status() {
  local status
  for _ in $(seq 1 200); do
    status="$("$pipetune" runs --db "$1" | awk 'NR == 2 { print $3 }')"
    [ "$status" != running ] && break
    sleep 0.1
  done
  echo "$status"
}
for k in 1 2; do
  "$pipetune" train --steps 2 --threads 1 --tp $k --pp "$np" --dp 1 --db threads$k.db >/dev/null
  "$mpiexec" -np "$np" "$pipetune" train --steps 2 --threads 1 --tp $k --pp "$np" --dp 1 \
    --ranks-per-process $k --db processes$k.db >/dev/null
  if [ -z "$(spans threads$k.db)" ] || [ "$(spans threads$k.db)" != "$(spans processes$k.db)" ]; then
    echo "FAIL workspace ($k per process): threads '$(spans threads$k.db)'," \
      "processes '$(spans processes$k.db)'"
    failures=$((failures + 1))
  else
    echo "ok   workspace ($k per process): one run, $(spans processes$k.db) (kind, status, spans)" \
      "as with threads"
  fi
done
# --trace with processes: the Chrome trace of the workspace run has the spans of the threads run.
if [ "$np" -eq 2 ]; then
  "$pipetune" train --steps 2 --threads 1 --tp 1 --pp 2 --dp 1 --no-db --trace threads.json >/dev/null
  "$mpiexec" -np 2 "$pipetune" train --steps 2 --threads 1 --tp 1 --pp 2 --dp 1 --db traced.db \
    --trace processes.json >/dev/null
  complete() { grep -o '"ph": *"X"' "$1" 2>/dev/null | wc -l; }
  if [ "$(complete threads.json)" -eq 0 ] || [ "$(complete threads.json)" != "$(complete processes.json)" ]; then
    echo "FAIL --trace: threads $(complete threads.json) spans, processes $(complete processes.json)"
    failures=$((failures + 1))
  else
    echo "ok   --trace with processes: $(complete processes.json) spans, as with threads"
  fi
fi
# A process killed mid-run ends the others within 30 s, named by the launcher, and the run
# stays in the workspace as interrupted with the steps it committed.
"$mpiexec" -np "$np" "$pipetune" train --steps 100000 --threads 1 --tp 1 --pp "$np" --dp 1 \
  --db killed.db >killed.out 2>killed.err &
launcher=$!
for _ in $(seq 1 300); do  # until a step is committed (at most 30 s)
  grep -q "^step" killed.out 2>/dev/null && break
  sleep 0.1
done
victim="$(pgrep -P "$launcher" | tail -1)"
kill -9 "$victim" 2>/dev/null
ended=0
for _ in $(seq 1 300); do
  if ! kill -0 "$launcher" 2>/dev/null; then
    ended=1
    break
  fi
  sleep 0.1
done
wait "$launcher"
code=$?
status="$(final_status killed.db)"
if [ "$ended" -ne 1 ] || [ "$code" -eq 0 ] || ! grep -q "signal 9" killed.err ||
  [ "$status" != interrupted ]; then
  [ "$ended" -eq 1 ] || kill -9 "$launcher" 2>/dev/null
  echo "FAIL killed process: ended $ended, exit $code, status '$status'"
  tail -5 killed.err
  failures=$((failures + 1))
else
  echo "ok   killed process $victim: launcher ended (exit $code) naming it, run $status"
fi
# A process that hangs (stopped): the others' watchdog fails the run within its limit, naming the
# wait, and the job ends (no hang). The run is stored as failed when rank 0's own watchdog fires
# first, or interrupted when another process's abort ends rank 0's first (which waits on whom
# is the schedule's); either way not complete, with its committed steps. With one rank per
# process, and (np = 2) with 2 ranks as threads per process.
hung_ranks=(1)
[ "$np" -eq 2 ] && hung_ranks=(1 2)
for k in "${hung_ranks[@]}"; do
  "$mpiexec" -np "$np" "$pipetune" train --steps 100000 --threads 1 --tp $k --pp "$np" \
    --dp 1 --ranks-per-process $k --watchdog 3 --db hung$k.db >hung.out 2>hung.err &
  launcher=$!
  for _ in $(seq 1 300); do
    grep -q "^step" hung.out 2>/dev/null && break
    sleep 0.1
  done
  victim="$(pgrep -P "$launcher" | tail -1)"
  kill -STOP "$victim" 2>/dev/null
  ended=0
  for _ in $(seq 1 300); do  # the 3 s watchdog, then the abort: well within 30 s
    if ! kill -0 "$launcher" 2>/dev/null; then
      ended=1
      break
    fi
    sleep 0.1
  done
  if [ "$ended" -ne 1 ]; then
    kill -9 "$launcher" "$victim" 2>/dev/null
    pkill -9 -P "$launcher" 2>/dev/null
  fi
  wait "$launcher"
  code=$?
  status="$(final_status hung$k.db)"
  if [ "$ended" -ne 1 ] || [ "$code" -eq 0 ] || ! grep -q "(watchdog)" hung.err ||
    { [ "$status" != failed ] && [ "$status" != interrupted ]; }; then
    echo "FAIL hung process ($k per process): ended $ended, exit $code, status '$status'"
    grep -v '^-' hung.err | head -3
    failures=$((failures + 1))
  else
    echo "ok   hung process $victim ($k per process): watchdog ended the job (exit $code)," \
      "run $status"
  fi
done
# An injected fault in one process (train --fault) ends the job with its named error, and the
# failing process tells rank 0's, which marks the run failed (as threads do), not interrupted:
# one rank per process, and as the second rank thread of the last process (hybrid).
for per_process in 1 2; do
  [ $((np / per_process)) -ge 2 ] || continue  # one process of 2 ranks: threads, not MPI
  out="$("$mpiexec" -np $((np / per_process)) "$pipetune" train --steps 3 --threads 1 --tp 1 \
    --pp "$np" --dp 1 --ranks-per-process "$per_process" \
    --fault rank=$((np - 1)),step=2,kind=throw --db fault$per_process.db 2>&1)"
  code=$?
  status="$(final_status fault$per_process.db)"
  # Rank 0's process words what the failing one told it as the engine does (no flag).
  named="injected fault: rank $((np - 1)), step 2"
  if [ "$code" -ne 1 ] || ! grep -q "failed in process 0: process $((np / per_process - 1)) failed: $named" <<<"$out" ||
    [ "$status" != failed ]; then
    echo "FAIL injected fault ($per_process per process): exit $code, status '$status'"
    echo "$out" | grep -v '^-' | head -3
    failures=$((failures + 1))
  else
    echo "ok   injected fault on rank $((np - 1)) ($per_process per process): exit $code, named," \
      "rank 0's process marked the run $status"
  fi
done
[ "$failures" -eq 0 ]
