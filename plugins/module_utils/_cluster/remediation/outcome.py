# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the remediation run's decisions, pure (the gpu_remediation role's filters wrap
them): which planned nodes a run acts on and with which step (``targets``), and where a node the run does not bring back
stands (``report``). Every action, step, escalation and outcome is read from the actions table
(``_common/health/actions.py``); the role's registered stages are ``actions.STAGES``."""

from __future__ import annotations

import re
import time

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import approval
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import states
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool, as_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError, ParameterError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions

MODES = ("report", "quarantine", "remediate")
STAGES = actions.STAGES
# the variables the role registers each stage's result in (roles/gpu_remediation/tasks/main.yml; a test holds them together):
# gpu_remediation_<stage>, but the post-check's, as gpu_remediation_verify is the role's switch of the verification pod
REGISTERED_AS = {"verify": "post_check"}
STAGE_VARS = tuple("gpu_remediation_" + REGISTERED_AS.get(s, s) for s in STAGES)
# what the role registers after the report is made, for it (the RMA evidence, the bug report's stat before its fetch): never a stage
AFTER_REPORT = ("gpu_remediation_evidence", "gpu_remediation_bug_report")
RMA_NEXT = ("replace the GPU: open an RMA with NVIDIA, attaching nvidia-bug-report.sh's log from this node and this report "
            "(the GPUs' UUIDs, the XIDs and recovery action the plan saw); the node stays quarantined until it is released")


class OutcomeError(GpuopsError):
    """The input is not what the role passes (the message names it)."""


def allowed_actions(value, mode):
    """``gpu_remediation_allowed_actions`` checked (a list, or a survey's ``"reset,reboot"``)."""
    if isinstance(value, str):
        value = [a.strip() for a in value.split(",") if a.strip()]
    bad = [a for a in value or () if a not in actions.AUTOMATED]
    if bad:
        raise ParameterError("gpu_remediation_allowed_actions", "%s not an action this role takes (%s)"
                             % (", ".join(map(repr, bad)), ", ".join(actions.AUTOMATED)))
    if mode == "remediate" and not value:
        raise ParameterError("gpu_remediation_allowed_actions", "empty with gpu_remediation_mode=remediate; allow one or more of %s "
                             "(%s is the default), or run in quarantine mode" % (", ".join(actions.AUTOMATED), actions.AUTOMATED[0]))
    return list(value or ())


def _target(row, mode, allowed):
    """One acted-on row: its step and what the role runs for it (the flags the role's ``when`` read)."""
    step = actions.step(row["action"], mode == "remediate")
    escalation = actions.escalation(step, allowed) if step in actions.AUTOMATED else None
    target = {"host": row.get("host") or row["node"], "node": row["node"], "action": row["action"], "row": row, "step": step,
              "escalate": escalation is not None, "automated": step in actions.AUTOMATED, "stage_vars": list(STAGE_VARS)}
    for name in actions.AUTOMATED:
        target["runs_" + name] = step == name  # the role's blocks: runs_reset, runs_reboot
    if escalation:  # the row the widened quarantine takes (a failed reset's reboot)
        target["escalation_row"] = dict(row, action=escalation, scope=actions.scope_of(escalation))
    return target


def targets(plan, mode, allowed, approval_given=None, now=None):
    """``{"act": [...], "skipped": [{node, action, why}], "mode", "by_host": {host: its act item}, "pin"}`` from
    gpu_remediation_plan's result (the filter ``_remediation_targets`` documents it). ``approval_given``: ``{approved,
    max_age, require}`` of the run (the approved plan's pin, its greatest age, whether one is required), or None."""
    given = dict(approval_given or {})
    approved, max_age, require = given.get("approved"), given.get("max_age"), given.get("require", False)
    if mode not in MODES:
        raise ParameterError("gpu_remediation_mode", "%r is not one of %s" % (mode, ", ".join(MODES)))
    allowed = allowed_actions(allowed, mode)
    if not isinstance(plan, dict) or not isinstance(plan.get("nodes"), list):
        raise OutcomeError("_remediation_targets: expects gpu_remediation_plan's result (with nodes)")
    act, skipped = [], []
    for row in plan["nodes"]:
        if row.get("action") not in actions.ACTING:
            continue
        why = _skip(row, mode, allowed)
        if why:
            skipped.append({"node": row.get("node"), "action": row.get("action"), "why": why})
        else:
            act.append(_target(row, mode, allowed))
    now = time.time() if now is None else now
    pinned = approval.pin(act, mode, now)
    if approved in (None, "", {}):
        if as_bool("gpu_remediation_require_approval", require) and mode != "report":
            raise ParameterError("gpu_remediation_require_approval", "this run acts only on an approved plan, and "
                                 "gpu_remediation_approved_plan is empty: run the workflow's plan job (check mode) and approve it")
    else:
        limit = approval.MAX_AGE if max_age in (None, "") else as_int("gpu_remediation_approval_max_age", max_age)
        act, refused = approval.hold(act, approved, now, limit)
        skipped.extend(refused)
    return {"act": act, "skipped": skipped, "mode": mode, "by_host": dict((t["host"], t) for t in act), "pin": pinned}


def _skip(row, mode, allowed):
    """Why a planned row is not acted on in this run, or None."""
    if row.get("batch") != 1:
        return row.get("deferred_reason") or "not in this run's batch"
    if mode == "report":
        return "report mode"
    if mode == "remediate" and row["action"] in actions.AUTOMATED and row["action"] not in allowed:
        return "%s is not in gpu_remediation_allowed_actions" % row["action"]
    return None


def _ran(result):
    return isinstance(result, dict) and bool(result) and not result.get("skipped")


def _failed(stage, result):
    """Whether a stage that ran failed: its task failed, or (the recovery check) it named the node among its failed nodes,
    which daemonset_rollout reports without failing the task."""
    return bool(result.get("failed")) or (stage == "recovery" and bool(result.get("failed_nodes")))


def _error(failed, results, failure):
    """What the failed stage said: its message, or the recovery check's lines for its failed node."""
    if not failed:
        return None
    if failed not in results:
        return failure["msg"]
    lines = results[failed].get("lines") if failed == "recovery" else None
    return "; ".join(str(line) for line in lines) if lines else results[failed].get("msg")


def report(target, results, failure=None):
    """One node's report where the role does not bring it back (``rma_candidate`` or ``needs_human``); None where it did (the
    filter ``_remediation_report`` documents the rules)."""
    if not isinstance(target, dict) or "row" not in target:
        raise OutcomeError("_remediation_report: expects gpu_remediation_target (a row of _remediation_targets' act)")
    if isinstance(results, (list, tuple)):  # the role's registered results, in STAGE_VARS' order
        results = dict(zip(STAGES, results))
    results = dict((k, v) for k, v in (results or {}).items() if k in STAGES)
    row = target["row"]
    if _ran(results.get("release")) and not results["release"].get("failed"):
        return None
    quarantined = results.get("quarantine") if isinstance(results.get("quarantine"), dict) else {}
    if quarantined.get("claimed_by") or quarantined.get("deferred"):
        return None  # another run holds the node, or a run beside this one took its place: this run did nothing to it
    held = _held(target, row, results.get("quarantine"))
    if held:
        return held
    # what stopped the run: the last stage that ran, where it failed; else a task that registers no stage (``failure``)
    last = next((s for s in reversed(STAGES) if _ran(results.get(s))), None)
    failure = failure if isinstance(failure, dict) and failure.get("task") else None
    failed = last if last and _failed(last, results[last]) else ("other" if failure else None)
    at_quarantine = actions.outcome_at_quarantine(target.get("action")) if target.get("action") in actions.TABLE else None
    if failed is None and not at_quarantine:
        return None
    proofs = [actions.TABLE[a]["tried_by"] for a in actions.AUTOMATED]  # the reboot's proof says whether the node rebooted
    rebooted = any(_ran(results.get(s)) and bool(results[s].get("rebooted")) for s in proofs)
    out = dict(_about(target, row), tried=actions.tried(lambda stage: _ran(results.get(stage))), failed_step=failed,
               failed_task=failure["task"] if failure else None, error=_error(failed, results, failure), rebooted=rebooted,
               quarantined=True, gate=_gate(results))
    out["outcome"], out["next"] = _next(failed, at_quarantine, rebooted, target)
    return out


def page(target, results, held=None):
    """One node's line on the run's fleet page (plugin_utils/_fleet_page.py): ``{state, timeline, outcome, next}``, from what
    the role's stages registered (``results``, as ``report`` takes them) and the node's ``report`` (``held``, None where the
    run brought it back). ``state``: ``released``, ``held`` (the node stays quarantined: its report says why), ``deferred``
    (a run beside this one took the fleet's last place), ``quarantined`` (quarantine mode's end), or None where this run did
    nothing to the node (another run holds it). Each stage that ran is a step of the timeline, with the controller's time
    where its module gave one (``at``: gpu_quarantine's)."""
    if isinstance(results, (list, tuple)):
        results = dict(zip(STAGES, results))
    results = dict((k, v) for k, v in (results or {}).items() if k in STAGES)
    quarantined = results.get("quarantine") if _ran(results.get("quarantine")) else {}
    if quarantined.get("claimed_by"):
        return {"state": None, "timeline": [], "outcome": None, "next": None}
    timeline = []
    for stage in STAGES:
        result = results.get(stage)
        if not _ran(result):
            continue
        step = stage + (" failed" if _failed(stage, result) else "")
        if stage == "quarantine" and result.get("evicted") is not None:
            step += " (%d pods evicted)" % len(result.get("evicted") or ())
        timeline.append({"step": step, "at": result.get("at") if isinstance(result.get("at"), str) else ""})
    if quarantined.get("deferred"):
        state = "deferred"
    elif isinstance(held, dict):
        state = "held"
    elif _ran(results.get("release")) and not results["release"].get("failed"):
        state = "released"
    else:
        state = "quarantined" if quarantined else None
    held = held if isinstance(held, dict) else {}
    return {"state": state, "timeline": timeline, "outcome": held.get("outcome") or quarantined.get("deferred"), "next": held.get("next")}


# the quarantine's states the role stops at for the node without failing it (gpu_quarantine's step; states.py), and what
# the node waits for there (the report's next)
HELD = dict((name, states.TABLE[name]["waits_for"]) for name in states.STOPS)


def _held(target, row, quarantine):
    """The report of a node the quarantine left waiting for pods, or that an operator cancelled; else None."""
    step = quarantine.get("step") if isinstance(quarantine, dict) and not quarantine.get("failed") else None
    if step not in HELD:
        return None
    return dict(_about(target, row), tried=["quarantine"], failed_step=None, failed_task=None, error=None, rebooted=False,
                quarantined=states.TABLE[step]["holds"], outcome=step, next=HELD[step], evicted=list(quarantine.get("evicted") or []),
                waiting_for=list(quarantine.get("waiting_for") or []), jobs=list(quarantine.get("jobs") or []),
                cancelled_by_operator=quarantine.get("cancelled_by_operator"))


def _about(target, row):
    """What every report says of its node: the target and the plan row's GPUs, reasons, signal keys and driver."""
    return {"node": target["node"], "host": target.get("host"), "action": target.get("action"), "gpus": list(row.get("gpus") or []),
            "reasons": list(row.get("reasons") or []), "keys": list(row.get("keys") or []), "driver_version": row.get("driver_version")}


def _gate(results):
    """The gate before the release that ran: ``dcgm`` (DCGM's diagnostic), else None (the verification pod, where it runs, is
    the role's own task: its failure names it)."""
    diag = results.get("diag")
    return "dcgm" if _ran(diag) and diag.get("gate") == "dcgm" else None


def _next(failed, at_quarantine, rebooted, target):
    """``(outcome, what to do next)`` of a node the run leaves quarantined."""
    if failed is None and at_quarantine == "rma_candidate":
        return at_quarantine, RMA_NEXT
    if failed is None:
        return at_quarantine, "investigate: the plan could not name an automatic action (see reasons); release the node when done"
    if failed == "verify" and rebooted:
        return "rma_candidate", "the GPU did not recover from a reboot; " + RMA_NEXT
    if failed == "diag":
        return "needs_human", ("DCGM's diagnostic failed on the remediated GPUs (see error: the test, the GPU, DCGM's warning): the GPU "
                               "is not released; run dcgmi diag -r 3 on it, and open an RMA if it fails again (the evidence is in "
                               "this report); the node stays quarantined until it is released")
    if failed == "recovery":
        return "needs_human", ("the device plugin's new pod is not Ready on the node, or its allocatable GPUs are below capacity (see "
                               "error): NVML found the GPUs healthy, so look at the plugin pod (its log, its image); the node stays "
                               "quarantined until it is released")
    step = target.get("step")
    escalation = actions.TABLE[step]["escalates_to"] if step in actions.AUTOMATED else None
    if failed in actions.TABLE.get(step, {}).get("stages", ()) and escalation and not target.get("escalate"):
        return "needs_human", ("%s the node, NVIDIA's next step after a failed %s: run again with %s in gpu_remediation_allowed_actions "
                               "(the quarantine is widened to the whole node), or %s it yourself and release it"
                               % (escalation, step, escalation, escalation))
    if failed == "quarantine":
        return "needs_human", ("the drain did not finish (a PodDisruptionBudget, or a pod kubectl drain would not evict): resolve it "
                               "and run again; the next run resumes the drain")
    return "needs_human", "see error; the node stays quarantined until it is fixed and released"


# the archive nvidia-bug-report.sh writes where gpu_rma_evidence runs it (_node/health/evidence.py): <dir>/nvidia-bug-report-
# <boot ID, 36 characters at most>.log, gzipped by the tool
_BUG_REPORT = re.compile(r"\Anvidia-bug-report-[0-9A-Za-z-]{1,36}\.log(?:\.gz)?\Z")


def bug_report_fetch(evidence, allowed, directory, max_bytes, stat=None):
    """``{"path": ...}`` where the controller may fetch the node's bug report, else ``{"skipped": why}``. Only where the run
    allowed it (``allowed``: ``gpu_remediation_evidence_bug_report``), only the file this run's ``directory`` holds under the
    tool's name (the path is the node's word: anything else names a file the controller did not choose), and only at most
    ``max_bytes`` as the node reported it and, with ``stat`` (``ansible.builtin.stat``'s result), as it is on the node now."""
    report = (evidence or {}).get("bug_report") if isinstance(evidence, dict) else None
    if not as_bool("gpu_remediation_evidence_bug_report", allowed):
        return {"skipped": "not allowed (gpu_remediation_evidence_bug_report: false)"}
    limit = as_int("gpu_remediation_evidence_bug_report_max_bytes", max_bytes)
    if not isinstance(report, dict) or not isinstance(report.get("path"), str):
        return {"skipped": "the node wrote no bug report"}
    path, folder = report["path"], str(directory).rstrip("/")
    head, dummy, name = path.rpartition("/")
    if head != folder or not _BUG_REPORT.match(name):
        return {"skipped": "the node named %r, not a bug report in %s: nothing is fetched" % (path[:200], folder)}
    sizes = [report.get("bytes")]
    if stat is not None:
        found = (stat or {}).get("stat") or {}
        if not found.get("exists") or not found.get("isreg"):
            return {"skipped": "%s is not a regular file on the node" % path}
        sizes.append(found.get("size"))
    for size in sizes:
        if not (isinstance(size, int) and not isinstance(size, bool)) or size > limit:
            return {"skipped": "the bug report is %r bytes, over gpu_remediation_evidence_bug_report_max_bytes (%d): fetch it by hand"
                               % (size, limit)}
    return {"path": path}
