# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health, part 1, on a REAL kubelet v1.20.2 node (SIMULATED GPUs: fake NVML, a fake device plugin).

Three GPUs, one ReplicaSet pod on each. First an XID 63 (a row remap recorded; NVIDIA's catalog: IGNORE) hits one
GPU: the fake NVML delivers the event to the device plugin's health loop (the real plugin's, k8s-device-plugin
internal/rm/health.go, which does not skip 63), which marks that GPU Unhealthy; the real kubelet then lowers the
node's allocatable. NVML asks for nothing, so the plan reports row 17 (restart the plugin pod) and plans no drain.
Then a double-bit ECC error (XID 48): NVML's recovery action says reset, and the kernel log holds the driver's XID
line. playbooks/gpu_health.yml reads the node and plans against the real API server: the GPU-scoped eviction names
exactly the pods that kubelet's own pod-resources API says hold that GPU.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import fakenode
import realnode
from realnode import settled, wait

ROOT = realnode.ROOT
BIN = os.path.dirname(sys.executable)
GPUS = ["GPU-1a1a1a1a-1111-4111-8111-00000000001a", "GPU-2b2b2b2b-2222-4222-8222-00000000002b", "GPU-3c3c3c3c-3333-4333-8333-00000000003c"]
NAMESPACE = "gpuops-health"
PLAN_TASK = "Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)"


def inventory(node, tmp, kernel_log):
    env = node.environ()
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "gpuops_node_name": realnode.NAME,
            "gpuops_gpu_count": len(GPUS), "gpuops_lab": True,
            "checkpoint_guard_checkpoint_path": realnode.CHECKPOINT,
            "checkpoint_guard_environment": {k: env[k] for k in ("LD_LIBRARY_PATH", "PATH", "GPUOPS_FAKE_NVML_CONFIG")},
            "gpuops_gpu_health_kernel_log": "file", "gpuops_gpu_health_kernel_log_path": kernel_log,
            "gpuops_gpu_health_mark_path": str(tmp / "last-remediation.json")}
    doc = {"gpu_nodes": {"hosts": {"knode": host}},
           "all": {"vars": {"gpuops_kubeconfig": node.cluster.kubeconfig, "gpuops_gpu_health_namespace": NAMESPACE}}}
    path = tmp / "inventory.json"
    path.write_text(json.dumps(doc))
    return str(path)


def holders(node, uuid):
    """namespace/pod of every container kubelet's pod-resources API lists holding ``uuid``."""
    return sorted(set("%s/%s" % (ns, pod) for (ns, pod, dummy), devices in node.pod_resources().items()
                      if uuid in devices.get(realnode.RESOURCE, [])))


def gpu_health(node, tmp, kernel_log, name):
    """playbooks/gpu_health.yml on the node (local connection) and the real API server: (the node's plan row, the report)."""
    report_dir = tmp / ("report-" + name)
    cmd = [os.path.join(BIN, "ansible-playbook"), "-i", inventory(node, tmp, str(kernel_log)),
           os.path.join(ROOT, "playbooks", "gpu_health.yml"), "-e", json.dumps({"gpuops_report_dir": str(report_dir)})]
    proc = subprocess.run(cmd, cwd=str(tmp), env=realnode.ansible_env(tmp), capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    report = json.loads((report_dir / "gpu-health.json").read_text())
    return dict((r["node"], r) for r in report["plan"]["nodes"])[realnode.NAME], report


def test_the_plugin_withholds_a_gpu_for_an_xid_and_the_plan_reports_it_then_names_exactly_its_pods_for_a_reset(real_node, tmp_path):
    node = real_node
    node.up(GPUS, health=True)
    node.namespace(NAMESPACE)
    apps = ("train-a", "train-b", "train-c")
    for app in apps:
        node.create_replicaset(app, NAMESPACE)
    wait(lambda: settled(node, NAMESPACE, list(node.pods(NAMESPACE))) and len(node.pods(NAMESPACE)) == 3
         and all(p.status.phase == "Running" for p in node.pods(NAMESPACE).values()), "3 GPU pods running", timeout=180)
    # the faulty GPU is whichever kubelet gave train-b's pod: read from kubelet, not assumed
    resources = node.pod_resources()
    pod_b = next(p for p in node.pods(NAMESPACE) if p.startswith("train-b"))
    target = resources[(NAMESPACE, pod_b, "cuda")][realnode.RESOURCE][0]
    index = GPUS.index(target)
    assert holders(node, target) == ["%s/%s" % (NAMESPACE, pod_b)]
    assert node.allocatable() == 3

    bus = "0000:00:%02x" % (7 + index)
    kernel_log = tmp_path / "kern.log"

    # 1. XID 63 (a row remap was recorded): NVIDIA's catalog says IGNORE and NVML asks for nothing, but the plugin's
    # health loop does not skip 63, so it withholds the GPU. Row 17: reported (restart the plugin pod), never planned.
    kernel_log.write_text("[   12.000001] NVRM: GPU at PCI:%s: %s\n"
                          "[  700.100000] NVRM: Xid (PCI:%s): 63, pid=4242, name=python3, Row Remapper: New row marked for remapping, "
                          "reset gpu to activate.\n" % (bus, target, bus))
    fakenode.append_config(node.nvml_config, fakenode.xid(index, 63))
    # the plugin's health loop marks it Unhealthy; the real kubelet lowers allocatable (capacity stays)
    node.wait_allocatable(2, timeout=60)
    capacity = int(node.cluster.core.read_node(realnode.NAME).status.capacity[realnode.RESOURCE])
    assert capacity == 3
    assert "XidCriticalError: Xid=63 on Device=%s" % target in node.log("plugin")
    # kubelet stops nothing on its own: the pod on the unhealthy GPU still runs, and still holds it
    assert holders(node, target) == ["%s/%s" % (NAMESPACE, pod_b)]
    row, report = gpu_health(node, tmp_path, kernel_log, "withheld")
    assert (row["action"], row["row"], row["scope"], row["batch"], row["evictions"]) == ("observe", 17, None, None, [])
    assert row["plugin_unhealthy"] == ["%s 2 of 3 allocatable" % realnode.RESOURCE]

    # 2. XID 48 (DBE) on that GPU: the NVML event, NVML's recovery action (reset), and the driver's kernel log line
    with open(str(kernel_log), "a") as handle:
        handle.write("[  812.345678] NVRM: Xid (PCI:%s): 48, pid=4242, name=python3, An uncorrectable double bit error (DBE) "
                     "has been detected on GPU in the framebuffer at partition 0, subpartition 0.\n" % bus)
    fakenode.append_config(node.nvml_config, fakenode.health("recovery", index, 1), fakenode.xid(index, 48))
    wait(lambda: "XidCriticalError: Xid=48 on Device=%s" % target in node.log("plugin"), "the plugin's XID 48 line")
    row, report = gpu_health(node, tmp_path, kernel_log, "faulty")
    assert (row["action"], row["scope"], row["gpus"]) == ("reset", "gpu", [target])
    # exactly the pods kubelet's pod-resources API says hold the GPU, read again now
    assert sorted(e["pod"] for e in row["evictions"]) == holders(node, target)
    assert all(e["evict"] for e in row["evictions"]) and row["blockers"] == []
    # the node's read: NVML's field 230 decides, and the driver's XID line is joined to that GPU by its bus ID
    keys = set((s["key"], s["source"]) for s in row["signals"])
    assert ("recovery:1", "nvml_field") in keys and ("xid:48", "kernel_log") in keys, row["signals"]
    assert [(r["node"], r["action"], r["gpus"], r["simulated"]) for r in report["nodes"]] == [("knode", "reset", [target], True)]
    assert report["plan"]["breaker"]["state"] == "closed" and report["plan"]["ledger_written"] is False
    # report mode: every pod still runs, with its GPU
    assert sorted(holders(node, g)[0].split("/")[1][:7] for g in GPUS) == sorted(apps)
