# -*- coding: utf-8 -*-
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The actions table (_common/health/actions.py) read as its users read it: severity order, scope, what each evicts, the
role's step, the escalation and the outcome of an action a run does not take. The role's side is
tests/unit/roles/test_gpu_remediation_role.py's."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._common.health import actions as a


def test_the_order_puts_a_person_before_an_automatic_reset():
    assert a.NAMES == (a.NONE, a.OBSERVE, a.RESET, a.INVESTIGATE, a.REBOOT, a.REPLACE)
    assert a.most_severe([a.RESET, a.INVESTIGATE]) == a.INVESTIGATE and a.most_severe([a.OBSERVE, a.NONE]) == a.OBSERVE
    assert [a.severity(n) for n in a.NAMES] == list(range(len(a.NAMES)))


def test_scope_eviction_and_step_of_each_action():
    assert [a.scope_of(n) for n in a.NAMES] == [None, None, "gpu", "node", "node", "node"]
    assert a.ACTING == (a.RESET, a.INVESTIGATE, a.REBOOT, a.REPLACE) and a.AUTOMATED == (a.RESET, a.REBOOT)
    assert (a.evicts(a.RESET), a.evicts(a.RESET, peers=True), a.evicts(a.REBOOT), a.evicts(a.OBSERVE)) == ("gpu", "gpu+peers", "node", "none")
    steps = (a.step(a.RESET, True), a.step(a.RESET, False), a.step(a.REPLACE, True), a.step(a.NONE, True))
    assert steps == (a.RESET, a.QUARANTINE, a.QUARANTINE, None)


def test_a_failed_reset_escalates_to_a_reboot_only_where_the_run_allows_it():
    assert a.escalation(a.RESET, [a.RESET, a.REBOOT]) == a.REBOOT and a.escalation(a.RESET, [a.RESET]) is None
    assert a.escalation(a.REBOOT, list(a.AUTOMATED)) is None
    assert (a.outcome_at_quarantine(a.REPLACE), a.outcome_at_quarantine(a.INVESTIGATE), a.outcome_at_quarantine(a.RESET)) == (
        "rma_candidate", "needs_human", None)


def test_an_action_was_tried_where_its_proof_stage_ran():
    assert a.tried(lambda stage: stage == "reset") == [a.RESET]
    assert a.tried(lambda stage: stage == "reboot_wait") == [a.REBOOT] and a.tried(lambda stage: False) == []
    assert a.STAGES[0] == "quarantine" and a.STAGES[-3:] == ("recovery", "diag", "release")
