# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the pure half of the node-by-node DaemonSet rollout
(module ``daemonset_rollout``): the current revision, the plan, per-node checks and rows.

Plain data in (API objects as dicts, as the API serves them), plain data out; no client, no
clock. The module does the calls and the waiting (``k8s_watch``).

Revisions, from kubernetes pkg/controller/daemon/update.go: the DaemonSet controller keeps one
ControllerRevision per pod template, owned by the DaemonSet and labelled
``controller-revision-hash``; ``constructHistory`` gives the revision matching the current
template the number ``maxRevision(old) + 1``, so once ``status.observedGeneration`` has caught
up with ``metadata.generation`` the current revision is the highest-numbered one. Pods carry
the same ``controller-revision-hash`` label; ``IsPodUpdated`` (pkg/controller/daemon/util)
calls a pod updated when that label equals the current revision's hash.
"""

from __future__ import annotations

import copy
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import UUID, is_int, whole_quantity
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError

REVISION_LABEL = "controller-revision-hash"
# A row's status: updated (old pod deleted, the new one passed), ready (nothing deleted: the pod
# was waited for and passed), failed, not_started (the rollout stopped before it), planned
# (check mode). Nodes already current have no row.
_UUID_RE = re.compile(r"\b((?:GPU|MIG)-%s)\b" % UUID)


class RolloutError(GpuopsError):
    """The DaemonSet cannot be rolled (missing, not observed, no revision)."""


def _meta(obj):
    return (obj or {}).get("metadata") or {}


def _status(obj):
    return (obj or {}).get("status") or {}


def _labels(obj):
    return _meta(obj).get("labels") or {}


def pod_nodes(pods):
    """The nodes the given pods are bound to."""
    return set((p.get("spec") or {}).get("nodeName") for p in pods or () if (p.get("spec") or {}).get("nodeName"))


def owned_by(obj, uid):
    """Is ``obj`` controlled by the object with ``uid`` (its controller owner reference)?"""
    return any(ref.get("uid") == uid and ref.get("controller") for ref in _meta(obj).get("ownerReferences") or ())


# -- parameters ---------------------------------------------------------------------------------

def check_int(field, value, minimum):
    if not is_int(value) or value < minimum:
        raise ParameterError(field, "expected an integer >= %d, got %r" % (minimum, value))
    return value


def check_pattern(field, pattern, expect=None):
    try:
        compiled = re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise ParameterError(field, "%r is not a regular expression: %s" % (pattern, exc)) from exc
    missing = sorted(set(expect or {}) - set(compiled.groupindex))
    if missing:
        raise ParameterError(field.rsplit(".", 1)[0] + ".expect", "names %s, which %r has no named group for (use (?P<name>...))"
                             % (", ".join(missing), pattern))
    return compiled


def selector_string(match_labels):
    """``k=v,k2=v2`` from a DaemonSet's ``spec.selector.matchLabels`` (what the API takes)."""
    if not match_labels:
        raise RolloutError("the DaemonSet has no spec.selector.matchLabels; its pods cannot be selected")
    return ",".join("%s=%s" % (k, match_labels[k]) for k in sorted(match_labels))


# -- revision -------------------------------------------------------------------------------------

def observed(daemonset):
    """Has the DaemonSet controller processed the current spec (and so made its revision)?"""
    generation = _meta(daemonset).get("generation")
    return generation is not None and (_status(daemonset).get("observedGeneration") or 0) >= generation


def current_revision(daemonset, revisions):
    """``{"hash", "number", "name"}`` of the DaemonSet's current ControllerRevision (see the module docstring)."""
    uid = _meta(daemonset).get("uid")
    owned = [r for r in revisions or () if owned_by(r, uid)]
    if not owned:
        raise RolloutError("DaemonSet %s/%s has no ControllerRevision yet: is kube-controller-manager running?"
                           % (_meta(daemonset).get("namespace"), _meta(daemonset).get("name")))
    best = max(owned, key=lambda r: int(r.get("revision") or 0))
    return {"hash": _labels(best).get(REVISION_LABEL) or _meta(best).get("name"), "number": int(best.get("revision") or 0),
            "name": _meta(best).get("name")}


def pod_is_current(pod, revision_hash):
    return revision_hash is not None and _labels(pod).get(REVISION_LABEL) == revision_hash


# -- pod state ----------------------------------------------------------------------------------

def _condition(obj, kind):
    for cond in _status(obj).get("conditions") or ():
        if cond.get("type") == kind:
            return cond.get("status") == "True"
    return False


LAST_WORDS_MAX = 600


def _waiting_reasons(statuses, prefix=""):
    out = []
    for ctr in statuses or ():
        waiting = (ctr.get("state") or {}).get("waiting")
        if waiting:
            message = " (%s)" % waiting["message"] if waiting.get("message") else ""
            out.append("%s%s: %s%s" % (prefix, ctr.get("name"), waiting.get("reason"), message))
        terminated = (ctr.get("state") or {}).get("terminated") or (ctr.get("lastState") or {}).get("terminated")
        if terminated and terminated.get("exitCode") not in (0, None) and not waiting:
            out.append("%s%s: exited %s%s" % (prefix, ctr.get("name"), terminated.get("exitCode"),
                                              " (%s)" % terminated["reason"] if terminated.get("reason") else ""))
        # its termination message (the log's tail with terminationMessagePolicy FallbackToLogsOnError): its last line
        words = ((terminated or {}).get("message") or "").strip()
        if words and terminated.get("exitCode") not in (0, None):
            out.append("%s%s said: %s" % (prefix, ctr.get("name"), words.splitlines()[-1][:LAST_WORDS_MAX]))
    return out


def _crashlooping(statuses, restarts):
    for ctr in statuses or ():
        waiting = (ctr.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff" and int(ctr.get("restartCount") or 0) >= restarts:
            return True
    return False


def pod_state(pod, require_init=False, crashloop_restarts=3):
    """``{"name", "ready", "done", "failed", "reason"}`` of a DaemonSet pod.

    ``done``: nothing more to wait for: Ready (and, with ``require_init``, every init container
    terminated with exit code 0), or given up: ``failed`` when the pod ended or a container is in
    CrashLoopBackOff after ``crashloop_restarts`` restarts (it restarts forever; waiting out the
    timeout would only delay the report).
    """
    status = _status(pod)
    init = status.get("initContainerStatuses") or []
    regular = status.get("containerStatuses") or []
    reasons = _waiting_reasons(init, "init container ") + _waiting_reasons(regular)
    init_ok = all(((c.get("state") or {}).get("terminated") or {}).get("exitCode") == 0 for c in init)
    ready = _condition(pod, "Ready") and (init_ok or not require_init)
    failed = not ready and (status.get("phase") in ("Failed", "Succeeded") or _crashlooping(init + regular, crashloop_restarts))
    reason = None
    if not ready:
        reason = "; ".join(reasons) or status.get("reason") or status.get("message") or "phase %s" % (status.get("phase") or "Pending")
        if require_init and _condition(pod, "Ready") and not init_ok:
            reason = "Ready, but not every init container completed with exit code 0"
    return {"name": _meta(pod).get("name"), "ready": ready, "done": ready or failed, "failed": failed, "reason": reason}


# -- plan -----------------------------------------------------------------------------------------

def _images(pod_or_template):
    spec = (pod_or_template or {}).get("spec") or {}
    return dict((c.get("name"), c.get("image")) for c in spec.get("containers") or ())


def _tag(image):
    if not image or "@" in image:
        return image
    match = re.search(r":([^/:]+)$", image)
    return match.group(1) if match else image


def plan(daemonset, revision_hash, pods, nodes=None, batch_size=1, assume_changed=False, verify_current=False, check_only=False):
    """Which nodes to roll, in which batches.

    ``pods``: the DaemonSet's pods (owned by it); ``nodes``: the node names asked for (None: every
    node with a pod of the DaemonSet). A node whose pod is on ``revision_hash`` and Ready is
    ``current`` and skipped (with ``verify_current`` its checks still run, nothing is deleted); a
    node with an old pod gets it deleted; a node with a current pod not Ready yet, or none yet
    (the controller is creating it) is waited for. ``assume_changed`` (check mode, the template
    would change): every pod is old. ``check_only``: nothing is deleted anywhere; every node is
    checked with the pod it runs, current or not (action ``check``).
    """
    check_int("batch_size", batch_size, 1)
    by_node = {}
    for pod in pods or ():
        node = (pod.get("spec") or {}).get("nodeName")
        if node and not _meta(pod).get("deletionTimestamp"):
            by_node.setdefault(node, []).append(pod)
    targets = sorted(set(nodes) if nodes is not None else set(by_node))
    steps, current = [], []
    for node in targets:
        node_pods = by_node.get(node) or []
        old = [p for p in node_pods if assume_changed or not pod_is_current(p, revision_hash)]
        new = [p for p in node_pods if p not in old]
        # a node asked for by name without a pod is waited for: the controller may be creating
        # it (first install); if the DaemonSet does not select the node the wait says so
        if check_only:
            steps.append({"node": node, "old_pods": [], "old_images": {}, "action": "check"})
            continue
        if not old and new and _condition(new[0], "Ready") and not verify_current:
            current.append(node)
            continue
        step = {"node": node, "old_pods": sorted(_meta(p).get("name") for p in old),
                "old_images": _images(old[0]) if old else {}, "action": "replace" if old else "wait"}
        steps.append(step)
    batches = [steps[i:i + batch_size] for i in range(0, len(steps), batch_size)]
    return {"steps": steps, "batches": batches, "current": current,
            "to_images": _images(((daemonset or {}).get("spec") or {}).get("template")), "batch_size": batch_size}


def plan_lines(the_plan, container=None, check_mode=False):
    """The plan for people: ``batch N: node: from -> to (delete pod)``."""
    lines = ["CHECK MODE: nothing is deleted"] if check_mode else []
    to_images = the_plan["to_images"]
    name = container if container in to_images else (sorted(to_images)[0] if to_images else None)
    target = _tag(to_images.get(name)) if name else "?"
    if not the_plan["steps"]:
        lines.append("nothing to replace: %d node(s) already run %s" % (len(the_plan["current"]), to_images.get(name) if name else "?"))
    for number, batch in enumerate(the_plan["batches"], 1):
        for step in batch:
            if step["action"] == "replace":
                source = _tag(step["old_images"].get(name)) if name else "?"
                lines.append("batch %d: %s: %s -> %s (delete %s)" % (number, step["node"], source, target, ", ".join(step["old_pods"])))
            elif step["action"] == "check":
                lines.append("batch %d: %s: check the pod it runs (nothing is deleted)" % (number, step["node"]))
            else:
                lines.append("batch %d: %s: wait for the pod of the current revision and check it" % (number, step["node"]))
    return lines


# -- checks -----------------------------------------------------------------------------------------

def node_resource(node_obj, resource, before=None):
    """``resource`` allocatable vs capacity of a Node, against its capacity ``before`` the rollout."""
    status = _status(node_obj)
    capacity = whole_quantity((status.get("capacity") or {}).get(resource))
    allocatable = whole_quantity((status.get("allocatable") or {}).get(resource))
    ok = capacity > 0 and allocatable == capacity and (not before or capacity >= before)
    reason = None
    if not ok:
        if capacity == 0:
            reason = "the plugin registered no %s (capacity 0)" % resource
        elif allocatable != capacity:
            reason = "allocatable %s is %d of capacity %d" % (resource, allocatable, capacity)
        else:
            reason = "capacity %s is %d, was %d before the rollout" % (resource, capacity, before)
    return {"ok": ok, "capacity": capacity, "allocatable": allocatable, "before": before, "reason": reason,
            "text": "%d/%d" % (allocatable, capacity)}


def capacity_before(nodes, resource):
    """node name -> capacity of ``resource`` now (0 when absent)."""
    return dict((_meta(n).get("name"), whole_quantity((_status(n).get("capacity") or {}).get(resource))) for n in nodes or ())


def log_check(text, pattern, expect=None):
    """The last match of ``pattern`` in a container log: ``{"ok", "line", "groups", "reason"}``.

    ``line`` is the first line of the match, ``groups`` its named groups; with ``expect`` (group
    name -> value), each named group must equal its value (a driver version asked for).
    """
    found = None
    for match in pattern.finditer(text or ""):
        found = match
    if found is None:
        # what the container said last instead (an installer's error), so the row tells why
        lines = [line for line in (text or "").splitlines() if line.strip()]
        last = "; its last line: %s" % lines[-1].strip()[:LAST_WORDS_MAX] if lines else "; the log is empty"
        return {"ok": False, "line": None, "groups": {},
                "reason": "no line of the log matches %r%s" % (pattern.pattern, last)}
    start = (text.rfind("\n", 0, found.start()) + 1)
    end = text.find("\n", found.start())
    line = text[start:end if end >= 0 else len(text)]
    groups = found.groupdict()
    wrong = ["%s is %s, expected %s" % (k, groups.get(k), v) for k, v in sorted((expect or {}).items()) if groups.get(k) != str(v)]
    return {"ok": not wrong, "line": line, "groups": groups, "reason": "; ".join(wrong) or None}


def parse_gpu_listing(text):
    """UUIDs in what ``nvidia-smi -L`` or ``--query-gpu=uuid`` printed."""
    return sorted(set(m.group(1) for m in _UUID_RE.finditer(text or "")))


def termination_message(pod):
    for ctr in _status(pod).get("containerStatuses") or ():
        terminated = (ctr.get("state") or {}).get("terminated")
        if terminated:
            return terminated.get("message")
    return None


def _seen(pod, expected):
    """What a finished verification pod saw (its termination message) beside ``expected``; ``ok`` False, with the reason,
    where it did not succeed, and not yet decided otherwise."""
    status = _status(pod)
    phase = status.get("phase")
    message = termination_message(pod)
    expected = sorted(set(expected or []))
    seen = parse_gpu_listing(message)
    result = {"phase": phase, "seen": seen, "expected": expected, "message": message,
              "missing": sorted(set(expected) - set(seen)), "unexpected": sorted(set(seen) - set(expected))}
    if phase != "Succeeded":
        result["ok"] = False
        result["reason"] = "verification pod ended %s: %s" % (phase, status.get("message") or status.get("reason") or message or "no message")
    return result


def verify_listing(pod, expected_uuids, requested=None):
    """Compare what a verification pod saw (its termination message) with the node's GPU UUIDs.

    A pod that asked for all the node's GPUs must see exactly them; one that asked for
    ``requested`` GPUs must see that many, each a current UUID.
    """
    result = _seen(pod, expected_uuids)
    seen, expected = result["seen"], result["expected"]
    if "ok" in result:
        return result
    if not expected:
        result["ok"] = False
        result["reason"] = "no GPUs in gpu_uuid_facts for this node to compare with"
    elif requested is not None and not result["unexpected"]:
        result["missing"] = []
        result["ok"] = len(seen) == int(requested)
        result["reason"] = None if result["ok"] else "the pod asked for %s GPU(s) and saw %d: %s" % (requested, len(seen), ", ".join(seen) or "none")
    elif result["missing"] or result["unexpected"]:
        result["ok"] = False
        result["reason"] = "the pod saw %s; gpu_uuid_facts lists %s" % (", ".join(seen) or "no GPU", ", ".join(expected))
    else:
        result["ok"] = True
        result["reason"] = None
    return result


def verify_seen(pod, must_see):
    """A verification pod that asked for every free GPU of its node: ok when it Succeeded and was given each GPU of
    ``must_see`` (a remediated GPU, free once its pods were drained; kubelet has no way to ask for one GPU by name).
    The node's other free GPUs it was given are expected too."""
    result = dict(_seen(pod, must_see), unexpected=[])
    if "ok" in result:
        return result
    if result["missing"]:
        given = ", ".join(result["seen"]) or "none"
        result.update(ok=False, reason="the pod was given every free GPU of the node (%s) and not %s" % (given, ", ".join(result["missing"])))
    else:
        result.update(ok=True, reason=None)
    return result


def free_gpus(node, pods, resource):
    """How many of ``resource`` the node (a dict) has allocatable and no pod holds: its allocatable less what the
    containers of its pods that have not ended ask for (an extended resource's limit is its request; an init container
    holds its own at most while the others wait, so the pod holds the larger of the two, as kubelet counts it)."""
    allocatable = whole_quantity(((node.get("status") or {}).get("allocatable") or {}).get(resource))
    held = 0
    for pod in pods:
        if (_status(pod).get("phase") or "") in ("Succeeded", "Failed"):
            continue
        spec = pod.get("spec") or {}

        def asks(ctr):
            resources = ctr.get("resources") or {}
            return whole_quantity((resources.get("limits") or {}).get(resource) or (resources.get("requests") or {}).get(resource))

        held += max(sum(asks(c) for c in spec.get("containers") or ()), max([asks(c) for c in spec.get("initContainers") or ()] or [0]))
    return max(0, allocatable - held)


def verify_result(pod, expected_uuids=None, requested=None, must_see=None):
    """A finished verification pod: with ``must_see``, it must have been given those GPUs; compared with ``expected_uuids``
    when given; else Succeeded is ok."""
    if must_see is not None:
        return verify_seen(pod, must_see)
    if expected_uuids is not None:
        return verify_listing(pod, expected_uuids, requested)
    phase = _status(pod).get("phase")
    message = termination_message(pod)
    ok = phase == "Succeeded"
    return {"ok": ok, "phase": phase, "message": message,
            "reason": None if ok else "verification pod ended %s: %s" % (phase, _status(pod).get("message") or message or "no message")}


def verify_pod(template, node, name, gpus=None, resource="nvidia.com/gpu"):
    """The verification pod for ``node``: ``template`` pinned to the node, never restarted; with
    ``gpus``, its first container's ``resource`` limit (and request) set to that many."""
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict) or not template["spec"].get("containers"):
        raise ParameterError("verify_pod.template", "expected a Pod manifest with spec.containers")
    pod = copy.deepcopy({"apiVersion": "v1", "kind": "Pod", "metadata": template.get("metadata") or {}, "spec": template["spec"]})
    pod["metadata"].pop("generateName", None)
    pod["metadata"]["name"] = name
    pod["spec"]["nodeName"] = node
    pod["spec"]["restartPolicy"] = "Never"
    if gpus is not None:
        resources = pod["spec"]["containers"][0].setdefault("resources", {})
        resources.setdefault("limits", {})[resource] = str(int(gpus))  # a quantity: a string to the API
        if resource in (resources.get("requests") or {}):
            resources["requests"][resource] = str(int(gpus))
    return pod


# -- rows and summary ---------------------------------------------------------------------------

def new_row(step, status="not_started"):
    return {"node": step["node"], "status": status, "old_pod": ", ".join(step.get("old_pods") or ()) or None,
            "new_pod": None, "revision": None, "seconds": None, "reason": None, "from_images": step.get("old_images") or {},
            "gpus": None, "verify": None, "log": None}


def summary(rows, the_plan, stopped, max_failed, check_mode):
    def names(status):
        return [r["node"] for r in rows if r["status"] == status]

    result = {"rows": rows, "updated": names("updated"), "ready": names("ready"), "failed_nodes": names("failed"),
              "not_started": names("not_started"), "current": list(the_plan["current"]), "stopped": stopped,
              "batches": [[s["node"] for s in batch] for batch in the_plan["batches"]]}
    if check_mode:
        result["msg"] = "check mode: %d node(s) would be rolled, %d already current" % (len(the_plan["steps"]), len(the_plan["current"]))
    elif not the_plan["steps"]:
        result["msg"] = "nothing to roll: %d node(s) already current" % len(the_plan["current"])
    else:
        result["msg"] = "%s: %d updated, %d ready, %d failed (max_failed_nodes %d), %d not started" % (
            "stopped" if stopped else "finished", len(result["updated"]), len(result["ready"]), len(result["failed_nodes"]),
            max_failed, len(result["not_started"]))
    return result


def report_lines(rows):
    lines = []
    for row in rows:
        text = "%s: %s" % (row["node"], row["status"])
        if row.get("gpus"):
            text += ", GPUs %s" % row["gpus"]
        if row.get("verify"):
            text += ", verify %s" % row["verify"]
        if row.get("seconds") is not None:
            text += " (%.1f s)" % row["seconds"]
        if row.get("reason"):
            text += ": %s" % row["reason"]
        lines.append(text)
    return lines
