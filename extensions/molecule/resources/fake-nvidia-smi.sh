#!/bin/sh
# SIMULATED nvidia-smi on the Molecule node: the tests' fake (fake_nvidia_smi.py) on the fake NVML's node file, which a
# real nvidia-smi needs no environment to find (the GPU reset's rescue timers run it from systemd, with none).
# A test hook: where /run/gpuops-test/hang-at names this call (pm0: -pm 0, r: -r, pm1: -pm 1), the marker is removed
# (once), /run/gpuops-test/hanging gets this PID and the call hangs, so a test can SIGKILL gpu_reset at that step.
case " $* " in
  *" -pm 0 "*) step=pm0 ;;
  *" -pm 1 "*) step=pm1 ;;
  *" -r "*) step=r ;;
  *) step= ;;
esac
if [ -n "$step" ] && [ "$(cat /run/gpuops-test/hang-at 2>/dev/null)" = "$step" ]; then
  rm -f /run/gpuops-test/hang-at
  echo $$ > /run/gpuops-test/hanging
  exec sleep 3600
fi
GPUOPS_FAKE_NVML_CONFIG=${GPUOPS_FAKE_NVML_CONFIG:-/etc/gpuops-lab/fake_nvml.cfg} exec python3 /usr/local/lib/gpuops-fake/fake_nvidia_smi.py "$@"
