# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""gpu_quarantine's quarantine (_cluster/remediation/quarantine.py): the parameters (a plan row fills them, bad input names the
option), the targets by drain's rules, the eviction by UID, the escalation; on the fake API (fake_core_api.py) the node's
patch that fails, the Node condition, an operator's cancel, and a node's own writes (an uncordon, a forged or garbage
annotation) that never end, skip or steer it. The real API server's behaviour is tests/kube/test_gpu_quarantine.py's."""

from __future__ import annotations

import json

import pytest

from fake_core_api import NOW, WHERE, ApiError, FakeApi, G
from fake_core_api import params as api_params

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, pause, release
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import Session
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


# the quarantine, an operator's cancel and the node's own writes on the fake API (fake_core_api.py; issue 57's round-4 rule:
# the ledger is the record, the node's annotation and its uncordon are data)


def test_a_node_patch_that_fails_takes_the_runs_ledger_entry_back():
    api = FakeApi(ledgers.empty())

    def refused(name, body):
        api.calls.append("patch node")
        raise ApiError(409, "Conflict")

    api.patch_node = refused
    with pytest.raises(q.QuarantineError) as failed:
        q.quarantine(Session(api, api_params(), False, ApiError, now=NOW))
    assert "node a could not be marked (409 Conflict): the node was not changed; its ledger entry was taken back" in str(failed.value)
    assert ledgers.parse(api.cm, WHERE)["entries"] == []


def _condition(api):
    found = [c for c in api.node["status"].get("conditions") or [] if c["type"] == marks.CONDITION]
    return (found[0]["status"], found[0]["reason"]) if found else None


def test_the_node_condition_says_why_and_a_refused_condition_never_stops_the_quarantine_or_the_release():
    api = FakeApi(ledgers.empty())
    api.node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]
    done = q.quarantine(Session(api, api_params(), False, ApiError, now=NOW))
    assert done["condition_error"] is None and _condition(api) == ("False", "Xid48")
    assert [c["type"] for c in api.node["status"]["conditions"]] == ["Ready", marks.CONDITION]  # kubelet's own stays
    again = q.quarantine(Session(api, api_params(), False, ApiError, now=NOW + 5))
    assert not again["changed"] and "patch node status" not in api.calls[api.calls.index("patch node status") + 1:]

    refusing = FakeApi(ledgers.empty())

    def forbidden(name, body):
        refusing.calls.append("patch node status")
        raise ApiError(403, "Forbidden")

    refusing.patch_node_status = forbidden
    done = q.quarantine(Session(refusing, api_params(), False, ApiError, now=NOW))
    assert done["step"] == "drained" and refusing.node["spec"]["unschedulable"], "the quarantine went on"
    assert "could not be written (403 Forbidden): grant patch on nodes/status" in done["condition_error"]
    released = release.release(Session(refusing, api_params(state="released"), False, ApiError, now=NOW + 60))
    assert released["changed"] and not refusing.node["spec"]["unschedulable"] and "403" in released["condition_error"]


def test_an_uncordon_alone_cancels_nothing_it_is_reported_and_the_quarantine_holds():
    """Issue 57, item 1 (critical): a faulty node's kubelet may uncordon its own Node. The next run took that for an operator's
    cancel: the controller removed our taint (which the node itself may not), closed the entry cancelled_by_operator, and the
    plan then left the faulty node alone. Now an uncordon is reported (who may have done it, how to cancel) and nothing of
    ours comes off."""
    api = FakeApi(ledgers.empty())
    q.quarantine(Session(api, api_params(), False, ApiError, now=NOW))
    api.node["spec"]["unschedulable"] = False  # the node's kubelet (or anyone) uncordons it
    api.calls = []
    again = q.quarantine(Session(api, api_params(), False, ApiError, now=NOW + 30))
    assert again["step"] == "drained" and not again["changed"] and "cancelled_by_operator" not in again, again
    assert "uncordoned while quarantined" in again["uncordoned_while_quarantined"] and "kubectl taint node a %s-" % q.TAINT_KEY in again["msg"]
    assert api.calls == [], api.calls  # nothing written: the taint, the annotation and the open entry stay
    assert [t["key"] for t in api.node["spec"]["taints"]] == [q.TAINT_KEY]
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert entry["closed_at"] is None and entry["step"] == "drained" and entry["cordoned_by_us"] is True
    # the release lifts nothing it did not put on: the node is schedulable already
    released = release.release(Session(api, api_params(state="released"), False, ApiError, now=NOW + 60))
    assert released["untainted"] and not released["uncordoned"] and not api.node["spec"]["taints"]


def test_an_operator_who_takes_off_our_taint_cancels_and_gets_the_node_back_our_cordon_lifted():
    """The operator's cancel is a signal no kubelet can forge: our taint removed (NodeRestriction refuses a kubelet's change of
    its taints). The entry closes cancelled_by_operator; our cordon (the ledger says it is ours) comes off with its mark."""
    api = FakeApi(ledgers.empty())
    q.quarantine(Session(api, api_params(), False, ApiError, now=NOW))
    api.node["spec"]["taints"].append({"key": "example.com/theirs", "effect": "NoSchedule"})
    api.node["spec"]["taints"] = [t for t in api.node["spec"]["taints"] if t["key"] != q.TAINT_KEY]  # kubectl taint ... -
    preview = q.quarantine(Session(api, api_params(), True, ApiError, now=NOW + 30))
    assert preview["changed"] and preview["step"] == q.CANCELLED_BY_OPERATOR and q.REMEDIATION in api.node["metadata"]["annotations"]
    done = q.quarantine(Session(api, api_params(), False, ApiError, now=NOW + 30))
    assert done["step"] == q.CANCELLED_BY_OPERATOR and done["cancelled_by_operator"] == "removed the taint %s" % q.TAINT_KEY
    assert done["evicted"] == [] and not api.node["spec"]["unschedulable"] and q.CORDON_MARK not in api.node["metadata"]["annotations"]
    assert api.node["spec"]["taints"] == [{"key": "example.com/theirs", "effect": "NoSchedule"}]
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert (entry["result"], entry["closed_at"], entry["keys"]) == ("cancelled_by_operator", NOW + 30, ["xid:48"])
    assert q.REMEDIATION not in api.node["metadata"]["annotations"] and _condition(api) == ("Unknown", "CancelledByOperator")


FORGED = {"gpus": [G[0]], "action": "reset", "scope": "gpu", "step": "drained", "started": NOW - 99, "cordoned_by_us": True,
          "paused_labels": {"node-restriction.kubernetes.io/pool": "secure", "gpuops.fleet/gpu-maintenance": None}}


def test_a_forged_annotation_neither_skips_the_quarantine_nor_makes_the_controller_write_a_label():
    """Issue 57, item 2 (critical): a faulty node, not yet quarantined, writes our annotation on itself (cordoned_by_us, a
    pause's labels naming node-restriction.kubernetes.io/pool): the run cancelled instead of quarantining, and the controller
    wrote that label (a confused deputy). The ledger holds no open entry for it: it is quarantined as any node, the forged
    annotation overwritten, and no label is ever written but the pause's own keys."""
    api = FakeApi(ledgers.empty())
    api.node["spec"]["unschedulable"] = True  # it cordoned itself too, as it may
    api.node["metadata"]["annotations"][q.REMEDIATION] = json.dumps(FORGED)
    api.node["metadata"]["annotations"][q.CORDON_MARK] = "gpu-remediation"
    done = q.quarantine(Session(api, api_params(), False, ApiError, now=NOW))
    assert done["step"] == "drained" and "cancelled_by_operator" not in done and done["foreign_cordon"] and not done["cordoned"], done
    assert [t["key"] for t in api.node["spec"]["taints"]] == [q.TAINT_KEY]
    entry = ledgers.parse(api.cm, WHERE)["entries"][-1]
    assert (entry["node"], entry["closed_at"], entry["step"], entry["cordoned_by_us"]) == ("a", None, "drained", False)
    mirror = json.loads(api.node["metadata"]["annotations"][q.REMEDIATION])
    assert "paused_labels" not in mirror and mirror["cordoned_by_us"] is False and mirror["started"] == NOW
    asked = dict(api_params(state="paused"), pause_labels={pause.MAINTENANCE_LABEL: "true"}, pause_pods=[], pause_timeout=5)
    paused = pause.pause(Session(api, asked, False, ApiError))
    assert paused["previous_labels"] == {pause.MAINTENANCE_LABEL: None}
    api.node["metadata"]["annotations"][q.REMEDIATION] = json.dumps(FORGED)  # forged again, mid-remediation
    pause.unpause(Session(api, dict(api_params(state="unpaused")), False, ApiError))
    released = release.release(Session(api, api_params(state="released"), False, ApiError, now=NOW + 60))
    assert released["restored_labels"] == {} and not released["uncordoned"] and api.node["spec"]["unschedulable"], released
    assert "node-restriction.kubernetes.io/pool" not in api.node["metadata"]["labels"] and pause.MAINTENANCE_LABEL not in api.node["metadata"]["labels"]
    assert api.node["spec"]["taints"] == []


def test_a_garbage_annotation_never_blocks_the_nodes_own_quarantine():
    """Before, an annotation the quarantine could not read was an error ("remove it by hand"): a node could write garbage on
    itself and never be quarantined. The annotation is no input any more."""
    for text in ("reset please", "[" * 20000 + "]" * 20000, json.dumps({"gpus": "x", "step": 5}), '"\ud800"'):
        api = FakeApi(ledgers.empty())
        api.node["metadata"]["annotations"][q.REMEDIATION] = text
        assert q.quarantine(Session(api, api_params(), False, ApiError, now=NOW))["step"] == "drained"
        assert json.loads(api.node["metadata"]["annotations"][q.REMEDIATION])["step"] == "drained"


def test_an_evicted_pods_multi_pod_job_is_named_with_every_pod_of_it():
    """Issue 59, item 4: the quarantine's evicted items carried no job, so a PyTorchJob whose worker was evicted was missing
    from the node's report (its waiting pods were named right)."""
    labels = {"training.kubeflow.org/job-name": "bert", "training.kubeflow.org/replica-type": "worker",
              "training.kubeflow.org/replica-index": "0", "training.kubeflow.org/operator-name": "pytorchjob-controller"}
    worker = pod("bert-worker-0", "u0", owner="PyTorchJob")
    worker["metadata"]["labels"] = labels
    other = pod("bert-worker-1", "u1", owner="PyTorchJob")
    other["metadata"]["labels"] = dict(labels, **{"training.kubeflow.org/replica-index": "1"})
    p = params(plan=dict(ROW, evictions=[{"pod": "ml/bert-worker-0", "uid": "u0"}]))
    to_evict, gone, skipped, refusals, waiting = q._targets(p, [worker, other], 0, 0)
    assert [e["pod"] for e in to_evict] == ["ml/bert-worker-0"] and to_evict[0]["job"]["kind"] == "PyTorchJob"
    asked = []

    class Api:
        def list_namespaced_pod(self, namespace, label_selector):
            asked.append((namespace, label_selector))
            return type("Pods", (), {"items": [worker, other]})()

    session = type("S", (), {"api": Api(), "serial": staticmethod(lambda x: x)})()
    found = q._jobs(session, to_evict)
    assert [(j["kind"], j["name"], j["affected"]) for j in found] == [("PyTorchJob", "bert", ["ml/bert-worker-0"])]
    assert len(found[0]["pods"]) == 2 and asked and asked[0][0] == "ml"
