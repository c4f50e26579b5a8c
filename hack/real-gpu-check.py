# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Checks on a machine with a REAL NVIDIA GPU (not run in CI: CI has none). Prints one JSON object.

Needs python3, the NVIDIA driver, and pynvml (nvidia-ml-py) on PYTHONPATH; no Ansible. Run from the
repository root:

    mkdir -p build/devicekit && cp .venv/lib/python3*/site-packages/pynvml.py build/devicekit/
    PYTHONPATH=build/devicekit python3 hack/real-gpu-check.py

1. gpu_uuid_facts' two backends on the real driver: NVML (pynvml) and nvidia-smi's real output
   must agree on every GPU's index, UUID, name, PCI bus ID, memory and minor number;
2. NVML from a driver root (the GPU Operator's layout): the real libnvidia-ml.so.1 linked under a
   temp root, loaded by path first (in a fresh process, without the host's search path mattering);
3. the node command, end to end on a temp sysroot: a kubelet checkpoint with one pod on the real
   GPU and one on a GPU that is not there; `gpuops report` must say it would prune (exit 5),
   `gpuops check` must keep the real GPU's pod and drop the other, and a second check is up to date.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LINK = os.path.join(ROOT, "build", "collections", "ansible_collections", "gpuops", "fleet")
if not os.path.exists(LINK):
    os.makedirs(os.path.dirname(LINK), exist_ok=True)
    os.symlink(ROOT, LINK)
sys.path.insert(0, os.path.join(ROOT, "build", "collections"))

from ansible_collections.gpuops.fleet.plugins.module_utils._node import checkpoint as codec  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.module_utils._node import systemd  # noqa: E402

STALE = "GPU-7fd52bfc-364d-1129-a142-c3f10e053ccb"
FIELDS = ("index", "uuid", "name", "pci_bus_id", "memory_total_mib", "minor_number")


def pick(facts):
    return [dict((k, g.get(k)) for k in FIELDS) for g in facts["gpus"]]


def run_gather(backend, driver_root=None):
    code = (
        "import json, sys; sys.path.insert(0, %r)\n"
        "from ansible_collections.gpuops.fleet.plugins.module_utils._node import gpu_inventory as inv, _systemd as sd\n"
        "print(json.dumps(inv.gather(sd.run, %r, inv.find_nvidia_smi(), driver_root=%r)))\n"
    ) % (os.path.join(ROOT, "build", "collections"), backend, driver_root)
    env = dict(os.environ)
    if driver_root:
        env["LD_LIBRARY_PATH"] = "/nonexistent"
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out), round((time.monotonic() - started) * 1000, 1)


def host_nvml():
    """The real libnvidia-ml.so.1 as the dynamic linker finds it (ldconfig -p), e.g. /usr/local/nvidia/lib64 on GKE."""
    out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, check=False).stdout
    for line in out.splitlines():
        if line.strip().startswith("libnvidia-ml.so.1 ") and "=>" in line:
            return os.path.realpath(line.split("=>", 1)[1].strip())
    return None


def main():
    report = {"machine": os.uname().nodename}
    nvml, nvml_ms = run_gather("nvml")
    smi, smi_ms = run_gather("nvidia-smi")
    report["nvml"] = {"available": nvml["available"], "reason": nvml["reason"], "driver": nvml["driver_version"],
                      "cuda": nvml["cuda_driver_version"], "gpus": nvml["gpus"], "ms": nvml_ms}
    report["nvidia_smi"] = {"available": smi["available"], "reason": smi["reason"], "ms": smi_ms,
                            "gpus": pick(smi)}
    report["backends_agree"] = nvml["available"] and smi["available"] and pick(nvml) == pick(smi)
    if not report["backends_agree"]:
        report["disagreement"] = {"nvml": pick(nvml), "nvidia_smi": pick(smi)}

    lib = host_nvml()
    with tempfile.TemporaryDirectory() as tmp:
        if lib:
            libdir = os.path.join(tmp, "driver", "usr/lib/x86_64-linux-gnu")
            os.makedirs(libdir)
            os.symlink(lib, os.path.join(libdir, "libnvidia-ml.so.1"))
            rooted, dummy = run_gather("nvml", driver_root=os.path.join(tmp, "driver"))
            report["driver_root"] = {"library": lib, "available": rooted["available"], "reason": rooted["reason"],
                                     "same_uuids": [g["uuid"] for g in rooted["gpus"]] == [g["uuid"] for g in nvml["gpus"]]}
        report["guard"] = guard_story(tmp, nvml)
    print(json.dumps(report, indent=2))
    ok = report["backends_agree"] and report.get("driver_root", {}).get("same_uuids") and report["guard"]["ok"]
    return 0 if ok else 1


def guard_story(tmp, nvml):
    real = nvml["gpus"][0]["uuid"]
    plugins = os.path.join(tmp, "sysroot/var/lib/kubelet/device-plugins")
    os.makedirs(plugins)
    path = os.path.join(plugins, "kubelet_internal_checkpoint")
    cp = codec.Checkpoint(
        "v2",
        [codec.PodDevicesEntry("pod-on-real-gpu", "train", "nvidia.com/gpu", {0: [real]}, None),
         codec.PodDevicesEntry("pod-on-gone-gpu", "train", "nvidia.com/gpu", {0: [STALE]}, None)],
        {"nvidia.com/gpu": [real, STALE]},
    )
    with open(path, "wb") as handle:
        handle.write(codec.encode(cp)[0])
    config = os.path.join(tmp, "gpuops.json")
    with open(config, "w") as handle:
        json.dump({"checkpoint_path": path, "backup_dir": os.path.join(tmp, "backups"), "lock_dir": os.path.join(tmp, "run"),
                   "kubelet_unit": "gpuops-real-gpu-check-no-such.service"}, handle)
    cmd = [sys.executable, "-c", "import sys; sys.path.insert(0, %r); from ansible_collections.gpuops.fleet.plugins.module_utils._node.guard "
           "import main; sys.exit(main())" % os.path.join(ROOT, "build", "collections")]
    runs = {}
    for name, args in (("report", ["report"]), ("check", ["check"]), ("again", ["check"])):
        proc = subprocess.run(cmd + args + ["--config", config], capture_output=True, text=True, check=False)
        records = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        runs[name] = {"rc": proc.returncode, "events": [r["event"] for r in records], "last": records[-1] if records else proc.stderr}
    with open(path, "rb") as handle:
        after = codec.decode(handle.read())
    kept = [e.pod_uid for e in after.checkpoint.entries] if after.valid else None
    ok = (runs["report"]["rc"] == 5 and runs["check"]["rc"] == 0 and runs["again"]["rc"] == 0
          and kept == ["pod-on-real-gpu"] and runs["again"]["last"].get("status") == "up_to_date")
    return {"ok": ok, "runs": runs, "kept_pods": kept, "systemctl": systemd.available()}


if __name__ == "__main__":
    sys.exit(main())
