# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What training fleets need from a remediation, on a real API server (SIMULATED nodes and GPUs), through
playbooks/gpu_remediation.yml in remediate mode, the audit log as the judge.

A 4-GPU node whose GPUs all ask for a reset (NVML's recovery action), one pod on each, of four namespaces: a training
Job's worker (``training-*`` allow_completion), an inference ReplicaSet's (``inference-*`` immediate), a batch one
(``batch-*`` delete_after_timeout, 1 minute) and a kube-system one (a system namespace). Only the inference pod is
evicted at once; the node waits at awaiting_pods with the Node condition GPUHealthy False; a second run writes nothing;
after the minute the batch pod goes; nothing in kube-system is touched (no write of ours there, ever); once the training
pod has ended and kube-system's owner removed its pod, the next run resets the GPUs and releases the node (GPUHealthy
True). Then an operator's removal of our taint (which no kubelet may make) cancels a quarantine: the ledger and the report
say cancelled_by_operator, only our marks come off, and the next run leaves the node alone for the same signal (an uncordon
alone cancels nothing: tests/kube/test_hostile_node.py). Bad rules fail before any node is touched.
"""

from __future__ import annotations

import time

from test_gpu_health_plan import G, running
from test_gpu_quarantine import REMEDIATION, TAINT, evictions, ledger, node_state, remediation_fleet, report, writes

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import due as dues
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes as event_nodes

G4 = G + ["GPU-55555555-2222-3333-4444-555555555555"]
CONDITION = "GPUHealthy"


def gpu_pod_template(app, node, restart="Always"):
    return {"metadata": {"labels": {"app": app}},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node}, "restartPolicy": restart,
                     "containers": [{"name": "work", "image": "registry.example/work:1", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}}


def replica_set(f, namespace, app, node):
    f.cluster.apps.create_namespaced_replica_set(namespace, {"metadata": {"name": app}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"app": app}}, "template": gpu_pod_template(app, node)}})


def training_job(f, namespace, app, node):
    # OnFailure: the simulated kubelet runs it until the test ends it (a Never pod would run to completion at once)
    f.cluster.batch.create_namespaced_job(namespace, {"metadata": {"name": app}, "spec": {
        "backoffLimit": 0, "template": gpu_pod_template(app, node, restart="OnFailure")}})


def condition(f, name):
    found = [c for c in f.node(name).status.conditions or [] if c.type == CONDITION]
    return (found[0].status, found[0].reason) if found else None


def mixed_fleet(fleet, fake_lib_dir):
    """One 4-GPU node (the device plugin deployed), one pod per GPU in four namespaces, every GPU asking for a reset."""
    suffix = "%d" % time.monotonic_ns()
    spaces = {"training": "training-" + suffix[-8:], "inference": "inference-" + suffix[-8:], "batch": "batch-" + suffix[-8:],
              "system": "kube-system"}

    f, name, dummy, dummy2, extra = remediation_fleet(fleet, fake_lib_dir, nodes=[{"name": "a", "gpus": G4}])
    # remediation_fleet's three ReplicaSet pods hold GPUs 0-2 in the fleet's namespace: this test's pods replace them
    for app in ("on-gpu0", "on-gpu1", "on-gpu2"):
        f.cluster.apps.delete_namespaced_replica_set(app, f.namespace, propagation_policy="Foreground")
    f.wait(lambda: not [p for p in f.cluster.core.list_namespaced_pod(f.namespace).items if (p.metadata.labels or {}).get("app", "").startswith("on-gpu")],
           "the fleet's own GPU pods gone")
    for kind in ("training", "inference", "batch"):
        f.cluster.namespace(spaces[kind])
    apps = {"training": "train-" + suffix[-6:], "inference": "serve-" + suffix[-6:], "batch": "sweep-" + suffix[-6:],
            "system": "gpuops-test-sys-" + suffix[-6:]}
    training_job(f, spaces["training"], apps["training"], name)
    for kind in ("inference", "batch", "system"):
        replica_set(f, spaces[kind], apps[kind], name)
    for kind in apps:
        f.wait(lambda kind=kind: running(f, apps[kind], spaces[kind]), "%s's pod running" % kind)
    cfg = f.tmp / "nodes" / name / "fake_nvml.cfg"
    with open(str(cfg), "a") as handle:
        handle.write("".join("recovery|%d|1\n" % i for i in range(4)))
    rules = [{"namespace": "training-*", "mode": "allow_completion"},
             {"namespace": "batch-*", "mode": "delete_after_timeout", "timeout_minutes": "1"},  # a survey's string
             {"namespace": "inference-*", "mode": "immediate"}, {"namespace": "*", "mode": "immediate"}]
    extra = dict(extra, gpuops_eviction_modes=rules, gpu_remediation_mode="remediate")
    return f, name, spaces, apps, extra


def due(f, checker):
    """What the event source would offer now (due.Checker on the real API server: the ledger the module wrote, the pods the API
    lists on the node, the Nodes as the watch sees them): ``[(node, why)]``."""
    tracker = event_nodes.Tracker()
    tracker.start([f.cluster.api_client.sanitize_for_serialization(n) for n in f.cluster.core.list_node().items], "0", "now")
    found = checker.check(tracker.views, time.time(), "now")
    assert checker.error is None, checker.error
    return [(e["gpuops"]["node"], e["gpuops"]["why"]) for e in found]


def test_eviction_modes_per_namespace_the_training_pod_runs_to_its_end_and_the_reset_waits_for_it(fleet, fake_lib_dir):
    f, name, spaces, apps, extra = mixed_fleet(fleet, fake_lib_dir)
    pod = dict((k, "%s/%s" % (spaces[k], running(f, apps[k], spaces[k])[0].metadata.name)) for k in apps)
    uid = dict((k, running(f, apps[k], spaces[k])[0].metadata.uid) for k in apps)
    try:
        rc, run = f.play(extra, playbook="gpu_remediation.yml")
        assert rc == 0, run.failure()
        # only the immediate pod is evicted at once; the node waits at awaiting_pods, quarantined, its condition False
        assert evictions(run) == [pod["inference"].split("/")[1]], run.tasks("Remediate the node")
        unschedulable, record, marked, taints = node_state(f, name)
        assert unschedulable and record["step"] == "awaiting_pods" and taints
        assert condition(f, name) == ("False", "Recovery1")
        held = report(f, name)
        assert held["outcome"] == "awaiting_pods" and held["quarantined"] and held["evicted"] == [pod["inference"]]
        waiting = dict((w["pod"], w) for w in held["waiting_for"])
        assert sorted(waiting) == sorted([pod["training"], pod["batch"], pod["system"]])
        assert (waiting[pod["training"]]["mode"], waiting[pod["batch"]]["mode"], waiting[pod["system"]]["mode"]) == (
            "allow_completion", "delete_after_timeout", "system")
        assert all(w["age_seconds"] is not None and w["age_seconds"] >= 0 for w in waiting.values())
        # the training worker is a Job's pod: the report names the job and its pods
        job = [j for j in held["jobs"] if j["kind"] == "Job"]
        assert job and job[0]["name"] == apps["training"] and [m["pod"] for m in job[0]["pods"]] == [pod["training"]]
        assert writes(run, "kube-system") == []

        # issue 59, item 2: the event source offers it again only when its wait is over (nothing is due while the pods run)
        from kubernetes.client.exceptions import ApiException

        checker = dues.Checker(f.cluster.core, f.namespace, ApiException)
        assert due(f, checker) == []
        entry = [e for e in ledger(f)["entries"] if e["node"] == name and not e["closed_at"]][0]
        assert sorted(w["pod"] for w in entry["waiting_for"]) == sorted([pod["training"], pod["batch"], pod["system"]])
        assert [w["due_at"] for w in entry["waiting_for"] if w["pod"] == pod["batch"]] == [entry["at"] + 60]

        # a second run in between writes nothing new
        rc, run = f.play(extra, playbook="gpu_remediation.yml")
        assert rc == 0, run.failure()
        assert writes(run) == [] and evictions(run) == []
        assert running(f, apps["batch"], spaces["batch"])[0].metadata.uid == uid["batch"]

        # the batch pod goes once the fault (the ledger's entry) is a minute old
        opened = [e for e in ledger(f)["entries"] if e["node"] == name and not e["closed_at"]][0]["at"]
        time.sleep(max(0, opened + 61 - time.time()))
        assert due(f, checker) == [(name, "deadline")]  # the batch pod's time has come: offered again, once (then backed off)
        assert due(f, checker) == []
        rc, run = f.play(extra, playbook="gpu_remediation.yml")
        assert rc == 0, run.failure()
        assert evictions(run) == [pod["batch"].split("/")[1]]
        assert node_state(f, name)[1]["step"] == "awaiting_pods"
        assert running(f, apps["training"], spaces["training"])[0].metadata.uid == uid["training"]  # still running
        assert running(f, apps["system"], spaces["system"])[0].metadata.uid == uid["system"]
        assert writes(run, "kube-system") == []

        # the training pod ends (as kubelet reports it), kube-system's owner removes its own pod: the next run resets, releases
        training = running(f, apps["training"], spaces["training"])[0]
        f.cluster.core.patch_namespaced_pod_status(training.metadata.name, spaces["training"], {"status": {"phase": "Succeeded"}})
        f.cluster.apps.delete_namespaced_replica_set(apps["system"], "kube-system", propagation_policy="Foreground")
        f.wait(lambda: not running(f, apps["system"], "kube-system"), "kube-system's pod gone")
        # what it waited for is gone (kube-system's pod, once its deletion is done: a pod being deleted still holds the GPU)
        fresh, offered = dues.Checker(f.cluster.core, f.namespace, ApiException), []
        f.wait(lambda: offered.extend(due(f, fresh)) or offered, "the node offered again once its pods are gone")
        assert offered == [(name, "pods_gone")]
        rc, run = f.play(extra, playbook="gpu_remediation.yml")
        assert rc == 0, run.failure()
        assert evictions(run) == []
        assert node_state(f, name) == (False, None, False, [])
        assert "recovery|" not in (f.tmp / "nodes" / name / "fake_nvml.cfg").read_text()  # the reset ran
        entry = ledger(f)["entries"][-1]
        assert (entry["node"], entry["result"]) == (name, "recovered") and entry["recover_seconds"] >= 60
        assert condition(f, name) == ("True", "Recovered")
    finally:
        f.cluster.apps.delete_collection_namespaced_replica_set("kube-system", label_selector="app=%s" % apps["system"])


def test_an_operator_who_removes_our_taint_cancels_the_remediation_and_the_next_run_leaves_the_node_alone(fleet, fake_lib_dir):
    f, name, dummy, dummy2, extra = remediation_fleet(fleet, fake_lib_dir)
    extra = dict(extra, gpu_remediation_mode="quarantine")
    rc, run = f.play(extra, playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert node_state(f, name)[0] and condition(f, name) == ("False", "Recovery1")

    # the operator takes the node back as the guide says: kubectl taint node <node> gpuops.fleet/gpu-unhealthy-
    node = f.node(name)
    kept = [f.cluster.api_client.sanitize_for_serialization(t) for t in node.spec.taints or [] if t.key != TAINT]
    f.cluster.core.patch_node(name, {"spec": {"taints": kept}})
    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate"), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert evictions(run) == []
    unschedulable, record, marked, taints = node_state(f, name)
    assert (unschedulable, record, marked, taints) == (False, None, False, [])
    entry = [e for e in ledger(f)["entries"] if e["node"] == name][-1]
    assert entry["result"] == "cancelled_by_operator" and entry["closed_at"] and entry["keys"] == ["recovery:1"]
    held = report(f, name)
    assert held["outcome"] == "cancelled_by_operator" and held["cancelled_by_operator"] == "removed the taint %s" % TAINT
    assert not held["quarantined"]
    assert condition(f, name) == ("Unknown", "CancelledByOperator")

    # the same signal: the plan leaves the node alone, nothing is written
    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate"), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert writes(run) == []
    row = [r for r in run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")["nodes"]
           if r["node"] == name][0]
    assert row["deferred_reason"] == "cancelled_by_operator" and row["batch"] is None
    assert TAINT not in [t.key for t in f.node(name).spec.taints or []] and REMEDIATION not in (f.node(name).metadata.annotations or {})


def test_bad_eviction_rules_fail_before_any_node_is_touched(fleet, fake_lib_dir):
    f, name, dummy, dummy2, extra = remediation_fleet(fleet, fake_lib_dir)
    for rules, named in (([{"namespace": "*", "mode": "gentle"}], "eviction_modes[0].mode"),
                         ([{"namespace": "Training_*", "mode": "immediate"}, {"namespace": "*", "mode": "immediate"}], "eviction_modes[0].namespace"),
                         ([{"namespace": "batch", "mode": "immediate"}], "eviction_modes[0].namespace")):
        rc, run = f.play(dict(extra, gpu_remediation_mode="remediate", gpuops_eviction_modes=rules), playbook="gpu_remediation.yml")
        assert rc != 0 and named in run.failure(), run.failure()
        assert writes(run) == []
    # a pod's annotation that asks for a harsher mode than its namespace's keeps its node out of the plan, named
    victim = [p for p in f.cluster.core.list_namespaced_pod(f.namespace).items if (p.metadata.labels or {}).get("app") == "on-gpu0"][0]
    f.cluster.core.patch_namespaced_pod(victim.metadata.name, f.namespace, {"metadata": {"annotations": {"gpuops.fleet/eviction-mode": "immediate"}}})
    rules = [{"namespace": "*", "mode": "allow_completion"}]
    rc, run = f.play(dict(extra, gpu_remediation_mode="remediate", gpuops_eviction_modes=rules), playbook="gpu_remediation.yml")
    assert rc == 0, run.failure()
    assert writes(run) == []
    row = [r for r in run.localhost("Plan (read-only unless the breaker trips with gpuops_gpu_health_record, or is reset)")["nodes"]
           if r["node"] == name][0]
    assert row["deferred_reason"] == "blocked" and [b["kind"] for b in row["blockers"]] == ["eviction_mode"]
    assert "%s/%s" % (f.namespace, victim.metadata.name) in row["blockers"][0]["detail"] and "harsher" in row["blockers"][0]["detail"]
