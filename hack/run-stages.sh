#!/usr/bin/env bash
# make test's driver: every stage in CI's order, timed (hack/stage.sh), with the stages that mostly wait
# (a real API server's controllers, containers booting systemd, the real kubelet node) run beside the ones
# that compute.
#
#   hack/run-stages.sh "FIRST..." "COMPUTE..." "LANE...; LANE...; ..." "LAST..."
#
# FIRST run one after another; then COMPUTE in the foreground while each ';'-separated LANE of the third
# argument runs in the background, its stages one after another (a lane's output in out/stages-lane-N.log,
# printed whole when all have ended, so the log reads stage by stage); then LAST, alone. On this 2-core
# machine the kube stage's load average is about 0.7 while it runs (it waits on controllers), so the
# compute stages lose little to it. The real kubelet node's stage must never overlap Molecule: podman's
# networks add iptables rules, and the node's teardown checks that the host's rules are as they were
# (seen: a kube-node run beside a Molecule scenario failed that check, its 12 tests passed). So it follows
# molecule in the same lane. GPUOPS_SERIAL=1 runs every stage one after another.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
MAKE=${MAKE:-make}
read -r -a first <<< "$1"
read -r -a compute <<< "$2"
IFS=';' read -r -a lanes <<< "$3"
read -r -a last <<< "$4"
start=$(date +%s)
mkdir -p out
rm -f out/stages.tsv out/stages-lane-*.log out/stages-wall

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
  all=()
  for lane in "${lanes[@]}"; do
    read -r -a lane_stages <<< "$lane"
    all+=("${lane_stages[@]}")
  done
  stages "${compute[@]}" "${all[@]}" "${last[@]}"
  finish $?
fi
pids=()
for i in "${!lanes[@]}"; do
  read -r -a lane_stages <<< "${lanes[$i]}"
  [ ${#lane_stages[@]} -gt 0 ] || continue
  ( stages "${lane_stages[@]}" > "out/stages-lane-$i.log" 2>&1 ) &
  pids+=("$!:$i")
done
stages "${compute[@]}"
compute_rc=$?
lanes_rc=0
for entry in "${pids[@]}"; do
  wait "${entry%%:*}" || lanes_rc=1
done
for entry in "${pids[@]}"; do
  i=${entry#*:}
  echo "=== the stages run beside (${lanes[$i]}): their output (out/stages-lane-$i.log) ==="
  cat "out/stages-lane-$i.log"
done
if [ "$compute_rc" != 0 ] || [ "$lanes_rc" != 0 ]; then
  finish 1
fi
if [ ${#last[@]} -gt 0 ]; then
  stages "${last[@]}"
  finish $?
fi
finish 0
