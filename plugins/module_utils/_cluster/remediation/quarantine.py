# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: quarantining a node for a GPU remediation, and an operator's cancel of it
(module gpu_quarantine, ``state: quarantined``). The pause is ``pause.py``'s, the release ``release.py``'s, the marks and the
record ``marks.py``'s, the states and their moves ``states.py``'s; each operation takes one ``session.Session``. The drain is
``drain``'s (kubectl drain's rules, the Eviction API, a PDB's 429 retried).

**Quarantined.** The node's ledger entry first (the breakers count it as in flight; where the ledger cannot be
written, full or refused, nothing else changes). Then one patch, at the resourceVersion read (so a concurrent
writer makes it fail, never mixes, and this run's entry is taken back): cordon, with our mark ``CORDON_MARK``
only where the node was not cordoned already (a cordon someone else set is theirs, and stays); the taint
``TAINT_KEY=<first GPU>:NoSchedule``; and the annotation ``REMEDIATION``, JSON ``{gpus, action, scope, step,
started, run, cordoned_by_us}``. Then the evictions: for ``scope: gpu`` only the pods
the plan mapped to the target GPUs, each by its UID (a pod recreated under the same name is not
ours); for ``scope: node`` every pod on the node but DaemonSet and mirror pods. The step goes
``draining`` -> ``drained``; a PodDisruptionBudget that still refuses at ``drain_timeout`` leaves the
node quarantined at ``drain_blocked`` and fails: a faulty GPU must not go back into the pool, and
nothing may reset it while its pods run. A killed run leaves the ledger's entry; the next run with the same
GPUs resumes from it (evicting what is left), and a second run of a finished quarantine writes nothing.

**Cancelled.** Our taint taken off by a cluster user (a kubelet may not) while the ledger says we marked the node: the
entry is closed ``cancelled_by_operator`` and only what is ours comes off; an uncordon alone is reported, never a cancel.

Refusals change nothing and name what refuses: a node in another remediation (other GPUs or action),
a hard blocker of the plan (a pod that uses the GPU outside kubelet's accounting, a host process, a pod
kubectl drain would not evict), a pod that breaks drain's rules now.
"""

from __future__ import annotations

import datetime
import re

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.pods import active
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import eviction, jobs, marks, node_reboot, states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import claims
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.marks import CORDON_MARK, REMEDIATION, TAINT_KEY
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.plan import DEFERRING_BLOCKERS
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.session import QuarantineError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import GPU_ID, check_value
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

ACTIONS = actions.ACTING
RESULTS = ("recovered", "rebooted", "replaced", "needs_human", "rma_candidate", "cancelled")
# the states of a quarantine, their moves and what each means: states.py (the ledger records the step, the annotation mirrors it)
MARKING, DRAINING, DRAINED, DRAIN_BLOCKED = states.MARKING, states.DRAINING, states.DRAINED, states.DRAIN_BLOCKED
AWAITING, CANCELLED_BY_OPERATOR = states.AWAITING_PODS, states.CANCELLED_BY_OPERATOR
# the plan's blockers that no waiting ends; a PDB's is waited on (drain_timeout)
HARD_BLOCKERS = ("not_evictable",) + DEFERRING_BLOCKERS
POD_REF = re.compile(r"\A[a-z0-9](?:[-a-z0-9]*[a-z0-9])?/[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?\Z")
__all__ = ("CORDON_MARK", "REMEDIATION", "TAINT_KEY", "QuarantineError")


def check_params(p):
    """The module's parameters, checked; a ``plan`` row fills what is not given. ParameterError names the option."""
    p = dict(p)
    row = p.get("plan") or {}
    if not isinstance(row, dict):
        raise ParameterError("plan", "expected one node's row of gpu_remediation_plan (a dict), got %s" % type(row).__name__)
    for key in ("node", "gpus", "action", "scope", "evictions", "blockers", "keys", "driver_version", "guard"):
        if p.get(key) in (None, []) and row.get(key) not in (None, []):
            p[key] = row[key]
    check_value("node", p.get("node"), "dns_subdomain")
    if p["drain_timeout"] <= 0:
        raise ParameterError("drain_timeout", "%d must be a positive number of seconds" % p["drain_timeout"])
    if p["state"] == "released":
        if p["result"] not in RESULTS:
            raise ParameterError("result", "%r is not one of %s" % (p["result"], ", ".join(RESULTS)))
        return p
    if p["state"] == "unclaimed":
        return p
    if p["state"] in ("paused", "unpaused"):
        if p["state"] == "paused" and p.get("pause_timeout", 1) <= 0:
            raise ParameterError("pause_timeout", "%d must be a positive number of seconds" % p["pause_timeout"])
        return p
    if p.get("action") not in ACTIONS:
        raise ParameterError("action", "%r is not an action that quarantines (%s); %s change nothing" % (
            p.get("action"), ", ".join(ACTIONS), " and ".join(a for a in actions.NAMES if a not in ACTIONS)))
    scope = actions.scope_of(p["action"])
    if p.get("scope") not in (None, scope):
        raise ParameterError("scope", "%r does not go with action %s (its scope is %s)" % (p["scope"], p["action"], scope))
    p["scope"] = scope
    gpus = p.get("gpus") or []
    if not gpus and scope == "gpu":
        raise ParameterError("gpus", "a GPU-scoped quarantine needs the target GPUs' UUIDs")
    for i, uuid in enumerate(gpus):
        if not isinstance(uuid, str) or not GPU_ID.match(uuid):
            raise ParameterError("gpus[%d]" % i, "%r is not a GPU UUID (GPU-... or MIG-...)" % (uuid,))
    evictions = []
    for i, item in enumerate(p.get("evictions") or ()):
        ref = item.get("pod") if isinstance(item, dict) else item
        if not isinstance(ref, str) or not POD_REF.match(ref):
            raise ParameterError("evictions[%d]" % i, "%r is not namespace/name of a pod (or a plan eviction with pod and uid)" % (item,))
        evictions.append({"pod": ref, "uid": item.get("uid") if isinstance(item, dict) else None})
    p["gpus"], p["evictions"] = list(gpus), evictions
    p["blockers"] = [b for b in p.get("blockers") or () if isinstance(b, dict)]
    p["guard"] = _guard(p.get("guard"))
    p["policy"] = eviction.check_policy(p.get("eviction_modes"), p.get("system_namespaces"))
    return p


def _guard(value):
    """The plan row's ``guard`` (claims.check_open's numbers), or None; a malformed one is refused, naming it."""
    if value is None:
        return None
    ints = ("cap", "threshold", "window")
    if not isinstance(value, dict) or any(value.get(k) is not None and not (isinstance(value[k], int) and not isinstance(value[k], bool))
                                          for k in ints) or not isinstance(value.get("in_flight", []), list):
        raise ParameterError("plan.guard", "expected the plan's {cap, in_flight, threshold, window}, got %r" % (value,))
    return {"cap": value.get("cap"), "threshold": value.get("threshold"), "window": value.get("window"),
            "in_flight": [n for n in value.get("in_flight") or () if isinstance(n, str)]}


def _active(pod):
    return active(pod) and not marks.meta(pod).get("deletionTimestamp")


def _targets(p, pods, fault_age, now):
    """``(to_evict [{pod, uid, note, mode, mode_note, job}], gone [pod], skipped [{pod, why}], refusals [str], waiting [{pod, uid, mode, why,
    age_seconds, job}])``: drain's rules, and the pods' eviction modes ``fault_age`` seconds into the quarantine (a pod the
    modes keep is waited for: allow_completion, delete_after_timeout before its time, a system namespace's pod on a target
    GPU; on a node-scoped quarantine a system namespace's pod is left, as a DaemonSet's is)."""
    by_name = dict(("%s/%s" % (marks.meta(x).get("namespace"), marks.meta(x).get("name")), x) for x in pods)
    to_evict, gone, skipped, refusals, waiting = [], [], [], [], []
    if p["scope"] == "gpu":
        wanted = p["evictions"]
    else:
        wanted = [{"pod": ref, "uid": marks.meta(x).get("uid")} for ref, x in sorted(by_name.items())]
    for item in wanted:
        pod = by_name.get(item["pod"])
        if pod is None or not _active(pod) or (item.get("uid") and marks.meta(pod).get("uid") != item["uid"]):
            gone.append(item["pod"])
            continue
        if p["scope"] == "node" and drain.left_by_drain(pod):
            skipped.append({"pod": item["pod"], "why": "a DaemonSet's or mirror pod: kubectl drain leaves it"})
            continue
        try:
            found = eviction.mode_of(pod, p["policy"])
        except eviction.PodModeError as exc:
            refusals.append(str(exc))
            continue
        if found["system"] and p["scope"] == "node":
            skipped.append({"pod": item["pod"], "why": "a system namespace's pod (%s): never evicted" % found["by"]})
            continue
        verdict, why_mode = eviction.decide(found, fault_age)
        if verdict == "wait":
            waiting.append({"pod": item["pod"], "uid": marks.meta(pod).get("uid"), "mode": "system" if found["system"] else found["mode"],
                            "why": why_mode, "age_seconds": _age(pod, now), "job": jobs.job_of(pod), "due_at": _due_at(found, fault_age, now)})
            continue
        ok, why = drain.pod_verdict(pod, p["drain_force"], p["drain_delete_emptydir_data"])
        if ok:
            to_evict.append({"pod": item["pod"], "uid": marks.meta(pod).get("uid"), "note": why, "mode": found["mode"], "mode_note": why_mode,
                             "job": jobs.job_of(pod)})  # an evicted worker's job is named as a waited-for one's is
        else:
            refusals.append(why)
    return to_evict, gone, skipped, refusals, waiting


def _due_at(found, fault_age, now):
    """When a waited-for pod's time comes (a delete_after_timeout pod: the quarantine's start plus its timeout), else None:
    the ledger keeps it, and the event source offers the node again then (remediation_due)."""
    if found["system"] or found["mode"] != eviction.AFTER_TIMEOUT or not found.get("timeout_minutes"):
        return None
    return int(now - fault_age + found["timeout_minutes"] * 60)


def _age(pod, now):
    """The pod's age in seconds (from its start, else its creation), or None where neither can be read."""
    stamp = (pod.get("status") or {}).get("startTime") or marks.meta(pod).get("creationTimestamp")
    seconds = _epoch(stamp)
    return None if seconds is None else max(0, int(now - seconds))


def _epoch(stamp):
    """Epoch seconds of an RFC 3339 time as the API serves it (``...Z``) or the client's ``isoformat()`` (``...+00:00``)."""
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.datetime.fromisoformat(stamp[:-1] + "+00:00" if stamp.endswith("Z") else stamp)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def _refuse_early(p, current, escalation):
    """The refusals before anything is read of the pods: another remediation in progress, a hard blocker."""
    if current and not escalation and (sorted(current.get("gpus") or []) != sorted(p["gpus"]) or current.get("action") != p["action"]):
        raise QuarantineError("node %s is already in a remediation (%s of %s, step %s, since %s): finish it or release it first; "
                              "nothing was changed" % (p["node"], current.get("action"), ", ".join(current.get("gpus") or []) or "the node",
                                                       current.get("step"), current.get("started")))
    hard = [b for b in p["blockers"] if b.get("kind") in HARD_BLOCKERS]
    if hard:
        raise QuarantineError("node %s: the plan names blockers no drain ends: %s; nothing was changed"
                              % (p["node"], "; ".join(b.get("detail") or b.get("kind") for b in hard)))


def quarantine(s):
    """The module's result for ``state: quarantined`` (``s``: a session.Session; see the module docstring); ``stops``: whether
    the role stops for the node at its step (states.py), without failing the run."""
    try:
        result = _quarantine(s)
    except (claims.Claimed, claims.Refused) as exc:
        if s.wrote:  # a claim lost half-way (it ran out, another run took it): stop, the node as it stands
            raise QuarantineError(str(exc)) from None
        current = marks.open_entry(ledgers.read(s.api, s.p["namespace"], s.api_exception)[0], s.node)
        return {"node": s.node, "gpus": s.p["gpus"], "action": s.p["action"], "scope": s.p["scope"], "evicted": [], "waiting_for": [],
                "jobs": [], "changed": False, "step": current.get("step") if current else None, "stops": True, "msg": str(exc),
                "claimed_by": exc.claim if isinstance(exc, claims.Claimed) else None,
                "deferred": exc.reason if isinstance(exc, claims.Refused) else None}
    return dict(result, stops=states.TABLE[result["step"]]["stops"])


def _quarantine(s):
    p = s.p
    node, opened, current = s.read()
    held = (opened or {}).get("claim")
    if p.get("claim") and claims.live(held, s.now) and held.get("run") != p["claim"]:
        raise claims.Claimed(p["node"], held)  # another run acts on it now, though this run would write nothing: it leaves it
    escalation = _escalation(current, p)
    cancelled = marks.operator_cancelled(node, current)
    if cancelled and not escalation:
        return cancel(s, node, current, cancelled)
    _refuse_early(p, current, escalation)
    # the fault's age for delete_after_timeout: from the ledger's entry, which the controller wrote (a node may write its own
    # Node's annotations, never the ledger)
    fault_age = max(0, s.now - int(opened["at"])) if opened and opened.get("at") is not None else 0
    to_evict, gone, skipped, refusals, waiting = _targets(p, s.pods_on_node(), fault_age, s.now)
    if refusals:
        raise QuarantineError("node %s: refusing to drain, nothing was changed: %s" % (p["node"], "; ".join(refusals)))
    work = _work(p, node, current, escalation, waiting)
    result = {"node": p["node"], "gpus": p["gpus"], "action": p["action"], "scope": p["scope"], "evicted": [e["pod"] for e in to_evict],
              "already_gone": gone, "left_on_node": skipped, "eviction_notes": [e for e in to_evict if e["note"] or e["mode_note"]],
              "waiting_for": waiting, "fault_age_seconds": fault_age, "cordoned": work["ours"],
              "foreign_cordon": bool(marks.spec(node).get("unschedulable")) and not work["ours"],
              "uncordoned_while_quarantined": marks.uncordoned(node, current),
              "resumed_from": current["step"] if current else None, "escalated_from": escalation,
              "boot_id": work["boot_id"], "boot_id_at_quarantine": (current or {}).get("boot_id") or work["boot_id"]}
    step = work["step"]
    if not work["marks"] and current["step"] == step and not to_evict:
        result["jobs"] = _jobs(s, waiting)
        said = _waiting_msg(result) if waiting else "node %s is quarantined and drained already" % p["node"]
        return dict(result, changed=False, step=step, msg=_held(result, said))
    result["jobs"] = _jobs(s, to_evict + waiting)
    if s.check_mode:
        return dict(result, changed=True, step=step, msg=_msg(result, "would"))
    # the record's step is the ledger's, each move through states.move; the mark's annotation shows draining
    record = dict(current or {}, gpus=p["gpus"], action=p["action"], scope=p["scope"], step=current["step"] if current else MARKING,
                  started=(current or {}).get("started") or s.now, run=p.get("run") or (current or {}).get("run"),
                  cordoned_by_us=work["ours"], boot_id=(current or {}).get("boot_id") or work["boot_id"])
    if escalation:
        record["escalated_from"] = escalation
    if current is not None and (work["marks"] or to_evict):
        s.claim()  # before this run's first write of a node another run may hold (a fresh entry is claimed as it is opened)
    if work["marks"]:
        result["condition_error"] = _mark(s, node, record, work, current)
        if work["widen"]:  # the ledger's entry was widened to the escalation's action at step draining (_ledger_open)
            record["step"] = states.move(record["step"], DRAINING)
        if to_evict:  # the node's patch is done: from here our taint missing is an operator's cancel, never a mark to redo
            record["step"] = states.move(record["step"], DRAINING)
            s.ledger_set({"step": DRAINING})
    _drain(s, record, to_evict, result, step)
    return dict(result, changed=True, step=step, msg=_held(result, _msg(result, "")))


def _work(p, node, current, escalation, waiting):
    """What this run's quarantine writes on the node: ``need_cordon`` (ours only where we mark the node and it is schedulable;
    a cordon already there is someone else's, or the node's), ``taints`` (with ours, None where it is on), ``widen`` (an
    escalation to another action), ``marks`` (the node's patch is due), ``ours`` (the cordon is ours), ``escalation``, ``step``
    (the drain's end: drained, or awaiting_pods) and ``boot_id`` (read as node_reboot compares it)."""
    marking = current is None or current["step"] == MARKING
    need_cordon = marking and not marks.spec(node).get("unschedulable") and (current is None or current["cordoned_by_us"])
    taints = marks.taints_with_ours(node, marks.taint_value(p["gpus"], p["scope"]))
    widen = bool(escalation) and current is not None and current["action"] != p["action"]
    return {"need_cordon": need_cordon, "taints": taints, "widen": widen, "marks": marking or widen or taints is not None,
            "ours": bool(current and current["cordoned_by_us"]) or need_cordon, "escalation": escalation,
            "step": AWAITING if waiting else DRAINED, "boot_id": node_reboot.boot_state(node)[0] or None}


def _held(result, text):
    return text + ("; " + result["uncordoned_while_quarantined"] if result.get("uncordoned_while_quarantined") else "")


def _jobs(s, pods):
    """The multi-pod jobs of ``pods`` (evicted or waited for), each with every pod of it in its namespace: a job loses all its
    workers when one is evicted, so the report names them all."""
    found = {}
    for item in pods:
        job = item.get("job")
        if job is None:
            continue
        key = (job["namespace"], job["selector"])
        if key not in found:
            listed = s.api.list_namespaced_pod(job["namespace"], label_selector=job["selector"]).items
            found[key] = dict(job, pods=jobs.members(job, [s.serial(x) for x in listed]), affected=[])
        found[key]["affected"].append(item["pod"])
    return [found[k] for k in sorted(found)]


def _waiting_msg(result):
    return "node %s is quarantined; its GPUs wait for %s" % (result["node"], "; ".join(
        "%s (%s, running %s)" % (w["pod"], w["why"], "%d s" % w["age_seconds"] if w["age_seconds"] is not None else "for an unknown time")
        for w in result["waiting_for"]))


def cancel(s, node, current, undone):
    """An operator ended our quarantine by hand: the ledger's entry is closed ``cancelled_by_operator`` (the plan then leaves the
    node alone for the same signal), and only what is ours comes off, as a release takes it off (``marks.ours``: the taint,
    the annotation, our cordon and its mark where the operator took off the taint only, a pause's labels); the Node condition
    says Unknown. Nothing is evicted."""
    result = {"node": s.node, "gpus": current.get("gpus") or [], "action": current.get("action"), "scope": current.get("scope"),
              "evicted": [], "waiting_for": [], "jobs": [], "cancelled_by_operator": undone, "was": current, "step": CANCELLED_BY_OPERATOR}
    msg = ("node %s: a cluster user %s while it was quarantined (step %s): the remediation of that node is cancelled; the next "
           "run leaves it alone for the same signal" % (s.node, undone, current.get("step")))
    if s.check_mode:
        return dict(result, changed=True, msg="would record: " + msg)
    states.move(current["step"], CANCELLED_BY_OPERATOR)
    s.close_entry(CANCELLED_BY_OPERATOR)
    spec, restore = marks.ours(node, current)
    s.patch_node(node, spec, {REMEDIATION: None, CORDON_MARK: None}, labels=restore or None)
    result["condition_error"] = s.set_condition(node, "Unknown", "CancelledByOperator",
                                                "gpuops.fleet's quarantine for %s of %s was cancelled: an operator %s" % (
                                                    current.get("action"), ", ".join(current.get("gpus") or []) or "the node", undone))
    return dict(result, changed=True, msg=msg)


def _mark(s, node, record, work, current):
    """The ledger's entry (opened, or widened to the escalation's action), then one patch of the node: the cordon, our taint,
    the annotation (the record's mirror); then the GPUHealthy condition."""
    p = s.p
    patch_spec = dict(unschedulable=True) if work["need_cordon"] else {}
    if work["taints"] is not None:
        patch_spec["taints"] = work["taints"]
    written = {REMEDIATION: marks.mirror(dict(record, step=DRAINING))}
    if work["need_cordon"]:
        written[CORDON_MARK] = "gpu-remediation"
    # the ledger first: where it cannot be written (full, refused, another run's write), the node is left as it was
    opened = _ledger_open(s, record, work["escalation"]) if current is None or work["escalation"] else None
    try:
        s.patch_node(node, patch_spec, written)
    except s.api_exception as exc:
        raise QuarantineError("node %s could not be marked (%s %s): the node was not changed; %s" % (
            p["node"], getattr(exc, "status", ""), getattr(exc, "reason", "") or "", _ledger_take_back(s, opened))) from None
    return s.set_condition(node, "False", marks.condition_reason(p.get("keys"), p["action"]),
                           "gpuops.fleet quarantined %s for %s (signals: %s)" % (
                               ", ".join(p["gpus"]) or "the node", p["action"], ", ".join(p.get("keys") or []) or "the plan's"))


def _drain(s, record, to_evict, result, step=DRAINED):
    """The evictions by kubectl drain's rules, then the wait for the pods to go; the step recorded either way."""
    deadline = s.clock() + s.p["drain_timeout"]
    try:
        for item in to_evict:
            namespace, name = item["pod"].split("/", 1)
            drain.evict(s.api, namespace, name, deadline, s.api_exception, uid=item["uid"])
        left = drain.waiter(s.api)(s.node, set(e["pod"] for e in to_evict), deadline) if to_evict else []
        if left:
            raise drain.DrainError("evicted pods still on the node after drain_timeout: %s" % ", ".join(left))
    except drain.DrainError as exc:
        record["step"] = states.move(record["step"], DRAIN_BLOCKED)
        _set_step(s, record, {"blocked_at": s.now}, let_go=True)
        raise QuarantineError("node %s stays quarantined (step drain_blocked; no reset or reboot may run): %s" % (s.node, exc),
                              dict(result, changed=True, step=DRAIN_BLOCKED, stops=False)) from exc
    record["step"] = states.move(record["step"], step)
    waited = [{"pod": w["pod"], "uid": w["uid"], "due_at": w["due_at"]} for w in result["waiting_for"]] if step == states.AWAITING_PODS else None
    _set_step(s, record, {"waiting_for": waited[:ledgers.MAX_WAITING] if waited else None}, let_go=step == states.AWAITING_PODS)


def _set_step(s, record, waits=None, let_go=False):
    """The record's step in the ledger (the truth), then in the node's annotation (its mirror). ``waits``: what a waiting step
    waits for (``waiting_for``: the pods, ``blocked_at``: when the drain was blocked), for the event source's
    ``remediation_due``; the other step's are cleared."""
    fields = {"step": record["step"], "action": record["action"], "scope": record["scope"], "waiting_for": None, "blocked_at": None}
    fields.update(waits or {})
    s.ledger_set(fields, let_go)  # a run that stops for the node (its pods) gives its claim up
    s.patch_node(s.read_node(), annotations={REMEDIATION: marks.mirror(record)})


def _escalation(current, p):
    """The action a reset quarantine is widened from (``reset``), where ``escalate`` asks to widen it to a reboot of the same
    GPUs (the reset failed); else None."""
    widened = [a for a in actions.AUTOMATED if actions.TABLE[a]["escalates_to"] == p["action"]]
    if not (p.get("escalate") and current and widened):
        return None
    if current.get("action") not in widened + [p["action"]] or sorted(current.get("gpus") or []) != sorted(p["gpus"]):
        raise QuarantineError("node %s: escalate widens a reset of the same GPUs to a reboot; it is in a %s of %s: nothing was changed"
                              % (p["node"], current.get("action"), ", ".join(current.get("gpus") or []) or "the node"))
    return current.get("escalated_from") or (current["action"] if current.get("action") in widened else None)


def _ledger_open(s, record, escalation=None):
    """Open the node's ledger entry with the record (step marking), or widen an open one to the escalation's action, before
    the node is marked; the entry added (for ``_ledger_take_back``), or None where one was open already."""
    p = s.p
    added = []

    tripped = []

    def change(ledger):
        entry = marks.open_entry(ledger, p["node"])
        del tripped[:]
        if entry is None:
            try:
                claims.check_open(ledger, p["node"], p.get("guard"), p.get("keys"), p.get("driver_version"), s.now)
            except claims.Refused as exc:
                if exc.reason != "fleet_event":
                    raise
                tripped.append(exc)  # the tripped breaker is written, then the node refused
                return ledger
        if entry and escalation and entry.get("action") != p["action"]:
            entry.update(action=p["action"], escalated_from=escalation, scope=p["scope"],
                         step=states.move(entry.get("step") or DRAINING, DRAINING))
            return ledger
        if entry:
            return ledger if p.get("claim") else None  # a concurrent run opened it: its claim decides (Session.ledger_update)
        fresh = ledgers.bounded_entry({"node": p["node"], "gpus": p["gpus"], "action": p["action"], "keys": list(p.get("keys") or []),
                                       "driver_version": p.get("driver_version"), "at": s.now, "closed_at": None, "result": None,
                                       "run": p.get("run"), "step": states.move(states.START, MARKING), "scope": p["scope"],
                                       "cordoned_by_us": bool(record["cordoned_by_us"]), "boot_id": record.get("boot_id")})
        del added[:]
        added.append(fresh)
        return dict(ledger, entries=(ledger.get("entries") or []) + [fresh])

    s.ledger_update(change)
    if tripped:
        s.wrote = 0  # the breaker's write opened nothing: the node is as it was
        raise tripped[0]
    return added[0] if added else None


def _ledger_take_back(s, entry):
    """Remove the entry this run opened for a quarantine that did not happen; what became of it, as a sentence."""
    if entry is None:
        return "the node's ledger entry was open before this run and stays"

    def change(ledger):
        kept = [e for e in ledger.get("entries") or [] if e != entry]
        return None if len(kept) == len(ledger.get("entries") or []) else dict(ledger, entries=kept)

    try:
        s.ledger_update(change)
    except (s.api_exception, ledgers.LedgerError) as exc:
        return ("its ledger entry could not be taken back (%s); it counts as in flight for %d s, then no more (the node carries no "
                "quarantine)" % (str(exc)[:200], ledgers.STALE_OPEN))
    return "its ledger entry was taken back"


def _msg(result, verb):
    did = ["cordon"] if result["cordoned"] and not result["foreign_cordon"] else []
    did.append("taint")
    if verb:
        text = "would %s %s" % (" and ".join(did), result["node"])
    else:
        text = "%s %s" % (" and ".join(d + "ed" for d in did), result["node"])
    if result["evicted"]:
        text += "; %s %s" % ("would evict" if verb else "evicted", ", ".join(result["evicted"]))
    if result.get("waiting_for"):
        text += "; %s for %s (their eviction modes: a later run goes on once they are gone)" % (
            "would wait" if verb else "waits", ", ".join("%s (%s)" % (w["pod"], w["mode"]) for w in result["waiting_for"]))
    return text
