# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Eviction modes (pure): the rules checked with the field named, the first glob wins, the annotation only makes a mode
gentler, the system namespaces are never evicted, delete_after_timeout evicts at its time; the multi-pod job of a pod by
its controller's documented labels. The API behaviour is tests/kube/test_eviction_modes.py's."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import eviction as ev
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import quarantine as q
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

RULES = [{"namespace": "training-*", "mode": "allow_completion"}, {"namespace": "batch", "mode": "delete_after_timeout", "timeout_minutes": "1"},
         {"namespace": "inference-*", "mode": "immediate"}, {"namespace": "*", "mode": "delete_after_timeout", "timeout_minutes": 30}]


def pod(namespace, name="p", annotations=None, labels=None, owner=None):
    meta = {"namespace": namespace, "name": name, "uid": "u-" + name, "annotations": annotations or {}, "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner[0], "name": owner[1], "controller": True}]
    return {"metadata": meta, "spec": {"nodeName": "gpu-a"}, "status": {"phase": "Running", "startTime": "2026-12-01T10:00:00Z"}}


def test_the_first_matching_glob_wins_a_survey_string_is_a_number_and_the_system_namespaces_are_never_evicted():
    policy = ev.check_policy(RULES, None)
    assert policy["rules"][1]["timeout_minutes"] == 1  # an AWX survey's "1"
    assert [ev.mode_of(pod(n), policy)["mode"] for n in ("training-a", "batch", "inference-x", "other")] == [
        "allow_completion", "delete_after_timeout", "immediate", "delete_after_timeout"]
    assert ev.mode_of(pod("other"), policy)["timeout_minutes"] == 30 and ev.mode_of(pod("other"), policy)["by"] == "eviction_modes[3] (*)"
    for system in ("kube-system", "gpu-operator", "gpuops-system"):
        found = ev.mode_of(pod(system), policy)
        assert found["system"] and ev.decide(found, 10 ** 6)[0] == "wait"
    # anchored as written: a namespace that only contains a system name is not one
    assert not ev.mode_of(pod("my-kube-system-copy"), policy)["system"]
    assert not ev.mode_of(pod("kube-system"), ev.check_policy(RULES, ""))["system"]  # '' names none
    # unset: today's behaviour, every namespace immediate
    assert ev.mode_of(pod("training-a"), ev.check_policy(None, None))["mode"] == "immediate"


def test_delete_after_timeout_waits_until_the_fault_is_old_enough_then_evicts():
    found = ev.mode_of(pod("batch"), ev.check_policy(RULES, None))
    verdict, why = ev.decide(found, 59)
    assert verdict == "wait" and "evicted in 1 s" in why
    verdict, why = ev.decide(found, 60)
    assert verdict == "evict" and "past its 1 min" in why
    assert ev.decide(ev.mode_of(pod("training-a"), ev.check_policy(RULES, None)), 10 ** 7)[0] == "wait"  # allow_completion: never


@pytest.mark.parametrize("rules, system, field", [
    ([{"namespace": "*", "mode": "gentle"}], None, "eviction_modes[0].mode"),
    ([{"namespace": "Training_*", "mode": "immediate"}, {"namespace": "*", "mode": "immediate"}], None, "eviction_modes[0].namespace"),
    ([{"namespace": "train[-*", "mode": "immediate"}, {"namespace": "*", "mode": "immediate"}], None, "eviction_modes[0].namespace"),
    ([{"namespace": "*", "mode": "immediate"}, {"namespace": "batch", "mode": "immediate"}], None, "eviction_modes[0].namespace"),
    ([{"namespace": "batch", "mode": "immediate"}], None, "eviction_modes[0].namespace"),  # no '*' last
    ([{"namespace": "*", "mode": "delete_after_timeout"}], None, "eviction_modes[0].timeout_minutes"),
    ([{"namespace": "*", "mode": "delete_after_timeout", "timeout_minutes": "soon"}], None, "eviction_modes[0].timeout_minutes"),
    ([{"namespace": "*", "mode": "delete_after_timeout", "timeout_minutes": 0}], None, "eviction_modes[0].timeout_minutes"),
    ([{"namespace": "*", "mode": "immediate", "timeout_minutes": 5}], None, "eviction_modes[0].timeout_minutes"),
    ([{"namespace": "*", "mode": "immediate", "grace": 5}], None, "eviction_modes[0].grace"),
    (["training-*=allow_completion"], None, "eviction_modes[0]"),
    ("immediate", None, "eviction_modes"),
    (None, "^(kube-system", "system_namespaces"),
])
def test_bad_rules_name_the_field(rules, system, field):
    with pytest.raises(ParameterError) as err:
        ev.check_policy(rules, system)
    assert err.value.field == field


def test_an_annotation_may_only_make_the_mode_gentler():
    policy = ev.check_policy(RULES, None)
    gentler = ev.mode_of(pod("inference-x", annotations={ev.ANNOTATION: "allow_completion"}), policy)
    assert gentler["mode"] == "allow_completion" and gentler["by"] == "annotation " + ev.ANNOTATION
    longer = ev.mode_of(pod("batch", annotations={ev.ANNOTATION: "delete_after_timeout:90"}), policy)
    assert (longer["mode"], longer["timeout_minutes"]) == ("delete_after_timeout", 90)
    same = ev.mode_of(pod("batch", annotations={ev.ANNOTATION: "delete_after_timeout"}), policy)
    assert same["timeout_minutes"] == 1  # the namespace's minutes
    for namespace, asked in (("training-a", "immediate"), ("training-a", "delete_after_timeout:5"), ("other", "delete_after_timeout:29"),
                             ("batch", "immediate")):
        with pytest.raises(ev.PodModeError) as err:
            ev.mode_of(pod(namespace, name="job-0", annotations={ev.ANNOTATION: asked}), policy)
        assert "%s/job-0" % namespace in str(err.value) and "harsher" in str(err.value)
    for asked in ("gentle", "allow_completion:5", "delete_after_timeout:x", "delete_after_timeout:0"):
        with pytest.raises(ev.PodModeError) as err:
            ev.mode_of(pod("other", annotations={ev.ANNOTATION: asked}), policy)
        assert ev.ANNOTATION in str(err.value)
    with pytest.raises(ev.PodModeError) as err:  # no minutes to inherit from an allow_completion... nor an immediate rule
        ev.mode_of(pod("inference-x", annotations={ev.ANNOTATION: "delete_after_timeout"}), policy)
    assert "names no minutes" in str(err.value)


def test_the_quarantine_waits_for_the_pods_the_modes_keep_and_refuses_a_harsher_annotation():
    policy_rules = RULES
    pods = [pod("training-a", "train-0"), pod("inference-x", "serve-0"), pod("batch", "b-0"), pod("kube-system", "sys-0")]
    for p_ in pods:
        p_["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "o", "controller": True}]
    wanted = [{"pod": "%s/%s" % (x["metadata"]["namespace"], x["metadata"]["name"]), "uid": x["metadata"]["uid"]} for x in pods]
    p = q.check_params(dict(BASE, node="gpu-a", gpus=[G0], action="reset", evictions=wanted, eviction_modes=policy_rules))
    now = 1796119200 + 3600  # an hour after the pods started
    to_evict, gone, skipped, refusals, waiting = q._targets(p, pods, 30, now)  # pylint: disable=protected-access
    assert [e["pod"] for e in to_evict] == ["inference-x/serve-0"] and not gone and not skipped and not refusals
    assert [(w["pod"], w["mode"]) for w in waiting] == [("training-a/train-0", "allow_completion"), ("batch/b-0", "delete_after_timeout"),
                                                        ("kube-system/sys-0", "system")]
    assert all(w["age_seconds"] == 3600 for w in waiting)
    to_evict, dummy, dummy2, dummy3, waiting = q._targets(p, pods, 61, now)  # pylint: disable=protected-access
    assert [e["pod"] for e in to_evict] == ["inference-x/serve-0", "batch/b-0"] and len(waiting) == 2
    # a node-scoped quarantine leaves a system namespace's pod, as a DaemonSet's
    node = q.check_params(dict(BASE, node="gpu-a", action="reboot", eviction_modes=policy_rules))
    dummy, dummy2, skipped, dummy3, waiting = q._targets(node, pods, 0, now)  # pylint: disable=protected-access
    assert [s["pod"] for s in skipped] == ["kube-system/sys-0"] and [w["pod"] for w in waiting] == ["batch/b-0", "training-a/train-0"]
    pods[1]["metadata"]["annotations"] = {ev.ANNOTATION: "delete_after_timeout:1"}  # harsher than allow_completion? no: inference is immediate
    assert not q._targets(p, pods, 0, now)[3]  # pylint: disable=protected-access
    pods[0]["metadata"]["annotations"] = {ev.ANNOTATION: "immediate"}
    refusals = q._targets(p, pods, 0, now)[3]  # pylint: disable=protected-access
    assert len(refusals) == 1 and "training-a/train-0" in refusals[0] and "harsher" in refusals[0]
    with pytest.raises(ParameterError) as err:
        q.check_params(dict(BASE, node="gpu-a", gpus=[G0], action="reset", eviction_modes=[{"namespace": "*", "mode": "later"}]))
    assert err.value.field == "eviction_modes[0].mode"


G0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
BASE = {"state": "quarantined", "plan": None, "node": None, "gpus": None, "action": None, "scope": None, "evictions": None, "blockers": None,
        "keys": None, "driver_version": None, "run": None, "result": "recovered", "namespace": "gpuops-system", "drain_timeout": 300,
        "drain_force": False, "drain_delete_emptydir_data": False, "eviction_modes": None, "system_namespaces": None}


def test_the_plan_leaves_a_node_an_operator_took_back_alone_for_the_same_signal_only():
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import plan as rp

    def row(keys, gpus=(G0,)):
        return {"node": "gpu-a", "keys": list(keys), "gpus": list(gpus), "reasons": [], "deferred_reason": None}

    cancelled = {"node": "gpu-a", "at": 100, "closed_at": 200, "result": "cancelled_by_operator", "keys": ["recovery:1"], "gpus": [G0]}
    held = row(["recovery:1"])
    rp._operator_hold(held, {"entries": [cancelled]})  # pylint: disable=protected-access
    assert held["deferred_reason"] == "cancelled_by_operator" and "an operator cancelled" in held["reasons"][0]
    for fresh, entries in ((row(["recovery:1", "xid:79"]), [cancelled]),  # a new signal
                           (row(["recovery:1"], gpus=(G0, "GPU-other")), [cancelled]),  # another GPU
                           (row(["recovery:1"]), [cancelled, dict(cancelled, at=300, closed_at=400, result="recovered")]),  # since
                           (row(["recovery:1"]), [dict(cancelled, node="gpu-b")])):  # another node's
        rp._operator_hold(fresh, {"entries": entries})  # pylint: disable=protected-access
        assert fresh["deferred_reason"] is None, fresh


def test_the_event_source_knows_every_step_the_quarantine_writes():
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes
    assert nodes.STEPS == states.SHOWN


@pytest.mark.parametrize("text", ["delete_after_timeout:" + "9" * 5000, "delete_after_timeout:\u00b2", "delete_after_timeout:\u0661",
                                  "delete_after_timeout:1_000", "delete_after_timeout:+5", "delete_after_timeout:" + "1" * 19,
                                  "x" * 100000])
def test_a_tenants_hostile_annotation_is_that_pods_named_error_never_a_crash(text):
    """Issue 57, item 8: 5,000 digits raised ValueError (Python's 4,300-digit limit) out of the plan. Now the pod's annotation
    is its own named error, bounded in size."""
    with pytest.raises(ev.PodModeError) as err:
        ev.mode_of(pod("batch", annotations={ev.ANNOTATION: text}), ev.check_policy(RULES, None))
    assert str(err.value).startswith("pod batch/p: annotation %s" % ev.ANNOTATION) and len(str(err.value)) < 600, str(err.value)[:300]
