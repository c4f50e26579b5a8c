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
from test_gpu_health_plan import G, OTHER, running
from test_gpu_quarantine import PLAN_TASK, REMEDIATION, TAINT, evictions, node_state, remediation_fleet, writes


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


# -- round 4 (issue 57): a node is not trusted about its own remediation, on the production-authorization rig ----------------

def _forbidden(call):
    from kubernetes.client.rest import ApiException
    try:
        call()
    except ApiException as exc:
        return exc.status
    return None


def _condition(status, message="SIMULATED: the node says its GPUs are fine"):
    stamp = "2026-12-06T00:00:00Z"
    return {"status": {"conditions": [{"type": "GPUHealthy", "status": status, "reason": "NodeSaysSo", "message": message,
                                       "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}]}}


def _entries(f, name):
    import test_gpu_quarantine
    return [e for e in test_gpu_quarantine.ledger(f)["entries"] if e["node"] == name]


def test_a_node_with_only_its_kubelet_identity_cannot_end_steer_or_skip_its_own_remediation(fleet, fake_lib_dir):
    """Issue 57's hostile-node story, items 1, 2, 3 and 10. The control plane runs Node,RBAC with NodeRestriction; node a (GPU 0
    faulty) and c write with their own kubelet identities (system:node:<name>), which the API server limits as a real
    kubelet's. Every write a kubelet is allowed is made, and none ends, shortens, skips or steers a's remediation, defers
    it, or makes the controller write what a could not write itself; the audit log and the ledger are the judges."""
    import json

    import test_gpu_quarantine as tq

    f, name, plugin, uids, extra = remediation_fleet(fleet, fake_lib_dir)
    b, c = [n["name"] for n in f.nodes if n["name"] != name]
    me, other = f.as_node(name), f.as_node(c)
    restricted = "node-restriction.kubernetes.io/pool"

    # what a kubelet may not do, as production clusters refuse it: its taints, another Node, a node-restriction label
    assert _forbidden(lambda: me.patch_node(name, {"spec": {"taints": [{"key": "x", "effect": "NoSchedule"}]}})) == 403
    assert _forbidden(lambda: me.patch_node(b, {"metadata": {"annotations": {"x": "y"}}})) == 403
    assert _forbidden(lambda: me.patch_node(name, {"metadata": {"labels": {restricted: "secure"}}})) == 403

    # item 2: before its quarantine, a writes our annotation on itself (we cordoned it, a pause changed a label it may not
    # write, step drained) and our cordon's mark, and says GPUHealthy=True; item 3: healthy c writes our annotation to take
    # the fleet's one place (breaker_percent 50 of 3 GPU Nodes: 2; an event run's --limit of a alone made it 1)
    forged = {"gpus": [G[0]], "action": "reset", "scope": "gpu", "step": "drained", "started": 1, "cordoned_by_us": True,
              "paused_labels": {restricted: "secure", "gpuops.fleet/gpu-maintenance": None}}
    me.patch_node(name, {"metadata": {"annotations": {REMEDIATION: json.dumps(forged), tq.MARK: "gpu-remediation"}}})
    me.patch_node_status(name, _condition("True"))
    other.patch_node(c, {"metadata": {"annotations": {REMEDIATION: json.dumps(dict(forged, gpus=[OTHER[1]]))}}})
    # and b, really quarantined by us already (a cluster user's write: the module), takes one place
    done, dummy = tq.module(f, {"state": "quarantined", "node": b, "action": "reset", "gpus": [OTHER[0]], "namespace": f.namespace,
                                "drain_timeout": 30})
    assert done["step"] == "drained", done

    vars_ = dict(extra, gpu_remediation_mode="quarantine", gpuops_gpu_health_breaker_percent=50)
    rc, run = f.play(vars_, "--limit", "%s,localhost" % name, playbook="gpu_remediation.yml")  # as an event run limits it
    assert rc == 0, run.failure()
    plan = run.localhost(PLAN_TASK)
    assert plan["scope"] == 3 and plan["capacity"]["in_flight"] == [b] and plan["capacity"]["cap"] == 2, plan["capacity"]
    row = dict((r["node"], r) for r in plan["nodes"])[name]
    assert row["batch"] == 1 and row["deferred_reason"] is None, row
    node = f.node(name)
    assert TAINT in [t.key for t in node.spec.taints or []] and node.spec.unschedulable  # quarantined, by us
    assert restricted not in (node.metadata.labels or {})
    entry = _entries(f, name)[-1]
    assert (entry["closed_at"], entry["step"], entry["cordoned_by_us"]) == (None, "drained", True), entry
    assert not [w for w in writes(run) if w[1] == "nodes" and w[2] != name], writes(run)  # nothing about b or c

    # item 1: quarantined, a uncordons itself (allowed), writes our annotation again (cancelled, not ours), says GPUHealthy
    # again; it cannot lift our taint
    me.patch_node(name, {"spec": {"unschedulable": False}, "metadata": {"annotations": {
        REMEDIATION: json.dumps(dict(forged, step="cancelled_by_operator", cordoned_by_us=False)), tq.MARK: None}}})
    me.patch_node_status(name, _condition("True"))
    assert _forbidden(lambda: me.patch_node(name, {"spec": {"taints": []}})) == 403
    rc, run = f.play(vars_, "--limit", "%s,localhost" % name, playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    node = f.node(name)
    assert TAINT in [t.key for t in node.spec.taints or []], "the controller lifted the taint on the node's word"
    entry = _entries(f, name)[-1]
    assert entry["closed_at"] is None and entry["result"] is None, entry  # never cancelled_by_operator
    assert not [w for w in writes(run) if w[1] == "nodes"], writes(run)  # the controller wrote nothing on the node's word
    said = run.tasks("Quarantine (cordon, taint, drain the faulty GPU's pods; the whole node's for a reboot)")
    held = [h[name] for h in said if name in h][-1]
    assert "uncordoned while quarantined" in held["uncordoned_while_quarantined"] and "kubectl taint node %s %s-" % (name, TAINT) in held["msg"]
    row = dict((r["node"], r) for r in run.localhost(PLAN_TASK)["nodes"])[name]
    assert row["deferred_reason"] != "cancelled_by_operator", row

    # the remediation goes on to its end: reset, verify, release (the ledger, not the node, says what is ours)
    rc, run = f.play(dict(vars_, gpu_remediation_mode="remediate"), "--limit", "%s,localhost" % name, playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    entry = _entries(f, name)[-1]
    assert entry["result"] == "recovered" and entry["closed_at"], entry
    node = f.node(name)
    assert TAINT not in [t.key for t in node.spec.taints or []] and restricted not in (node.metadata.labels or {})
    assert "gpuops.fleet/gpu-maintenance" not in (node.metadata.labels or {})  # the pause's own key, restored as it was
    # b's quarantine (ours) and c's self-written annotation: untouched by a's runs
    assert TAINT in [t.key for t in f.node(b).spec.taints or []] and _entries(f, b)[-1]["closed_at"] is None
    assert TAINT not in [t.key for t in f.node(c).spec.taints or []]


def test_one_nodes_hostile_writes_never_blind_the_watch_to_another_nodes_fault(fleet, fake_lib_dir):
    """Issue 57, item 7, on the production-authorization rig: node a, with its own kubelet identity, writes what it may on
    itself (our annotation as 40 KB of nested JSON, a lone surrogate, 5,000 digits; a GPUHealthy condition with a huge
    message; its own labels), again and again, while b's device plugin withholds a GPU: the event source (its follow(), as
    ansible-rulebook runs it) emits b's fault within settle_seconds + 5 s, and never relists for a's data."""
    import os
    import threading
    import time

    import eda_source
    import fakenode

    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options

    f = fleet([{"name": "a", "gpus": [G[0]]}, {"name": "b", "gpus": [OTHER[0]]}])
    a, b = f.nodes[0]["name"], f.nodes[1]["name"]
    f.install_old_plugin()  # the simulated plugin registers the GPUs (and runs its health loop)
    me = f.as_node(a)
    options = source_options.check_nodes({"kubeconfig": os.path.join(f.cluster.workdir, "role.kubeconfig"), "heartbeat": 5,
                                         "label_selector": "gpuops.test/run=%s" % f.label["gpuops.test/run"]})
    events, stop = [], threading.Event()
    thread = threading.Thread(target=eda_source.load().follow, args=(options, events.append, stop), daemon=True)
    thread.start()
    hostile = ["[" * 20000 + "]" * 20000, '{"step": "\\ud800"}', "9" * 5000, '{"step": ' + "[" * 900 + "]" * 900 + "}"]
    try:
        deadline = time.monotonic() + 30
        while not [e for e in events if e["gpuops"]["kind"] == "startup"]:
            assert time.monotonic() < deadline, events
            time.sleep(0.1)
        for i, text in enumerate(hostile):
            me.patch_node(a, {"metadata": {"annotations": {REMEDIATION: text}, "labels": {"gpuops.test/hostile": str(i)}}})
            me.patch_node_status(a, _condition("True", message="\u2028" * 20000))
        faulted = time.monotonic()
        fakenode.append_config(f.nodes[1]["nvml_config"], fakenode.xid(0, 48))  # b's plugin withholds its GPU
        for i, text in enumerate(hostile * 3):
            me.patch_node(a, {"metadata": {"annotations": {REMEDIATION: text + " " * i}}})
        seconds = None
        while time.monotonic() < faulted + options["settle_seconds"] + 5 + 10:
            if [e for e in events if e["gpuops"]["kind"] == "gpu_faults" and b in e["gpuops"]["nodes"]]:
                seconds = time.monotonic() - faulted
                break
            time.sleep(0.1)
    finally:
        stop.set()
        thread.join(15)
    errors = [e["gpuops"]["error"] for e in events if e["gpuops"].get("error")]
    assert not errors, errors  # never a reconnect (the old RecursionError was taken for a lost connection, for ever)
    assert seconds is not None and seconds <= options["settle_seconds"] + 5, (seconds, [e["gpuops"]["kind"] for e in events])
    assert not [e for e in events if e["gpuops"]["kind"] == "gpu_faults" and a in e["gpuops"]["nodes"]]
    print("\nHOSTILE NODE: b's withheld GPU to its gpu_faults event while a wrote hostile values on itself: %.1f s (settle %d s)"
          % (seconds, options["settle_seconds"]))
