#!/usr/bin/env bash
# Times one pipetune command with several builds side by side: in each round every build runs
# the command once, in turn, so a machine whose speed wanders (a shared VM's does by a fifth from
# minute to minute) slows them alike. Prints, per build, the least and the median wall time and
# CPU time (user + system) over the rounds, from /usr/bin/time.
#
# Usage: tests/bench/compare_builds.sh [--rounds N] BINARY... -- COMMAND ARGS...
#   tests/bench/compare_builds.sh --rounds 6 /tmp/pipetune-old build/cli/pipetune -- \
#     tune --model gpt3-175b --hardware h100-sxm --gpus 1024 --global-batch 1536 --no-db
# Exit status 2 on a usage error or a command that fails.
set -euo pipefail

rounds=5
binaries=()
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --) shift; break ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) binaries+=("$1"); shift ;;
  esac
done
[ ${#binaries[@]} -gt 0 ] && [ $# -gt 0 ] ||
  { echo "compare_builds: usage: compare_builds.sh [--rounds N] BINARY... -- COMMAND ARGS..." >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "compare_builds: /usr/bin/time is missing (Debian's time)" >&2; exit 2; }
for b in "${binaries[@]}"; do
  [ -x "$b" ] || { echo "compare_builds: $b is not an executable" >&2; exit 2; }
done

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for _ in $(seq "$rounds"); do
  for i in "${!binaries[@]}"; do
    if ! /usr/bin/time -f "%e %U %S" -o "$tmp/last" "${binaries[$i]}" "$@" >/dev/null 2>"$tmp/err"; then
      echo "compare_builds: ${binaries[$i]} $* failed: $(tail -1 "$tmp/err")" >&2
      exit 2
    fi
    tail -1 "$tmp/last" >>"$tmp/$i"
  done
done
# The least and the median of a column of numbers.
least_median() { sort -n | awk '{ v[NR] = $1 } END { printf "least %.2f s, median %.2f s", v[1], v[int((NR + 1) / 2)] }'; }
for i in "${!binaries[@]}"; do
  wall="$(awk '{ print $1 }' "$tmp/$i" | least_median)"
  cpu="$(awk '{ print $2 + $3 }' "$tmp/$i" | least_median)"
  echo "${binaries[$i]}: wall $wall; CPU $cpu ($rounds rounds)"
done
