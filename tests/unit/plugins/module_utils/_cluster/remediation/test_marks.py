# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What a remediation puts on a Node and its record (_cluster/remediation/marks.py): the record is the ledger's entry, never
the node's annotation; the mirror shows each state as the table says; what comes off is ours only; a cancel is our taint
taken off, never an uncordon."""

from __future__ import annotations

import json

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, states

G0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
TAINTED = {"metadata": {"name": "gpu-a", "annotations": {marks.REMEDIATION: "anything", marks.CORDON_MARK: "gpu-remediation"}},
           "spec": {"unschedulable": True, "taints": [{"key": "other", "effect": "NoSchedule"},
                                                      {"key": marks.TAINT_KEY, "effect": "NoSchedule"}]}}
ENTRY = {"node": "gpu-a", "gpus": [G0], "action": "reset", "at": 5, "step": states.DRAINED, "cordoned_by_us": True, "scope": "gpu",
         "paused_labels": {"gpuops.fleet/gpu-maintenance": None}}


def test_the_record_comes_from_the_ledger_never_the_nodes_annotation():
    """The quarantine's record is the node's open ledger entry; the annotation (which the node may write) is never read. An
    entry of before the record (no step) is read with what the node cannot forge: our taint, and our cordon's mark."""
    assert marks.record(None, TAINTED) is None
    entry = dict(ENTRY, cordoned_by_us=False)
    assert marks.record(entry, TAINTED)["step"] == states.DRAINED and not marks.record(entry, TAINTED)["cordoned_by_us"]
    legacy = {"node": "gpu-a", "gpus": [G0], "action": "reset", "at": 5}
    assert (marks.record(legacy, TAINTED)["step"], marks.record(legacy, TAINTED)["cordoned_by_us"], marks.record(legacy, TAINTED)["scope"]) == (
        states.DRAINING, True, "gpu")
    assert marks.record(legacy, {"metadata": {"name": "gpu-a"}, "spec": {}})["step"] == states.MARKING
    # a run killed after its node patch, before its next ledger write: the taint proves the patch
    assert marks.record(dict(entry, step=states.MARKING), TAINTED)["step"] == states.DRAINING


def test_the_mirror_shows_each_recorded_state_as_the_table_says():
    for name in states.RECORDED:
        shown = json.loads(marks.mirror(dict(marks.record(dict(ENTRY, step=name), TAINTED))))
        assert shown["step"] == states.TABLE[name]["shown"] and shown["gpus"] == [G0]
    assert json.loads(marks.mirror(dict(marks.record(ENTRY, TAINTED), step=states.MARKING)))["step"] == states.DRAINING


def test_what_comes_off_is_ours_only_by_the_record():
    spec, restore = marks.ours(TAINTED, marks.record(ENTRY, TAINTED))
    assert spec == {"taints": [{"key": "other", "effect": "NoSchedule"}], "unschedulable": False}
    assert restore == {"gpuops.fleet/gpu-maintenance": None}  # the pause's own key, never a label the node wrote
    spec, restore = marks.ours(TAINTED, marks.record(dict(ENTRY, cordoned_by_us=False, paused_labels=None), TAINTED))
    assert spec == {"taints": [{"key": "other", "effect": "NoSchedule"}]} and restore == {}  # someone else's cordon stays


def test_a_cancel_is_our_taint_taken_off_and_an_uncordon_alone_is_reported():
    record = marks.record(ENTRY, TAINTED)
    uncordoned = dict(TAINTED, spec=dict(TAINTED["spec"], unschedulable=False))
    assert marks.operator_cancelled(uncordoned, record) is None
    assert "kubectl taint node gpu-a %s-" % marks.TAINT_KEY in marks.uncordoned(uncordoned, record)
    untainted = dict(TAINTED, spec={"unschedulable": True, "taints": []})
    assert marks.operator_cancelled(untainted, record) == "removed the taint %s" % marks.TAINT_KEY
    assert marks.operator_cancelled(untainted, dict(record, step=states.MARKING)) is None  # our taint is not on yet


def test_the_condition_reason_is_camel_case_from_the_signal_and_bounded():
    assert marks.condition_reason(["xid:79"], "reset") == "Xid79"
    assert marks.condition_reason([], "reboot") == "Reboot" and marks.condition_reason(None, None) == "GPUFault"
    assert marks.condition_reason(["::"], "reset") == "GPUFault" and len(marks.condition_reason(["a" * 500], None)) == 64
