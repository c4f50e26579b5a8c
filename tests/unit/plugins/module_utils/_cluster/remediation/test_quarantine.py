# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_quarantine's pure parts: the parameters (a plan row fills them, bad input names the option), the annotation read
strictly, the targets by drain's rules, and the eviction by UID. The API behaviour is tests/kube/test_gpu_quarantine.py's."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, pause
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

G0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
BASE = {"state": "quarantined", "plan": None, "node": None, "gpus": None, "action": None, "scope": None, "evictions": None, "blockers": None,
        "keys": None, "driver_version": None, "run": None, "result": "recovered", "namespace": "gpuops-system", "drain_timeout": 300,
        "drain_force": False, "drain_delete_emptydir_data": False}
ROW = {"node": "gpu-a", "action": "reset", "scope": "gpu", "gpus": [G0], "keys": ["recovery:1"], "driver_version": "580.65.06",
       "evictions": [{"pod": "ml/train-0", "uid": "u0", "evict": True}], "blockers": [{"kind": "pdb", "pdb": "ml/keep"}]}


def params(**kw):
    return q.check_params(dict(BASE, **kw))


def test_a_plan_row_fills_the_options_and_given_options_win():
    p = params(plan=ROW)
    assert (p["node"], p["gpus"], p["action"], p["scope"], p["keys"]) == ("gpu-a", [G0], "reset", "gpu", ["recovery:1"])
    assert p["evictions"] == [{"pod": "ml/train-0", "uid": "u0"}] and p["blockers"] == ROW["blockers"]
    assert params(plan=ROW, node="gpu-b")["node"] == "gpu-b"
    # a reboot is node-scoped whatever the row's GPUs
    assert params(node="gpu-a", action="reboot")["scope"] == "node"
    assert params(node="gpu-a", gpus=[G0], action="reset", evictions=["ml/train-0"])["evictions"] == [{"pod": "ml/train-0", "uid": None}]


@pytest.mark.parametrize("bad, field", [
    ({"node": "Bad_Node", "action": "reset", "gpus": [G0]}, "node"),
    ({"node": "gpu-a", "action": "observe", "gpus": [G0]}, "action"),
    ({"node": "gpu-a", "action": "reset"}, "gpus"),
    ({"node": "gpu-a", "action": "reset", "gpus": ["0"]}, "gpus[0]"),
    ({"node": "gpu-a", "action": "reset", "gpus": [G0], "scope": "node"}, "scope"),
    ({"node": "gpu-a", "action": "reset", "gpus": [G0], "evictions": ["ml/Train 0"]}, "evictions[0]"),
    ({"node": "gpu-a", "action": "reset", "gpus": [G0], "drain_timeout": 0}, "drain_timeout"),
    ({"node": "gpu-a", "plan": "gpu-a"}, "plan"),
])
def test_bad_input_names_the_option(bad, field):
    with pytest.raises(ParameterError) as err:
        params(**bad)
    assert err.value.field == field


def test_the_record_comes_from_the_ledger_never_the_nodes_annotation():
    """The quarantine's record is the node's open ledger entry; the annotation (which the node may write) is never read. An
    entry of before the record (no step) is read with what the node cannot forge: our taint, and our cordon's mark."""
    tainted = {"metadata": {"name": "gpu-a", "annotations": {q.REMEDIATION: "anything", q.CORDON_MARK: "gpu-remediation"}},
               "spec": {"unschedulable": True, "taints": [{"key": q.TAINT_KEY, "effect": "NoSchedule"}]}}
    assert marks.record(None, tainted) is None
    entry = {"node": "gpu-a", "gpus": [G0], "action": "reset", "at": 5, "step": "drained", "cordoned_by_us": False, "scope": "gpu"}
    assert marks.record(entry, tainted)["step"] == "drained" and not marks.record(entry, tainted)["cordoned_by_us"]
    legacy = {"node": "gpu-a", "gpus": [G0], "action": "reset", "at": 5}
    assert (marks.record(legacy, tainted)["step"], marks.record(legacy, tainted)["cordoned_by_us"], marks.record(legacy, tainted)["scope"]) == (
        "draining", True, "gpu")
    assert marks.record(legacy, {"metadata": {"name": "gpu-a"}, "spec": {}})["step"] == q.MARKING
    # a run killed after its node patch, before its next ledger write: the taint proves the patch
    assert marks.record(dict(entry, step=q.MARKING), tainted)["step"] == "draining"


def pod(name, uid, owner="ReplicaSet", phase="Running"):
    meta = {"name": name, "namespace": "ml", "uid": uid}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": "o", "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": "gpu-a"}, "status": {"phase": phase}}


def test_targets_by_uid_for_a_gpu_and_by_drains_rules_for_a_node():
    pods = [pod("train-0", "u0"), pod("train-1", "u1"), pod("dcgm", "u2", owner="DaemonSet"), pod("done", "u3", phase="Succeeded")]
    p = params(plan=dict(ROW, evictions=[{"pod": "ml/train-0", "uid": "u0"}, {"pod": "ml/train-1", "uid": "other"}, {"pod": "ml/gone", "uid": "u9"}]))
    to_evict, gone, skipped, refusals, waiting = q._targets(p, pods, 0, 0)
    # train-1 is there with another UID: a pod recreated under that name is not the one the plan named
    assert [e["pod"] for e in to_evict] == ["ml/train-0"] and gone == ["ml/train-1", "ml/gone"] and not skipped and not refusals
    node = params(node="gpu-a", action="reboot")
    to_evict, gone, skipped, refusals, waiting = q._targets(node, pods + [pod("notebook", "u4", owner=None)], 0, 0)
    assert sorted(e["pod"] for e in to_evict) == ["ml/train-0", "ml/train-1"]
    assert [s["pod"] for s in skipped] == ["ml/dcgm"] and gone == ["ml/done"]
    assert len(refusals) == 1 and "ml/notebook has no controller" in refusals[0] and waiting == []


class Conflict(Exception):
    def __init__(self, status, body):
        super().__init__(body)
        self.status, self.body = status, body


def test_an_eviction_by_uid_carries_the_precondition_and_a_uid_mismatch_means_gone():
    sent = []

    class Api:
        def create_namespaced_pod_eviction(self, name, namespace, body):
            sent.append(body)
            raise Conflict(409, '{"message":"Precondition failed: UID in precondition: u0, UID in object meta: u7"}')

    drain.evict(Api(), "ml", "train-0", 0, Conflict, uid="u0")
    assert sent == [{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "train-0", "namespace": "ml"},
                     "deleteOptions": {"preconditions": {"uid": "u0"}}}]


def test_escalate_widens_only_a_reset_of_the_same_gpus_to_a_reboot():
    reboot = params(node="gpu-a", gpus=[G0], action="reboot", escalate=True)
    assert q._escalation({"action": "reset", "gpus": [G0], "step": "drained"}, reboot) == "reset"
    # a rerun of the widened quarantine keeps where it came from
    assert q._escalation({"action": "reboot", "gpus": [G0], "escalated_from": "reset"}, reboot) == "reset"
    # not asked, nothing to widen, or not a widening: the usual rules (a node in another remediation is refused)
    assert q._escalation({"action": "reset", "gpus": [G0]}, dict(reboot, escalate=False)) is None
    assert q._escalation(None, reboot) is None
    assert q._escalation({"action": "reset", "gpus": [G0]}, params(plan=ROW, escalate=True)) is None
    with pytest.raises(q.QuarantineError) as err:
        q._escalation({"action": "reset", "gpus": ["GPU-other"]}, reboot)
    assert "widens a reset of the same GPUs" in str(err.value) and "nothing was changed" in str(err.value)
    with pytest.raises(q.QuarantineError):
        q._escalation({"action": "replace", "gpus": [G0]}, reboot)


def test_the_pause_waits_for_a_terminating_nvml_client_until_kubelet_removes_it():
    """A plugin pod the DaemonSet controller is deleting still runs its process (NVML held) until kubelet stops it: it is
    still there for the pause; an ended one is not. (The real kubelet node: the reset was refused "In use by another
    client" while the pause had taken the terminating pod for gone.)"""
    selectors = [{"name": "nvidia-device-plugin-ds"}]
    plugin = pod("plugin", "u1")
    plugin["metadata"]["labels"] = {"name": "nvidia-device-plugin-ds"}
    terminating = dict(plugin, metadata=dict(plugin["metadata"], deletionTimestamp="2026-11-29T10:00:00Z"))
    ended = dict(plugin, status={"phase": "Succeeded"})
    assert pause.matching([terminating], selectors) == ["ml/plugin"]  # pylint: disable=protected-access
    assert pause.matching([ended], selectors) == [] and pause.matching([pod("other", "u2")], selectors) == []  # pylint: disable=protected-access
