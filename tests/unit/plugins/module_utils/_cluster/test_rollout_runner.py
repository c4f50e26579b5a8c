# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The API half of the rollout engine (``_cluster.rollout.runner``) against a scripted cluster.

A fake cluster answers the list calls and records deletes; the kubernetes client's ``Watch`` is
replaced by one that plays the fake's current state (and the deletions since) on each stream, so
``roll`` runs its real waits without an API server. ``make kube`` runs the same engine against a
real kube-apiserver through the module.
"""

from __future__ import annotations

import types

import pytest

import kube_list

pytest.importorskip("kubernetes")

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import k8s_watch  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.rollout import plan as ro  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.rollout import runner  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError  # noqa: E402
from ansible_collections.gpuops.fleet.plugins.modules.daemonset_rollout import ARGUMENT_SPEC  # noqa: E402

UID = "ds-uid"
NS = "kube-system"


def pod(name, node, rev, ready=True):
    return {"metadata": {"namespace": NS, "name": name, "labels": {"app": "plugin", ro.REVISION_LABEL: rev},
                         "ownerReferences": [{"uid": UID, "controller": True}]},
            "spec": {"nodeName": node, "containers": [{"name": "ctr", "image": "plugin:%s" % rev}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


class FakeCluster:
    """One DaemonSet (revision ``new``), its pods, the nodes; a delete brings the node's new pod."""

    def __init__(self, pods, nodes, strategy="OnDelete", new_pod_ready=True):
        self.pods = dict((p["metadata"]["name"], p) for p in pods)
        self.nodes = nodes
        self.deleted, self.gone = [], []
        self.new_pod_ready = new_pod_ready
        self.ds = {"metadata": {"namespace": NS, "name": "plugin", "uid": UID, "generation": 2},
                   "spec": {"selector": {"matchLabels": {"app": "plugin"}}, "updateStrategy": {"type": strategy},
                            "template": {"spec": {"containers": [{"name": "ctr", "image": "plugin:new"}]}}},
                   "status": {"observedGeneration": 2}}
        self.core = types.SimpleNamespace(list_namespaced_pod=self.list_pods, delete_namespaced_pod=self.delete,
                                          list_node=self.list_nodes, read_namespaced_pod_log=None, create_namespaced_pod=None)
        self.apps = types.SimpleNamespace(list_namespaced_daemon_set=lambda *a, **k: self.listed([self.ds]),
                                          list_namespaced_controller_revision=lambda *a, **k: self.listed([
                                              {"metadata": {"name": "plugin-new", "labels": {ro.REVISION_LABEL: "new"},
                                                            "ownerReferences": [{"uid": UID, "controller": True}]}, "revision": 2}]))

    @staticmethod
    def listed(items):
        return kube_list.listed(items, "1")

    def list_pods(self, *args, **kwargs):
        return self.listed(self.pods.values())

    def list_nodes(self, *args, **kwargs):
        return self.listed({"metadata": {"name": n}} for n in self.nodes)

    def delete(self, name, namespace):
        self.deleted.append(name)
        old = self.pods.pop(name)
        self.gone.append(old)
        node = old["spec"]["nodeName"]
        self.pods["%s-new" % node] = pod("%s-new" % node, node, "new", ready=self.new_pod_ready)

    def watch_class(self):
        cluster = self

        class ScriptedWatch:
            def stream(self, func, *args, **kwargs):
                for old in cluster.gone:
                    yield {"type": "DELETED", "raw_object": old}
                for item in func(*args).items:
                    yield {"type": "ADDED", "raw_object": item}

            def stop(self):
                pass

        return ScriptedWatch


def params(**overrides):
    p = dict((k, v.get("default")) for k, v in ARGUMENT_SPEC.items())
    p.update(namespace=NS, name="plugin")
    p.update(overrides)
    return p


def roll(monkeypatch, cluster, check_mode=False, **overrides):
    monkeypatch.setattr(k8s_watch.k8s_watch, "Watch", cluster.watch_class())
    p = params(**overrides)
    runner.check_params(p)
    client = types.SimpleNamespace(sanitize_for_serialization=lambda item: item)
    api = runner.DaemonSetApi(client, p, check_mode, core=cluster.core, apps=cluster.apps)
    return runner.roll(api, p, check_mode)


def test_a_rollout_deletes_each_old_pod_and_waits_for_its_successor(monkeypatch):
    cluster = FakeCluster([pod("p-a", "gpu-a", "old"), pod("p-b", "gpu-b", "new"), pod("p-c", "gpu-c", "old")],
                          ["gpu-a", "gpu-b", "gpu-c"])
    out = roll(monkeypatch, cluster)
    assert cluster.deleted == ["p-a", "p-c"]
    assert [(r["node"], r["status"], r["new_pod"]) for r in out["rows"]] == [
        ("gpu-a", "updated", "gpu-a-new"), ("gpu-c", "updated", "gpu-c-new")]
    assert out["changed"] is True and out["api_calls"] > 0
    # the second run finds every node current: nothing deleted, nothing changed
    again = roll(monkeypatch, cluster)
    assert cluster.deleted == ["p-a", "p-c"] and again["changed"] is False and again["rows"] == []


def test_a_new_pod_that_never_gets_ready_fails_its_node_and_stops_the_rollout(monkeypatch):
    cluster = FakeCluster([pod("p-a", "gpu-a", "old"), pod("p-b", "gpu-b", "old")], ["gpu-a", "gpu-b"], new_pod_ready=False)
    out = roll(monkeypatch, cluster, pod_timeout=1)
    assert cluster.deleted == ["p-a"]  # max_failed_nodes 0: gpu-b's pod is never deleted
    rows = dict((r["node"], r) for r in out["rows"])
    assert rows["gpu-a"]["status"] == "failed" and "not Ready after 1 s" in rows["gpu-a"]["reason"]
    assert rows["gpu-b"]["status"] == "not_started"


def test_check_mode_deletes_nothing_and_plans_every_old_pod(monkeypatch):
    cluster = FakeCluster([pod("p-a", "gpu-a", "old"), pod("p-b", "gpu-b", "new")], ["gpu-a", "gpu-b"])
    out = roll(monkeypatch, cluster, check_mode=True)
    assert cluster.deleted == [] and out["changed"] is True
    assert [(r["node"], r["status"]) for r in out["rows"]] == [("gpu-a", "planned")]


def test_a_rolling_update_daemonset_is_refused_before_any_delete(monkeypatch):
    cluster = FakeCluster([pod("p-a", "gpu-a", "old")], ["gpu-a"], strategy="RollingUpdate")
    with pytest.raises(ro.RolloutError, match="updateStrategy RollingUpdate"):
        roll(monkeypatch, cluster)
    assert cluster.deleted == []


def test_a_node_that_does_not_exist_is_named_and_nothing_is_deleted(monkeypatch):
    cluster = FakeCluster([pod("p-a", "gpu-a", "old")], ["gpu-a"])
    with pytest.raises(ro.RolloutError, match="no such node in the cluster: gpu-typo"):
        roll(monkeypatch, cluster, nodes=["gpu-a", "gpu-typo"])
    assert cluster.deleted == []


@pytest.mark.parametrize("field,value,fix", [
    ("nodes", [], "is empty"), ("pod_timeout", 0, "pod_timeout"), ("max_failed_nodes", -1, "max_failed_nodes")])
def test_options_no_rollout_can_honour_are_refused_by_name(field, value, fix):
    with pytest.raises(ParameterError, match=fix):
        runner.check_params(params(**{field: value}))
