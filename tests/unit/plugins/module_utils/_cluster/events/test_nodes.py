# -*- coding: utf-8 -*-
"""The GPU Nodes' events (module_utils/_cluster/events/nodes.py, window.py): a change of a node's state, each once; a relist emits what
changed while away; the startup event names every unhealthy node; a Node's fields stay data; bad options are named."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes

T = "2026-11-29T10:00:00Z"


def node(name, rv, gpus=8, free=8, boot="b1", ready="True", step=None, resource="nvidia.com/gpu"):
    annotations = {nodes.REMEDIATION: json.dumps({"step": step, "gpus": []})} if step else {}
    return {"metadata": {"name": name, "resourceVersion": str(rv), "annotations": annotations},
            "status": {"capacity": {resource: str(gpus), "cpu": "64"}, "allocatable": {resource: str(free), "cpu": "63"},
                       "nodeInfo": {"bootID": boot}, "conditions": [{"type": "Ready", "status": ready}]}}


def kinds(events):
    return [(e["gpuops"]["kind"], e["gpuops"].get("node")) for e in events]


def test_startup_names_every_unhealthy_node_and_ignores_nodes_without_gpus():
    cpu = {"metadata": {"name": "cpu-1", "resourceVersion": "1"}, "status": {"capacity": {"cpu": "8"}}}
    tracker = nodes.Tracker()
    start = tracker.start([node("a", 1), node("b", 2, free=7), node("c", 3, ready="False"), node("d", 4, step="drained"), cpu], "10", T)
    assert start["gpuops"]["kind"] == "startup" and start["gpuops"]["watched"] == 4
    assert [(n["node"], n["unhealthy"]) for n in start["gpuops"]["nodes"]] == [
        ("b", ["nvidia.com/gpu 7 of 8 allocatable"]), ("c", ["Ready is False"]), ("d", ["remediation step drained"])]


def test_each_change_of_state_is_one_event_and_a_notification_that_changes_nothing_is_none():
    tracker = nodes.Tracker()
    tracker.start([node("a", 1)], "1", T)
    assert tracker.apply("MODIFIED", node("a", 2), T) == []  # a heartbeat of kubelet: nothing the events compare
    lost = tracker.apply("MODIFIED", node("a", 3, free=7), T)
    assert kinds(lost) == [("gpu_unallocatable", "a")]
    assert lost[0]["gpuops"]["changed"] == {"nvidia.com/gpu": {"before": 8, "after": 7, "capacity": 8}}
    assert lost[0]["gpuops"]["resource_version"] == "3" and lost[0]["gpuops"]["observed_at"] == T
    assert tracker.apply("MODIFIED", node("a", 3, free=7), T) == []  # the same version delivered again
    assert tracker.apply("MODIFIED", node("a", 4, free=7), T) == []  # still 7: no second event
    assert kinds(tracker.apply("MODIFIED", node("a", 5, free=8, boot="b2"), T)) == [("gpu_restored", "a"), ("node_rebooted", "a")]
    assert kinds(tracker.apply("MODIFIED", node("a", 6, free=8, boot="b2", ready="Unknown"), T)) == [("node_not_ready", "a")]
    assert kinds(tracker.apply("MODIFIED", node("a", 7, free=8, boot="b2"), T)) == [("node_ready", "a")]
    step = tracker.apply("MODIFIED", node("a", 8, boot="b2", step="draining"), T)
    assert kinds(step) == [("remediation_step", "a")] and step[0]["gpuops"]["changed"] == {"step": {"before": None, "after": "draining"}}
    assert tracker.apply("BOOKMARK", {"metadata": {"resourceVersion": "99"}}, T) == [] and tracker.resource_version == "99"
    assert kinds(tracker.apply("DELETED", node("a", 9), T)) == [("node_removed", "a")] and tracker.views == {}


def test_a_relist_emits_what_changed_while_away_once_and_nothing_it_knew():
    tracker = nodes.Tracker()
    tracker.start([node("a", 1), node("b", 2), node("c", 3)], "3", T)
    assert tracker.apply("MODIFIED", node("a", 4, free=6), T)  # known before the watch broke
    # away: a lost another GPU? no; b lost one, c is gone, d appeared unhealthy, a unchanged since version 4
    events = tracker.relist([node("a", 4, free=6), node("b", 5, free=7), node("d", 6, free=0)], "6", T)
    assert kinds(events) == [("gpu_unallocatable", "b"), ("node_removed", "c"), ("gpu_unallocatable", "d")]
    assert tracker.relist([node("a", 4, free=6), node("b", 5, free=7), node("d", 6, free=0)], "7", T) == []  # a second relist: nothing
    assert tracker.resource_version == "7"


def test_a_new_gpu_node_is_news_only_when_unhealthy():
    tracker = nodes.Tracker()
    tracker.start([], "1", T)
    assert tracker.apply("ADDED", node("a", 2), T) == []
    assert kinds(tracker.apply("ADDED", node("b", 3, free=0), T)) == [("gpu_unallocatable", "b")]
    assert kinds(tracker.apply("ADDED", node("c", 4, ready="False"), T)) == [("node_not_ready", "c")]


@pytest.mark.parametrize("bad", ["{{ lookup('pipe', 'id') }}", "A" * 300, "Node_1", "a;rm -rf /", "", None, 7])
def test_a_node_whose_name_is_not_a_kubernetes_name_makes_no_event(bad):
    tracker = nodes.Tracker()
    tracker.start([], "1", T)
    hostile = node("x", 2, free=0)
    hostile["metadata"]["name"] = bad
    assert tracker.apply("ADDED", hostile, T) == [] and tracker.views == {}


def test_node_written_fields_stay_bounded_data():
    hostile = node("a", 2, boot="{{ 7*7 }}" * 100)
    hostile["metadata"]["annotations"] = {nodes.REMEDIATION: json.dumps({"step": "{{ lookup('env', 'HOME') }}" * 50})}
    hostile["status"]["capacity"]["nvidia.com/gpu"] = "9" * 5000
    hostile["status"]["conditions"] = [{"type": "Ready", "status": "{{ x }}"}]
    state = nodes.view(hostile, by_label=True)  # (selected by label: its GPU count is not a count)
    # a boot ID is a UUID's characters, a step one of the quarantine's: any other text never leaves as text
    assert state["boot_id"] == "invalid" and state["step"] == "other" and state["ready"] is None
    assert state["gpus"] == {}  # a quantity that is not a count is not read as one
    bad_json = node("b", 2)
    bad_json["metadata"]["annotations"] = {nodes.REMEDIATION: "{not json"}
    assert nodes.view(bad_json)["step"] == "unreadable"


def test_each_node_event_limits_a_playbook_to_its_node():
    tracker = nodes.Tracker()
    tracker.start([node("a", 1)], "1", T)
    assert tracker.apply("MODIFIED", node("a", 2, free=7), T)[0]["meta"] == {"hosts": ["a", "localhost"]}


def test_a_slim_node_has_the_same_view_whatever_the_node_says():
    """nodes.slim keeps what view reads: the same view for a Node and its slim copy, with every field of the Node
    replaced by each hostile value or deleted (hostile_values.mutations)."""
    import hostile_values

    full = node("a", 2, free=6, boot="b-1")
    full["metadata"]["annotations"] = {nodes.REMEDIATION: json.dumps({"step": "drained"}), "other": "x"}
    full["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    full["status"]["images"] = [{"names": ["img:%d" % i], "sizeBytes": i} for i in range(2)]
    count = 0
    tracker = nodes.Tracker()
    tracker.start([full], "1", T)
    for dummy, dummy2, shape in hostile_values.mutations(full):
        assert nodes.view(nodes.slim(shape)) == nodes.view(shape), shape
        for kind in ("MODIFIED", "DELETED", "BOOKMARK"):
            tracker.apply(kind, shape, T)  # never an exception: one node's bad data would end the source for all
        tracker.relist([shape], "2", T)
        count += 1
    for shape in ({}, None, [], "x", {"metadata": None, "status": []}):
        assert nodes.view(nodes.slim(shape)) is None
    assert count > 500
    big = json.loads(json.dumps(full))
    big["status"]["images"] = [{"names": ["registry.example.com/team/trainer@sha256:%064x" % i], "sizeBytes": i} for i in range(50)]
    assert len(json.dumps(nodes.slim(big))) < len(json.dumps(big)) / 5


class _Raising(dict):
    """A Node whose every read raises: whatever a future field's reading may raise, as data of that node alone."""

    def get(self, *args):
        raise RecursionError("maximum recursion depth exceeded")


def test_a_node_whose_data_raises_is_unreadable_said_once_and_the_tracker_goes_on():
    """Issue 57, item 7: any exception from one Node's data makes that node unreadable (an event about it alone), never an
    exception out of the tracker (the source would take it for a lost connection and relist for ever)."""
    tracker = nodes.Tracker()
    tracker.start([node("a", 1), node("h", 2)], "2", T)
    bad = _Raising(metadata={"name": "h", "resourceVersion": "3"})
    assert nodes.view(bad) is None  # not even its name could be read: nothing to say about it
    marked = nodes.slim({"metadata": {"name": "h", "resourceVersion": "3"}, "status": _Raising()})
    assert marked["gpuops_unreadable"] == "RecursionError"
    assert kinds(tracker.apply("MODIFIED", marked, T)) == [("node_unreadable", "h")]
    assert tracker.views["h"]["unreadable"] == "its Node's data could not be read (RecursionError)"
    assert tracker.apply("MODIFIED", dict(marked, metadata={"name": "h", "resourceVersion": "4"}), T) == []  # said once
    assert kinds(tracker.apply("MODIFIED", node("a", 5, free=7), T)) == [("gpu_unallocatable", "a")]
    # h readable again, and withholding a GPU: news
    assert kinds(tracker.apply("MODIFIED", node("h", 6, free=7), T)) == [("gpu_unallocatable", "h")]
    assert "its Node's data could not be read" not in " ".join(nodes.unhealthy(tracker.views["h"]))
