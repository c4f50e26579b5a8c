# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: quarantining a node for a GPU remediation, and releasing it
(module gpu_quarantine). The drain is ``drain``'s (kubectl drain's rules, the Eviction API, a PDB's 429 retried).

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
nothing may reset it while its pods run. A killed run leaves the annotation; the next run with the same
GPUs resumes from it (evicting what is left), and a second run of a finished quarantine writes nothing.

**Paused** (a quarantined node): the pause labels (default ``gpuops.fleet/gpu-maintenance=true``, which the
collection's device plugin and dcgm-exporter DaemonSets exclude) with their previous values kept in the annotation,
then a watch until no pod of ``pause_pods`` runs on the node: NVML's clients gone, so a reset can run. **Unpaused**:
the labels back as they were (removed where there was none); the DaemonSets start their pods again, which is how the
device plugin marks a GPU Healthy again.

**Released.** The ledger's open entry for the node is closed first, with ``result`` and its seconds from quarantine to
release (where it cannot be, the node stays quarantined as the ledger says). Then only what is ours comes off: the taint
by its key, the annotation, the cordon only with our mark, and a pause's labels, restored.

Refusals change nothing and name what refuses: a node in another remediation (other GPUs or action),
a hard blocker of the plan (a pod that uses the GPU outside kubelet's accounting, a host process, a pod
kubectl drain would not evict), a pod that breaks drain's rules now.
"""

from __future__ import annotations

import datetime
import json
import re
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster import drain
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.pods import active
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import eviction, jobs, node_reboot
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.k8s_watch import Watcher
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.plan import DEFERRING_BLOCKERS
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.plan import QUARANTINE_ANNOTATION as REMEDIATION
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation.plan import QUARANTINE_TAINT
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import GPU_ID, check_value
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError, ResultError

CORDON_MARK = "gpuops.fleet/cordoned-for-gpu-health"
TAINT_KEY = QUARANTINE_TAINT
ACTIONS = actions.ACTING
RESULTS = ("recovered", "rebooted", "replaced", "needs_human", "rma_candidate", "cancelled")
# the states of a quarantine, their moves and what each means: states.py (the ledger records the step, the annotation mirrors it)
MARKING, DRAINING, DRAINED, DRAIN_BLOCKED = states.MARKING, states.DRAINING, states.DRAINED, states.DRAIN_BLOCKED
AWAITING, CANCELLED_BY_OPERATOR, RELEASED = states.AWAITING_PODS, states.CANCELLED_BY_OPERATOR, states.RELEASED
# the Node condition that says why a node is out (the taint says that it is): False while quarantined for a GPU, True on
# release, Unknown where an operator cancelled the quarantine; kubelet's status updates patch its own conditions only
CONDITION = "GPUHealthy"
# the plan's blockers that no waiting ends; a PDB's is waited on (drain_timeout)
HARD_BLOCKERS = ("not_evictable",) + DEFERRING_BLOCKERS
POD_REF = re.compile(r"\A[a-z0-9](?:[-a-z0-9]*[a-z0-9])?/[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?\Z")


class QuarantineError(ResultError):
    """Refused before anything changed, or the drain could not finish (``result`` says where the node stands)."""


def _meta(obj):
    found = obj.get("metadata") if isinstance(obj, dict) else None
    return found if isinstance(found, dict) else {}


def _spec(node):
    found = node.get("spec") if isinstance(node, dict) else None
    return found if isinstance(found, dict) else {}


def check_params(p):
    """The module's parameters, checked; a ``plan`` row fills what is not given. ParameterError names the option."""
    p = dict(p)
    row = p.get("plan") or {}
    if not isinstance(row, dict):
        raise ParameterError("plan", "expected one node's row of gpu_remediation_plan (a dict), got %s" % type(row).__name__)
    for key in ("node", "gpus", "action", "scope", "evictions", "blockers", "keys", "driver_version"):
        if p.get(key) in (None, []) and row.get(key) not in (None, []):
            p[key] = row[key]
    check_value("node", p.get("node"), "dns_subdomain")
    if p["drain_timeout"] <= 0:
        raise ParameterError("drain_timeout", "%d must be a positive number of seconds" % p["drain_timeout"])
    if p["state"] == "released":
        if p["result"] not in RESULTS:
            raise ParameterError("result", "%r is not one of %s" % (p["result"], ", ".join(RESULTS)))
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
    p["policy"] = eviction.check_policy(p.get("eviction_modes"), p.get("system_namespaces"))
    return p


def _tainted(node):
    """Whether ``node`` carries our taint: a Node's taints are written by cluster users only (NodeRestriction refuses a kubelet's
    change of them), so the node cannot forge or lift it."""
    taints = _spec(node).get("taints")
    return isinstance(taints, list) and any(isinstance(t, dict) and t.get("key") == TAINT_KEY for t in taints)


def _record(entry, node):
    """The quarantine's record of ``node`` from its open ledger entry (``ledger.py``: the controller's own, in a namespace no
    kubelet may write), or None where the ledger holds none: ``{gpus, action, scope, step, started, run, cordoned_by_us,
    boot_id, paused_labels, escalated_from}``. Nothing here is read from the node's annotation, which the node may write as
    easily as we do. An entry written before the ledger kept the record (no step) is read with what the node cannot forge:
    marked (step draining: the drain resumes) where our taint is on, else marking; our cordon where it carries our mark."""
    if entry is None:
        return None
    action = entry.get("action")
    record = {"gpus": list(entry.get("gpus") or []), "action": action, "scope": entry.get("scope") or _scope(action),
              "step": entry.get("step"), "started": entry.get("at"), "run": entry.get("run"),
              "cordoned_by_us": bool(entry.get("cordoned_by_us")), "boot_id": entry.get("boot_id"),
              "paused_labels": entry.get("paused_labels"), "escalated_from": entry.get("escalated_from")}
    if record["step"] is None:
        record["step"] = DRAINING if _tainted(node) else MARKING
        record["cordoned_by_us"] = drain.cordoned_by_us(node, CORDON_MARK)
    elif record["step"] == MARKING and _tainted(node):
        record["step"] = states.move(MARKING, DRAINING)  # the node's patch was done (a run killed before it wrote the next step): the drain resumes
    return record


def _scope(action):
    try:
        return actions.scope_of(action)
    except (KeyError, TypeError, ValueError):
        return None


def _mirror(record):
    """The annotation's text: the record, for people and the event source (its step); never read back as the truth."""
    shown = dict((k, v) for k, v in record.items() if v is not None)
    if shown.get("step"):
        shown["step"] = states.TABLE[shown["step"]]["shown"]
    return json.dumps(shown, sort_keys=True)


def _taints_with_ours(node, value):
    taints = list(_spec(node).get("taints") or [])
    if any(t.get("key") == TAINT_KEY for t in taints):
        return None
    return taints + [{"key": TAINT_KEY, "value": value, "effect": "NoSchedule"}]


def _taint_value(gpus, scope):
    if scope == "node" or not gpus:
        return "node"
    return gpus[0][:12].rstrip("-")  # a label value: at most 63 characters, alphanumeric at both ends


def _active(pod):
    return active(pod) and not _meta(pod).get("deletionTimestamp")


def _targets(p, pods, fault_age, now):
    """``(to_evict [{pod, uid, note, mode}], gone [pod], skipped [{pod, why}], refusals [str], waiting [{pod, uid, mode, why,
    age_seconds, job}])``: drain's rules, and the pods' eviction modes ``fault_age`` seconds into the quarantine (a pod the
    modes keep is waited for: allow_completion, delete_after_timeout before its time, a system namespace's pod on a target
    GPU; on a node-scoped quarantine a system namespace's pod is left, as a DaemonSet's is)."""
    by_name = dict(("%s/%s" % (_meta(x).get("namespace"), _meta(x).get("name")), x) for x in pods)
    to_evict, gone, skipped, refusals, waiting = [], [], [], [], []
    if p["scope"] == "gpu":
        wanted = p["evictions"]
    else:
        wanted = [{"pod": ref, "uid": _meta(x).get("uid")} for ref, x in sorted(by_name.items())]
    for item in wanted:
        pod = by_name.get(item["pod"])
        if pod is None or not _active(pod) or (item.get("uid") and _meta(pod).get("uid") != item["uid"]):
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
            waiting.append({"pod": item["pod"], "uid": _meta(pod).get("uid"), "mode": "system" if found["system"] else found["mode"],
                            "why": why_mode, "age_seconds": _age(pod, now), "job": jobs.job_of(pod)})
            continue
        ok, why = drain.pod_verdict(pod, p["drain_force"], p["drain_delete_emptydir_data"])
        if ok:
            to_evict.append({"pod": item["pod"], "uid": _meta(pod).get("uid"), "note": why, "mode": found["mode"], "mode_note": why_mode})
        else:
            refusals.append(why)
    return to_evict, gone, skipped, refusals, waiting


def _age(pod, now):
    """The pod's age in seconds (from its start, else its creation), or None where neither can be read."""
    stamp = (pod.get("status") or {}).get("startTime") or _meta(pod).get("creationTimestamp")
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


def _rfc3339(now):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def _open_entry(ledger, node):
    for entry in reversed(ledger.get("entries") or []):
        if entry.get("node") == node and not entry.get("closed_at"):
            return entry
    return None


def _read(client, api, p, api_exception):
    """``(node, entry, record)``: the Node, its open ledger entry and the quarantine's record from it."""
    node = client.sanitize_for_serialization(api.read_node(p["node"]))
    ledger, dummy = ledgers.read(api, p["namespace"], api_exception)
    entry = _open_entry(ledger, p["node"])
    return node, entry, _record(entry, node)


def _ledger_set(api, p, fields, api_exception):
    """The node's open ledger entry updated with ``fields`` (the record's step, a pause's labels) before the node mirrors
    them; QuarantineError where the ledger holds no open entry for it any more (another run released it)."""
    found = []

    def change(ledger):
        entry = _open_entry(ledger, p["node"])
        del found[:]
        if entry is None:
            return None
        found.append(entry)
        if all(entry.get(k) == v for k, v in fields.items()):
            return None
        entry.update(fields)
        return ledger

    ledgers.update(api, p["namespace"], change, api_exception)
    if not found:
        raise QuarantineError("node %s: the ledger holds no open entry for it any more (another run released or cancelled it); "
                              "nothing more was changed" % p["node"])


def _patch_node(api, node, spec=None, annotations=None, labels=None):
    """One patch of ``node`` at the resourceVersion read (a concurrent writer makes it fail with 409, never mixes)."""
    body = {"metadata": {"resourceVersion": _meta(node).get("resourceVersion")}}
    for part, value in (("annotations", annotations), ("labels", labels)):
        if value:
            body["metadata"][part] = value
    if spec:
        body["spec"] = spec
    return api.patch_node(_meta(node)["name"], body)


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


def quarantine(client, api, p, check_mode, api_exception, now=None, clock=time.monotonic):
    """The module's result for ``state: quarantined`` (see the module docstring); ``stops``: whether the role stops for the node
    at its step (states.py), without failing the run."""
    result = _quarantine(client, api, p, check_mode, api_exception, now, clock)
    return dict(result, stops=states.TABLE[result["step"]]["stops"])


def _quarantine(client, api, p, check_mode, api_exception, now, clock):
    now = int(now if now is not None else time.time())
    node, opened, current = _read(client, api, p, api_exception)
    escalation = _escalation(current, p)
    cancelled = _operator_cancelled(node, current)
    if cancelled and not escalation:
        return cancel(client, api, p, node, current, cancelled, check_mode, api_exception, now)
    _refuse_early(p, current, escalation)
    # the fault's age for delete_after_timeout: from the ledger's entry, which the controller wrote (a node may write its own
    # Node's annotations, never the ledger)
    fault_age = max(0, now - int(opened["at"])) if opened and opened.get("at") is not None else 0
    pods = [client.sanitize_for_serialization(x) for x in api.list_pod_for_all_namespaces(field_selector="spec.nodeName=%s" % p["node"]).items]
    to_evict, gone, skipped, refusals, waiting = _targets(p, pods, fault_age, now)
    if refusals:
        raise QuarantineError("node %s: refusing to drain, nothing was changed: %s" % (p["node"], "; ".join(refusals)))
    spec = _spec(node)
    boot_id = node_reboot.boot_state(node)[0] or None  # what node_reboot compares with, read the same way
    marking = current is None or current["step"] == MARKING
    # our cordon only where we mark the node and it is schedulable; a cordon already there is someone else's (or the node's)
    need_cordon = marking and not spec.get("unschedulable") and (current is None or current["cordoned_by_us"])
    taints = _taints_with_ours(node, _taint_value(p["gpus"], p["scope"]))
    widen = bool(escalation) and current is not None and current["action"] != p["action"]
    step = AWAITING if waiting else DRAINED
    ours = bool(current and current["cordoned_by_us"]) or need_cordon
    result = {"node": p["node"], "gpus": p["gpus"], "action": p["action"], "scope": p["scope"], "evicted": [e["pod"] for e in to_evict],
              "already_gone": gone, "left_on_node": skipped, "eviction_notes": [e for e in to_evict if e["note"] or e["mode_note"]],
              "waiting_for": waiting, "fault_age_seconds": fault_age, "cordoned": ours,
              "foreign_cordon": bool(spec.get("unschedulable")) and not ours,
              "uncordoned_while_quarantined": _uncordoned(node, current),
              "resumed_from": current["step"] if current else None, "escalated_from": escalation,
              "boot_id": boot_id, "boot_id_at_quarantine": (current or {}).get("boot_id") or boot_id}
    if not marking and not widen and taints is None and current["step"] == step and not to_evict:
        result["jobs"] = _jobs(client, api, waiting)
        said = _waiting_msg(result) if waiting else "node %s is quarantined and drained already" % p["node"]
        return dict(result, changed=False, step=step, msg=_held(result, said))
    result["jobs"] = _jobs(client, api, to_evict + waiting)
    if check_mode:
        return dict(result, changed=True, step=step, msg=_msg(result, "would"))
    # the record's step is the ledger's, each move through states.move; the mark's annotation shows draining
    record = dict(current or {}, gpus=p["gpus"], action=p["action"], scope=p["scope"], step=current["step"] if current else MARKING,
                  started=(current or {}).get("started") or now, run=p.get("run") or (current or {}).get("run"),
                  cordoned_by_us=ours, boot_id=(current or {}).get("boot_id") or boot_id)
    if escalation:
        record["escalated_from"] = escalation
    if marking or widen or taints is not None:
        result["condition_error"] = _mark(client, api, p, node, record, need_cordon, taints, now, api_exception, escalation, current)
        if widen:  # the ledger's entry was widened to the escalation's action at step draining (_ledger_open)
            record["step"] = states.move(record["step"], DRAINING)
        if to_evict:  # the node's patch is done: from here our taint missing is an operator's cancel, never a mark to redo
            record["step"] = states.move(record["step"], DRAINING)
            _ledger_set(api, p, {"step": DRAINING}, api_exception)
    _drain(client, api, p, record, to_evict, clock() + p["drain_timeout"], api_exception, result, step)
    return dict(result, changed=True, step=step, msg=_held(result, _msg(result, "")))


def _uncordoned(node, current):
    """Where the node is schedulable again while our quarantine holds, what that means and how to cancel (a sentence), else
    None. A kubelet may uncordon its own Node, so an uncordon alone cancels nothing: our taint keeps new pods off, and only a
    cluster user can remove it."""
    if current is None or not current["cordoned_by_us"] or _spec(node).get("unschedulable"):
        return None
    name = _meta(node).get("name")
    return ("node %s was uncordoned while quarantined (by its own kubelet, which may, or by a cluster user; the API server's audit "
            "log says which): an uncordon alone cancels nothing, and the quarantine holds (the taint %s keeps new pods off). To "
            "cancel the remediation, remove the taint: kubectl taint node %s %s-" % (name, TAINT_KEY, name, TAINT_KEY))


def _held(result, text):
    return text + ("; " + result["uncordoned_while_quarantined"] if result.get("uncordoned_while_quarantined") else "")


def _jobs(client, api, pods):
    """The multi-pod jobs of ``pods`` (evicted or waited for), each with every pod of it in its namespace: a job loses all its
    workers when one is evicted, so the report names them all."""
    found = {}
    for item in pods:
        job = item.get("job")
        if job is None:
            continue
        key = (job["namespace"], job["selector"])
        if key not in found:
            listed = api.list_namespaced_pod(job["namespace"], label_selector=job["selector"]).items
            found[key] = dict(job, pods=jobs.members(job, [client.sanitize_for_serialization(x) for x in listed]), affected=[])
        found[key]["affected"].append(item["pod"])
    return [found[k] for k in sorted(found)]


def _waiting_msg(result):
    return "node %s is quarantined; its GPUs wait for %s" % (result["node"], "; ".join(
        "%s (%s, running %s)" % (w["pod"], w["why"], "%d s" % w["age_seconds"] if w["age_seconds"] is not None else "for an unknown time")
        for w in result["waiting_for"]))


def _operator_cancelled(node, current):
    """What an operator undid of our quarantine by hand (a sentence), or None: our taint taken off a node the ledger says we
    marked. Only a cluster user can remove a taint (NodeRestriction refuses a kubelet's change of its taints), so a node
    cannot cancel its own quarantine; its uncordon of itself is reported (``_uncordoned``), never a cancel."""
    if current is None or current["step"] == MARKING or _tainted(node):
        return None
    return "removed the taint %s" % TAINT_KEY


def cancel(client, api, p, node, current, undone, check_mode, api_exception, now):
    """An operator ended our quarantine by hand: the ledger's entry is closed ``cancelled_by_operator`` (the plan then leaves the
    node alone for the same signal), and only what is ours comes off, as a release takes it off (``_ours``: the taint, the
    annotation, our cordon and its mark where the operator took off the taint only, a pause's labels); the Node condition
    says Unknown. Nothing is evicted."""
    result = {"node": p["node"], "gpus": current.get("gpus") or [], "action": current.get("action"), "scope": current.get("scope"),
              "evicted": [], "waiting_for": [], "jobs": [], "cancelled_by_operator": undone, "was": current, "step": CANCELLED_BY_OPERATOR}
    msg = ("node %s: a cluster user %s while it was quarantined (step %s): the remediation of that node is cancelled; the next "
           "run leaves it alone for the same signal" % (p["node"], undone, current.get("step")))
    if check_mode:
        return dict(result, changed=True, msg="would record: " + msg)
    states.move(current["step"], CANCELLED_BY_OPERATOR)
    _close_entry(api, p, now, CANCELLED_BY_OPERATOR, api_exception)
    spec, restore = _ours(node, current)
    _patch_node(api, node, spec, {REMEDIATION: None, CORDON_MARK: None}, labels=restore or None)
    result["condition_error"] = set_condition(api, node, "Unknown", "CancelledByOperator",
                                              "gpuops.fleet's quarantine for %s of %s was cancelled: an operator %s" % (
                                                  current.get("action"), ", ".join(current.get("gpus") or []) or "the node", undone),
                                              now, api_exception)
    return dict(result, changed=True, msg=msg)


def condition_reason(keys, action):
    """A Node condition's reason from the signal (CamelCase, as kubelet's own: ``xid:79`` -> ``Xid79``)."""
    text = (keys or [action or "GPUFault"])[0]
    words = re.findall(r"[A-Za-z0-9]+", str(text))
    return ("".join(w[:1].upper() + w[1:] for w in words) or "GPUFault")[:64]


def set_condition(api, node, status, reason, message, now, api_exception):
    """The Node's ``GPUHealthy`` condition, through the status subresource (a strategic merge on ``conditions``, keyed by type:
    kubelet's own conditions stay); nothing is written where ``node`` (as read) says this already. None, or why it could not
    be written (a sentence): the condition says why a node is out, the taint that it is, so a refusal (no ``patch`` on
    ``nodes/status``) is reported, never a reason to leave a quarantine or a release half done."""
    name = _meta(node)["name"]
    conditions = ((node.get("status") or {}).get("conditions")) or []
    old = next((c for c in conditions if isinstance(c, dict) and c.get("type") == CONDITION), None)
    message = message[:1024]
    if old and (old.get("status"), old.get("reason"), old.get("message")) == (status, reason, message):
        return None
    stamp = _rfc3339(now)
    transition = old.get("lastTransitionTime") if old and old.get("status") == status else stamp
    ours = {"type": CONDITION, "status": status, "reason": reason, "message": message, "lastHeartbeatTime": stamp,
            "lastTransitionTime": transition}
    try:
        api.patch_node_status(name, {"status": {"conditions": [ours]}})
    except api_exception as exc:
        return ("the Node condition %s=%s could not be written (%s %s): grant patch on nodes/status (docs/rbac/gpu-remediation-"
                "condition.yml)" % (CONDITION, status, getattr(exc, "status", ""), getattr(exc, "reason", "") or ""))
    return None


def _quarantined_condition(api, p, node, now, api_exception):
    return set_condition(api, node, "False", condition_reason(p.get("keys"), p["action"]),
                         "gpuops.fleet quarantined %s for %s (signals: %s)" % (
                             ", ".join(p["gpus"]) or "the node", p["action"], ", ".join(p.get("keys") or []) or "the plan's"), now,
                         api_exception)


def _mark(client, api, p, node, record, need_cordon, taints, now, api_exception, escalation, current):
    """The ledger's entry (opened, or widened to the escalation's action), then one patch of the node: the cordon, our taint,
    the annotation (the record's mirror); then the GPUHealthy condition."""
    patch_spec = dict(unschedulable=True) if need_cordon else {}
    if taints is not None:
        patch_spec["taints"] = taints
    marks = {REMEDIATION: _mirror(dict(record, step=DRAINING))}
    if need_cordon:
        marks[CORDON_MARK] = "gpu-remediation"
    # the ledger first: where it cannot be written (full, refused, another run's write), the node is left as it was
    opened = _ledger_open(api, p, record, now, api_exception, escalation) if current is None or escalation else None
    try:
        _patch_node(api, node, patch_spec, marks)
    except api_exception as exc:
        raise QuarantineError("node %s could not be marked (%s %s): the node was not changed; %s" % (
            p["node"], getattr(exc, "status", ""), getattr(exc, "reason", "") or "", _ledger_take_back(api, p, opened, api_exception))) from None
    return _quarantined_condition(api, p, node, now, api_exception)


def _drain(client, api, p, record, to_evict, deadline, api_exception, result, step=DRAINED):
    """The evictions by kubectl drain's rules, then the wait for the pods to go; the step recorded either way."""
    try:
        for item in to_evict:
            namespace, name = item["pod"].split("/", 1)
            drain.evict(api, namespace, name, deadline, api_exception, uid=item["uid"])
        left = drain.waiter(api)(p["node"], set(e["pod"] for e in to_evict), deadline) if to_evict else []
        if left:
            raise drain.DrainError("evicted pods still on the node after drain_timeout: %s" % ", ".join(left))
    except drain.DrainError as exc:
        record["step"] = states.move(record["step"], DRAIN_BLOCKED)
        _set_step(client, api, p, record, api_exception)
        raise QuarantineError("node %s stays quarantined (step drain_blocked; no reset or reboot may run): %s" % (p["node"], exc),
                              dict(result, changed=True, step=DRAIN_BLOCKED, stops=False)) from exc
    record["step"] = states.move(record["step"], step)
    _set_step(client, api, p, record, api_exception)


def _set_step(client, api, p, record, api_exception):
    """The record's step in the ledger (the truth), then in the node's annotation (its mirror)."""
    _ledger_set(api, p, {"step": record["step"], "action": record["action"], "scope": record["scope"]}, api_exception)
    node = client.sanitize_for_serialization(api.read_node(p["node"]))
    _patch_node(api, node, annotations={REMEDIATION: _mirror(record)})


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


def _ledger_open(api, p, record, now, api_exception, escalation=None):
    """Open the node's ledger entry with the record (step marking), or widen an open one to the escalation's action, before
    the node is marked; the entry added (for ``_ledger_take_back``), or None where one was open already."""
    added = []

    def change(ledger):
        entry = _open_entry(ledger, p["node"])
        if entry and escalation and entry.get("action") != p["action"]:
            entry.update(action=p["action"], escalated_from=escalation, scope=p["scope"],
                         step=states.move(entry.get("step") or DRAINING, DRAINING))
            return ledger
        if entry:
            return None
        fresh = ledgers.bounded_entry({"node": p["node"], "gpus": p["gpus"], "action": p["action"], "keys": list(p.get("keys") or []),
                                       "driver_version": p.get("driver_version"), "at": now, "closed_at": None, "result": None,
                                       "run": p.get("run"), "step": states.move(states.START, MARKING), "scope": p["scope"],
                                       "cordoned_by_us": bool(record["cordoned_by_us"]), "boot_id": record.get("boot_id")})
        del added[:]
        added.append(fresh)
        return dict(ledger, entries=(ledger.get("entries") or []) + [fresh])

    ledgers.update(api, p["namespace"], change, api_exception)
    return added[0] if added else None


def _ledger_take_back(api, p, entry, api_exception):
    """Remove the entry this run opened for a quarantine that did not happen; what became of it, as a sentence."""
    if entry is None:
        return "the node's ledger entry was open before this run and stays"

    def change(ledger):
        kept = [e for e in ledger.get("entries") or [] if e != entry]
        return None if len(kept) == len(ledger.get("entries") or []) else dict(ledger, entries=kept)

    try:
        ledgers.update(api, p["namespace"], change, api_exception)
    except (api_exception, ledgers.LedgerError) as exc:
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


# The label that takes the NVML clients' DaemonSets off a node for a reset (the collection's device_plugin and
# gpu_monitoring DaemonSets exclude it; on GPU Operator nodes its nvidia.com/gpu.deploy.<component>=false labels do that)
MAINTENANCE_LABEL = "gpuops.fleet/gpu-maintenance"


def check_pause(p):
    labels = p.get("pause_labels") or {}
    if not labels:
        raise ParameterError("pause_labels", "name at least one label that takes the NVML clients' pods off the node")
    for key, value in labels.items():
        check_value("pause_labels", key, "label_key")
        check_value("pause_labels.%s" % key, str(value), "label_value")
    for i, selector in enumerate(p.get("pause_pods") or ()):
        if not isinstance(selector, dict) or not selector:
            raise ParameterError("pause_pods[%d]" % i, "expected the matchLabels of the pods that must leave the node, got %r" % (selector,))
        for key, value in selector.items():
            check_value("pause_pods[%d]" % i, key, "label_key")
            check_value("pause_pods[%d].%s" % (i, key), str(value), "label_value")
    return dict((k, str(v)) for k, v in labels.items())


def _matching(pods, selectors):
    """The pods of ``selectors`` that may still hold NVML: every one not ended, a terminating one included (its containers
    run until kubelet stops them, terminationGracePeriodSeconds at most; kubelet then removes the pod). The real kubelet
    node showed it: a pause that took the plugin's terminating pod for gone reset a GPU its process still held."""
    found = []
    for pod in pods:
        labels = _meta(pod).get("labels") or {}
        if any(all(labels.get(k) == str(v) for k, v in sel.items()) for sel in selectors) and active(pod):
            found.append("%s/%s" % (_meta(pod).get("namespace"), _meta(pod).get("name")))
    return sorted(found)


def pause(client, api, p, check_mode, api_exception, clock=time.monotonic):
    """``state: paused``: the pause labels on a quarantined node (their previous values kept in its ledger entry first), then
    a watch until no pod of ``pause_pods`` runs there: the NVML clients a reset needs gone."""
    labels_wanted = check_pause(p)
    node, dummy, current = _read(client, api, p, api_exception)
    if current is None or current["step"] != DRAINED:
        raise QuarantineError("node %s is not quarantined and drained by gpu_quarantine (the ledger's step %s): pause only a drained "
                              "node; nothing was changed" % (p["node"], (current or {}).get("step")))
    labels = _meta(node).get("labels") or {}
    changes = dict((k, v) for k, v in labels_wanted.items() if labels.get(k) != v)
    previous = current.get("paused_labels")
    if previous is None:
        # the pause's own keys only, with what the node had: a release restores these and nothing else
        previous = dict((k, labels.get(k) if isinstance(labels.get(k), str) else None) for k in labels_wanted)
    result = {"node": p["node"], "labels": labels_wanted, "previous_labels": previous, "waited_for": []}
    if check_mode:
        return dict(result, changed=bool(changes), msg="would label %s %s" % (p["node"], labels_wanted))
    if current.get("paused_labels") is None:
        # the ledger first: a pause whose labels were written is always one whose previous values are known
        _ledger_set(api, p, {"paused_labels": previous}, api_exception)
    if changes:
        _patch_node(api, node, annotations={REMEDIATION: _mirror(dict(current, paused_labels=previous))}, labels=changes)
    selectors = p.get("pause_pods") or []
    if selectors:
        watch = Watcher(api.list_pod_for_all_namespaces, field_selector="spec.nodeName=%s" % p["node"])
        watch.wait(lambda w: not _matching(w.values(), selectors), clock() + p["pause_timeout"])
        left = _matching(watch.values(), selectors)
        result["waited_for"] = [dict(s) for s in selectors]
        if left:
            raise QuarantineError("node %s is labelled %s, and %s still run there after pause_timeout: does their DaemonSet exclude the "
                                  "label? (the collection's device_plugin and gpu_monitoring roles exclude %s=true)"
                                  % (p["node"], labels_wanted, ", ".join(left), MAINTENANCE_LABEL), dict(result, changed=bool(changes)))
    return dict(result, changed=bool(changes), msg="labelled %s %s; the NVML clients' pods are gone" % (p["node"], labels_wanted)
                if changes else "%s is paused already" % p["node"])


def unpause(client, api, p, check_mode, api_exception):
    """``state: unpaused``: the labels a pause changed back to the previous values its ledger entry keeps (removed where there
    was none); then the entry forgets them (a killed run restores them again, the same values)."""
    node, dummy, current = _read(client, api, p, api_exception)
    labels = dict((current or {}).get("paused_labels") or {})
    result = {"node": p["node"], "restored_labels": labels}
    if not labels:
        return dict(result, changed=False, msg="%s is not paused" % p["node"])
    if not check_mode:
        _patch_node(api, node, annotations={REMEDIATION: _mirror(dict(current, paused_labels=None))}, labels=labels)
        _ledger_set(api, p, {"paused_labels": None}, api_exception)
    return dict(result, changed=True, msg="%s %s's labels %s" % ("would restore" if check_mode else "restored", p["node"], labels))


def _ours(node, current):
    """``(spec, labels)`` of the one patch that takes off what a quarantine of ours put on ``node``, by its record (the ledger):
    our taint (by its key), our cordon (where the record says we cordoned it), a pause's labels restored (its own keys only);
    the caller's patch also removes our annotation and mark."""
    taints = _spec(node).get("taints")
    taints = list(taints) if isinstance(taints, list) else []
    kept = [t for t in taints if not (isinstance(t, dict) and t.get("key") == TAINT_KEY)]
    spec = {}
    if len(kept) != len(taints):
        spec["taints"] = kept
    if current and current["cordoned_by_us"] and _spec(node).get("unschedulable"):
        spec["unschedulable"] = False
    restore = dict((current or {}).get("paused_labels") or {})
    return spec, restore


def _close_entry(api, p, now, outcome, api_exception):
    """The node's open ledger entry closed with ``outcome``: its seconds from quarantine to release, but for an operator's cancel
    (no release)."""

    def close(ledger):
        found = _open_entry(ledger, p["node"])
        if found is None:
            return None
        found.update(closed_at=now, result=outcome,
                     recover_seconds=None if outcome == CANCELLED_BY_OPERATOR else now - int(found["at"]))
        return ledger

    ledgers.update(api, p["namespace"], close, api_exception)


def release(client, api, p, check_mode, api_exception, now=None):
    """The module's result for ``state: released``: only what is ours comes off (the ledger's record says what); the ledger
    entry is closed."""
    now = int(now if now is not None else time.time())
    node, entry, current = _read(client, api, p, api_exception)
    spec, restore = _ours(node, current)
    ours_cordon = "unschedulable" in spec
    annotations = _meta(node).get("annotations") or {}
    result = {"node": p["node"], "uncordoned": ours_cordon, "untainted": "taints" in spec, "was": current,
              "foreign_cordon": bool(_spec(node).get("unschedulable")) and not ours_cordon,
              "recover_seconds": (now - int(entry["at"])) if entry and entry.get("at") is not None else None, "result": p["result"]}
    result["restored_labels"] = restore
    if entry is None and not spec and REMEDIATION not in annotations and CORDON_MARK not in annotations:
        return dict(result, changed=False, msg="node %s carries nothing of a GPU remediation" % p["node"])
    if check_mode:
        return dict(result, changed=True, msg="would release %s" % p["node"])
    if entry is not None:
        states.move(current["step"], RELEASED)
        # the ledger first: where it cannot be written, the node stays quarantined as it was (and counts as in flight, as it is)
        _close_entry(api, p, now, p["result"], api_exception)
    _patch_node(api, node, spec, {REMEDIATION: None, CORDON_MARK: None}, labels=restore or None)
    after = " after %d s in quarantine" % result["recover_seconds"] if result["recover_seconds"] is not None else ""
    result["condition_error"] = set_condition(api, node, "True", condition_reason([p["result"]], None),
                                              "gpuops.fleet released the node (%s)%s" % (p["result"], after), now, api_exception)
    return dict(result, changed=True, msg="released %s (%s%s)" % (p["node"], p["result"], ", cordon kept: not ours" if result["foreign_cordon"] else ""))
