# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A hostile node acts on no other node (issue 48, item 1), against a real API server (SIMULATED nodes and GPUs).

Node a's interpreter is a wrapper (tests/fakes/hostile_python.py) that rewrites its modules' results, as root on a node
can: their facts rename it after node b (``gpuops_node_name``, ``ansible_host``), hand the controller a plan row for b
with a forged reboot, another kubeconfig, the k8s_node connection's server and token, the role's report directory and
device-plugin namespace. Every module the plays run on a is wrapped. The audit log is the judge: nothing is written about
b or c, nor about their pods, whatever a says.

* hostile from its first module: the plan marks a unknown (naming the facts), the quarantine mode acts on nothing;
* hostile only once its reset ran (it behaved while it was planned): the controller's next step for a refuses, so a stays
  quarantined, and nothing touches b or c;
* recover_pods.yml after a repair: a's claimed Kubernetes name (b's) is left out, so b's rejected pod stays.
"""

from __future__ import annotations

import sys

import yaml

import hostile_python
from test_gpu_health_plan import running
from test_gpu_quarantine import PLAN_TASK, REMEDIATION, evictions, node_state, remediation_fleet, writes


def hostile(f, name, victim, when=None):
    facts = {"gpuops_node_name": victim, "ansible_host": victim, "gpuops_kubeconfig": "/nonexistent/other-cluster",
             "ansible_kubectl_host": "https://127.0.0.1:9", "ansible_kubectl_token": "stolen",
             "gpu_remediation_target": {"node": victim, "host": name, "action": "reboot", "step": "reboot", "escalate": True,
                                        "row": {"node": victim, "action": "reboot", "scope": "node", "gpus": [], "evictions": []}},
             "gpu_remediation_report_dir": str(f.tmp / "elsewhere"), "gpu_remediation_device_plugin_namespace": "kube-system"}
    log = f.tmp / ("rewrites-%s" % (when or "all"))
    path = hostile_python.install(str(f.tmp / ("hostile-%s" % (when or "all"))), sys.executable, facts, when=when, log=str(log))
    f.set_host_vars(name, ansible_python_interpreter=path)
    return log


def others(f, name):
    """The names of every object of the other nodes: the nodes, and the pods on them."""
    names = set(n["name"] for n in f.nodes if n["name"] != name)
    for pod in f.cluster.core.list_pod_for_all_namespaces().items:
        if pod.spec.node_name in names:
            names.add(pod.metadata.name)
    return names


def test_a_hostile_node_touches_no_other_node_planned_or_mid_remediation(fleet, fake_lib_dir):
    f, name, plugin, uids, extra = remediation_fleet(fleet, fake_lib_dir)
    victim = [n["name"] for n in f.nodes if n["name"] != name][0]
    touched = others(f, name)

    # hostile from its first module: planned for nothing, nothing written anywhere
    log = hostile(f, name, victim)
    rc, run = f.play(dict(extra, gpu_remediation_mode="quarantine"), playbook="gpu_remediation.yml")
    assert "gpu_health_info" in log.read_text().split(), "the wrapper rewrote nothing"
    row = dict((r["host"], r) for r in run.localhost(PLAN_TASK)["nodes"])[name]
    assert (row["node"], row["state"], row["action"], row["batch"]) == (name, "unknown", "none", None), row
    assert "returned facts named as variables the controller acts on" in row["reasons"][0] and "gpuops_node_name" in row["reasons"][0]
    assert writes(run) == [], writes(run)

    # hostile once its reset ran: a is quarantined and reset; then every controller step for it refuses
    log = hostile(f, name, victim, when="gpu_reset")
    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate"), playbook="gpu_remediation.yml")
    assert rc != 0 and log.read_text().split() == ["gpu_reset"], run.failure()
    evicted = evictions(run)  # GPU 0's pod, as the plan said before the node turned
    assert len(evicted) == 1 and evicted[0].startswith("on-gpu0-"), evicted
    assert not [w for w in writes(run) if w[2] in touched], writes(run)
    refused = [h[name] for h in run.tasks("Bring NVML's clients back (a new device-plugin process marks the GPUs Healthy again)") if name in h]
    assert refused and refused[-1]["failed"] and "gpuops_node_name" in refused[-1]["msg"], refused
    cordoned, record, marked, dummy = node_state(f, name)
    assert cordoned and marked and record["step"] == "drained"  # a stays quarantined: nothing released it
    assert not (f.tmp / "elsewhere").exists() and not (f.tmp / "report" / ("gpu-remediation-%s.json" % victim)).exists()
    assert [running(f, app)[0].metadata.uid for app in ("on-gpu1", "on-gpu2")] == [uids["on-gpu1"], uids["on-gpu2"]]
    assert dict((p.spec.node_name, p.metadata.uid) for p in f.plugin_pods() if p.spec.node_name != name) == \
        dict((n, u) for n, u in plugin.items() if n != name)
    # this API server is the session's: a quarantine left in flight would count against the later tests' capacity
    f.cluster.core.patch_node(name, {"metadata": {"annotations": {REMEDIATION: None}}})


REJECT = "gpuops.test/reject-gpu-pods"


def test_recover_pods_never_takes_a_hostile_nodes_word_for_its_name(fleet, tmp_path):
    """After a repair (site.yml sets each repaired host's Kubernetes name from gpuops_node_name and groups it in
    gpuops_repaired), recover_pods.yml deletes the rejected pods on those nodes. Node a's module renamed it after node b,
    where a pod was rejected: recover_pods leaves a out (a warning names it), so b's pod stays; b itself, repaired and
    trusted, has its rejected pod deleted in the control run."""
    f = fleet([{"name": "a", "gpus": []}, {"name": "b", "gpus": [], "labels": {REJECT: "true"}}])
    a, b = f.nodes[0]["name"], f.nodes[1]["name"]
    f.cluster.core.create_namespaced_pod(f.namespace, {"metadata": {"name": "rejected", "ownerReferences": []}, "spec": {
        "nodeName": b, "containers": [{"name": "c", "image": "registry.example/train:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    f.wait(lambda: f.cluster.core.read_namespaced_pod("rejected", f.namespace).status.reason == "UnexpectedAdmissionError", "b rejects it")
    hostile(f, a, b)
    playbook = tmp_path / "repaired.yml"
    playbook.write_text(yaml.safe_dump([
        {"hosts": "gpu_nodes", "gather_facts": False, "tasks": [
            {"name": "a module on the node", "ansible.builtin.ping": {}},
            {"name": "as site.yml's repair play", "ansible.builtin.set_fact": {"gpuops_k8s_node_name": "{{ gpuops_node_name | default(inventory_hostname) }}"}},
            {"name": "repaired", "ansible.builtin.group_by": {"key": "gpuops_repaired"}, "when": "inventory_hostname == '%s'" % a}]},
        {"name": "recover", "ansible.builtin.import_playbook": "gpuops.fleet.recover_pods"}]))
    for host in (a, b):
        f.set_host_vars(host, gpuops_node_name=host)
    rc, run = f.play({"gpuops_recover_pods": True, "gpuops_recover_bare_pods": "delete"}, playbook=str(playbook))
    assert rc == 0, run.failure()
    assert [w for w in writes(run) if w[0] == "delete"] == [] and f.cluster.core.read_namespaced_pod("rejected", f.namespace)
    # control: b repaired, trusted: its rejected pod goes (the same playbook, b grouped)
    playbook.write_text(playbook.read_text().replace("inventory_hostname == '%s'" % a, "inventory_hostname == '%s'" % b))
    rc, run = f.play({"gpuops_recover_pods": True, "gpuops_recover_bare_pods": "delete"}, playbook=str(playbook))
    assert rc == 0, run.failure()
    assert ("delete", "pods", "rejected") in writes(run), writes(run)
