# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 57's adversarial pass, grown by the surfaces a node, a tenant and anyone on the network feed the controller: the Node
object as its own kubelet may write it (annotations, ours among them, labels, conditions, spec.unschedulable, status), a
pod's annotations, Alertmanager's alerts, dcgmi's output. Each field of each document replaced by each hostile value
(hostile_values: wrong types, 70,000 characters, a lone surrogate, '²', 5,000 digits, JSON nested 20,000 deep) or deleted;
each surface may answer only with a result or its own typed error, never another exception. The counts are the closing
note's figures."""

from __future__ import annotations

import json

from hostile_values import mutations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import alerts
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import window as windows
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import eviction, metrics, quarantine
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, pause
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp
from ansible_collections.gpuops.fleet.plugins.module_utils._node.health import diag

NOW = 1800000000
G = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"


def _node():
    """A Node as its kubelet may write it: our annotation and mark (forged), labels, conditions, uncordoned, a full status."""
    return {"metadata": {"name": "gpu-a", "resourceVersion": "7",
                         "annotations": {quarantine.REMEDIATION: json.dumps({"gpus": [G], "action": "reset", "step": "drained",
                                                                            "cordoned_by_us": True, "paused_labels": {"a": "b"}}),
                                         quarantine.CORDON_MARK: "gpu-remediation"},
                         "labels": {"kubernetes.io/hostname": "gpu-a", "nvidia.com/gpu.present": "true"}},
            "spec": {"unschedulable": False, "taints": [{"key": quarantine.TAINT_KEY, "value": "GPU-0650a168", "effect": "NoSchedule"}]},
            "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64"}, "allocatable": {"nvidia.com/gpu": "7", "cpu": "63"},
                       "nodeInfo": {"bootID": "5b0e6f0a-0000-4000-8000-000000000001"},
                       "conditions": [{"type": "Ready", "status": "True"}, {"type": marks.CONDITION, "status": "True",
                                                                            "reason": "NodeSaysSo", "message": "fine"}]}}


def _entry():
    return {"node": "gpu-a", "gpus": [G], "action": "reset", "at": NOW - 60, "closed_at": None, "step": "drained", "scope": "gpu",
            "cordoned_by_us": True, "paused_labels": {pause.MAINTENANCE_LABEL: None}, "boot_id": "b1"}


def test_the_node_object_as_its_kubelet_writes_it_never_raises_in_what_reads_it():
    """The Node watch (slim, view, the tracker), the quarantine's record and cancel, the plan's fleet and in-flight count and
    its plan, and the metrics: every field of the Node replaced or deleted."""
    tried = 0
    tracker = nodes.Tracker()
    tracker.start([_node()], "1", "t")
    ledger = dict(ledgers.empty(), entries=[_entry()])
    items = [{"node": "gpu-a", "host": "gpu-a", "health": {}, "entries": []}]
    for dummy, dummy2, node in mutations(_node()):
        tried += 1
        assert nodes.view(nodes.slim(node)) == nodes.view(node)
        tracker.apply("MODIFIED", node, "t")
        record = marks.record(_entry(), node) if isinstance(node, dict) else None  # pylint: disable=protected-access
        if record is not None:
            marks.operator_cancelled(node, record)  # pylint: disable=protected-access
            marks.uncordoned(node, record)  # pylint: disable=protected-access
            marks.ours(node, record)  # pylint: disable=protected-access
        rp.gpu_fleet([node])
        rp._in_flight({"gpu-a": node}, ledger, NOW)  # pylint: disable=protected-access
        rp.plan(items, [node], [], [], ledger, {}, NOW)
    text = metrics.render(ledger)
    text.encode("utf-8")
    assert tried > 700
    print("adversarial pass, the Node as its kubelet writes it: %d inputs, 0 exceptions" % tried)


def test_a_pods_annotations_are_its_own_error_or_a_mode():
    policy = eviction.check_policy([{"namespace": "batch", "mode": "delete_after_timeout", "timeout_minutes": 5},
                                    {"namespace": "*", "mode": "immediate"}], None)
    pod = {"metadata": {"namespace": "batch", "name": "p", "uid": "u", "annotations": {eviction.ANNOTATION: "delete_after_timeout:30"},
                        "labels": {"job-name": "j"}, "ownerReferences": [{"kind": "Job", "name": "j", "controller": True}]},
           "spec": {"nodeName": "gpu-a"}, "status": {"phase": "Running"}}
    tried = refused = 0
    for dummy, dummy2, doc in mutations(pod):
        tried += 1
        try:
            eviction.mode_of(doc, policy)
        except eviction.PodModeError:
            refused += 1
        except (AttributeError, TypeError):  # the API's schema gives a pod its metadata and namespace: not data a tenant sets
            if isinstance(doc.get("metadata"), dict) and isinstance(doc["metadata"].get("namespace"), str):
                raise
    print("adversarial pass, a pod's annotations: %d inputs, %d named errors, 0 other exceptions" % (tried, refused))


def test_alertmanagers_alerts_are_events_or_a_payload_error():
    payload = {"version": "4", "status": "firing", "receiver": "gpuops", "alerts": [{
        "status": "firing", "labels": {"alertname": "GPUXidErrors", "node": "gpu-a", "Hostname": "gpu-a", "xid": "79"},
        "annotations": {"summary": "s"}, "startsAt": "2026-12-06T00:00:00Z", "fingerprint": "f1"}]}
    options = source_options.check_alerts({"token": "t" * 16})
    window = windows.FaultWindow(5, 600)
    window.known = {"gpu-a": None}
    tried = refused = 0
    for dummy, dummy2, doc in mutations(payload):
        tried += 1
        try:
            for event in alerts.events(doc, options, "t", window.known):
                window.alert(event)
                assert event["gpuops"]["node"] in (None, "gpu-a") and json.dumps(event)
        except alerts.PayloadError:
            refused += 1
    print("adversarial pass, Alertmanager's alerts: %d inputs, %d refused (400), 0 other exceptions" % (tried, refused))


def test_dcgmis_output_is_a_verdict_or_none_never_a_pass_it_did_not_prove():
    real = {"DCGM GPU Diagnostic": {"test_categories": [
        {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"gpu_ids": "0,1", "status": "PASS"}]}]},
        {"category": "Hardware", "tests": [{"name": "GPU Memory", "results": [{"gpu_ids": "1", "status": "Fail", "warnings": [
            {"warning": "w", "error_id": 83}]}, {"gpu_ids": 0, "status": "PASS"}]}]}], "version": "3.3.5"}}
    tried = passed = 0
    for dummy, dummy2, doc in mutations(real):
        for text in (json.dumps(doc), "WARNING: x\n" + json.dumps(doc) + "\ntrailer"):
            tried += 1
            ok, failed, why = diag.verdict(diag.parse(text), [0, 1])
            assert not (ok and (failed or why))
            passed += bool(ok)
    # GPU 1 failed in the real output: only a mutation that removed or renamed that failure may pass it, with a PASS of its own
    print("adversarial pass, dcgmi's output: %d inputs, %d passes, 0 exceptions" % (tried, passed))
