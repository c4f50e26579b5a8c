#!/usr/bin/env bash
# Time one stage of `make test` into out/stages.tsv (name, seconds, exit status), or print the table.
#   hack/stage.sh NAME COMMAND...     run COMMAND, record how long it took; exit with its status
#   hack/stage.sh --table             the stages so far, and their total (.ci/run prints it at the end)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
log=out/stages.tsv
if [ "${1:-}" = "--table" ]; then
  [ -s "$log" ] || { echo "no stage timed yet ($log)"; exit 0; }
  # .ci/run's own first step (the Debian packages) is in out/ci-deps.tsv
  files=("$log")
  [ -s out/ci-deps.tsv ] && files=(out/ci-deps.tsv "$log")
  cat "${files[@]}" | awk -F'\t' 'BEGIN { printf "%-12s %9s  %s\n", "stage", "seconds", "result" }
              { total += $2; printf "%-12s %9d  %s\n", $1, $2, ($3 == 0 ? "ok" : "FAILED (exit " $3 ")") }
              END { printf "%-12s %9d  (%d min %02d s)\n", "sum", total, total / 60, total % 60 }'
  # stages run beside each other (hack/run-stages.sh): the wall clock is less than their sum
  if [ -s out/stages-wall ]; then
    wall=$(cat out/stages-wall)
    printf '%-12s %9d  (%d min %02d s, make test from start to end)\n' wall "$wall" $((wall / 60)) $((wall % 60))
  fi
  exit 0
fi
name=$1
shift
mkdir -p out
start=$(date +%s)
"$@"
rc=$?
printf '%s\t%d\t%d\n' "$name" "$(( $(date +%s) - start ))" "$rc" >> "$log"
exit "$rc"
