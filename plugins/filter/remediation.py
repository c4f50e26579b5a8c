# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpuops.fleet._remediation_targets: which planned nodes playbooks/gpu_remediation.yml acts on (the role's
plumbing, private: a leading underscore)."""

from __future__ import annotations

import time

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import approval
from ansible_collections.gpuops.fleet.plugins.module_utils._common.checks import as_bool, as_int
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _node_trust

MODES = ("report", "quarantine", "remediate")
ACTIONS = ("reset", "reboot", "replace", "investigate")


def remediation_targets(plan, mode, allowed_actions, approved=None, max_age=None, require=False):
    """``{"act": [{host, node, action, row}], "skipped": [{node, action, why}], "mode", "by_host": {host: its act item}}`` from
    gpu_remediation_plan's result.

    Only the rows the plan put in its first batch are acted on (the breakers and caps already chose them). ``report``
    acts on none. ``quarantine`` quarantines every chosen node (and does nothing else). ``remediate`` acts on the
    nodes whose action is allowed (``allowed_actions``); ``replace`` and ``investigate`` are quarantined only, as the
    design says, whatever the mode. A chosen node whose action is not allowed is skipped, with the reason.

    ``pin`` is what a person approves (``approval.pin``: the plan job hands it to the AWX job's artifacts). With ``approved``
    (the plan job's pin, which AWX passes to the act job), only the nodes it names and whose fresh plan agrees are acted on;
    each other one is skipped, naming the difference (``approval.hold``). ``require``: no act without an approved plan.
    """
    if mode not in MODES:
        raise AnsibleFilterError("gpu_remediation_mode: %r is not one of %s" % (mode, ", ".join(MODES)))
    if isinstance(allowed_actions, str):
        allowed_actions = [a.strip() for a in allowed_actions.split(",") if a.strip()]
    bad = [a for a in allowed_actions or () if a not in ("reset", "reboot")]
    if bad:
        raise AnsibleFilterError("gpu_remediation_allowed_actions: %s not an action this role takes (reset, reboot)" % ", ".join(map(repr, bad)))
    if mode == "remediate" and not allowed_actions:
        raise AnsibleFilterError("gpu_remediation_allowed_actions: empty with gpu_remediation_mode=remediate; allow reset (the default), reboot, "
                                 "or both, or run in quarantine mode")
    if not isinstance(plan, dict) or not isinstance(plan.get("nodes"), list):
        raise AnsibleFilterError("_remediation_targets: expects gpu_remediation_plan's result (with nodes)")
    act, skipped = [], []
    for row in plan["nodes"]:
        if row.get("action") not in ACTIONS:
            continue
        if row.get("batch") != 1:
            skipped.append({"node": row.get("node"), "action": row.get("action"), "why": row.get("deferred_reason") or "not in this run's batch"})
            continue
        if mode == "report":
            skipped.append({"node": row["node"], "action": row["action"], "why": "report mode"})
            continue
        if mode == "remediate" and row["action"] in ("reset", "reboot") and row["action"] not in allowed_actions:
            skipped.append({"node": row["node"], "action": row["action"], "why": "%s is not in gpu_remediation_allowed_actions" % row["action"]})
            continue
        step = "quarantine" if mode == "quarantine" or row["action"] in ("replace", "investigate") else row["action"]
        # a failed reset goes on to a reboot (NVIDIA's next step) only where the run may reboot
        act.append({"host": row.get("host") or row["node"], "node": row["node"], "action": row["action"], "row": row, "step": step,
                    "escalate": step == "reset" and "reboot" in allowed_actions})
    now = time.time()
    pinned = approval.pin(act, mode, now)
    if approved in (None, "", {}):
        if _flag("gpu_remediation_require_approval", require) and mode != "report":
            raise AnsibleFilterError("gpu_remediation_require_approval: this run acts only on an approved plan, and "
                                     "gpu_remediation_approved_plan is empty: run the workflow's plan job (check mode) and approve it")
    else:
        try:
            limit = approval.MAX_AGE if max_age in (None, "") else as_int("gpu_remediation_approval_max_age", max_age)
            act, refused = approval.hold(act, approved, now, limit)
        except (approval.ApprovalError, ParameterError) as exc:
            raise AnsibleFilterError(str(exc)) from None
        skipped.extend(refused)
    return {"act": act, "skipped": skipped, "mode": mode, "by_host": dict((t["host"], t) for t in act), "pin": pinned}


def _flag(name, value):
    try:
        return as_bool(name, value)
    except ParameterError as exc:
        raise AnsibleFilterError(str(exc)) from None


# the role's stages, in order, as it registers them (tasks/main.yml)
STAGES = ("quarantine", "pause", "reset", "escalate", "reboot", "reboot_wait", "verify", "recovery", "release")
RMA_NEXT = ("replace the GPU: open an RMA with NVIDIA, attaching nvidia-bug-report.sh's log from this node and this report "
            "(the GPUs' UUIDs, the XIDs and recovery action the plan saw); the node stays quarantined until it is released")


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


def remediation_report(target, results, failure=None, host_facts=None):
    """One node's report where the role does not bring it back (``rma_candidate`` or ``needs_human``); None where it did.

    ``results`` maps the role's stages (``STAGES``) to what each registered. A release that ran means the node came back
    (None). Else the last stage that ran decides where it failed (a reset that failed and was escalated to a reboot is
    not the end): a GPU
    still unhealthy after a reboot is an RMA candidate, as is the plan's ``replace`` (a repeat offender); a reset that
    failed where a reboot is not allowed (``target["escalate"]`` false), a blocked drain, or anything else needs a human,
    with what to do next. The node stays quarantined in every case (its ledger entry stays open, so the breakers count it).
    ``failure`` (``{task, msg}``, the role's rescue) names a failed task that registers no stage (``failed_step: other``).
    ``host_facts`` (the host's ``ansible_facts``) that name a controller variable fail it (plugin_utils/_node_trust.py).
    """
    if not isinstance(target, dict) or "row" not in target:
        raise AnsibleFilterError("_remediation_report: expects gpu_remediation_target (a row of _remediation_targets' act)")
    why = _node_trust.refusal(target.get("host"), host_facts)
    if why:  # the report's directory and the role's settings may be what the node returned: nothing is written
        raise AnsibleFilterError("_remediation_report: %s" % why)
    results = dict((k, v) for k, v in (results or {}).items() if k in STAGES)
    row = target["row"]
    if _ran(results.get("release")) and not results["release"].get("failed"):
        return None
    # what stopped the run: the last stage that ran, where it failed; else a task that registers no stage (``failure``)
    last = next((s for s in reversed(STAGES) if _ran(results.get(s))), None)
    failure = failure if isinstance(failure, dict) and failure.get("task") else None
    failed = last if last and _failed(last, results[last]) else ("other" if failure else None)
    tried = [a for a, stage in (("reset", "reset"), ("reboot", "reboot_wait")) if _ran(results.get(stage))]
    rebooted = _ran(results.get("reboot_wait")) and bool(results["reboot_wait"].get("rebooted"))
    if failed is None and target.get("action") not in ("replace", "investigate"):
        return None
    report = {"node": target["node"], "host": target.get("host"), "action": target.get("action"), "gpus": list(row.get("gpus") or []),
              "reasons": list(row.get("reasons") or []), "keys": list(row.get("keys") or []), "driver_version": row.get("driver_version"),
              "tried": tried, "failed_step": failed, "failed_task": failure["task"] if failure else None,
              "error": _error(failed, results, failure), "rebooted": rebooted,
              "quarantined": True}
    if failed is None and target["action"] == "replace":
        outcome, what = "rma_candidate", RMA_NEXT
    elif failed is None:
        outcome, what = "needs_human", "investigate: the plan could not name an automatic action (see reasons); release the node when done"
    elif failed == "verify" and rebooted:
        outcome, what = "rma_candidate", "the GPU did not recover from a reboot; " + RMA_NEXT
    elif failed == "recovery":
        outcome = "needs_human"
        what = ("the device plugin's new pod is not Ready on the node, or its allocatable GPUs are below capacity (see error): NVML "
                "found the GPUs healthy, so look at the plugin pod (its log, its image); the node stays quarantined until it is "
                "released")
    elif failed in ("pause", "reset") and not target.get("escalate"):
        outcome = "needs_human"
        what = ("reboot the node, NVIDIA's next step after a failed reset: run again with reboot in gpu_remediation_allowed_actions "
                "(the quarantine is widened to the whole node), or reboot it yourself and release it")
    elif failed == "quarantine":
        outcome, what = "needs_human", ("the drain did not finish (a PodDisruptionBudget, or a pod kubectl drain would not evict): "
                                        "resolve it and run again; the next run resumes the drain")
    else:
        outcome, what = "needs_human", "see error; the node stays quarantined until it is fixed and released"
    report.update(outcome=outcome, next=what)
    return report


class FilterModule:
    def filters(self):
        return {"_remediation_targets": remediation_targets, "_remediation_report": remediation_report}
