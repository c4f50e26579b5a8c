# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 50's main story on a REAL kubelet v1.20.2 node (SIMULATED GPUs: fake NVML, fake nvidia-smi, the fake device
plugin with the real plugin's XID health loop, run as a DaemonSet pod), through the real ansible-rulebook running
extensions/eda/rulebooks/gpu_health.yml in remediate mode.

Three GPUs, a ReplicaSet pod on each. An XID 48 with NVML's recovery action "reset" is written for the GPU of train-b's
pod; the plugin marks it Unhealthy; the real kubelet lowers allocatable to 2; the source's event runs
playbooks/gpu_remediation.yml for this node alone: the quarantine evicts train-b's pod only (the real kubelet stops its
container), the pause takes the plugin's pod off the node (the real DaemonSet controller), the reset runs on the fake
nvidia-smi, the plugin's new pod reports every GPU Healthy, the node is released; the other pods keep their containers.
The verification pod is off: it needs nvidia-smi in a container, which the rig's images lack.

The seconds from the fault (the XID written) to the event, to train-b's pod evicted and to the release go to
out/knode-gpu-events-remediation.json (figures, not asserted: tests are not timed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import fakenode
import realnode
from realnode import wait
from test_gpu_health_node import GPUS, NAMESPACE, holders
from test_gpu_remediation_node import containers, three_pods

BIN = os.path.dirname(sys.executable)
RULEBOOK = os.path.join(realnode.ROOT, "extensions", "eda", "rulebooks", "gpu_health.yml")
PLUGIN_NAMESPACE = "gpuops-plugin"
REMEDIATION = "gpuops.fleet/gpu-remediation"


def wait_text(path, text, timeout):
    return wait(lambda: text in path.read_text(errors="replace"), "%r in the rulebook's output" % text, timeout=timeout)


def test_an_xid_on_the_real_kubelet_is_remediated_by_the_rulebook_for_that_gpu_alone(real_node, tmp_path):
    node = real_node
    node.up(GPUS, health=True, plugin=False)
    node.namespace(PLUGIN_NAMESPACE)
    node.plugin_daemonset(PLUGIN_NAMESPACE)
    pod_b, target, index, kept = three_pods(node)

    env = node.environ()
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable, "gpuops_node_name": realnode.NAME,
            "checkpoint_guard_checkpoint_path": realnode.CHECKPOINT,
            "checkpoint_guard_environment": {k: env[k] for k in ("LD_LIBRARY_PATH", "PATH", "GPUOPS_FAKE_NVML_CONFIG", "GPUOPS_FAKE_SYSTEMD_DIR")},
            "gpuops_gpu_health_kernel_log": "none", "gpuops_gpu_health_mark_path": str(tmp_path / "last-remediation.json")}
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"gpu_nodes": {"hosts": {realnode.NAME: host}}, "all": {"vars": {
        "gpuops_gpu_health_namespace": NAMESPACE, "gpu_remediation_namespace": NAMESPACE,
        "gpu_remediation_device_plugin_namespace": PLUGIN_NAMESPACE, "gpu_remediation_pause_pods": [{"name": "nvidia-device-plugin-ds"}],
        "gpu_remediation_stop_units": [], "gpu_remediation_verify": False, "gpu_remediation_drain_timeout": 120,
        "gpu_remediation_recovery_timeout": 120}}}))
    variables = tmp_path / "vars.json"
    variables.write_text(json.dumps({"gpu_remediation_mode": "remediate", "gpuops_events_settle_seconds": 2,
                                     "gpuops_events_report_dir": str(tmp_path / "report")}))
    log = tmp_path / "rulebook.log"
    renv = dict(realnode.ansible_env(tmp_path), K8S_AUTH_KUBECONFIG=node.cluster.kubeconfig,
                PATH=BIN + os.pathsep + realnode.ansible_env(tmp_path)["PATH"])
    seconds = {}

    def evicted():
        pod = node.pods(NAMESPACE).get(pod_b)
        return pod is None or pod.metadata.deletion_timestamp is not None

    def released():
        found = node.cluster.core.read_node(realnode.NAME)
        return not found.spec.unschedulable and REMEDIATION not in (found.metadata.annotations or {})

    with open(str(log), "w") as out:
        proc = subprocess.Popen([os.path.join(BIN, "ansible-rulebook"), "-i", str(inventory), "--rulebook", RULEBOOK, "--vars", str(variables),
                                 "--print-events"], cwd=str(tmp_path), env=renv, stdout=out, stderr=subprocess.STDOUT)
        try:
            wait_text(log, "'kind': 'startup'", 120)
            faulted = time.monotonic()
            fakenode.append_config(node.nvml_config, fakenode.health("recovery", index, 1), fakenode.xid(index, 48))
            wait_text(log, "'kind': 'gpu_unallocatable'", 60)
            seconds["XID written to the event"] = time.monotonic() - faulted
            wait(evicted, "train-b's pod evicted", timeout=180, interval=0.1)
            seconds["XID written to train-b's pod evicted"] = time.monotonic() - faulted
            wait(lambda: node.cluster.core.read_node(realnode.NAME).spec.unschedulable, "the quarantine", timeout=60)
            wait(released, "the node released", timeout=400, interval=0.2)
            seconds["XID written to the node released"] = time.monotonic() - faulted
            wait_text(log, "PLAY RECAP", 120)
            time.sleep(3)
        finally:
            proc.terminate()
            proc.wait(60)
    text = log.read_text(errors="replace")
    assert text.count("PLAY RECAP") == 1 and "run_playbook - ERROR" not in text, text[-5000:]
    recap = text[text.index("PLAY RECAP"):].splitlines()[1:8]
    # the run's limit is the node and localhost; the knode's Node is named 127.0.0.1, which Ansible also takes for
    # localhost, so its recap is the one host
    assert [line.split()[0] for line in recap if ": ok=" in line] == [realnode.NAME], recap
    with open(node.nvml_config) as handle:
        assert "recovery|%d|1" % index not in handle.read()  # the fake nvidia-smi's reset cleared it
    assert dict((n, c) for n, c in containers(node).items() if n in kept) == kept  # the other GPUs' containers kept running
    node.wait_allocatable(3, timeout=60)
    wait(lambda: len(containers(node)) == 3, "train-b's replacement running", timeout=180)
    new_b = next(p for p in containers(node) if p.startswith("train-b"))
    assert new_b != pod_b and holders(node, target) == ["%s/%s" % (NAMESPACE, new_b)]
    print("MAIN STORY on the real kubelet (remediate): %s" % ", ".join("%s %.1f s" % kv for kv in seconds.items()))
    os.makedirs(os.path.join(realnode.ROOT, "out"), exist_ok=True)
    with open(os.path.join(realnode.ROOT, "out", "knode-gpu-events-remediation.json"), "w") as handle:
        json.dump(dict((k, round(v, 1)) for k, v in seconds.items()), handle, indent=1)
