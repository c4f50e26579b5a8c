# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sharing switch's drain: kubectl drain's rules per pod, and the cordon marked as ours (a fake CoreV1Api)."""

from __future__ import annotations

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain


def pod(name, owner=None, mirror=False, empty_dir=False):
    meta = {"name": name, "namespace": "ml", "annotations": {}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": name + "-owner", "controller": True}]
    if mirror:
        meta["annotations"][drain.MIRROR] = "abc"
    spec = {"nodeName": "gpu-a", "volumes": [{"name": "scratch", "emptyDir": {}}] if empty_dir else []}
    return {"metadata": meta, "spec": spec}


@pytest.mark.parametrize("the_pod, force, emptydir, evict, says", [
    (pod("train", "ReplicaSet"), False, False, True, None),
    (pod("train", "StatefulSet"), False, False, True, None),
    (pod("kube-proxy", mirror=True), True, True, False, "is a mirror pod"),
    (pod("dcgm", "DaemonSet"), True, True, False, "belongs to DaemonSet dcgm-owner"),
    (pod("notebook"), False, False, False, "has no controller: nothing recreates it once evicted; move it yourself, or set drain_force"),
    (pod("notebook"), True, False, True, "no controller, nothing recreates it (drain_force)"),
    (pod("cache", "ReplicaSet", empty_dir=True), False, False, False, "has emptyDir volumes (scratch)"),
    (pod("cache", "ReplicaSet", empty_dir=True), False, True, True, "emptyDir data lost"),
])
def test_kubectl_drain_rules(the_pod, force, emptydir, evict, says):
    ok, reason = drain.pod_verdict(the_pod, force, emptydir)
    assert ok is evict
    assert (reason is None) if says is None else (says in reason), reason


def test_the_plan_refuses_naming_node_pod_and_reason_and_evicts_the_rest():
    pods = [pod("train", "ReplicaSet"), pod("dcgm", "DaemonSet"), pod("notebook")]
    rows = [{"node": "gpu-a", "blocking_pods": ["ml/train", "ml/dcgm", "ml/notebook"]}]
    evictions, refusals = drain.drain_plan(rows, pods)
    assert evictions == [{"pod": "ml/train", "node": "gpu-a", "note": None}]
    assert [r.split(":")[0] for r in refusals] == ["node gpu-a", "node gpu-a"]
    assert "ml/dcgm belongs to DaemonSet" in refusals[0] and "ml/notebook has no controller" in refusals[1]


class FakeApi:
    def __init__(self, nodes):
        self.nodes = nodes
        self.calls = []

    def patch_node(self, name, body):
        self.calls.append((name, body))
        node = self.nodes[name]
        node.setdefault("spec", {}).update(body.get("spec") or {})
        annotations = node.setdefault("metadata", {}).setdefault("annotations", {})
        for key, value in ((body.get("metadata") or {}).get("annotations") or {}).items():
            if value is None:
                annotations.pop(key, None)
            else:
                annotations[key] = value

    def create_namespaced_pod_eviction(self, name, namespace, body):
        self.calls.append(("evict", "%s/%s" % (namespace, name)))


def node(name, unschedulable=False, ours=False):
    return {"metadata": {"name": name, "annotations": {drain.ANNOTATION: "cgpu=true"} if ours else {}}, "spec": {"unschedulable": unschedulable}}


def row(name, change=True):
    return {"node": name, "label": "cgpu", "desired": "true", "change": change, "blocking_pods": []}


def switch(api, rows, evictions, left=()):
    labelled = []
    result = drain.drain_and_switch(api, rows, api.nodes, evictions, lambda r: labelled.append(r["node"]),
                                    lambda n, names, deadline: sorted(left), Exception, 30)
    return result, labelled


def test_cordon_marked_evict_label_uncordon():
    api = FakeApi({"gpu-a": node("gpu-a")})
    (evicted, uncordoned), labelled = switch(api, [row("gpu-a")], [{"pod": "ml/train", "node": "gpu-a", "note": None}])
    assert api.calls == [
        ("gpu-a", {"spec": {"unschedulable": True}, "metadata": {"annotations": {drain.ANNOTATION: "cgpu=true"}}}),
        ("evict", "ml/train"),
        ("gpu-a", {"spec": {"unschedulable": False}, "metadata": {"annotations": {drain.ANNOTATION: None}}}),
    ]
    assert (evicted, uncordoned, labelled) == (["ml/train"], ["gpu-a"], ["gpu-a"])
    assert api.nodes["gpu-a"]["spec"]["unschedulable"] is False and drain.ANNOTATION not in api.nodes["gpu-a"]["metadata"]["annotations"]


def test_a_node_someone_else_cordoned_stays_cordoned():
    api = FakeApi({"gpu-a": node("gpu-a", unschedulable=True)})
    (evicted, uncordoned), labelled = switch(api, [row("gpu-a")], [{"pod": "ml/train", "node": "gpu-a", "note": None}])
    assert api.calls == [("evict", "ml/train")] and uncordoned == [] and labelled == ["gpu-a"]
    assert api.nodes["gpu-a"]["spec"]["unschedulable"] is True


def test_a_killed_runs_cordon_is_finished_or_undone():
    # still to switch: evict, label, then uncordon (our mark means it was not cordoned before us)
    api = FakeApi({"gpu-a": node("gpu-a", unschedulable=True, ours=True), "gpu-b": node("gpu-b", unschedulable=True, ours=True)})
    (evicted, uncordoned), labelled = switch(api, [row("gpu-a"), row("gpu-b", change=False)], [{"pod": "ml/train", "node": "gpu-a", "note": None}])
    assert labelled == ["gpu-a"] and sorted(uncordoned) == ["gpu-a", "gpu-b"]
    assert not any(n["spec"]["unschedulable"] for n in api.nodes.values())
    assert not any(drain.ANNOTATION in n["metadata"]["annotations"] for n in api.nodes.values())
    assert ("gpu-a", {"spec": {"unschedulable": True}, "metadata": {"annotations": {drain.ANNOTATION: "cgpu=true"}}}) not in api.calls


def test_pods_that_do_not_go_fail_the_node_and_uncordon_it():
    api = FakeApi({"gpu-a": node("gpu-a")})
    with pytest.raises(drain.DrainError, match="node gpu-a: evicted pods still there after drain_timeout: ml/train"):
        switch(api, [row("gpu-a")], [{"pod": "ml/train", "node": "gpu-a", "note": None}], left=["ml/train"])
    assert api.nodes["gpu-a"]["spec"]["unschedulable"] is False
