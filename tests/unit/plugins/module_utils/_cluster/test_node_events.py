# -*- coding: utf-8 -*-
"""The GPU Nodes' events (module_utils/_cluster/node_events.py): a change of a node's state, each once; a relist emits what
changed while away; the startup event names every unhealthy node; a Node's fields stay data; bad options are named."""

from __future__ import annotations

import json

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_events as ne
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

T = "2026-11-29T10:00:00Z"


def node(name, rv, gpus=8, free=8, boot="b1", ready="True", step=None, resource="nvidia.com/gpu"):
    annotations = {ne.REMEDIATION: json.dumps({"step": step, "gpus": []})} if step else {}
    return {"metadata": {"name": name, "resourceVersion": str(rv), "annotations": annotations},
            "status": {"capacity": {resource: str(gpus), "cpu": "64"}, "allocatable": {resource: str(free), "cpu": "63"},
                       "nodeInfo": {"bootID": boot}, "conditions": [{"type": "Ready", "status": ready}]}}


def kinds(events):
    return [(e["gpuops"]["kind"], e["gpuops"].get("node")) for e in events]


def test_startup_names_every_unhealthy_node_and_ignores_nodes_without_gpus():
    cpu = {"metadata": {"name": "cpu-1", "resourceVersion": "1"}, "status": {"capacity": {"cpu": "8"}}}
    tracker = ne.Tracker()
    start = tracker.start([node("a", 1), node("b", 2, free=7), node("c", 3, ready="False"), node("d", 4, step="drained"), cpu], "10", T)
    assert start["gpuops"]["kind"] == "startup" and start["gpuops"]["watched"] == 4
    assert [(n["node"], n["unhealthy"]) for n in start["gpuops"]["nodes"]] == [
        ("b", ["nvidia.com/gpu 7 of 8 allocatable"]), ("c", ["Ready is False"]), ("d", ["remediation step drained"])]


def test_each_change_of_state_is_one_event_and_a_notification_that_changes_nothing_is_none():
    tracker = ne.Tracker()
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
    tracker = ne.Tracker()
    tracker.start([node("a", 1), node("b", 2), node("c", 3)], "3", T)
    assert tracker.apply("MODIFIED", node("a", 4, free=6), T)  # known before the watch broke
    # away: a lost another GPU? no; b lost one, c is gone, d appeared unhealthy, a unchanged since version 4
    events = tracker.relist([node("a", 4, free=6), node("b", 5, free=7), node("d", 6, free=0)], "6", T)
    assert kinds(events) == [("gpu_unallocatable", "b"), ("node_removed", "c"), ("gpu_unallocatable", "d")]
    assert tracker.relist([node("a", 4, free=6), node("b", 5, free=7), node("d", 6, free=0)], "7", T) == []  # a second relist: nothing
    assert tracker.resource_version == "7"


def test_a_new_gpu_node_is_news_only_when_unhealthy():
    tracker = ne.Tracker()
    tracker.start([], "1", T)
    assert tracker.apply("ADDED", node("a", 2), T) == []
    assert kinds(tracker.apply("ADDED", node("b", 3, free=0), T)) == [("gpu_unallocatable", "b")]
    assert kinds(tracker.apply("ADDED", node("c", 4, ready="False"), T)) == [("node_not_ready", "c")]


@pytest.mark.parametrize("bad", ["{{ lookup('pipe', 'id') }}", "A" * 300, "Node_1", "a;rm -rf /", "", None, 7])
def test_a_node_whose_name_is_not_a_kubernetes_name_makes_no_event(bad):
    tracker = ne.Tracker()
    tracker.start([], "1", T)
    hostile = node("x", 2, free=0)
    hostile["metadata"]["name"] = bad
    assert tracker.apply("ADDED", hostile, T) == [] and tracker.views == {}


def test_node_written_fields_stay_bounded_data():
    hostile = node("a", 2, boot="{{ 7*7 }}" * 100)
    hostile["metadata"]["annotations"] = {ne.REMEDIATION: json.dumps({"step": "{{ lookup('env', 'HOME') }}" * 50})}
    hostile["status"]["capacity"]["nvidia.com/gpu"] = "9" * 5000
    hostile["status"]["conditions"] = [{"type": "Ready", "status": "{{ x }}"}]
    state = ne.view(hostile, by_label=True)  # (selected by label: its GPU count is not a count)
    # a boot ID is a UUID's characters, a step one of the quarantine's: any other text never leaves as text
    assert state["boot_id"] == "invalid" and state["step"] == "other" and state["ready"] is None
    assert state["gpus"] == {}  # a quantity that is not a count is not read as one
    bad_json = node("b", 2)
    bad_json["metadata"]["annotations"] = {ne.REMEDIATION: "{not json"}
    assert ne.view(bad_json)["step"] == "unreadable"


@pytest.mark.parametrize("args, field", [
    ({"gpu_resources": []}, "gpu_resources"), ({"gpu_resources": [7]}, "gpu_resources"), ({"label_selector": "a\nb"}, "label_selector"),
    ({"heartbeat": 0}, "heartbeat"), ({"heartbeat": "soon"}, "heartbeat"), ({"backoff_max": True}, "backoff_max"),
    ({"watch_seconds": 5}, "watch_seconds"), ({"kubeconfig": ["x"]}, "kubeconfig"), ({"namespace": "x"}, "namespace"),
])
def test_bad_options_are_named(args, field):
    with pytest.raises(ParameterError) as err:
        ne.check_options(args)
    assert err.value.field == field


def test_options_from_a_survey_and_the_defaults():
    got = ne.check_options({"gpu_resources": "nvidia.com/gpu, aliyun.com/gpu-mem", "heartbeat": "30", "validate_certs": "false"})
    assert got["gpu_resources"] == ["nvidia.com/gpu", "aliyun.com/gpu-mem"] and got["heartbeat"] == 30 and got["validate_certs"] is False
    assert ne.check_options({})["gpu_resources"] == list(ne.DEFAULT_RESOURCES)


def test_the_backoff_starts_soon_and_doubles_up_to_its_cap():
    """Issue 57, item 9: the first reconnect waited 2 s, then 4, 8, 16, 30: an API server back in 3 s delayed a fault's event by
    up to 30 s. It starts at half a second."""
    assert [ne.backoff(n, 30) for n in range(1, 10)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert ne.backoff(40, 5) == 5


def test_each_node_event_limits_a_playbook_to_its_node():
    tracker = ne.Tracker()
    tracker.start([node("a", 1)], "1", T)
    assert tracker.apply("MODIFIED", node("a", 2, free=7), T)[0]["meta"] == {"hosts": ["a", "localhost"]}


def test_a_window_gathers_a_storm_into_one_event_and_runs_a_flapping_node_once_per_flap_window():
    window = ne.FaultWindow(settle=5, flap=600, again_max=0)  # nothing offered again (test_no_fault_is_lost_only_delayed)
    assert window.due() is None and window.flush(0, T) is None
    for i, name in enumerate(["n%02d" % i for i in range(20)]):
        window.add({"gpuops": {"node": name}}, 100 + i * 0.2)  # 20 nodes within 4 s
    window.add({"gpuops": {"node": "n00"}}, 104)  # a node counted once
    assert window.due() == 105 and window.flush(104.9, T) is None
    storm = window.flush(105, T)
    assert storm["gpuops"]["kind"] == "gpu_faults" and storm["gpuops"]["nodes"] == ["n%02d" % i for i in range(20)]
    assert storm["meta"]["hosts"] == storm["gpuops"]["nodes"] + ["localhost"] and storm["gpuops"]["throttled"] == []
    assert window.due() is None
    window.add({"gpuops": {"node": "n03"}}, 200)  # n03 flaps: within its flap window
    window.add({"gpuops": {"node": "x"}}, 201)
    again = window.flush(205, T)
    assert (again["gpuops"]["nodes"], again["gpuops"]["throttled"], again["meta"]["hosts"]) == (["x"], ["n03"], ["x", "localhost"])
    window.add({"gpuops": {"node": "x"}}, 300)
    only = window.flush(305, T)
    assert only["gpuops"]["kind"] == "gpu_faults_throttled" and "meta" not in only and only["gpuops"]["throttled"] == ["x"]
    window.add({"gpuops": {"node": "x"}}, 900)  # its flap window over: it runs again
    assert window.flush(905, T)["gpuops"]["nodes"] == ["x"]


def test_a_slim_node_has_the_same_view_whatever_the_node_says():
    """node_events.slim keeps what view reads: the same view for a Node and its slim copy, with every field of the Node
    replaced by each hostile value or deleted (hostile_values.mutations)."""
    import hostile_values

    full = node("a", 2, free=6, boot="b-1")
    full["metadata"]["annotations"] = {ne.REMEDIATION: json.dumps({"step": "drained"}), "other": "x"}
    full["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    full["status"]["images"] = [{"names": ["img:%d" % i], "sizeBytes": i} for i in range(2)]
    count = 0
    tracker = ne.Tracker()
    tracker.start([full], "1", T)
    for dummy, dummy2, shape in hostile_values.mutations(full):
        assert ne.view(ne.slim(shape)) == ne.view(shape), shape
        for kind in ("MODIFIED", "DELETED", "BOOKMARK"):
            tracker.apply(kind, shape, T)  # never an exception: one node's bad data would end the source for all
        tracker.relist([shape], "2", T)
        count += 1
    for shape in ({}, None, [], "x", {"metadata": None, "status": []}):
        assert ne.view(ne.slim(shape)) is None
    assert count > 500
    big = json.loads(json.dumps(full))
    big["status"]["images"] = [{"names": ["registry.example.com/team/trainer@sha256:%064x" % i], "sizeBytes": i} for i in range(50)]
    assert len(json.dumps(ne.slim(big))) < len(json.dumps(big)) / 5


class _Raising(dict):
    """A Node whose every read raises: whatever a future field's reading may raise, as data of that node alone."""

    def get(self, *args):
        raise RecursionError("maximum recursion depth exceeded")


def test_a_node_whose_data_raises_is_unreadable_said_once_and_the_tracker_goes_on():
    """Issue 57, item 7: any exception from one Node's data makes that node unreadable (an event about it alone), never an
    exception out of the tracker (the source would take it for a lost connection and relist for ever)."""
    tracker = ne.Tracker()
    tracker.start([node("a", 1), node("h", 2)], "2", T)
    bad = _Raising(metadata={"name": "h", "resourceVersion": "3"})
    assert ne.view(bad) is None  # not even its name could be read: nothing to say about it
    marked = ne.slim({"metadata": {"name": "h", "resourceVersion": "3"}, "status": _Raising()})
    assert marked["gpuops_unreadable"] == "RecursionError"
    assert kinds(tracker.apply("MODIFIED", marked, T)) == [("node_unreadable", "h")]
    assert tracker.views["h"]["unreadable"] == "its Node's data could not be read (RecursionError)"
    assert tracker.apply("MODIFIED", dict(marked, metadata={"name": "h", "resourceVersion": "4"}), T) == []  # said once
    assert kinds(tracker.apply("MODIFIED", node("a", 5, free=7), T)) == [("gpu_unallocatable", "a")]
    # h readable again, and withholding a GPU: news
    assert kinds(tracker.apply("MODIFIED", node("h", 6, free=7), T)) == [("gpu_unallocatable", "h")]
    assert "its Node's data could not be read" not in " ".join(ne.unhealthy(tracker.views["h"]))


def _withheld(name, free):
    return {"name": name, "resource_version": str(free), "gpus": {"nvidia.com/gpu": [8, free]}, "boot_id": None, "ready": "True",
            "step": None, "quarantined": False}


def test_no_fault_is_lost_only_delayed_a_node_still_unhealthy_is_offered_again_with_a_capped_backoff():
    """Issue 57, item 9: a node's real fault within its flap window became gpu_faults_throttled, which no rule acts on, and was
    never offered again; a run that failed (the API server down) was never run again. Now a node still unhealthy (a GPU
    withheld in the watch's view, or a fault alert firing) is offered again: flap seconds after its run, then twice as long
    after each run, at most retry_max_seconds; a node healthy again is forgotten."""
    views = {"a": _withheld("a", 8), "b": _withheld("b", 7)}
    window = ne.FaultWindow(settle=5, flap=600, again_max=2400)
    window.known = views
    window.alert({"gpuops": {"kind": "gpu_alert", "node": "a", "fault": True, "status": "firing", "fingerprint": "f1", "alert": "GPUXidErrors"}})
    window.add({"gpuops": {"node": "a"}}, 0)  # an alert runs a (its GPUs not withheld yet)
    assert window.flush(5, T)["gpuops"]["nodes"] == ["a"]
    views["a"] = _withheld("a", 7)  # a's real fault, 100 s later: within its flap window
    window.add({"gpuops": {"node": "a"}}, 100)
    window.add({"gpuops": {"node": "b"}}, 100)  # b loses a GPU; its run will fail (the API server is down)
    first = window.flush(105, T)
    assert (first["gpuops"]["nodes"], first["gpuops"]["throttled"]) == (["b"], ["a"])
    assert window.due() == 605  # a, when its flap window ends
    again = window.flush(605, T)
    assert (again["gpuops"]["kind"], again["gpuops"]["nodes"], again["gpuops"]["again"]) == ("gpu_faults", ["a"], {"a": 2})
    assert again["meta"]["hosts"] == ["a", "localhost"]
    assert window.due() == 705  # b: its run at 105 did nothing (it failed), its GPU is still withheld
    assert window.flush(705, T)["gpuops"]["again"] == {"b": 2}
    # each further run waits twice as long (600, 1,200, 2,400), at most retry_max_seconds (2,400): never a loop
    times = []
    now = 705
    for dummy in range(8):
        now = window.due()
        batch = window.flush(now, T)
        times.append((now, batch["gpuops"]["nodes"]))
    assert [t for t, nodes in times if "b" in nodes][:3] == [705 + 1200, 705 + 1200 + 2400, 705 + 1200 + 4800]
    # healthy again: forgotten (no event), and the window has nothing due for it
    views["a"], views["b"] = _withheld("a", 8), _withheld("b", 8)
    window.alert({"gpuops": {"kind": "gpu_alert", "node": "a", "fault": False, "status": "resolved", "fingerprint": "f1"}})
    for dummy in range(3):
        due = window.due()
        if due is None:
            break
        assert window.flush(due, T) is None
    assert window.due() is None and window.attempts == {}


def test_a_firing_fault_alert_keeps_its_node_offered_again_until_it_is_resolved():
    window = ne.FaultWindow(settle=5, flap=600)
    window.known = {"c": _withheld("c", 8)}  # the plugin withholds nothing: only the alert says c is faulty
    fired = {"gpuops": {"kind": "gpu_alert", "node": "c", "fault": True, "status": "firing", "fingerprint": "f9", "alert": "GPUXidErrors"}}
    window.alert(fired)
    window.add(fired, 0)
    assert window.flush(5, T)["gpuops"]["nodes"] == ["c"]
    assert window.flush(605, T)["gpuops"]["again"] == {"c": 2}
    window.alert(dict(fired, gpuops=dict(fired["gpuops"], fault=False, status="resolved")))
    assert window.flush(window.due(), T) is None and window.due() is None
