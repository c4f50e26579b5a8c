# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The gpu_remediation role's choice of nodes (the plan's first batch only, by mode and allowed actions) and its report of a
node it leaves quarantined (the last failed stage decides: RMA candidate or what a human does next)."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpuops.fleet.plugins.filter.remediation import remediation_report, remediation_targets

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
    # a failed reset goes on to a reboot only where the run may reboot
    assert [t["escalate"] for t in got["act"]] == [False, False]
    assert [t["escalate"] for t in remediation_targets(PLAN, "remediate", ["reset", "reboot"])["act"]] == [True, False, False]


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


G0 = "GPU-0650a168-e770-3ea8-8ac3-8a1d419763e0"
TARGET = {"node": "n1", "host": "h1", "action": "reset", "step": "reset", "escalate": False,
          "row": {"node": "n1", "action": "reset", "gpus": [G0], "reasons": ["XID 48: double-bit ECC"], "keys": ["xid:48"], "driver_version": "580.65.06"}}
OK = {"changed": True}
SKIPPED = {"skipped": True}


def failed(msg):
    return {"failed": True, "msg": msg}


def test_a_node_brought_back_has_no_report_and_a_failed_reset_says_what_next():
    assert remediation_report(TARGET, {"quarantine": OK, "pause": OK, "reset": OK, "recovery": OK, "release": OK}) is None
    # the quarantine mode of a reset: nothing failed, nothing to report
    assert remediation_report(dict(TARGET, step="quarantine"), {"quarantine": OK}) is None
    got = remediation_report(TARGET, {"quarantine": OK, "pause": OK, "reset": failed("nvidia-smi -r failed (rc 255): In use by another client"),
                                      "escalate": SKIPPED, "release": None})
    assert (got["outcome"], got["failed_step"], got["tried"], got["gpus"], got["quarantined"]) == ("needs_human", "reset", ["reset"], [G0], True)
    assert "In use by another client" in got["error"] and "reboot in gpu_remediation_allowed_actions" in got["next"]
    assert got["keys"] == ["xid:48"] and got["driver_version"] == "580.65.06"


def test_a_node_another_run_holds_or_whose_place_a_run_beside_took_has_no_report_of_this_run():
    """Issue 59, item 3: the quarantine refused the node before writing anything (claimed_by, deferred): the run that holds it
    reports on it; this one did nothing to it, even for the plan's replace (quarantined and reported otherwise)."""
    claimed = dict(OK, claimed_by={"run": "run-x", "until": 1}, stops=True, step="draining")
    deferred = dict(OK, deferred="deferred_capacity", stops=True, step=None)
    for result in (claimed, deferred):
        assert remediation_report(TARGET, {"quarantine": result}) is None
        assert remediation_report(dict(TARGET, action="replace", step="quarantine"), {"quarantine": result}) is None


def test_a_gpu_still_unhealthy_after_the_escalated_reboot_is_an_rma_candidate():
    results = {"quarantine": OK, "pause": OK, "reset": failed("In use by another client"), "escalate": OK, "reboot": OK,
               "reboot_wait": {"rebooted": True, "changed": False}, "verify": failed("%s still asks for recovery action NODE_REBOOT" % G0)}
    got = remediation_report(dict(TARGET, escalate=True), results)
    assert (got["outcome"], got["failed_step"], got["tried"], got["rebooted"]) == ("rma_candidate", "verify", ["reset", "reboot"], True)
    assert "did not recover from a reboot" in got["next"] and "nvidia-bug-report.sh" in got["next"]
    # the escalated reboot brought it back: no report, though the reset had failed
    assert remediation_report(dict(TARGET, escalate=True), dict(results, verify=OK, recovery=OK, release=OK)) is None
    # a reboot that never happened (bootID unchanged) needs a human, not an RMA
    never = dict(results, reboot_wait=dict(failed("node n1 did not reboot: its bootID is still b1"), rebooted=False), verify=SKIPPED)
    assert remediation_report(dict(TARGET, escalate=True), never)["outcome"] == "needs_human"


def test_the_plans_replace_is_an_rma_report_and_a_blocked_drain_needs_a_human():
    replace = dict(TARGET, action="replace", step="quarantine", row=dict(TARGET["row"], action="replace"))
    got = remediation_report(replace, {"quarantine": OK})
    assert got["outcome"] == "rma_candidate" and got["failed_step"] is None and got["tried"] == []
    blocked = remediation_report(TARGET, {"quarantine": failed("node n1 stays quarantined (step drain_blocked ...)")})
    assert blocked["outcome"] == "needs_human" and "the next run resumes the drain" in blocked["next"]
    with pytest.raises(AnsibleFilterError):
        remediation_report({"node": "n1"}, {})


def test_a_failed_task_that_registers_no_stage_is_reported_with_its_name():
    results = {"quarantine": OK, "pause": OK, "reset": failed("In use"), "escalate": OK, "reboot": OK, "reboot_wait": {"rebooted": True}}
    got = remediation_report(dict(TARGET, escalate=True), results, {"task": "The node's connection back", "msg": "timed out"})
    # the reset's failure was escalated; what stopped the run is the wait for the connection
    assert (got["failed_step"], got["failed_task"], got["error"], got["outcome"]) == ("other", "The node's connection back", "timed out", "needs_human")


def test_a_device_plugin_that_does_not_come_back_is_a_failed_recovery_and_a_human_looks():
    """Issue 48, item 8: daemonset_rollout names the node among failed_nodes without failing its task; the report counts it as
    the recovery's failure (a person looks at the plugin pod), before a reboot or after one: NVML found the GPUs healthy."""
    down = {"failed_nodes": ["n1"], "lines": ["n1 - failed, GPUs 0/3 - the new pod is not Ready"], "changed": False, "msg": "1 failed"}
    got = remediation_report(TARGET, {"quarantine": OK, "pause": OK, "reset": OK, "recovery": down},
                             {"task": "The node recovered (else it stays quarantined, a person to look)", "msg": "n1 did not recover"})
    assert (got["outcome"], got["failed_step"], got["tried"]) == ("needs_human", "recovery", ["reset"]), got
    assert got["error"] == "n1 - failed, GPUs 0/3 - the new pod is not Ready" and "device plugin's new pod" in got["next"]
    rebooted = {"quarantine": OK, "escalate": OK, "reboot": OK, "reboot_wait": {"rebooted": True}, "verify": OK, "recovery": down}
    assert remediation_report(dict(TARGET, step="reboot"), rebooted)["outcome"] == "needs_human"


def test_a_host_whose_facts_name_a_controller_variable_gets_no_report_written():
    with pytest.raises(AnsibleFilterError, match="returned facts named as variables the controller acts on .'gpu_remediation_report_dir'."):
        remediation_report(TARGET, {"quarantine": OK}, None, {"gpu_remediation_report_dir": "/etc/cron.d", "gpuops_gpus": {}})


def test_an_approval_requirement_that_is_no_boolean_is_refused_naming_it():
    from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import outcome
    from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import ParameterError

    for require in ("", None, "maybe"):
        with pytest.raises(ParameterError) as err:
            outcome.targets({"nodes": []}, "remediate", ["reset"], {"approved": None, "require": require}, now=0)
        assert err.value.field == "gpu_remediation_require_approval"
    assert outcome.targets({"nodes": []}, "remediate", ["reset"], None, now=0)["act"] == []  # not asked: not required
