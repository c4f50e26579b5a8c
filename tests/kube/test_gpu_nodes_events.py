# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source gpuops.fleet.gpu_nodes (extensions/eda/plugins/event_source/gpu_nodes.py) against a real kube-apiserver:
it lists, then watches (bookmarks on), and emits each change of a GPU Node's state once (the 410 Gone and the reconnect
are tests/unit/extensions/test_gpu_nodes_source.py's, with the watch scripted). Run here without ansible-rulebook (its
``follow``, as ``main`` runs it in a thread); the Node objects are made and changed through the API, as kubelet and the
device plugin would change them."""

from __future__ import annotations

import os
import threading
import time

import pytest

import eda_source

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import node_events


def make_node(core, name, label, free=8):
    from kubernetes import client
    core.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=label)))
    set_status(core, name, free=free, boot="boot-1")


def set_status(core, name, free=8, boot="boot-1", ready="True", heartbeat=None):
    body = {"status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "8", "memory": "32Gi", "pods": "110"},
                       "allocatable": {"nvidia.com/gpu": str(free), "cpu": "8", "memory": "32Gi", "pods": "110"},
                       "nodeInfo": {"bootID": boot, "machineID": "m", "systemUUID": "s", "kernelVersion": "k", "osImage": "o",
                                    "containerRuntimeVersion": "c", "kubeletVersion": "v1.20.2", "kubeProxyVersion": "v1.20.2",
                                    "operatingSystem": "linux", "architecture": "amd64"},
                       "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady", "message": "m",
                                       "lastHeartbeatTime": heartbeat or "2026-11-29T10:00:00Z",
                                       "lastTransitionTime": "2026-11-29T10:00:00Z"}]}}
    core.patch_node_status(name, body)


def wait_for(events, predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in list(events) if predicate(e["gpuops"])]
        if found:
            return found
        time.sleep(0.05)
    return []


def changes(events):
    return [(e["gpuops"]["kind"], e["gpuops"].get("node")) for e in list(events)
            if not e["gpuops"]["kind"].startswith(("heartbeat", "gpu_faults"))]


@pytest.fixture()
def nodes(cluster):
    label = {"gpuops.test/events": "e%d" % os.getpid()}
    names = ["ev%d-a" % os.getpid(), "ev%d-b" % os.getpid()]
    make_node(cluster.core, names[0], label)
    make_node(cluster.core, names[1], label, free=7)
    yield names, label
    for name in names:
        try:
            cluster.core.delete_node(name)
        except Exception:  # noqa: BLE001 (deleted by the test)
            pass


def test_the_source_lists_then_watches_and_emits_each_change_once(cluster, nodes):
    (a, b), label = nodes
    module = eda_source.load()
    options = node_events.check_options({"kubeconfig": cluster.kubeconfig, "heartbeat": 2, "settle_seconds": 1,
                                         "label_selector": ",".join("%s=%s" % kv for kv in label.items())})
    events, stop = [], threading.Event()
    thread = threading.Thread(target=module.follow, args=(options, events.append, stop), daemon=True)
    thread.start()
    try:
        start = wait_for(events, lambda e: e["kind"] == "startup")
        assert start and [n["node"] for n in start[0]["gpuops"]["nodes"]] == [b]  # the unhealthy one, at once
        # a restarted source acts on what is withheld now: b's window (settle 1 s) closes, limited to b
        assert wait_for(events, lambda e: e["kind"] == "gpu_faults" and e["nodes"] == [b], timeout=5)
        faulted = time.monotonic()
        set_status(cluster.core, a, free=7)  # the device plugin withholds a GPU of a
        lost = wait_for(events, lambda e: e["kind"] == "gpu_unallocatable" and e["node"] == a, timeout=5)
        latency = time.monotonic() - faulted
        # a's fault is the next window's, limited to a
        assert wait_for(events, lambda e: e["kind"] == "gpu_faults" and e["nodes"] == [a], timeout=5)
        window = time.monotonic() - faulted
        assert lost and lost[0]["gpuops"]["changed"] == {"nvidia.com/gpu": {"before": 8, "after": 7, "capacity": 8}}
        set_status(cluster.core, a, free=7, heartbeat="2026-11-29T10:00:10Z")  # kubelet's heartbeat: nothing changed
        set_status(cluster.core, a, free=7, boot="boot-2")
        assert wait_for(events, lambda e: e["kind"] == "node_rebooted" and e["node"] == a)
        cluster.core.delete_node(b)
        assert wait_for(events, lambda e: e["kind"] == "node_removed" and e["node"] == b)
        assert wait_for(events, lambda e: e["kind"] == "heartbeat" and e["watched"] == 1, timeout=5)
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert changes(events) == [("startup", None), ("gpu_unallocatable", a), ("node_rebooted", a), ("node_removed", b)]
    assert [(e["gpuops"]["nodes"], e["meta"]["hosts"]) for e in events if e["gpuops"]["kind"] == "gpu_faults"] == [
        ([b], [b, "localhost"]), ([a], [a, "localhost"])]
    print("fault (allocatable patched) to event: %.3f s; to its window's gpu_faults (settle 1 s): %.3f s" % (latency, window))
