# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Filter gpuops.fleet._remediation_targets: which planned nodes playbooks/gpu_remediation.yml acts on (the role's
plumbing, private: a leading underscore)."""

from __future__ import annotations

from ansible.errors import AnsibleFilterError

MODES = ("report", "quarantine", "remediate")
ACTIONS = ("reset", "reboot", "replace", "investigate")


def remediation_targets(plan, mode, allowed_actions):
    """``{"act": [{host, node, action, row}], "skipped": [{node, action, why}], "mode"}`` from gpu_remediation_plan's result.

    Only the rows the plan put in its first batch are acted on (the breakers and caps already chose them). ``report``
    acts on none. ``quarantine`` quarantines every chosen node (and does nothing else). ``remediate`` acts on the
    nodes whose action is allowed (``allowed_actions``); ``replace`` and ``investigate`` are quarantined only, as the
    design says, whatever the mode. A chosen node whose action is not allowed is skipped, with the reason.
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
        act.append({"host": row.get("host") or row["node"], "node": row["node"], "action": row["action"], "row": row,
                    "step": "quarantine" if mode == "quarantine" or row["action"] in ("replace", "investigate") else row["action"]})
    return {"act": act, "skipped": skipped, "mode": mode}


class FilterModule:
    def filters(self):
        return {"_remediation_targets": remediation_targets}
