# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: what a GPU remediation puts on a Node, and its record, pure reads of data.

The marks: our taint ``TAINT_KEY`` (a cluster user's to write or remove, never the node's kubelet's: NodeRestriction), our
cordon with its mark ``CORDON_MARK`` (only where the node was schedulable), the annotation ``REMEDIATION`` (the record's
mirror for people and the event source, never read back) and the Node condition ``CONDITION``. The record is the node's
open ledger entry (``ledger.py``: the controller's own, in a namespace no kubelet may write); its step is one of the
remediation's states (``states.py``)."""

from __future__ import annotations

import json
import re
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.plan import QUARANTINE_ANNOTATION as REMEDIATION
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.plan import QUARANTINE_TAINT
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions

CORDON_MARK = "gpuops.fleet/cordoned-for-gpu-health"
TAINT_KEY = QUARANTINE_TAINT
# the Node condition that says why a node is out (the taint says that it is): False while quarantined for a GPU, True on
# release, Unknown where an operator cancelled the quarantine; kubelet's status updates patch its own conditions only
CONDITION = "GPUHealthy"
__all__ = ("REMEDIATION", "CORDON_MARK", "TAINT_KEY", "CONDITION")


def meta(obj):
    found = obj.get("metadata") if isinstance(obj, dict) else None
    return found if isinstance(found, dict) else {}


def spec(node):
    found = node.get("spec") if isinstance(node, dict) else None
    return found if isinstance(found, dict) else {}


def tainted(node):
    """Whether ``node`` carries our taint: a Node's taints are written by cluster users only (NodeRestriction refuses a kubelet's
    change of them), so the node cannot forge or lift it."""
    taints = spec(node).get("taints")
    return isinstance(taints, list) and any(isinstance(t, dict) and t.get("key") == TAINT_KEY for t in taints)


def open_entry(ledger, node):
    for entry in reversed(ledger.get("entries") or []):
        if entry.get("node") == node and not entry.get("closed_at"):
            return entry
    return None


def record(entry, node):
    """The quarantine's record of ``node`` from its open ledger entry, or None where the ledger holds none: ``{gpus, action,
    scope, step, started, run, cordoned_by_us, boot_id, paused_labels, escalated_from}``. Nothing here is read from the node's
    annotation, which the node may write as easily as we do. An entry written before the ledger kept the record (no step) is
    read with what the node cannot forge: marked (step draining: the drain resumes) where our taint is on, else marking; our
    cordon where it carries our mark."""
    if entry is None:
        return None
    action = entry.get("action")
    found = {"gpus": list(entry.get("gpus") or []), "action": action, "scope": entry.get("scope") or _scope(action),
             "step": entry.get("step"), "started": entry.get("at"), "run": entry.get("run"),
             "cordoned_by_us": bool(entry.get("cordoned_by_us")), "boot_id": entry.get("boot_id"),
             "paused_labels": entry.get("paused_labels"), "escalated_from": entry.get("escalated_from")}
    if found["step"] is None:
        found["step"] = states.DRAINING if tainted(node) else states.MARKING
        found["cordoned_by_us"] = drain.cordoned_by_us(node, CORDON_MARK)
    elif found["step"] == states.MARKING and tainted(node):
        # the node's patch was done (a run killed before it wrote the next step): the drain resumes
        found["step"] = states.move(states.MARKING, states.DRAINING)
    return found


def _scope(action):
    try:
        return actions.scope_of(action)
    except (KeyError, TypeError, ValueError):
        return None


def mirror(shown_record):
    """The annotation's text: the record as its state is shown (``states.py``), for people and the event source; never read
    back as the truth."""
    shown = dict((k, v) for k, v in shown_record.items() if v is not None)
    if shown.get("step"):
        shown["step"] = states.shown(shown["step"])
    return json.dumps(shown, sort_keys=True)


def taints_with_ours(node, value):
    """The node's taints with ours added, or None where ours is on already."""
    taints = spec(node).get("taints")
    taints = list(taints) if isinstance(taints, list) else []
    if any(isinstance(t, dict) and t.get("key") == TAINT_KEY for t in taints):
        return None
    return taints + [{"key": TAINT_KEY, "value": value, "effect": "NoSchedule"}]


def taint_value(gpus, scope):
    if scope == "node" or not gpus:
        return "node"
    return gpus[0][:12].rstrip("-")  # a label value: at most 63 characters, alphanumeric at both ends


def ours(node, current):
    """``(spec, labels)`` of the one patch that takes off what a quarantine of ours put on ``node``, by its record (the ledger):
    our taint (by its key), our cordon (where the record says we cordoned it), a pause's labels restored (its own keys only);
    the caller's patch also removes our annotation and mark."""
    taints = spec(node).get("taints")
    taints = list(taints) if isinstance(taints, list) else []
    kept = [t for t in taints if not (isinstance(t, dict) and t.get("key") == TAINT_KEY)]
    out = {}
    if len(kept) != len(taints):
        out["taints"] = kept
    if current and current["cordoned_by_us"] and spec(node).get("unschedulable"):
        out["unschedulable"] = False
    restore = dict((current or {}).get("paused_labels") or {})
    return out, restore


def uncordoned(node, current):
    """Where the node is schedulable again while our quarantine holds, what that means and how to cancel (a sentence), else
    None. A kubelet may uncordon its own Node, so an uncordon alone cancels nothing: our taint keeps new pods off, and only a
    cluster user can remove it."""
    if current is None or not current["cordoned_by_us"] or spec(node).get("unschedulable"):
        return None
    name = meta(node).get("name")
    return ("node %s was uncordoned while quarantined (by its own kubelet, which may, or by a cluster user; the API server's audit "
            "log says which): an uncordon alone cancels nothing, and the quarantine holds (the taint %s keeps new pods off). To "
            "cancel the remediation, remove the taint: kubectl taint node %s %s-" % (name, TAINT_KEY, name, TAINT_KEY))


def operator_cancelled(node, current):
    """What an operator undid of our quarantine by hand (a sentence), or None: our taint taken off a node the ledger says we
    marked. Only a cluster user can remove a taint (NodeRestriction refuses a kubelet's change of its taints), so a node
    cannot cancel its own quarantine; its uncordon of itself is reported (``uncordoned``), never a cancel."""
    if current is None or current["step"] == states.MARKING or tainted(node):
        return None
    return "removed the taint %s" % TAINT_KEY


def condition_reason(keys, action):
    """A Node condition's reason from the signal (CamelCase, as kubelet's own: ``xid:79`` -> ``Xid79``)."""
    text = (keys or [action or "GPUFault"])[0]
    words = re.findall(r"[A-Za-z0-9]+", str(text))
    return ("".join(w[:1].upper() + w[1:] for w in words) or "GPUFault")[:64]


def rfc3339(now):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def set_condition(api, node, condition, now, api_exception):
    """The Node's ``GPUHealthy`` condition ``(status, reason, message)``, through the status subresource (a strategic merge on
    ``conditions``, keyed by type: kubelet's own conditions stay); nothing is written where ``node`` (as read) says this
    already. None, or why it could not be written (a sentence): the condition says why a node is out, the taint that it is,
    so a refusal (no ``patch`` on ``nodes/status``) is reported, never a reason to leave a quarantine or a release half
    done."""
    status, reason, message = condition
    name = meta(node)["name"]
    conditions = ((node.get("status") or {}).get("conditions")) or []
    old = next((c for c in conditions if isinstance(c, dict) and c.get("type") == CONDITION), None)
    message = message[:1024]
    if old and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return None
    stamp = rfc3339(now)
    transition = old.get("lastTransitionTime") if old and old.get("status") == status else stamp
    written = {"type": CONDITION, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": stamp,
               "lastTransitionTime": transition}
    try:
        api.patch_node_status(name, {"status": {"conditions": [written]}})
    except api_exception as exc:
        return ("the Node condition %s=%s could not be written (%s %s): grant patch on nodes/status (docs/rbac/gpu-remediation-"
                "condition.yml)" % (CONDITION, status, getattr(exc, "status", ""), getattr(exc, "reason", "") or ""))
    return None
