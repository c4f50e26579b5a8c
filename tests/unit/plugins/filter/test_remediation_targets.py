# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_remediation role's choice of nodes: the plan's first batch only, by mode and allowed actions."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.remediation import remediation_targets

PLAN = {"nodes": [
    {"node": "n1", "host": "h1", "action": "reset", "batch": 1},
    {"node": "n2", "host": "h2", "action": "reboot", "batch": 1},
    {"node": "n3", "host": "h3", "action": "replace", "batch": 1},
    {"node": "n4", "host": "h4", "action": "reset", "batch": None, "deferred_reason": "fleet_event"},
    {"node": "n5", "host": "h5", "action": "observe", "batch": None},
    {"node": "n6", "host": "h6", "action": "none", "batch": None},
]}


def test_remediate_acts_on_the_first_batch_by_the_allowed_actions():
    got = remediation_targets(PLAN, "remediate", ["reset"])
    assert [(t["node"], t["step"]) for t in got["act"]] == [("n1", "reset"), ("n3", "quarantine")]
    assert [(s["node"], s["why"]) for s in got["skipped"]] == [("n2", "reboot is not in gpu_remediation_allowed_actions"), ("n4", "fleet_event")]
    # survey strings: "reset,reboot"
    assert [t["step"] for t in remediation_targets(PLAN, "remediate", "reset,reboot")["act"]] == ["reset", "reboot", "quarantine"]


def test_quarantine_only_quarantines_and_report_acts_on_nothing():
    assert [t["step"] for t in remediation_targets(PLAN, "quarantine", [])["act"]] == ["quarantine"] * 3
    report = remediation_targets(PLAN, "report", ["reset"])
    assert report["act"] == [] and [s["why"] for s in report["skipped"]] == ["report mode"] * 3 + ["fleet_event"]


@pytest.mark.parametrize("mode, allowed, says", [
    ("fix", ["reset"], "gpu_remediation_mode: 'fix' is not one of"),
    ("remediate", [], "gpu_remediation_allowed_actions: empty with gpu_remediation_mode=remediate"),
    ("remediate", ["replace"], "gpu_remediation_allowed_actions: 'replace' not an action"),
])
def test_bad_input_names_the_variable(mode, allowed, says):
    with pytest.raises(AnsibleFilterError) as err:
        remediation_targets(PLAN, mode, allowed)
    assert str(err.value).startswith(says)
