# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""GPU health, part 2, on a REAL kubelet v1.20.2 node (SIMULATED GPUs: fake NVML, fake nvidia-smi, a fake device
plugin running the real plugin's XID health loop): quarantine, reset, recover, release; the GPUHealthy Node condition
through the real kubelet's status updates.

Three GPUs, one ReplicaSet pod on each. An XID 48 with NVML's recovery action "reset" hits train-b's GPU: the plugin
marks it Unhealthy and the real kubelet lowers allocatable to 2. The plan's row goes to gpuops.fleet.gpu_quarantine:
exactly train-b's pod is evicted and the real kubelet stops its container; the pods on the other GPUs keep their
containers. The device plugin holds NVML (its health loop), so gpuops.fleet.gpu_reset refuses while it runs, naming
nothing changed; with the plugin stopped (on a cluster: its pod paused) the reset runs on the fake nvidia-smi, which
clears the recovery action; both resets run through gpuops.fleet.k8s_node (a node pod over the API, no SSH). A new
plugin process reports every GPU Healthy (the only way the plugin does): allocatable is back to 3. The release
uncordons the node, and train-b's replacement pod is admitted on the reset GPU.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import fakenode
import realnode
from realnode import wait
from test_gpu_health_node import GPUS, NAMESPACE, gpu_health, holders

BIN = os.path.dirname(sys.executable)


NODE_PODS = "gpuops-node-pods"


def playbook(node, tmp, name, tasks, hosts="localhost", through_api=False, exec_on="auto"):
    """One play of ``tasks`` on localhost (the controller) or on the node with its fake tools: a local connection, or
    ``through_api``: gpuops.fleet.k8s_node (a node pod over the API and the real kubelet's exec stream), chrooted into the
    host (``exec_on`` auto) or beside it (pod: the image's Python, host files under /host, the rig's NVML where a driver
    root keeps it, nvidia-smi and systemd's tools chrooted into the host), whose pod a second play deletes."""
    path = tmp / ("%s.yml" % name)
    env_node = node.environ()
    plays = [{"hosts": hosts, "gather_facts": False, "tasks": tasks}]
    if hosts == "knode":
        plays[0]["environment"] = {k: env_node[k] for k in ("LD_LIBRARY_PATH", "PATH", "GPUOPS_FAKE_NVML_CONFIG", "GPUOPS_FAKE_SYSTEMD_DIR")}
        if exec_on == "pod":
            plays[0]["environment"] = {"PATH": env_node["PATH"], "GPUOPS_FAKE_NVML_CONFIG": "/host" + node.nvml_config,
                                       "GPUOPS_FAKE_SYSTEMD_DIR": env_node["GPUOPS_FAKE_SYSTEMD_DIR"]}
    if through_api:
        plays.append({"hosts": "localhost", "gather_facts": False, "tasks": [
            {"name": "the run's node pod deleted", "gpuops.fleet.node_pods": {"state": "absent"}, "delegate_to": "knode"}]})
    path.write_text(json.dumps(plays))
    host = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    if through_api:
        host.update(realnode.through_api(node, NODE_PODS))
        if exec_on == "pod":
            host.update(gpuops_node_exec_on="pod", gpuops_node_pod_image=node.python_image, ansible_python_interpreter="/usr/bin/python3")
    inventory = tmp / ("inventory-remediation-%s.json" % (exec_on if through_api else "local"))
    inventory.write_text(json.dumps({"all": {"hosts": {"knode": host}, "vars": {"ansible_python_interpreter": sys.executable}}}))
    env = dict(realnode.ansible_env(tmp), ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", K8S_AUTH_KUBECONFIG=node.cluster.kubeconfig)
    proc = subprocess.run([os.path.join(BIN, "ansible-playbook"), "-i", str(inventory), str(path)], cwd=str(tmp), env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    out = json.loads(proc.stdout)
    return [t["hosts"][hosts if hosts != "localhost" else "localhost"] for t in out["plays"][0]["tasks"]]


def condition(node):
    """(status, reason) of the Node's GPUHealthy condition, or None."""
    found = [c for c in node.cluster.core.read_node_status(realnode.NAME).status.conditions or [] if c.type == "GPUHealthy"]
    return (found[0].status, found[0].reason) if found else None


class ConditionWatch:
    """GPUHealthy read every 2 s in a thread from its start until ``stop()``: the values seen, and the real kubelet's
    status patches meanwhile."""

    def __init__(self, node):
        self.node, self.seen, self.started = node, set(), time.monotonic()
        self.offset = node.cluster.audit_offset()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        self.seconds = None

    def _run(self):
        while not self.done.is_set():
            self.seen.add(condition(self.node))
            self.done.wait(2)

    def until(self, seconds):
        """Wait until the watch is ``seconds`` old; the seconds waited (the padding)."""
        left = max(0.0, seconds - (time.monotonic() - self.started))
        time.sleep(left)
        return left

    def stop(self):
        self.done.set()
        self.thread.join(10)
        self.seen.add(condition(self.node))
        self.seconds = time.monotonic() - self.started
        return self.seen, kubelet_status_patches(self.node.cluster, self.offset)


def kubelet_status_patches(cluster, offset):
    """How many status patches the real kubelet made since ``offset`` (the audit log: its own identity, system:node:<name>,
    as on a production cluster)."""
    return sum(1 for e in cluster.audit_events(offset, user="system:node:%s" % realnode.NAME)
               if e["verb"] == "patch" and (e.get("objectRef") or {}).get("subresource") == "status"
               and (e.get("objectRef") or {}).get("resource") == "nodes" and (e.get("userAgent") or "").startswith("kubelet"))


def containers(node):
    """{pod name: container ID} of the namespace's running pods."""
    found = {}
    for name, pod in node.pods(NAMESPACE).items():
        for status in pod.status.container_statuses or []:
            if status.container_id and status.state.running:
                found[name] = status.container_id
    return found


def three_pods(node):
    """A ReplicaSet pod on each GPU, running: (train-b's pod, its GPU, that GPU's index, {the others: their container})."""
    node.namespace(NAMESPACE)
    for app in ("train-a", "train-b", "train-c"):
        node.create_replicaset(app, NAMESPACE)
    wait(lambda: len(containers(node)) == 3, "3 GPU pods running", timeout=180)
    pod_b = next(p for p in node.pods(NAMESPACE) if p.startswith("train-b"))
    target = node.pod_resources()[(NAMESPACE, pod_b, "cuda")][realnode.RESOURCE][0]
    return pod_b, target, GPUS.index(target), dict((n, c) for n, c in containers(node).items() if n != pod_b)


def test_quarantine_reset_recover_release_on_the_real_kubelet(real_node, tmp_path):
    node = real_node
    node.up(GPUS, health=True)
    pod_b, target, index, kept = three_pods(node)
    kernel_log = tmp_path / "kern.log"
    kernel_log.write_text("")
    fakenode.append_config(node.nvml_config, fakenode.health("recovery", index, 1), fakenode.xid(index, 48))
    node.wait_allocatable(2, timeout=60)
    row, dummy = gpu_health(node, tmp_path, kernel_log, "before")
    assert (row["action"], row["gpus"], [e["pod"] for e in row["evictions"]]) == ("reset", [target], ["%s/%s" % (NAMESPACE, pod_b)])

    # the figures of the closing note (out/knode-gpu-remediation.json): each step's seconds, and the API requests of the
    # node steps through gpuops.fleet.k8s_node (user gpuops; the controller's steps and the test's own run as the admin)
    seconds = {}
    offset = node.cluster.audit_offset()
    started = time.monotonic()

    # quarantine: exactly train-b's pod goes; the real kubelet stops its container
    done = playbook(node, tmp_path, "quarantine", [{"name": "q", "gpuops.fleet.gpu_quarantine": {
        "state": "quarantined", "plan": row, "namespace": NAMESPACE, "drain_timeout": 120}}])[0]
    assert done["changed"] and done["step"] == "drained" and done["evicted"] == ["%s/%s" % (NAMESPACE, pod_b)], done
    wait(lambda: pod_b not in node.pods(NAMESPACE), "train-b's pod gone from the node", timeout=120)
    seconds["quarantine (until the real kubelet stopped the pod)"] = time.monotonic() - started
    assert holders(node, target) == []
    assert dict((n, c) for n, c in containers(node).items() if n in kept) == kept  # the other GPUs' containers kept running

    # the Node condition GPUHealthy (nodes/status): False while quarantined, watched from here to the release (2 minutes at
    # least) through the real kubelet's own status patches - it patches when its status changes (the plugin's stop and
    # start below change allocatable) - a strategic merge keyed by type on both sides
    assert condition(node) == ("False", "Recovery1"), condition(node)
    watch = ConditionWatch(node)

    # the plugin's health loop holds NVML: the reset is refused, nothing changed. The resets run through the API alone
    # (gpuops.fleet.k8s_node: a node pod, chrooted into the host), as on a managed cluster without SSH
    node.namespace(NODE_PODS)
    reset = {"name": "reset", "gpuops.fleet.gpu_reset": {"gpus": [target], "stop_units": [], "lock_dir": str(tmp_path / "run"),
                                                         "mark_path": str(tmp_path / "last-remediation.json")},
             "ignore_errors": True}
    step = time.monotonic()
    refused = playbook(node, tmp_path, "reset-held", [reset], hosts="knode", through_api=True)[0]
    seconds["reset refused while the plugin holds NVML (k8s_node)"] = time.monotonic() - step
    assert refused["failed"] and "In use by another client" in refused["msg"] and refused["persistence_restored"] == [target], refused
    # and beside the host (exec_on pod, as on a host without python3): NVML from a driver root in the pod, nvidia-smi on
    # the host; the same refusal, persistence mode back
    driver = tmp_path / "driver-root" / "usr" / "lib" / "x86_64-linux-gnu"
    driver.mkdir(parents=True)
    shutil.copy(os.path.join(node.lib_dir, "libnvidia-ml.so.1"), str(driver / "libnvidia-ml.so.1"))
    beside = dict(reset, **{"gpuops.fleet.gpu_reset": dict(reset["gpuops.fleet.gpu_reset"], driver_root=str(tmp_path / "driver-root"))})
    refused = playbook(node, tmp_path, "reset-held-beside", [beside], hosts="knode", through_api=True, exec_on="pod")[0]
    assert refused["failed"] and "In use by another client" in refused["msg"] and refused["persistence_restored"] == [target], refused
    assert "recovery|%d|1" % index in Path(node.nvml_config).read_text()

    # the plugin paused (stopped), the reset runs and clears the recovery action
    node.plugin_stop()
    step = time.monotonic()
    done = playbook(node, tmp_path, "reset", [dict(reset, ignore_errors=False)], hosts="knode", through_api=True)[0]
    seconds["reset (k8s_node)"] = time.monotonic() - step
    assert done["changed"] and done["nvidia_smi_rc"] == 0 and done["post"] == [] and done["reset"] == [target], done
    # a new plugin process: every GPU Healthy again, the real kubelet's allocatable back to capacity
    step = time.monotonic()
    node.plugin_start()
    node.wait_allocatable(3, timeout=60)
    seconds["a new plugin process, allocatable back to 3"] = time.monotonic() - step
    step = time.monotonic()
    padding = watch.until(120)
    seen, patches = watch.stop()
    assert seen == {("False", "Recovery1")} and patches >= 1, (seen, patches)
    assert [c.status for c in node.cluster.core.read_node_status(realnode.NAME).status.conditions if c.type == "Ready"] == ["True"]
    seconds["the condition watched through the real kubelet's status patches"] = watch.seconds
    seconds["kubelet's status patches while watched"] = patches
    step = time.monotonic()

    released = playbook(node, tmp_path, "release", [{"name": "r", "gpuops.fleet.gpu_quarantine": {
        "state": "released", "node": realnode.NAME, "namespace": NAMESPACE, "result": "recovered"}}])[0]
    assert released["changed"] and released["uncordoned"], released
    seconds["release"] = time.monotonic() - step
    seconds["quarantine to release (less the watch's padding)"] = time.monotonic() - started - padding
    assert condition(node) == ("True", "Recovered"), condition(node)
    calls = realnode.api_calls(node.cluster, offset)
    # train-b's replacement is admitted on the reset GPU; the other pods never restarted
    wait(lambda: len(containers(node)) == 3, "train-b's replacement running", timeout=180)
    # (the ReplicaSet's pods name the node, as field report 000's do, so kubelet itself refused the replacements while
    # the GPU was out: OutOf nvidia.com/gpu; with a scheduler the cordon and taint keep them off the node)
    new_b = next(p for p in containers(node) if p.startswith("train-b"))
    assert new_b != pod_b and holders(node, target) == ["%s/%s" % (NAMESPACE, new_b)]
    assert dict((n, c) for n, c in containers(node).items() if n in kept) == kept
    row, dummy = gpu_health(node, tmp_path, kernel_log, "after")
    assert row["action"] == "none", row
    assert node.cluster.core.list_namespaced_pod(NODE_PODS).items == [], "a node pod was left"
    os.makedirs(os.path.join(realnode.ROOT, "out"), exist_ok=True)
    with open(os.path.join(realnode.ROOT, "out", "knode-gpu-remediation.json"), "w") as handle:
        json.dump({"seconds": dict((k, round(v, 1)) for k, v in seconds.items()), "k8s_node_api_calls": calls,
                   "k8s_node_api_requests": sum(calls.values())}, handle, indent=1, sort_keys=True)
