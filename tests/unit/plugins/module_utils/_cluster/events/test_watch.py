# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The Node watch (module_utils/_cluster/events/watch.py) with its API scripted (kubernetes.watch.Watch replaced, as
test_k8s_watch.py does): a 410 Gone lists again and emits what changed while away, once; a connection that fails is
reported in a heartbeat, backed off and listed again; a window's faults are one event; one node's hostile data never blinds
the watch. The source's entry point is tests/unit/extensions/test_gpu_nodes_source.py's."""

from __future__ import annotations

import threading
import types

import pytest

import kube_list

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import k8s_watch as kw
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes, watch
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import window as windows
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options

pytest.importorskip("kubernetes")
from kubernetes.client.exceptions import ApiException  # noqa: E402  pylint: disable=wrong-import-position


def node(name, rv, free=8, boot="b1", step=None, tainted=False):
    meta = {"name": name, "resourceVersion": str(rv)}
    if step:
        meta["annotations"] = {nodes.REMEDIATION: '{"step": "%s"}' % step}
    return {"metadata": meta, "spec": {"taints": [{"key": nodes.TAINT, "effect": "NoSchedule"}] if tainted else []},
            "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": str(free)},
                       "nodeInfo": {"bootID": boot}, "conditions": [{"type": "Ready", "status": "True"}]}}


class Lister:
    """list_node: plays ``lists`` (each a list of nodes) one per call, the last one again after."""

    def __init__(self, lists):
        self.lists, self.calls = lists, 0

    def __call__(self, *args, **kwargs):
        items = self.lists[min(self.calls, len(self.lists) - 1)]
        self.calls += 1
        return kube_list.listed(items, 100 + self.calls)


class Client:
    @staticmethod
    def sanitize_for_serialization(item):
        return item


def scripted(streams, stop, now):
    """A Watch whose stream() calls play ``streams``; a stream that plays out holds its request to its timeout, as the
    server does (``now``: the fake time, in seconds)."""

    class FakeWatch:
        def stream(self, func, *args, **kwargs):
            if not streams:
                stop.set()
                return
            script = streams.pop(0)
            if isinstance(script, Exception):
                raise script
            for i, item in enumerate(script):
                try:
                    yield item
                except GeneratorExit:  # a watch stopped early is resumed from its last version: the rest comes next
                    streams.insert(0, script[i + 1:])
                    raise
            now[0] += kwargs["timeout_seconds"]

        def stop(self):
            pass

    return FakeWatch


def kinds(events):
    """The node events (not the heartbeats, not the windows' gpu_faults)."""
    return [(e["gpuops"]["kind"], e["gpuops"].get("node")) for e in events
            if not e["gpuops"]["kind"].startswith(("heartbeat", "gpu_faults", "node_reboots"))]


def run(monkeypatch, lists, streams, api=None, **given):
    stop, now = threading.Event(), [0.0]
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted(streams, stop, now))
    lister = Lister(lists)
    monkeypatch.setattr("kubernetes.client.CoreV1Api", lambda client: types.SimpleNamespace(list_node=lister, **(api or {})))
    events = []
    options = source_options.check_nodes(dict({"heartbeat": 10, "backoff_max": 1, "settle_seconds": 1}, **given))

    def clock():  # each look at the clock is 1 ms later; an idle watch request, its timeout later (scripted)
        now[0] += 0.001
        return now[0]

    watch.follow(options, events.append, stop, client=Client(), clock=clock)
    return events, lister


def test_a_410_lists_again_and_emits_what_changed_while_away_once(monkeypatch):
    gone = ApiException(status=410, reason="Gone")
    events, lister = run(monkeypatch, [[node("a", 1), node("b", 2)], [node("a", 5, free=6), node("b", 2)]],
                         [[{"type": "MODIFIED", "raw_object": node("a", 3, free=7)}], gone, [], [], [], []])
    assert lister.calls == 2
    assert kinds(events) == [("startup", None), ("gpu_unallocatable", "a"), ("gpu_unallocatable", "a")]
    # a's first fault ran; its second, within the flap window, is throttled
    assert [(e["gpuops"]["kind"], e["gpuops"]["nodes"], e["gpuops"]["throttled"]) for e in events if e["gpuops"]["kind"].startswith("gpu_faults")] == [
        ("gpu_faults", ["a"], []), ("gpu_faults_throttled", [], ["a"])]
    lost = [e["gpuops"]["changed"] for e in events if e["gpuops"]["kind"] == "gpu_unallocatable"]
    assert lost == [{"nvidia.com/gpu": {"before": 8, "after": 7, "capacity": 8}}, {"nvidia.com/gpu": {"before": 7, "after": 6, "capacity": 8}}]


def test_a_failed_connection_is_reported_backed_off_and_listed_again(monkeypatch):
    events, lister = run(monkeypatch, [[node("a", 1)], [node("a", 4, free=7)]], [ConnectionResetError("reset by peer"), []])
    assert lister.calls == 2
    errors = [e["gpuops"] for e in events if e["gpuops"].get("error")]
    assert len(errors) == 1 and errors[0]["error"] == "ConnectionResetError: reset by peer" and errors[0]["reconnect_in"] == 0.5
    assert kinds(events) == [("startup", None), ("gpu_unallocatable", "a")]


def test_the_faults_of_a_window_are_one_gpu_faults_event_limited_to_their_nodes(monkeypatch):
    events, dummy = run(monkeypatch, [[node("a", 1), node("b", 2), node("c", 3)]],
                        [[{"type": "MODIFIED", "raw_object": node("a", 4, free=7)}, {"type": "MODIFIED", "raw_object": node("b", 5, free=7)}],
                         [], []])
    faults = [e for e in events if e["gpuops"]["kind"] == "gpu_faults"]
    assert len(faults) == 1 and faults[0]["gpuops"]["nodes"] == ["a", "b"] and faults[0]["meta"]["hosts"] == ["a", "b", "localhost"]
    assert kinds(events) == [("startup", None), ("gpu_unallocatable", "a"), ("gpu_unallocatable", "b")]


def test_a_restarted_source_acts_on_the_gpus_withheld_now(monkeypatch):
    events, dummy = run(monkeypatch, [[node("a", 1, free=6), node("b", 2)]], [[], []])
    faults = [e["gpuops"] for e in events if e["gpuops"]["kind"] == "gpu_faults"]
    assert [f["nodes"] for f in faults] == [["a"]]


def test_the_reboots_of_a_window_are_one_node_reboots_event_less_the_remediations_own(monkeypatch):
    """A rack power-cycles: its nodes' new boot IDs are one node_reboots event (one checkpoint run); c, rebooted by our
    remediation (it carries our taint, which no kubelet can write), is the remediation's to verify; d wrote our annotation on
    itself (its kubelet may) to hide its reboot: it is in the run all the same; a's second reboot within the flap window is
    throttled."""
    events, dummy = run(monkeypatch, [[node("a", 1), node("b", 2), node("c", 3, step="drained", tainted=True), node("d", 4, step="drained")]],
                        [[{"type": "MODIFIED", "raw_object": node("a", 4, boot="b2")}, {"type": "MODIFIED", "raw_object": node("b", 5, boot="b2")},
                          {"type": "MODIFIED", "raw_object": node("c", 6, boot="b2", step="drained", tainted=True)},
                          {"type": "MODIFIED", "raw_object": node("d", 7, boot="b2", step="drained")}],
                         [], [{"type": "MODIFIED", "raw_object": node("a", 8, boot="b3")}], [], []])
    assert kinds(events) == [("startup", None), ("node_rebooted", "a"), ("node_rebooted", "b"), ("node_rebooted", "c"), ("node_rebooted", "d"),
                             ("node_rebooted", "a")]
    windows = [(e["gpuops"]["kind"], e["gpuops"]["nodes"], e["gpuops"]["throttled"], e.get("meta", {}).get("hosts"))
               for e in events if e["gpuops"]["kind"].startswith("node_reboots")]
    assert windows == [("node_reboots", ["a", "b", "d"], [], ["a", "b", "d", "localhost"]), ("node_reboots_throttled", [], ["a"], None)]
    assert not [e for e in events if e["gpuops"]["kind"].startswith("gpu_faults")]


def test_one_nodes_hostile_data_never_blinds_the_watch_for_another_nodes_fault(monkeypatch):
    """Issue 57, item 7: a 40 KB annotation of nested arrays raised RecursionError out of the view; the source took it for a lost
    connection, listed again, raised again, for ever, and another node's withheld GPU made no event. Now node h, its Node
    with every field replaced by each hostile value in turn (hostile_values, issue 57's included), is at most ``unreadable``:
    the watch is never listed again for it, and a's fault is one gpu_faults event."""
    import hostile_values

    hostile = node("h", 2)
    hostile["metadata"]["annotations"] = {nodes.REMEDIATION: '{"step": "drained"}'}
    notes = [{"type": "MODIFIED", "raw_object": shape} for dummy, dummy2, shape in hostile_values.mutations(hostile)]
    notes.append({"type": "MODIFIED", "raw_object": dict(hostile, metadata=dict(hostile["metadata"], resourceVersion="9998", annotations={
        nodes.REMEDIATION: "[" * 20000 + "]" * 20000}))})
    notes.append({"type": "MODIFIED", "raw_object": node("a", 9999, free=7)})
    events, lister = run(monkeypatch, [[node("a", 1), hostile]], [notes, [], []])
    assert len(notes) > 300
    assert lister.calls == 1 and not [e for e in events if e["gpuops"].get("error")], [e for e in events if e["gpuops"].get("error")][:2]
    # a's fault is in a window's run (h's own shapes may withhold a GPU of h's: that is h's data about h)
    assert "a" in [n for e in events if e["gpuops"]["kind"] == "gpu_faults" for n in e["gpuops"]["nodes"]]
    # the deep annotation is h's step "unreadable", said about h alone
    steps = [e["gpuops"] for e in events if e["gpuops"]["kind"] == "remediation_step" and e["gpuops"]["changed"]["step"]["after"] == "unreadable"]
    assert steps and set(e["node"] for e in steps) == {"h"}


def test_the_window_knows_the_gpu_nodes_of_the_watchs_latest_list(monkeypatch):
    """The alerts source asks the shared window which names are GPU Nodes: the watch's views as they are now, after every
    list and relist (each list replaces the views; a reference to the first list's would know nothing)."""
    window = windows.FaultWindow(1, 600)
    gone = ApiException(status=410, reason="Gone")
    stop, now = threading.Event(), [0.0]
    monkeypatch.setattr(kw.k8s_watch, "Watch", scripted([[], gone, []], stop, now))
    monkeypatch.setattr("kubernetes.client.CoreV1Api", lambda client: types.SimpleNamespace(list_node=Lister([[node("a", 1)], [node("a", 1), node("b", 2)]])))

    def clock():
        now[0] += 0.001
        return now[0]

    watch.follow(source_options.check_nodes({"heartbeat": 10, "backoff_max": 1}), [].append, stop, client=Client(), clock=clock, window=window)
    assert "a" in window.known and "b" in window.known and "c" not in window.known


def test_a_waiting_remediation_whose_pods_are_gone_is_offered_again_and_a_refused_ledger_is_said_in_the_heartbeat(monkeypatch):
    """Issue 59, item 2, through the watch: every due_seconds the ledger and the waiting node's pods are read (due.py); the
    node whose waited-for pod is gone is one remediation_due event limited to it. A ledger the source may not read is said
    in the heartbeat (due_error), and the Node watch goes on."""
    import json

    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers

    entry = {"node": "a", "gpus": [], "action": "reset", "at": 1, "closed_at": None, "step": "awaiting_pods",
             "waiting_for": [{"pod": "ml/train-0", "uid": "u0", "due_at": None}]}
    data = ledgers.dump(dict(ledgers.empty(), entries=[entry]))
    asked = []

    def read_namespaced_config_map(name, namespace):
        asked.append(namespace)
        return {"data": data}

    def list_pod_for_all_namespaces(field_selector):
        return types.SimpleNamespace(items=[])  # the training pod has ended and is gone

    api = {"read_namespaced_config_map": read_namespaced_config_map, "list_pod_for_all_namespaces": list_pod_for_all_namespaces,
           "api_client": Client()}
    events, dummy = run(monkeypatch, [[node("a", 1, tainted=True), node("b", 2)]], [[], [], []], api=api, due_seconds=5,
                        ledger_namespace="ops")
    offered = [e for e in events if e["gpuops"]["kind"] == "remediation_due"]
    assert [(e["gpuops"]["node"], e["gpuops"]["why"], e["meta"]["hosts"]) for e in offered] == [("a", "pods_gone", ["a", "localhost"])]
    assert asked and set(asked) == {"ops"}
    assert json.loads(data[ledgers.KEY])["entries"][0]["waiting_for"]  # what it waited for, from the ledger alone

    def refused(name, namespace):
        raise ApiException(status=403, reason="Forbidden")

    events, dummy = run(monkeypatch, [[node("a", 1, tainted=True)]], [[], [], []], api=dict(api, read_namespaced_config_map=refused),
                        due_seconds=5)
    beats = [e["gpuops"] for e in events if e["gpuops"]["kind"] == "heartbeat"]
    assert beats and "403" in beats[-1]["due_error"] and not [e for e in events if e["gpuops"]["kind"] == "remediation_due"]
