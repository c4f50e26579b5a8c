# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filters gpuops.fleet._remediation_targets, _remediation_report, _remediation_outcome, _bug_report_fetch and
_remediation_node_options: the gpu_remediation role's plumbing (private: a leading underscore), thin wrappers of the run's
decisions (module_utils/_cluster/remediation/outcome.py)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import outcome
from ansible_collections.gpuops.fleet.plugins.module_utils._common import settings
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError
from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import node_options
from ansible_collections.gpuops.fleet.plugins.plugin_utils import _node_trust


def remediation_targets(plan, mode, allowed_actions, approved=None, max_age=None, require=False):
    """``{"act": [{host, node, action, row, step, escalate, automated, runs_<action>[, escalation_row]}], "skipped": [{node,
    action, why}], "mode", "by_host": {host: its act item}, "pin"}`` from gpu_remediation_plan's result.

    Only the rows the plan put in its first batch are acted on (the breakers and caps already chose them). ``report``
    acts on none. ``quarantine`` quarantines every chosen node (and does nothing else). ``remediate`` takes the automated
    actions the run allows (``allowed_actions``); the others (``replace``, ``investigate``) are quarantined only, as the
    design says, whatever the mode. A chosen node whose action is not allowed is skipped, with the reason. ``escalate``: a
    failed step goes on to the action the table escalates it to (a reset's reboot) where the run allows that one.

    ``pin`` is what a person approves (``approval.pin``: the plan job hands it to the AWX job's artifacts). With ``approved``
    (the plan job's pin, which AWX passes to the act job), only the nodes it names and whose fresh plan agrees are acted on;
    each other one is skipped, naming the difference (``approval.hold``). ``require``: no act without an approved plan.
    """
    try:
        return outcome.targets(plan, mode, allowed_actions, {"approved": approved, "max_age": max_age, "require": require})
    except GpuopsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def remediation_report(target, results, failure=None, host_facts=None):
    """One node's report where the role does not bring it back (``rma_candidate`` or ``needs_human``); None where it did.

    ``results`` maps the role's stages (``outcome.STAGES``) to what each registered, or lists them in ``STAGE_VARS``'
    order. A release that ran means the node came back
    (None). Else the last stage that ran decides where it failed (a step that failed and was escalated is not the end): a GPU
    still unhealthy after a reboot is an RMA candidate, as is the plan's ``replace`` (a repeat offender); a step that failed
    where its escalation is not allowed (``target["escalate"]`` false), a blocked drain, or anything else needs a human,
    with what to do next. The node stays quarantined in every case (its ledger entry stays open, so the breakers count it).
    ``failure`` (``{task, msg}``, the role's rescue) names a failed task that registers no stage (``failed_step: other``).
    ``host_facts`` (the host's ``ansible_facts``) that name a controller variable fail it (plugin_utils/_node_trust.py).
    """
    why = _node_trust.refusal(target.get("host"), host_facts) if isinstance(target, dict) else None
    if why:  # the report's directory and the role's settings may be what the node returned: nothing is written
        raise AnsibleFilterError("_remediation_report: %s" % why)
    try:
        return outcome.report(target, results, failure)
    except GpuopsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def remediation_outcome(target, results, held=None):
    """One node's line on the run's fleet page: ``{state, timeline, outcome, next}`` (``outcome.page``)."""
    if not isinstance(target, dict):
        raise AnsibleFilterError("_remediation_outcome: expects gpu_remediation_target (a row of _remediation_targets' act)")
    return outcome.page(target, results, held)


def bug_report_fetch(evidence, allowed, directory, max_bytes, stat=None):
    """``{"path"}`` where the role may fetch the node's bug report, else ``{"skipped": why}`` (``outcome.bug_report_fetch``)."""
    try:
        return outcome.bug_report_fetch(evidence, allowed, directory, max_bytes, stat)
    except GpuopsError as exc:
        raise AnsibleFilterError(str(exc)) from None


def remediation_node_options(values):
    """True where each of the role's variables that a node module reads (``values``: {variable: value}) passes that module's
    own check (module_utils/_common/health/node_options.py); else an error naming the variable and the fix. The role asks it
    on the controller before any node is touched; a survey's string is read as its type first."""
    if not isinstance(values, dict):
        raise AnsibleFilterError("gpuops.fleet._remediation_node_options: expected a mapping of the role's variables to their values")
    try:
        node_options.ROLE.check_all(values, coerce=settings.coerce)
    except GpuopsError as exc:
        raise AnsibleFilterError("%s; set it to a valid value (no node was touched)" % exc) from None
    return True


class FilterModule:
    def filters(self):
        return {"_remediation_targets": remediation_targets, "_remediation_report": remediation_report,
                "_bug_report_fetch": bug_report_fetch, "_remediation_outcome": remediation_outcome, "_remediation_node_options": remediation_node_options}
