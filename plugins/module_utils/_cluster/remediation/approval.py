# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: a remediation plan a person approved, pinned, and held against the fresh plan.

The AWX workflow "GPU health - plan, approve, remediate" runs ``playbooks/gpu_remediation.yml`` in check mode, waits for a
person's approval (up to 24 hours), then runs it again. That run reads and plans afresh; without a pin it would act on
whatever the fleet, or a hostile node, says then, not on what was approved. So the plan job hands the nodes it would act
on to the job's artifacts (``pin``: each node's host, action, step, GPUs and the pods it would evict, by UID, with the time
and a SHA-256 digest), AWX passes them to the act job as an extra variable, and the act job (``hold``) acts only on the
approved nodes whose fresh plan still agrees, refusing each other one and naming the difference:

* a node the approval did not name, or whose action, step, GPUs (the reset's, its NVLink peers included) or escalation
  differ;
* a pod to evict that the approval did not name (a pod, or a pod's UID, new since): a person approved evicting those pods,
  not others. Fewer pods (some ended meanwhile) agree.

An approved plan that is not one (its digest does not match, a field of another shape) or older than ``max_age`` seconds
refuses everything: nothing is acted on. The digest is an integrity check of what AWX carried between the jobs, not a
signature: whoever may set the act job's extra variables may run it anyway.
"""

from __future__ import annotations

import hashlib
import json
import math

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

VERSION = 1
# a plan approved this long ago (seconds) or more is refused: the workflow's approval waits at most 24 hours
MAX_AGE = 86400 + 3600
# a plan dated this far in the future (seconds) is refused (clocks differ a little between AWX's nodes)
SKEW = 300
_COMPARED = ("action", "step", "gpus", "targets", "escalate")


class ApprovalError(GpuopsError):
    """The approved plan cannot be used: nothing is acted on."""


def _node(target):
    row = target.get("row") or {}
    # the pods the quarantine would evict (by UID: a pod recreated under the same name is another pod)
    evictions = sorted(({"pod": e.get("pod"), "uid": e.get("uid")} for e in row.get("evictions") or ()
                        if isinstance(e, dict) and e.get("evict", True)), key=lambda e: (str(e["pod"]), str(e["uid"])))
    return {"host": target.get("host"), "node": target.get("node"), "action": target.get("action"), "step": target.get("step"),
            "gpus": sorted(row.get("gpus") or []), "targets": sorted(row.get("targets") or row.get("gpus") or []),
            "escalate": bool(target.get("escalate")), "evictions": evictions}


def digest(body):
    """SHA-256 of the plan's canonical JSON (sorted keys, no spaces), the digest field left out."""
    text = json.dumps(dict((k, v) for k, v in body.items() if k != "digest"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def pin(targets, mode, now):
    """The approval's record of ``targets`` (``_remediation_targets``' act items) planned at ``now`` (epoch seconds)."""
    body = {"version": VERSION, "at": int(now), "mode": mode, "nodes": [_node(t) for t in targets]}
    body["digest"] = digest(body)
    return body


def _checked(approved, now, max_age):
    if not isinstance(approved, dict):
        raise ApprovalError("gpu_remediation_approved_plan: expected the plan job's gpuops_approved_plan (a mapping), got %s"
                            % type(approved).__name__)
    if approved.get("version") != VERSION or not isinstance(approved.get("nodes"), list) or not isinstance(approved.get("digest"), str):
        raise ApprovalError("gpu_remediation_approved_plan: not an approved plan of this collection (version %d, nodes, digest); "
                            "nothing is acted on" % VERSION)
    if digest(approved) != approved["digest"]:
        raise ApprovalError("gpu_remediation_approved_plan: its digest does not match its content (it was changed after the plan job "
                            "made it); nothing is acted on: plan and approve again")
    at = approved.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not math.isfinite(at):
        raise ApprovalError("gpu_remediation_approved_plan: its time (at) is %r, not epoch seconds; nothing is acted on" % (at,))
    age = now - at
    if age > max_age:
        raise ApprovalError("gpu_remediation_approved_plan: planned %d s ago, more than gpu_remediation_approval_max_age (%d s); nothing "
                            "is acted on: plan and approve again" % (age, max_age))
    if age < -SKEW:
        raise ApprovalError("gpu_remediation_approved_plan: planned %d s in the future; nothing is acted on (is a clock wrong?)" % -age)
    nodes = {}
    for i, node in enumerate(approved["nodes"]):
        problem = _node_problem(node)
        if problem:
            raise ApprovalError("gpu_remediation_approved_plan: nodes[%d] is not a node of the plan (%s); nothing is acted on" % (i, problem))
        nodes[node["host"]] = node
    return nodes


def _texts(value):
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _node_problem(node):
    """Why ``node`` is not one ``pin`` writes (the field named), or None."""
    if not isinstance(node, dict):
        return "a %s, not a mapping" % type(node).__name__
    for key in ("host", "node", "action", "step"):
        if not isinstance(node.get(key), str):
            return "%s is %r" % (key, node.get(key))
    for key in ("gpus", "targets"):
        if not _texts(node.get(key)):
            return "%s is %r" % (key, node.get(key))
    if not isinstance(node.get("escalate"), bool):
        return "escalate is %r" % (node.get("escalate"),)
    evictions = node.get("evictions")
    if not isinstance(evictions, list) or not all(isinstance(e, dict) and isinstance(e.get("pod"), str)
                                                  and (e.get("uid") is None or isinstance(e.get("uid"), str)) for e in evictions):
        return "evictions is %r" % (evictions,)
    return None


def hold(targets, approved, now, max_age=MAX_AGE):
    """``(act, refused)``: the fresh ``targets`` the approved plan names and agrees with, and ``[{node, action, why}]`` for the
    others. ApprovalError where the approved plan itself cannot be used."""
    nodes = _checked(approved, now, max_age)
    act, refused = [], []
    for target in targets:
        fresh, pinned = _node(target), nodes.get(target.get("host"))
        why = None
        if pinned is None or pinned.get("node") != fresh["node"]:
            why = "not in the approved plan (approved: %s)" % (", ".join(sorted(n.get("node") or h for h, n in nodes.items())) or "no node")
        else:
            differ = ["%s %s, approved %s" % (key, json.dumps(fresh[key]), json.dumps(pinned.get(key))) for key in _COMPARED
                      if fresh[key] != pinned.get(key)]
            approved_pods = set((e.get("pod"), e.get("uid")) for e in pinned.get("evictions") or () if isinstance(e, dict))
            new = ["%s (UID %s)" % (e["pod"], e["uid"]) for e in fresh["evictions"] if (e["pod"], e["uid"]) not in approved_pods]
            if new:
                differ.append("it would evict %s, which the approval did not name" % ", ".join(new))
            if differ:
                why = "the plan now differs from the approved one: %s" % "; ".join(differ)
        if why:
            refused.append({"node": target.get("node"), "action": target.get("action"), "why": "refused: " + why})
        else:
            act.append(target)
    return act, refused
