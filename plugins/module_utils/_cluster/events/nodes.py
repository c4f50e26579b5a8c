# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the GPU Nodes' events, pure (the event source ``gpuops.fleet.gpu_nodes`` feeds it
the API's list and watch; ``extensions/eda/plugins/event_source/gpu_nodes.py``).

Each Node is reduced to a view (``view``): per GPU resource its capacity and allocatable, the kernel's boot ID, the
``Ready`` condition and the step of our quarantine annotation. An event is a change of that view (``changes``), never a
watch notification as such: a notification delivered twice, a MODIFIED that changes only a heartbeat, or a relist after
``410 Gone`` that finds what was already known, emits nothing; a relist emits exactly what changed while the watch was away
(``Tracker.relist``). So no event is emitted twice, and none is missed while the source runs. A restarted source starts
with one ``startup`` event naming every node that is unhealthy now, so an activation that restarts misses nothing either.

Everything a Node says is data: names are checked (DNS-1123) before any event carries them, texts are bounded, and an event
never holds a template or a command; the rulebook passes the node's name to ``--limit`` and nothing else.
"""

from __future__ import annotations

import fnmatch
import json
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events.kinds import (
    GPU_RESTORED, GPU_UNALLOCATABLE, HEARTBEAT, NODE_NOT_READY, NODE_READY, NODE_REBOOTED, NODE_REMOVED, NODE_UNREADABLE,
    REMEDIATION_STEP, STARTUP)
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events.options import DEFAULT_RESOURCES, MAX_TEXT, host_name
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import digits, is_int

# the steps the quarantine's annotation shows (_cluster/remediation/states.py); any other text is reported as "other"
STEPS = states.SHOWN
_BOOT_ID = re.compile(r"\A[0-9A-Za-z-]{1,64}\Z")
REMEDIATION = "gpuops.fleet/gpu-remediation"  # the quarantine's annotation (_cluster/remediation/plan.py QUARANTINE_ANNOTATION)
TAINT = "gpuops.fleet/gpu-unhealthy"  # the quarantine's taint (plan.py QUARANTINE_TAINT): a cluster user's to write, never a kubelet's


def _count(value):
    number = digits(value if isinstance(value, str) else str(value) if is_int(value) else None)
    return number if number is not None and number < 10 ** 9 else None


def view(node, resources=DEFAULT_RESOURCES, by_label=False):
    """What the events compare of a Node: ``{name, resource_version, gpus: {resource: [capacity, allocatable]}, boot_id,
    ready, step}``; None for a node with no GPU resource in its capacity (unless ``by_label``: the list was selected by
    label) or whose name is not a Kubernetes name. A field of the wrong type is as absent: one node's bad data is no
    exception for the source (it would end the activation for every node). Where reading it raises all the same (any
    exception: a value nested too deep, a number too long), the view says ``unreadable`` (``_unreadable``): that node is
    reported, and the watch goes on for the others."""
    try:
        return _view(node, resources, by_label)
    except Exception as exc:  # noqa: BLE001 (one object's data: whatever it raises is about that node only)
        return _unreadable(node, exc)


def _unreadable(node, exc):
    """The view of a Node whose data raised ``exc``: no GPUs, Ready and boot unknown, and why (the exception's type, never its
    text: it may quote the node's data). None where even its name cannot be read as a Kubernetes name."""
    try:
        meta = _dict(_dict(node).get("metadata"))
        name = meta.get("name") if host_name(meta.get("name")) else None
        version = meta.get("resourceVersion")
        version = version[:64] if isinstance(version, str) else ""
    except Exception:  # noqa: BLE001
        return None
    if name is None:
        return None
    return {"name": name, "resource_version": version, "gpus": {}, "boot_id": None, "ready": None, "step": None, "quarantined": False,
            "unreadable": "its Node's data could not be read (%s)" % (exc.args[0] if isinstance(exc, _Marked) else type(exc).__name__)}


class _Marked(Exception):
    pass


_GPU_RESOURCES = {}  # (a resource name, the patterns) -> whether it is a GPU resource: a Node's few names, matched once


def _gpu_resource(resource, resources):
    key = (resource, tuple(resources))
    found = _GPU_RESOURCES.get(key)
    if found is None:
        if len(_GPU_RESOURCES) >= 4096:  # a node that invents names: the cache starts again, never grows without end
            _GPU_RESOURCES.clear()
        found = _GPU_RESOURCES[key] = isinstance(resource, str) and any(fnmatch.fnmatchcase(resource, p) for p in resources)
    return found


def _view(node, resources, by_label):
    if _UNREADABLE in _dict(node):
        raise _Marked(node[_UNREADABLE])
    meta = _dict(_dict(node).get("metadata"))
    name = meta.get("name")
    if not host_name(name):  # a Node named all or ungrouped can be no one inventory host: never watched, never in a --limit
        return None
    status = _dict(node.get("status"))
    capacity, allocatable = _dict(status.get("capacity")), _dict(status.get("allocatable"))
    gpus = {}
    for resource in sorted(set(capacity) | set(allocatable)):
        if _gpu_resource(resource, resources):
            have, free = _count(capacity.get(resource)), _count(allocatable.get(resource))
            if have:
                gpus[resource[:MAX_TEXT]] = [have, free if free is not None else 0]
    if not gpus and not by_label:
        return None
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    ready = next((c.get("status") for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"), None)
    boot = _dict(status.get("nodeInfo")).get("bootID")
    version = meta.get("resourceVersion")
    return {"name": name, "resource_version": version[:64] if isinstance(version, str) else "", "gpus": gpus,
            "boot_id": boot if isinstance(boot, str) and _BOOT_ID.match(boot) else ("invalid" if boot else None),
            "ready": ready if ready in ("True", "False", "Unknown") else None, "step": _step(meta), "quarantined": _quarantined(node)}


def _quarantined(node):
    """Whether the Node carries our quarantine's taint: a kubelet may write our annotation on its own Node, never its taints
    (NodeRestriction), so this, not the annotation's step, says that our remediation holds the node."""
    taints = _dict(node.get("spec")).get("taints")
    return isinstance(taints, list) and any(isinstance(t, dict) and t.get("key") == TAINT for t in taints)


def _dict(value):
    return value if isinstance(value, dict) else {}


_UNREADABLE = "gpuops_unreadable"


def slim(node):
    """What ``view`` reads of a Node, the rest dropped as the list and the watch deliver it (its images and managedFields
    were most of the source's memory at a thousand Nodes). Never raises: a Node it cannot slim keeps its name and version
    and is marked, so its view says unreadable."""
    try:
        return _slim(node)
    except Exception as exc:  # noqa: BLE001 (one object's data)
        meta = _dict(_dict(node).get("metadata"))
        return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")}, _UNREADABLE: type(exc).__name__}


def _slim(node):
    meta, status = _dict(_dict(node).get("metadata")), _dict(_dict(node).get("status"))
    annotations = _dict(meta.get("annotations"))
    conditions = status.get("conditions") if isinstance(status.get("conditions"), list) else []
    taints = _dict(node.get("spec")).get("taints")
    return {"metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion"),
                         "annotations": dict((k, v) for k, v in annotations.items() if k == REMEDIATION)},
            "spec": {"taints": [t for t in taints if isinstance(t, dict) and t.get("key") == TAINT] if isinstance(taints, list) else []},
            "status": {"capacity": status.get("capacity"), "allocatable": status.get("allocatable"),
                       "conditions": [c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"],
                       "nodeInfo": {"bootID": _dict(status.get("nodeInfo")).get("bootID")}}}


def _step(meta):
    text = _dict(meta.get("annotations")).get(REMEDIATION)
    if text is None:
        return None
    try:
        found = json.loads(text) if isinstance(text, str) and len(text) < 65536 else None
    except (ValueError, RecursionError):  # not JSON, a number past int()'s digits, arrays nested past the interpreter's depth
        found = None
    step = found.get("step") if isinstance(found, dict) else None
    if not isinstance(step, str):
        return "unreadable"
    return step if step in STEPS else "other"


def withheld(state):
    """Whether a GPU resource of the node's view is below its capacity (the device plugin withholds a GPU)."""
    return any(free < have for have, free in state["gpus"].values())


def unhealthy(state):
    """Why a node's view is unhealthy now (a list; empty: healthy): GPUs withheld, not Ready, in a remediation."""
    why = ["%s %d of %d allocatable" % (r, free, have) for r, (have, free) in sorted(state["gpus"].items()) if free < have]
    if state.get("unreadable"):
        why.append(state["unreadable"])
    if state["ready"] not in (None, "True"):
        why.append("Ready is %s" % state["ready"])
    if state["step"]:
        why.append("remediation step %s" % state["step"])
    return why


# What ansible-rulebook limits a playbook to (``meta.hosts``): the nodes (inventory hosts named after their Nodes, as the
# k8s_gpu_nodes inventory names them) and localhost, where the collection's playbooks run their controller plays
# (ansible-playbook's --limit skips the implicit localhost unless it names it).
CONTROLLER = "localhost"


def limit(nodes):
    return list(nodes) + [CONTROLLER]


def _event(kind, state, changed, observed):
    """One node's event, limited to that node (a checked Kubernetes name) and the controller."""
    return {"gpuops": {"kind": kind, "node": state["name"], "changed": changed, "resource_version": state["resource_version"],
                       "observed_at": observed, "unhealthy": unhealthy(state)}, "meta": {"hosts": limit([state["name"]])}}


def changes(before, after, observed):
    """The events of a node's view going from ``before`` (None: not known) to ``after`` (None: gone); a node not known
    before is news only where it is unhealthy."""
    if after is None:
        return [_event(NODE_REMOVED, before, {}, observed)] if before else []
    if after.get("unreadable") or (before or {}).get("unreadable"):
        # a node whose data cannot be read (or can again): said once per change, never a fault of its own (it names no GPU)
        if after.get("unreadable") and not (before or {}).get("unreadable"):
            return [_event(NODE_UNREADABLE, after, {"unreadable": after["unreadable"]}, observed)]
        if before is None or after.get("unreadable"):
            return []
        before = None if not before.get("gpus") else before
    if before is None:  # a GPU node that appears unhealthy is news (a healthy one is not)
        if not unhealthy(after):
            return []
        return [_event(GPU_UNALLOCATABLE if withheld(after) else NODE_NOT_READY, after, {}, observed)]
    out = []
    lost, back = {}, {}
    for resource in sorted(set(before["gpus"]) | set(after["gpus"])):
        was, now = before["gpus"].get(resource, [0, 0]), after["gpus"].get(resource, [0, 0])
        short_was, short_now = was[0] - was[1], now[0] - now[1]
        if short_now > short_was:
            lost[resource] = {"before": was[1], "after": now[1], "capacity": now[0]}
        elif short_now < short_was:
            back[resource] = {"before": was[1], "after": now[1], "capacity": now[0]}
    if lost:
        out.append(_event(GPU_UNALLOCATABLE, after, lost, observed))
    if back:
        out.append(_event(GPU_RESTORED, after, back, observed))
    if before["boot_id"] and after["boot_id"] and before["boot_id"] != after["boot_id"]:
        out.append(_event(NODE_REBOOTED, after, {"boot_id": {"before": before["boot_id"], "after": after["boot_id"]}}, observed))
    if before["ready"] != after["ready"] and (before["ready"] == "True" or after["ready"] == "True"):
        kind = NODE_READY if after["ready"] == "True" else NODE_NOT_READY
        out.append(_event(kind, after, {"ready": {"before": before["ready"], "after": after["ready"]}}, observed))
    if before["step"] != after["step"]:
        out.append(_event(REMEDIATION_STEP, after, {"step": {"before": before["step"], "after": after["step"]}}, observed))
    return out


class Tracker:
    """The nodes' views as the source last knew them, and the resourceVersion to watch from."""

    def __init__(self, resources=DEFAULT_RESOURCES, by_label=False):
        self.resources, self.by_label = resources, by_label
        self.views, self.resource_version = {}, None
        self.listed = False  # the first list has come (the alerts name a node only then: window.FaultWindow.ready)

    # the GPU Nodes known now, by name (a list replaces ``views``: whoever shares the tracker sees the new one)
    def __contains__(self, name):
        return name in self.views

    def __len__(self):
        return len(self.views)

    def get(self, name, default=None):
        return self.views.get(name, default)

    def start(self, nodes, resource_version, observed):
        """The first list: the views, and the ``startup`` event naming every node unhealthy now."""
        self.views = dict((v["name"], v) for v in (view(n, self.resources, self.by_label) for n in nodes) if v)
        self.resource_version = resource_version
        self.listed = True
        bad = [{"node": name, "unhealthy": why, "resource_version": v["resource_version"]}
               for name, v, why in ((n, v, unhealthy(v)) for n, v in sorted(self.views.items())) if why]
        return {"gpuops": {"kind": STARTUP, "nodes": bad, "watched": len(self.views), "resource_version": resource_version,
                           "observed_at": observed}}

    def apply(self, kind, node, observed):
        """One watch notification (ADDED, MODIFIED, DELETED, BOOKMARK): its events."""
        meta = _dict(_dict(node).get("metadata"))
        if isinstance(meta.get("resourceVersion"), str) and meta["resourceVersion"]:
            self.resource_version = meta["resourceVersion"][:64]
        if kind == "BOOKMARK":
            return []
        name = meta.get("name") if host_name(meta.get("name")) else None
        before = self.views.get(name)
        after = None if kind == "DELETED" else view(node, self.resources, self.by_label)
        if before and after and before["resource_version"] == after["resource_version"]:
            return []  # the same version delivered again
        if after is None:
            self.views.pop(name, None)
        else:
            self.views[name] = after
        return changes(before, after, observed)

    def relist(self, nodes, resource_version, observed):
        """A new list after ``410 Gone`` (or a reconnect): the events of what changed while away, each once."""
        fresh = dict((v["name"], v) for v in (view(n, self.resources, self.by_label) for n in nodes) if v)
        out = []
        for name in sorted(set(self.views) | set(fresh)):
            before, after = self.views.get(name), fresh.get(name)
            if before and after and before["resource_version"] == after["resource_version"]:
                continue
            out.extend(changes(before, after, observed))
        self.views, self.resource_version = fresh, resource_version
        return out

    def heartbeat(self, observed):
        return {"gpuops": {"kind": HEARTBEAT, "watched": len(self.views), "resource_version": self.resource_version,
                           "observed_at": observed, "unhealthy_nodes": sorted(n for n, v in self.views.items() if unhealthy(v))}}
