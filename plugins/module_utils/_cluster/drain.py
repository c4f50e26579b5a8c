# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: draining the pods that block a GPU sharing switch, by kubectl drain's rules.

What ``kubectl drain`` does with a node's pods (k8s.io/kubectl/pkg/drain/filters.go), and so do we
with the pods that hold the resource a switch removes:

* a mirror pod (annotation ``kubernetes.io/config.mirror``) is never evicted: kubelet runs it from a
  file on the node (``skipDeletion``);
* a DaemonSet's pod is not evicted: the controller would start it on the node again
  (``daemonSetFilter``, ``--ignore-daemonsets``). Here it still holds the resource, so the node is refused;
* a pod with no controller is refused unless forced (``unreplicatedFilter``, ``--force``): nothing
  recreates it;
* a pod with an ``emptyDir`` volume is refused unless its data may go (``localStorageFilter``,
  ``--delete-emptydir-data``);
* everything else is evicted through the Eviction API, so PodDisruptionBudgets hold (429 is retried).

The cordon is marked as ours (annotation ANNOTATION): a run killed between the cordon and the
uncordon leaves the mark, and the next run finishes the switch and uncordons, or, when the node no
longer needs to switch, just uncordons. A cordon someone else set is never lifted.
"""

from __future__ import annotations

import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import Watcher
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

ANNOTATION = "gpuops.fleet/cordoned-for-sharing-switch"
MIRROR = "kubernetes.io/config.mirror"
# kubectl drain retries an eviction a PodDisruptionBudget refuses (429) every 5 s
EVICTION_RETRY_SECONDS = 5


class DrainError(GpuopsError):
    """A drain was refused before anything changed, or could not be completed."""


def _meta(obj):
    found = obj.get("metadata") if isinstance(obj, dict) else None
    return found if isinstance(found, dict) else {}


def controller(pod):
    """The pod's controller owner reference (``kind``, ``name``), or None."""
    for ref in _meta(pod).get("ownerReferences") or ():
        if ref.get("controller"):
            return ref
    return None


def left_by_drain(pod):
    """Whether ``kubectl drain`` leaves the pod where it is: a mirror pod or a DaemonSet's (``skipDeletion``,
    ``daemonSetFilter``). A node drain skips them; a drain that needs the pod gone refuses instead (``pod_verdict``)."""
    owner = controller(pod)
    return MIRROR in (_meta(pod).get("annotations") or {}) or bool(owner and owner.get("kind") == "DaemonSet")


def pod_verdict(pod, force=False, delete_emptydir_data=False):
    """``(evict, reason)`` for one pod that holds the resource a switch removes, by kubectl drain's rules."""
    name = "%s/%s" % (_meta(pod).get("namespace"), _meta(pod).get("name"))
    if MIRROR in (_meta(pod).get("annotations") or {}):
        return False, "%s is a mirror pod: kubelet runs it from a static manifest on the node and kubectl drain never evicts it; " \
                      "remove the manifest from the node first" % name
    owner = controller(pod)
    if owner and owner.get("kind") == "DaemonSet":
        return False, "%s belongs to DaemonSet %s: its controller would start it on the node again (kubectl drain skips it); " \
                      "keep the DaemonSet off the node first" % (name, owner.get("name"))
    notes = []
    if owner is None:
        if not force:
            return False, "%s has no controller: nothing recreates it once evicted; move it yourself, or set drain_force " \
                          "(kubectl drain --force)" % name
        notes.append("no controller, nothing recreates it (drain_force)")
    empty_dirs = [v.get("name") for v in (pod.get("spec") or {}).get("volumes") or () if "emptyDir" in v and v.get("emptyDir") is not None]
    if empty_dirs:
        if not delete_emptydir_data:
            return False, "%s has emptyDir volumes (%s) whose data is lost when it is evicted; set drain_delete_emptydir_data " \
                          "(kubectl drain --delete-emptydir-data)" % (name, ", ".join(empty_dirs))
        notes.append("emptyDir data lost (drain_delete_emptydir_data)")
    return True, "; ".join(notes) or None


def drain_plan(rows, pods, force=False, delete_emptydir_data=False):
    """``(evictions, refusals)``: per blocking pod of each row, ``{"pod", "node", "note"}`` to evict, or the reason it cannot be."""
    by_name = dict(("%s/%s" % (_meta(p).get("namespace"), _meta(p).get("name")), p) for p in pods or ())
    evictions, refusals = [], []
    for row in rows:
        for item in row["blocking_pods"]:
            ok, reason = pod_verdict(by_name[item], force, delete_emptydir_data)
            if ok:
                evictions.append({"pod": item, "node": row["node"], "note": reason})
            else:
                refusals.append("node %s: %s" % (row["node"], reason))
    return evictions, refusals


def cordoned_by_us(node, annotation=ANNOTATION):
    """Whether the node is cordoned with our mark (``annotation``: a sharing switch's, or another task's)."""
    spec, annotations = node.get("spec"), _meta(node).get("annotations")
    return bool(isinstance(spec, dict) and spec.get("unschedulable")) and isinstance(annotations, dict) and annotation in annotations


def cordon(api, node, mode):
    api.patch_node(node, {"spec": {"unschedulable": True}, "metadata": {"annotations": {ANNOTATION: mode}}})


def uncordon(api, node):
    # null removes the annotation (a JSON merge / strategic merge patch)
    api.patch_node(node, {"spec": {"unschedulable": False}, "metadata": {"annotations": {ANNOTATION: None}}})


def waiter(api):
    """``wait_gone(node, names, deadline)``: watch the node's pods until none of ``names`` (namespace/name) is left, or
    ``deadline``; returns those still there."""
    def wait_gone(node, names, deadline):
        pods = Watcher(api.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % node)
        pods.wait(lambda w: not any("%s/%s" % k in names for k in w.objects), deadline)
        return sorted("%s/%s" % k for k in pods.objects if "%s/%s" % k in names)
    return wait_gone


def evict(api, namespace, name, deadline, api_exception, sleep=time.sleep, clock=time.monotonic, uid=None):
    """Evict one pod through the Eviction API, retrying while a PodDisruptionBudget refuses (until ``deadline``).

    With ``uid``, only that pod: the eviction carries it as a precondition, so a pod recreated under the same name (a
    StatefulSet's) is never evicted in its place; the API's 409 for a UID that no longer matches means ours is gone."""
    # policy/v1 Eviction from Kubernetes 1.22; the API servers before serve policy/v1beta1 only
    for version in ("policy/v1", "policy/v1beta1"):
        body = {"apiVersion": version, "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        if uid:
            body["deleteOptions"] = {"preconditions": {"uid": uid}}
        while True:
            try:
                api.create_namespaced_pod_eviction(name, namespace, body)
                return
            except api_exception as exc:
                if exc.status == 404 and "not found" in str(exc.body or "").lower() and "pods" in str(exc.body or ""):
                    return  # already gone
                if exc.status == 409 and uid and "precondition" in str(exc.body or "").lower():
                    return  # the pod of that name is another one now: ours is gone
                if exc.status == 429 and clock() < deadline:
                    sleep(EVICTION_RETRY_SECONDS)  # a PodDisruptionBudget says not yet
                    continue
                if exc.status == 429:
                    raise DrainError("evicting %s/%s: a PodDisruptionBudget still refuses it after drain_timeout" % (namespace, name)) from exc
                if exc.status in (400, 404, 415, 422) and version == "policy/v1":
                    break  # this API server does not know policy/v1 Eviction
                raise


def drain_and_switch(api, rows, nodes_by_name, evictions, label_node, wait_gone, api_exception, timeout, clock=time.monotonic):
    """Per node to change: cordon (marked as ours), evict its planned pods, wait until they are gone, label, uncordon.

    A node an earlier, killed run cordoned (our mark) counts as not cordoned before, so it is
    uncordoned at the end; a node someone else cordoned stays cordoned. Nodes that need no
    change but carry our mark are uncordoned (the earlier run's switch is done, or no longer
    wanted). Returns ``(evicted, uncordoned)``.
    """
    deadline = clock() + timeout
    evicted, uncordoned = [], []
    for row in rows:
        node = nodes_by_name[row["node"]]
        ours = cordoned_by_us(node)
        if not row["change"]:
            if ours:
                uncordon(api, row["node"])
                uncordoned.append(row["node"])
            continue
        was_cordoned = bool((node.get("spec") or {}).get("unschedulable")) and not ours
        planned = [e["pod"] for e in evictions if e["node"] == row["node"]]
        if not planned and not ours:
            label_node(row)
            continue
        if not was_cordoned and not ours:
            cordon(api, row["node"], "%s=%s" % (row["label"], row["desired"]))
        try:
            for item in planned:
                namespace, name = item.split("/", 1)
                evict(api, namespace, name, deadline, api_exception)
                evicted.append(item)
            left = wait_gone(row["node"], set(planned), deadline)
            if left:
                raise DrainError("node %s: evicted pods still there after drain_timeout: %s" % (row["node"], ", ".join(left)))
            label_node(row)
        finally:
            # a failure we see uncordons as before; only a run that is killed leaves the cordon (and our mark)
            if not was_cordoned:
                uncordon(api, row["node"])
                uncordoned.append(row["node"])
    return evicted, uncordoned
