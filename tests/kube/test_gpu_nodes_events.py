# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The event source gpuops.fleet.gpu_nodes (extensions/eda/plugins/event_source/gpu_nodes.py) against a real kube-apiserver:
it lists, then watches (bookmarks on), and emits each change of a GPU Node's state once (the 410 Gone and the reconnect
are tests/unit/extensions/test_gpu_nodes_source.py's, with the watch scripted). Run here without ansible-rulebook (its
``follow``, as ``main`` runs it in a thread); the Node objects are made and changed through the API, as kubelet and the
device plugin would change them."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

import eda_source
import kubefleet

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import options as source_options


def make_node(kubelet, name, label, free=8):
    """Node ``name`` registered by its own kubelet identity (``kubelet``: cluster.as_node), with its status."""
    from kubernetes import client
    kubelet.create_node(client.V1Node(metadata=client.V1ObjectMeta(name=name, labels=label)))
    set_status(kubelet, name, free=free, boot="boot-1")


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
            if not e["gpuops"]["kind"].startswith(("heartbeat", "gpu_faults", "node_reboots"))]


KUBELETS = {}  # node name -> the API as its own kubelet (the Node authorizer and NodeRestriction limit what it writes)


@pytest.fixture()
def nodes(cluster, tmp_path):
    label = {"gpuops.test/events": "e%d" % os.getpid()}
    names = ["ev%d-a" % os.getpid(), "ev%d-b" % os.getpid()]
    for name in names:
        KUBELETS[name] = cluster.as_node(name, tmp_path / "identities")
    make_node(KUBELETS[names[0]], names[0], label)
    make_node(KUBELETS[names[1]], names[1], label, free=7)
    yield names, label
    for name in names:
        try:
            cluster.core.delete_node(name)
        except Exception:  # noqa: BLE001 (deleted by the test)
            pass


def test_the_source_lists_then_watches_and_emits_each_change_once(cluster, nodes):
    (a, b), label = nodes
    module = eda_source.load()
    options = source_options.check_nodes({"kubeconfig": cluster.kubeconfig, "heartbeat": 2, "settle_seconds": 1,
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
        set_status(KUBELETS[a], a, free=7)  # the device plugin withholds a GPU of a
        lost = wait_for(events, lambda e: e["kind"] == "gpu_unallocatable" and e["node"] == a, timeout=5)
        latency = time.monotonic() - faulted
        # a's fault is the next window's, limited to a
        assert wait_for(events, lambda e: e["kind"] == "gpu_faults" and e["nodes"] == [a], timeout=5)
        window = time.monotonic() - faulted
        assert lost and lost[0]["gpuops"]["changed"] == {"nvidia.com/gpu": {"before": 8, "after": 7, "capacity": 8}}
        set_status(KUBELETS[a], a, free=7, heartbeat="2026-11-29T10:00:10Z")  # kubelet's heartbeat: nothing changed
        set_status(KUBELETS[a], a, free=7, boot="boot-2")
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


def start(cluster, label, module=None, heartbeat=2):
    module = module or eda_source.load()
    options = source_options.check_nodes({"kubeconfig": cluster.kubeconfig, "heartbeat": heartbeat, "settle_seconds": 1, "backoff_max": 2,
                                         "label_selector": ",".join("%s=%s" % kv for kv in label.items())})
    events, stop = [], threading.Event()
    thread = threading.Thread(target=module.follow, args=(options, events.append, stop), daemon=True)
    thread.start()
    assert wait_for(events, lambda e: e["kind"] == "startup")
    return events, stop, thread


def test_the_api_server_restarted_mid_watch_misses_nothing_and_emits_nothing_twice(cluster, nodes):
    """kube-apiserver stopped under a running watch (3 s down) and started again: the source reports the outage in a
    heartbeat, backs off, lists again and emits what changed: a's GPU withheld right after the restart, once; b's GPU back
    through the watch, once; no event of a node that did not change, and each window once."""
    (a, b), label = nodes
    events, stop, thread = start(cluster, label)
    try:
        assert wait_for(events, lambda e: e["kind"] == "gpu_faults" and e["nodes"] == [b], timeout=5)
        cluster.restart_apiserver(down=3)
        set_status(KUBELETS[a], a, free=6)  # at once: the source is still backing off, or has just listed again
        assert wait_for(events, lambda e: e["kind"] == "gpu_unallocatable" and e["node"] == a, timeout=30)
        assert wait_for(events, lambda e: e["kind"] == "gpu_faults" and e["nodes"] == [a], timeout=10)
        set_status(KUBELETS[b], b, free=8)
        assert wait_for(events, lambda e: e["kind"] == "gpu_restored" and e["node"] == b, timeout=10)
        time.sleep(3)  # a duplicate (a second list or watch of the same versions) would have come by now
    finally:
        stop.set()
        thread.join(15)
    assert [e["gpuops"]["error"] for e in events if e["gpuops"].get("error")], "the outage was never seen"
    assert changes(events) == [("startup", None), ("gpu_unallocatable", a), ("gpu_restored", b)]
    assert [e["gpuops"]["nodes"] for e in events if e["gpuops"]["kind"] == "gpu_faults"] == [[b], [a]]


def test_a_compacted_resource_version_is_a_real_410_and_the_list_emits_what_changed_while_away(cluster, nodes, monkeypatch):
    """kube-apiserver with the nodes' watch cache off (--watch-cache-sizes=nodes#0: a watch is served from etcd), the
    source's next watch held back while a's GPU is withheld and etcd's history compacted: the watch from the source's last
    resourceVersion gets the server's 410 Gone, the source lists again and emits a's change once."""
    from kubernetes import watch as kube_watch
    from kubernetes.client.exceptions import ApiException

    (a, b), label = nodes
    real = kube_watch.Watch
    gate, held, gone = threading.Event(), threading.Event(), []
    gate.set()

    class Gated(real):
        def stream(self, func, *args, **kwargs):
            if not gate.is_set():
                held.set()
                gate.wait(60)
            try:
                yield from real.stream(self, func, *args, **kwargs)
            except ApiException as exc:
                gone.append((exc.status, kwargs.get("resource_version"), exc.reason))
                raise

    cluster.restart_apiserver({"--watch-cache-sizes": "nodes#0"})
    try:
        monkeypatch.setattr(kube_watch, "Watch", Gated)
        events, stop, thread = start(cluster, label, heartbeat=1)
        try:
            assert wait_for(events, lambda e: e["kind"] == "gpu_faults" and e["nodes"] == [b], timeout=5)
            gate.clear()
            assert held.wait(10), "the source's next watch never came"
            set_status(KUBELETS[a], a, free=5)  # while the source is away
            # one more write, so the compaction passes a's change (at the revision of the last write itself, etcd keeps
            # it, and a watch from just before it gets it without its previous value: kube-apiserver's 500, not a 410)
            marker = "ev%d-compact" % os.getpid()
            cluster.core.create_namespaced_config_map("default", {"metadata": {"name": marker}})
            cluster.core.delete_namespaced_config_map(marker, "default")
            revision = cluster.compact_etcd()
            gate.set()
            assert wait_for(events, lambda e: e["kind"] == "gpu_unallocatable" and e["node"] == a, timeout=20)
            time.sleep(3)
        finally:
            gate.set()
            stop.set()
            thread.join(15)
    finally:
        cluster.restart_apiserver({"--watch-cache-sizes": None})
    assert [g[0] for g in gone] == [410], gone  # the real server's, once
    assert int(gone[0][1]) < revision
    assert changes(events) == [("startup", None), ("gpu_unallocatable", a)]
    assert [e["gpuops"]["nodes"] for e in events if e["gpuops"]["kind"] == "gpu_faults"] == [[b], [a]]


# -- issue 60: a standby activation -----------------------------------------------------------------------------------------

def _activation(f, identity, lease, log):
    """One activation of the source (tests/kube/source_process.py) with leader election on ``lease``; its events in ``log``."""
    import json as _json  # pylint: disable=import-outside-toplevel
    options = {"kubeconfig": os.path.join(f.cluster.workdir, "role.kubeconfig"), "label_selector": ",".join("%s=%s" % kv for kv in f.label.items()),
               "settle_seconds": 2, "due_seconds": 0, "heartbeat": 3600, "ledger_namespace": f.namespace,
               "leader_election": {"lease": lease, "identity": identity, "lease_seconds": 10, "renew_seconds": 2}}
    # closed with the process, by the test
    handle = open(str(log), "w")  # noqa: SIM115  pylint: disable=consider-using-with
    proc = subprocess.Popen([sys.executable, os.path.join(kubefleet.HERE, "source_process.py"), _json.dumps(options)],
                            stdout=handle, stderr=subprocess.STDOUT, cwd=str(f.tmp))
    return proc, handle


def _events(log):
    import json as _json  # pylint: disable=import-outside-toplevel
    out = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"at"'):
            out.append(_json.loads(line))
    return out


def test_two_activations_one_leads_and_the_standby_takes_over_without_running_the_leaders_window_again(fleet, fake_lib_dir):
    """Two activations of the source with one Lease (the real API server): A leads (its startup event), B waits and emits
    nothing; GPU 0 of node a is withheld: A's gpu_faults runs a. A is killed (SIGKILL: no give-up): B takes over within the
    Lease's 10 s and one renewal, begins with its startup event, and a (still withheld) is not run again (throttled: A
    wrote its window's runs into the Lease). The seconds from A's death to B's startup are printed (a figure)."""
    from test_gpu_health_plan import faulty, healthy  # pylint: disable=import-outside-toplevel
    from test_gpu_quarantine import remediation_fleet  # pylint: disable=import-outside-toplevel

    f, name, dummy, dummy2, dummy3 = remediation_fleet(fleet, fake_lib_dir)
    healthy(f, name)
    lease = "leader-" + f.namespace[-6:]
    log_a, log_b = f.tmp / "a.log", f.tmp / "b.log"
    a, handle_a = _activation(f, "activation-a", lease, log_a)
    b = handle_b = None
    try:
        f.wait(lambda: any(e["event"]["gpuops"]["kind"] == "startup" for e in _events(log_a)), "A's startup", timeout=60)
        b, handle_b = _activation(f, "activation-b", lease, log_b)
        time.sleep(5)
        assert _events(log_b) == [], log_b.read_text()[-2000:]  # the standby emits nothing
        faulty(f, name, "recovery|0|1", "xid|0|79")
        f.wait(lambda: any(e["event"]["gpuops"]["kind"] == "gpu_faults" and name in e["event"]["gpuops"]["nodes"] for e in _events(log_a)),
               "A's gpu_faults for a", timeout=90)
        time.sleep(3)  # a renewal writes the window's run into the Lease
        assert _events(log_b) == [], log_b.read_text()[-2000:]
        a.kill()
        died = time.time()
        f.wait(lambda: any(e["event"]["gpuops"]["kind"] == "startup" for e in _events(log_b)), "B's startup", timeout=60)
        took = [e["at"] for e in _events(log_b) if e["event"]["gpuops"]["kind"] == "startup"][0] - died
        f.wait(lambda: any(e["event"]["gpuops"]["kind"].startswith("gpu_faults") for e in _events(log_b)), "B's window closed", timeout=30)
        kinds = [(e["event"]["gpuops"]["kind"], e["event"]["gpuops"].get("nodes"), e["event"]["gpuops"].get("throttled")) for e in _events(log_b)]
        assert ("gpu_faults_throttled", [], [name]) in kinds, kinds
        assert not [k for k in kinds if k[0] == "gpu_faults"], kinds  # the leader's window is not run again
        assert took <= 14, took  # lease_seconds (10) + renew_seconds (2), and the list
        from kubernetes.client import CoordinationV1Api  # pylint: disable=import-outside-toplevel
        assert CoordinationV1Api(f.cluster.api_client).read_namespaced_lease(lease, f.namespace).spec.holder_identity == "activation-b"
        print("STANDBY: A killed -> B's startup %.1f s" % took)
    finally:
        for proc, handle in ((a, handle_a), (b, handle_b)):
            if proc is not None:
                proc.kill()
                proc.wait(30)
                handle.close()
