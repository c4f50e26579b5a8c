# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: pods kubelet rejected at admission, and what to do with each.

When kubelet's device manager cannot allocate the devices a pod asks for (stale IDs in its
checkpoint, a plugin not registered yet), kubelet rejects the pod at admission: phase
``Failed``, reason ``UnexpectedAdmissionError`` (kubernetes#116125; the admission path is
``pkg/kubelet/lifecycle/predicate.go``). Such a pod stays Failed after the node is repaired:

* a pod with a controller (``ownerReferences[].controller: true``: ReplicaSet, StatefulSet,
  Job, DaemonSet ...) is deleted, so that its controller's own logic replaces it (a
  ReplicaSet has usually created a replacement already; a StatefulSet recreates the name);
* a bare pod is never recreated by anyone: it is reported with the command that recreates
  it, and deleted only when asked (``bare_pods: delete``).

A pod still Running on a GPU the node no longer has is broken too, differently. A real kubelet
(checked with v1.20.2, containerd 1.6, ``../shared/recipes/real-kubelet-node.md`` in this project's
workplace) keeps such a pod Running across its restart: it re-admits it from its checkpoint entry
without asking the plugin, and at every later container start it reuses the cached allocation of
the gone GPU, so the container never starts again (``CreateContainerError``: the device node is
gone; with the NVIDIA runtime, its hook refuses the unknown UUID). Only the repair knows which pods'
entries named a gone GPU (``kubelet_checkpoint``'s ``affected_pods``); given those UIDs
(``stale_pod_uids``), such a pod whose container waits in one of ``BROKEN_START_REASONS`` is
brought back the same way. A pod that fails to start for any other reason, or whose UID the
repair did not name, is never touched.

Pure logic on pod dicts as the API returns them (camelCase keys); the module does the I/O.
"""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

from shlex import quote

DEFAULT_REASONS = ("UnexpectedAdmissionError",)
BARE_POD_ACTIONS = ("report", "delete")
# a container kubelet cannot create or start (the runtime refuses the gone GPU's device or UUID)
BROKEN_START_REASONS = ("CreateContainerError", "RunContainerError")


def controller_of(pod):
    """The owner reference marked ``controller: true`` as {kind, name, uid}, or None for a bare pod."""
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or ():
        if ref.get("controller"):
            return {"kind": ref.get("kind"), "name": ref.get("name"), "uid": ref.get("uid")}
    return None


def recreate_command(namespace, name):
    """A shell command that recreates a bare pod from its own spec (status dropped by the API on create)."""
    return "kubectl -n %s get pod %s -o yaml | kubectl replace --force -f -" % (quote(namespace), quote(name))


def validate(nodes, reasons, bare_pods, stale_pod_uids=()):
    if not isinstance(stale_pod_uids, (list, tuple)) or not all(isinstance(u, str) and u for u in stale_pod_uids):
        raise ParameterError("stale_pod_uids", "must be a list of pod UIDs (kubelet_checkpoint's affected_pods[].pod_uid)")
    _validate(nodes, reasons, bare_pods)


def broken_start(pod):
    """``(reason, message)`` of the first container (init or regular) waiting in BROKEN_START_REASONS, else None."""
    status = pod.get("status") or {}
    for container in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        waiting = (container.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in BROKEN_START_REASONS:
            return waiting.get("reason"), "container %s: %s" % (container.get("name"), waiting.get("message") or waiting.get("reason"))
    return None


def _validate(nodes, reasons, bare_pods):
    if not isinstance(nodes, list) or not all(isinstance(n, str) and n for n in nodes):
        raise ParameterError("nodes", "must be a list of Kubernetes node names")
    if not isinstance(reasons, list) or not reasons or not all(isinstance(r, str) and r for r in reasons):
        raise ParameterError("reasons", "must be a non-empty list of pod status reasons, e.g. [UnexpectedAdmissionError]")
    if bare_pods not in BARE_POD_ACTIONS:
        raise ParameterError("bare_pods", "%r is not one of %s" % (bare_pods, ", ".join(BARE_POD_ACTIONS)))


def classify(pods, nodes, reasons=DEFAULT_REASONS, bare_pods="report", stale_pod_uids=()):
    """One row per pod to bring back on ``nodes``, never one being deleted:

    * rejected at admission: phase Failed, ``status.reason`` in ``reasons``;
    * broken on a gone GPU: not finished, its UID in ``stale_pod_uids``, a container waiting in
      BROKEN_START_REASONS.
    """
    wanted = set(nodes)
    stale = set(stale_pod_uids or ())
    rows = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        status = pod.get("status") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in wanted or meta.get("deletionTimestamp"):
            continue
        phase = status.get("phase")
        if phase == "Failed" and status.get("reason") in reasons:
            reason, message, kind = status.get("reason"), status.get("message"), "rejected"
        elif phase in ("Running", "Pending") and meta.get("uid") in stale and broken_start(pod):
            (reason, message), kind = broken_start(pod), "gpu_gone"
        else:
            continue
        owner = controller_of(pod)
        row = {
            "namespace": meta.get("namespace"),
            "name": meta.get("name"),
            "uid": meta.get("uid"),
            "node": node,
            "phase": phase,
            "kind": kind,
            "reason": reason,
            "message": message,
            "controller": owner,
            "action": "delete" if owner is not None or bare_pods == "delete" else "report",
            "recreate_command": None if owner is not None else recreate_command(meta.get("namespace") or "default", meta.get("name") or ""),
        }
        rows.append(row)
    return sorted(rows, key=lambda r: (r["node"], r["namespace"] or "", r["name"] or ""))


def summary(rows, deleted, check_mode):
    """The module's result keys from the rows and the names actually deleted (``namespace/name``)."""
    verb = "would delete" if check_mode else "deleted"
    owned = [r for r in rows if r["controller"] is not None]
    bare = [r for r in rows if r["controller"] is None]
    rejected = len([r for r in rows if r["kind"] == "rejected"])
    broken = len(rows) - rejected
    parts = ["%d pod(s) rejected at admission%s on %d node(s)" % (
        rejected, " and %d Running but unable to start a container on a gone GPU" % broken if broken else "", len(set(r["node"] for r in rows)))]
    if owned:
        parts.append("%s %d with a controller (it replaces them)" % (verb, len([r for r in owned if r["action"] == "delete"])))
    bare_deleted = [r for r in bare if r["action"] == "delete"]
    if bare_deleted:
        parts.append("%s %d bare pod(s) as asked (bare_pods=delete): nothing recreates them" % (verb, len(bare_deleted)))
    reported = [r for r in bare if r["action"] == "report"]
    if reported:
        parts.append("%d bare pod(s) left for you: recreate_command recreates each" % len(reported))
    return {
        "changed": bool(deleted) or (check_mode and any(r["action"] == "delete" for r in rows)),
        "pods": rows,
        "deleted": sorted(deleted),
        "bare": [dict((k, r[k]) for k in ("namespace", "name", "node", "kind", "recreate_command", "action")) for r in bare],
        "msg": "; ".join(parts) if rows else "no pod rejected at admission, and none broken on a gone GPU, on the nodes given",
    }
