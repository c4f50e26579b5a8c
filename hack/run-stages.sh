#!/usr/bin/env bash
# make test's driver: every stage in CI's order, timed (hack/stage.sh), with the stages that mostly wait
# (a real API server's controllers, containers booting systemd) run beside the ones that compute.
#
#   hack/run-stages.sh "FIRST..." "COMPUTE..." "BESIDE..." "LAST..."
#
# FIRST run one after another; then COMPUTE in the foreground while BESIDE run in the background (their
# output in out/stages-beside.log, printed whole when they end, so the log reads stage by stage); then
# LAST, alone (the real kubelet node's stage, which has flaked on a loaded 2-core machine). Measured on
# this 2-core machine: the kube stage's load average is about 0.7 while it runs (it waits on
# controllers), so COMPUTE loses little to it. GPUOPS_SERIAL=1 runs every stage one after another.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
MAKE=${MAKE:-make}
read -r -a first <<< "$1"
read -r -a compute <<< "$2"
read -r -a beside <<< "$3"
read -r -a last <<< "$4"
start=$(date +%s)
mkdir -p out
rm -f out/stages.tsv out/stages-beside.log out/stages-wall

stages() {
  local stage
  for stage in "$@"; do
    hack/stage.sh "$stage" "$MAKE" --no-print-directory "$stage" || return 1
  done
}

finish() {
  printf '%d\n' "$(( $(date +%s) - start ))" > out/stages-wall
  exit "$1"
}

stages "${first[@]}" || finish 1
# what both groups build first, built once here so that they never race for it
"$MAKE" --no-print-directory collection-link fakes || finish 1
if [ "${GPUOPS_SERIAL:-0}" = 1 ]; then
  stages "${compute[@]}" "${beside[@]}" "${last[@]}"
  finish $?
fi
( stages "${beside[@]}" > out/stages-beside.log 2>&1 ) &
beside_pid=$!
stages "${compute[@]}"
compute_rc=$?
wait "$beside_pid"
beside_rc=$?
echo "=== the stages run beside (${beside[*]}): their output (out/stages-beside.log) ==="
cat out/stages-beside.log
if [ "$compute_rc" != 0 ] || [ "$beside_rc" != 0 ]; then
  finish 1
fi
stages "${last[@]}"
finish $?
