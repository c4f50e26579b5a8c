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
import threading
import weakref

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_int, digits, is_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

# the kinds of event the sources emit (``event.gpuops.kind``), each spelled here only: a rule's condition names one of them
STARTUP, HEARTBEAT, NODE_UNREADABLE, NODE_REMOVED = "startup", "heartbeat", "node_unreadable", "node_removed"
GPU_UNALLOCATABLE, GPU_RESTORED, NODE_REBOOTED = "gpu_unallocatable", "gpu_restored", "node_rebooted"
NODE_NOT_READY, NODE_READY, REMEDIATION_STEP = "node_not_ready", "node_ready", "remediation_step"
GPU_FAULTS, NODE_REBOOTS, THROTTLED = "gpu_faults", "node_reboots", "_throttled"  # a window's event, and where all were throttled
GPU_ALERT = "gpu_alert"  # the alertmanager source's, one per alert (alerts.py)
KINDS = (STARTUP, HEARTBEAT, GPU_UNALLOCATABLE, GPU_RESTORED, NODE_REBOOTED, NODE_NOT_READY, NODE_READY, REMEDIATION_STEP, NODE_REMOVED,
         NODE_UNREADABLE, GPU_FAULTS, GPU_FAULTS + THROTTLED, NODE_REBOOTS, NODE_REBOOTS + THROTTLED, GPU_ALERT)
# the steps the quarantine's annotation shows (_cluster/remediation/states.py); any other text is reported as "other"
STEPS = states.SHOWN
_BOOT_ID = re.compile(r"\A[0-9A-Za-z-]{1,64}\Z")
DEFAULT_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-*", "aliyun.com/gpu-mem")
REMEDIATION = "gpuops.fleet/gpu-remediation"  # the quarantine's annotation (_cluster/remediation/plan.py QUARANTINE_ANNOTATION)
TAINT = "gpuops.fleet/gpu-unhealthy"  # the quarantine's taint (plan.py QUARANTINE_TAINT): a cluster user's to write, never a kubelet's
_DNS = re.compile(r"\A[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
MAX_TEXT = 256
_SELECTOR = re.compile(r"\A[A-Za-z0-9_./!=,() -]{0,1024}\Z")


def check_options(args):
    """The source's options (``args`` of the rulebook's source), checked and completed; ParameterError names the option."""
    out = {"gpu_resources": list(DEFAULT_RESOURCES), "label_selector": "", "heartbeat": 60, "backoff_max": 30, "watch_seconds": 300,
           "settle_seconds": 5, "flap_seconds": 600, "retry_max_seconds": 3600,
           "kubeconfig": None, "context": None, "host": None, "api_key": None, "validate_certs": True, "ca_cert": None}
    for key, value in (args or {}).items():
        if key not in out:
            raise ParameterError(str(key), "is not an option of gpuops.fleet.gpu_nodes (known: %s)" % ", ".join(sorted(out)))
        out[key] = value
    resources = out["gpu_resources"]
    if isinstance(resources, str):
        resources = [r.strip() for r in resources.split(",") if r.strip()]
    if not isinstance(resources, list) or not resources or not all(isinstance(r, str) and r and len(r) <= MAX_TEXT for r in resources):
        raise ParameterError("gpu_resources", "a non-empty list of resource names or shell patterns (nvidia.com/gpu, nvidia.com/mig-*), "
                             "got %r" % (out["gpu_resources"],))
    out["gpu_resources"] = resources
    if not isinstance(out["label_selector"], str) or not _SELECTOR.match(out["label_selector"]):
        raise ParameterError("label_selector", "a Kubernetes label selector such as 'nvidia.com/gpu.present=true', got %r" % (out["label_selector"],))
    for key, low, high in (("heartbeat", 1, 3600), ("backoff_max", 1, 600), ("watch_seconds", 10, 1800), ("settle_seconds", 1, 300),
                           ("flap_seconds", 0, 86400), ("retry_max_seconds", 0, 86400)):
        out[key] = whole(key, out[key], low, high)
    for key in ("kubeconfig", "context", "host", "api_key", "ca_cert"):
        if out[key] is not None and (not isinstance(out[key], str) or "\x00" in out[key]):
            raise ParameterError(key, "a string, got %s" % type(out[key]).__name__)
    if isinstance(out["validate_certs"], str):
        out["validate_certs"] = out["validate_certs"].strip().lower() not in ("false", "no", "0", "off")
    return out


def whole(key, value, low, high):
    """An option's whole number in ``[low, high]`` (a rulebook's template gives a string); ParameterError names it."""
    try:
        number = as_int(key, value)
    except ParameterError:
        number = None
    if number is None or not low <= number <= high:
        raise ParameterError(key, "a whole number from %d to %d, got %r" % (low, high, value))
    return number


def dns_name(name):
    """Whether ``name`` is a Kubernetes object name (DNS-1123 subdomain)."""
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS.match(name))


# what a playbook's --limit (ansible-rulebook joins meta.hosts into it) takes for more than one host, though DNS-1123 allows it
PATTERN_WORDS = ("all", "ungrouped")


def host_name(name):
    """Whether ``name`` may name one inventory host in ``meta.hosts``: a Kubernetes name that is no Ansible pattern word (``all``,
    ``ungrouped``: a --limit of it is every host)."""
    return dns_name(name) and name not in PATTERN_WORDS


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
        if isinstance(resource, str) and any(fnmatch.fnmatchcase(resource, p) for p in resources):
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


class FaultWindow:
    """GPU faults gathered into one event per short window (a storm is one plan run, so the same-signal breaker sees its
    nodes together), and each node at most once per ``flap`` seconds (a flapping node runs once per window).

    ``add`` a ``gpu_unallocatable`` event; ``due()`` is when the window closes (``settle`` seconds after its first fault) or a
    node is offered again, whichever is first; ``flush(now)`` the ``gpu_faults`` event once it has closed: ``nodes``
    (``meta.hosts``: the playbook's limit), ``throttled`` (nodes of the window run less than ``flap`` seconds ago) and
    ``again`` (nodes offered again, with their attempt); ``gpu_faults_throttled`` where every node was; None before the window
    closes. ``kind`` names the event: ``node_reboots`` gathers the reboots (checkpoint_repair.yml).

    **No fault is lost, only delayed.** A node that ran and is still unhealthy (``still``: the Node watch sees a GPU withheld, or
    a fault alert of it still fires) is offered again in a later window: ``flap`` seconds (at least ``MIN_AGAIN``) after its
    run, then twice as long after each further run, at most ``again_max`` seconds (a run that keeps failing is never a loop).
    So a fault throttled within the flap window, and a run that failed (the API server restarting), are run again; a node
    healthy again is forgotten. ``again_max`` 0 offers nothing again."""

    MIN_AGAIN = 60

    def __init__(self, settle, flap, kind=GPU_FAULTS, again_max=3600):
        self.settle, self.flap, self.kind, self.again_max = settle, flap, kind, again_max
        self.opened, self.nodes, self.last_run = None, [], {}
        self.attempts = {}  # node -> its runs since it was last seen healthy
        self.firing = {}  # node -> the fingerprints of its fault alerts that fire (the alerts source's)
        # the GPU Nodes the ruleset's Node watch knows (its tracker's views, by name); None where no Node watch shares the window:
        # an alert names a node only where it is one of them (alerts.node_of)
        self.known = None
        self.lock = threading.RLock()  # the sources of one ruleset share a window (``shared``): the Node watch runs in a thread

    def add(self, event, now):
        node = event["gpuops"]["node"]
        with self.lock:
            if self.opened is None:
                self.opened = now
            if node not in self.nodes:
                self.nodes.append(node)

    def alert(self, event):
        """A ``gpu_alert`` of a known node: a firing fault alert keeps its node unhealthy until it is resolved."""
        node, fingerprint = event["gpuops"].get("node"), event["gpuops"].get("fingerprint") or event["gpuops"].get("alert")
        if not node:
            return
        with self.lock:
            held = self.firing.setdefault(node, set())
            if event["gpuops"].get("fault"):
                held.add(fingerprint)
            elif event["gpuops"].get("status") == "resolved":
                held.discard(fingerprint)
            if not held:
                self.firing.pop(node, None)

    def still(self, node):
        """Whether ``node`` is still unhealthy: a GPU withheld in the Node watch's view, or a fault alert of it firing."""
        view = (self.known or {}).get(node)
        return bool(view and withheld(view)) or bool(self.firing.get(node))

    def _again_at(self, node):
        tries = self.attempts.get(node, 0)
        if not tries or not self.again_max or node not in self.last_run:
            return None
        return self.last_run[node] + min(max(self.flap, self.MIN_AGAIN) * 2 ** min(tries - 1, 20), max(self.again_max, self.flap))

    def due(self):
        with self.lock:
            times = [self.opened + self.settle] if self.opened is not None else []
            times += [t for t in (self._again_at(n) for n in list(self.attempts)) if t is not None]
            return min(times) if times else None

    def flush(self, now, observed):
        with self.lock:
            self._again(now)
            return self._flush(now, observed)

    def _again(self, now):
        """The nodes due to be offered again, into the window where they are still unhealthy; forgotten where healthy again."""
        for node in list(self.attempts):
            at = self._again_at(node)
            if at is None or now < at:
                continue
            if not self.still(node):
                self.attempts.pop(node, None)
                continue
            if self.opened is None:
                self.opened = now - self.settle  # due now: the window closes at once
            if node not in self.nodes:
                self.nodes.append(node)

    def _flush(self, now, observed):
        if self.opened is None or now < self.opened + self.settle:
            return None
        due_again = set(n for n in self.nodes if (self._again_at(n) or float("inf")) <= now)
        run = [n for n in self.nodes if n in due_again or now - self.last_run.get(n, -float("inf")) >= self.flap]
        throttled = [n for n in self.nodes if n not in run]
        again = dict((n, self.attempts.get(n, 0) + 1) for n in run if n in due_again)
        for node in run:
            self.last_run[node] = now
            self.attempts[node] = self.attempts.get(node, 0) + 1
        for node in throttled:  # not lost: offered again when its time comes, if it is still unhealthy
            self.attempts.setdefault(node, 1)
        self.opened, self.nodes = None, []
        if not run:  # every node of the window ran less than ``flap`` seconds ago: said, offered again later
            return {"gpuops": {"kind": self.kind + THROTTLED, "nodes": [], "throttled": throttled, "window": self.settle,
                               "observed_at": observed}}
        return {"gpuops": {"kind": self.kind, "nodes": run, "throttled": throttled, "again": again, "window": self.settle,
                           "observed_at": observed}, "meta": {"hosts": limit(run)}}


_SHARED = weakref.WeakKeyDictionary()
_SHARED_LOCK = threading.Lock()


def shared(queue, settle, flap, retry_max=3600):
    """The fault window of the ruleset whose event queue is ``queue``: the Node watch and the alerts of one ruleset add to
    one window, so a GPU fault seen by both (the device plugin withheld it; an XID alert fired) runs once, and a storm seen
    by both is still one plan run. The sources must agree on ``settle_seconds`` and ``flap_seconds``.

    ansible-rulebook gives each source its own ``FilteredQueue`` around the ruleset's queue, as ``.queue``
    (ansible_rulebook/engine.py, 1.3.2): the ruleset's queue is the key."""
    queue = getattr(queue, "queue", queue)
    with _SHARED_LOCK:
        window = _SHARED.get(queue)
        if window is None:
            window = _SHARED[queue] = FaultWindow(settle, flap, again_max=retry_max)
        for key, mine, theirs in (("settle_seconds", settle, window.settle), ("flap_seconds", flap, window.flap),
                                  ("retry_max_seconds", retry_max, window.again_max)):
            if mine != theirs:
                raise ParameterError(key, "%s here, %s in another source of this ruleset: the sources of one ruleset share one fault "
                                     "window, give them the same %s" % (mine, theirs, key))
        return window


def backoff(attempt, cap):
    """Seconds to wait before reconnect ``attempt``: 0.5, 1, 2, 4, ... at most ``cap`` (a first retry soon: an API server that
    restarts is back in seconds, and every second of backoff delays a fault's event)."""
    return min(cap, 0.5 * 2 ** min(max(attempt, 1) - 1, 16))
