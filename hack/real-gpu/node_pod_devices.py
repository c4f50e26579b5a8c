# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""On a machine with a REAL NVIDIA GPU and ``runc``: can NVML be read from the k8s_node connection's pod?

The node pod (plugins/module_utils/_cluster/node_pod.py) is not privileged: the host's ``/`` at
``/host``, CAP_SYS_CHROOT added to the runtime's default set, every command ``chroot /host``. The
runtime gives such a container the default device allow list only (kubelet -> containerd -> runc:
``linux.resources.devices`` denies all, then allows the standard character devices), so a GPU's
device nodes, even the host's own under ``/host/dev``, cannot be opened, whatever the path.

This runs one NVML read, ``chroot /host <python> -c '...nvmlInit...'``, then the collection's own
inventory (``gpu_inventory.gather``, whose reason must name the fix when it cannot read), in runc containers built as
containerd builds that pod, with three device policies:

* ``default``: the pod as it is (no GPU device allowed);
* ``nvidia``: the NVIDIA character devices allowed (majors of ``nvidiactl``/``nvidia0``,
  ``nvidia-uvm`` and ``nvidia-caps`` read from ``/proc/devices``), which is what NVIDIA's container
  runtime adds for a container whose environment has ``NVIDIA_VISIBLE_DEVICES=all``;
* ``privileged``: every device allowed, for comparison.

Prints one JSON object; with ``$OUT`` set also writes node-pod-devices.json there.
Usage: python3 hack/real-gpu/node_pod_devices.py [RUNC]
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

# containerd's default capability set (oci.DefaultUnixCapabilities / WithDefaultUnixCapabilities) + SYS_CHROOT
CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD", "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID",
        "CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]
# containerd's default device rules (oci.WithDefaultUnixDevices / populateDefaultUnixSpec): deny all, then these
DEFAULT_DEVICES = [{"allow": False, "access": "rwm"}] + [
    {"allow": True, "type": "c", "major": major, "minor": minor, "access": "rwm"}
    for major, minor in ((1, 3), (1, 5), (1, 7), (1, 8), (1, 9), (5, 0), (5, 1), (5, 2), (136, -1), (10, 200))
]
READ = ("import pynvml; pynvml.nvmlInit(); h = pynvml.nvmlDeviceGetHandleByIndex(0); "
        "print('NVML-OK', pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetUUID(h))")
# then the collection's own inventory (gpu_uuid_facts' gather()), whose reason must say why when it cannot read
GATHER = """
import json, subprocess, sys
sys.path.insert(0, sys.argv[1])
from ansible_collections.gpuops.fleet.plugins.module_utils._node.gpu_inventory import gather, find_nvidia_smi
def run(argv):
    p = subprocess.run(argv, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr
facts = gather(run, "auto", find_nvidia_smi())
print("GATHER=" + json.dumps({"available": facts["available"], "backend": facts["backend"], "reason": facts["reason"],
                              "uuids": [g["uuid"] for g in facts["gpus"]]}))
"""
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, "build", "collections")


def nvidia_majors():
    majors = {}
    with open("/proc/devices") as handle:
        for line in handle:
            parts = line.split()
            if len(parts) == 2 and parts[0].isdigit() and parts[1].startswith("nvidia"):
                majors[parts[1]] = int(parts[0])
    return majors


def rules(policy, majors):
    if policy == "privileged":
        return [{"allow": True, "access": "rwm"}]
    extra = []
    if policy == "nvidia":
        extra = [{"allow": True, "type": "c", "major": m, "minor": -1, "access": "rwm"} for m in sorted(set(majors.values()))]
    return DEFAULT_DEVICES + extra


def config(rootfs, policy, majors, python):
    rel = [d for d in ("bin", "sbin", "lib", "lib64", "usr", "etc", "opt") if os.path.isdir("/" + d)]
    mounts = [
        {"destination": "/proc", "type": "proc", "source": "proc"},
        {"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
        {"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"]},
        # the pod's image: this machine's own files, read-only
    ] + [{"destination": "/" + d, "type": "bind", "source": "/" + d, "options": ["rbind", "ro"]} for d in rel] + [
        # hostPath "/" at /host, as kubelet mounts it (rbind: the host's /dev, /proc, /sys come along)
        {"destination": "/host", "type": "bind", "source": "/", "options": ["rbind", "rprivate"]},
    ]
    return {
        "ociVersion": "1.0.2",
        "process": {
            "terminal": False, "user": {"uid": 0, "gid": 0}, "cwd": "/",
            "args": ["chroot", "/host", "/bin/sh", "-c", '"$1" -c "$2"; "$1" -c "$3" "$4"', "read", python, READ, GATHER, COLLECTIONS],
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"] + [
                "%s=%s" % (k, os.environ[k]) for k in ("LD_LIBRARY_PATH", "GPUOPS_FAKE_NVML_CONFIG") if os.environ.get(k)],
            "capabilities": dict((k, CAPS) for k in ("bounding", "effective", "permitted")),
            "noNewPrivileges": False,
        },
        "root": {"path": rootfs, "readonly": True},
        "hostname": "gpuops-node-pod",
        "mounts": mounts,
        "linux": {
            "resources": {"devices": rules(policy, majors)},
            # hostPID: no pid namespace
            "namespaces": [{"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/proc/timer_list", "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"],
        },
    }


def main():
    runc = sys.argv[1] if len(sys.argv) > 1 else shutil.which("runc")
    if not runc:
        print(json.dumps({"ok": False, "skipped": "no runc"}))
        return 0
    majors = nvidia_majors()
    report = {"runc": subprocess.run([runc, "--version"], capture_output=True, text=True, check=False).stdout.splitlines()[:1],
              "nvidia_majors": majors, "python": sys.executable, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        rootfs = os.path.join(tmp, "rootfs")
        for name in ("proc", "dev", "sys", "host", "bin", "sbin", "lib", "lib64", "usr", "etc", "opt", "tmp"):
            os.makedirs(os.path.join(rootfs, name))
        for policy in ("default", "nvidia", "privileged"):
            bundle = os.path.join(tmp, policy)
            os.makedirs(bundle)
            with open(os.path.join(bundle, "config.json"), "w") as handle:
                json.dump(config(rootfs, policy, majors, sys.executable), handle)
            name = "gpuops-devices-%s-%d" % (policy, os.getpid())
            proc = subprocess.run([runc, "--root", os.path.join(tmp, "state"), "run", "--bundle", bundle, name],
                                  capture_output=True, text=True, check=False, timeout=120)
            subprocess.run([runc, "--root", os.path.join(tmp, "state"), "delete", "-f", name], capture_output=True, check=False)
            out = (proc.stdout + proc.stderr).strip()
            gathered = [json.loads(line[len("GATHER="):]) for line in proc.stdout.splitlines() if line.startswith("GATHER=")]
            report["runs"][policy] = {"rc": proc.returncode, "nvml_ok": "NVML-OK" in proc.stdout, "gather": gathered[0] if gathered else None,
                                      "output": out[-1200:]}
    runs = report["runs"]
    # what the design rests on: the pod as built cannot read NVML; with the NVIDIA devices allowed it can
    report["ok"] = not runs["default"]["nvml_ok"] and runs["nvidia"]["nvml_ok"] and runs["privileged"]["nvml_ok"]
    # and the collection's inventory: unknown with the device hint under the pod's list, the GPU read with the others
    default, allowed = runs["default"]["gather"] or {}, [runs[p]["gather"] or {} for p in ("nvidia", "privileged")]
    report["gather_ok"] = (default.get("available") is False and "EPERM" in (default.get("reason") or "")
                           and "gpuops_node_pod_gpu_access" in (default.get("reason") or "") and all(g.get("available") for g in allowed))
    report["ok"] = report["ok"] and report["gather_ok"]
    text = json.dumps(report, indent=2)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "node-pod-devices.json"), "w") as handle:
            handle.write(text)
    print(text)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
