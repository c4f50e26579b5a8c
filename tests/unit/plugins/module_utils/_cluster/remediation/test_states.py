# -*- coding: utf-8 -*-
"""A node's remediation states (_cluster/remediation/states.py): the moves the table allows and refuses, the sets the rest of
the collection reads, and the guide's diagram written from the table."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.events import nodes
from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger, outcome, plan, states

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "..", ".."))


def test_a_remediation_starts_at_marking_and_nowhere_else():
    assert states.move(states.START, states.MARKING) == states.MARKING
    for name in states.NAMES:
        if name != states.MARKING:
            with pytest.raises(states.IllegalMove, match="starts at marking"):
                states.move(states.START, name)


@pytest.mark.parametrize("before,after", [
    (states.RELEASED, states.DRAINING),  # an end is an end: a new fault opens a new entry
    (states.CANCELLED_BY_OPERATOR, states.DRAINED),
    (states.RELEASED, states.CANCELLED_BY_OPERATOR),
    (states.MARKING, states.CANCELLED_BY_OPERATOR),  # our taint is not on yet: no operator took it off
    (states.MARKING, states.DRAIN_BLOCKED),  # the mark comes before any eviction a budget could refuse
    (states.DRAINED, states.MARKING),  # the mark is done once
    (states.AWAITING_PODS, states.MARKING),
])
def test_a_move_the_table_does_not_allow_raises(before, after):
    with pytest.raises(states.IllegalMove, match="may not move to"):
        states.move(before, after)


@pytest.mark.parametrize("before,after", [("drainin", states.DRAINED), (states.DRAINED, "acting"), (states.DRAINED, None)])
def test_a_name_that_is_no_state_raises(before, after):
    with pytest.raises(states.IllegalMove, match="no remediation state"):
        states.move(before, after)


def test_every_move_the_table_lists_is_allowed_and_a_state_moves_to_itself():
    for name in states.NAMES:
        for after in states.TABLE[name]["next"]:
            assert states.move(name, after) == after
        assert states.move(name, name) == name


def test_the_table_is_consistent():
    assert states.TERMINAL == (states.RELEASED, states.CANCELLED_BY_OPERATOR)
    for name in states.NAMES:
        row = states.TABLE[name]
        assert set(row["next"]) <= set(states.NAMES) and name not in row["next"]
        assert row["recorded"] == (name not in states.TERMINAL) == row["holds"] == bool(row["shown"])
        assert row["waits_for"]
    # every recorded state reaches an end; every state but the start is reached
    reached = set(states.TABLE[states.MARKING]["next"]) | {states.MARKING}
    assert reached | set(n for r in states.RECORDED for n in states.TABLE[r]["next"]) == set(states.NAMES)
    for name in states.RECORDED:
        seen, todo = set(), [name]
        while todo:
            here = todo.pop()
            seen.add(here)
            todo.extend(n for n in states.TABLE[here]["next"] if n not in seen)
        assert set(states.TERMINAL) & seen, name


def test_the_rest_of_the_collection_reads_the_table():
    # derived, never listed again: a new state reaches the ledger, the event source and the report by its row alone
    assert ledger.STEPS == states.RECORDED and states.MARKING in ledger.STEPS
    assert nodes.STEPS == states.SHOWN and states.MARKING not in nodes.STEPS  # the annotation shows marking as draining
    assert set(outcome.HELD) == set(states.STOPS) and states.AWAITING_PODS in outcome.HELD
    assert plan.CANCELLED_BY_OPERATOR == states.CANCELLED_BY_OPERATOR


def test_the_guides_diagram_is_the_tables():
    guide = os.path.join(ROOT, "docs", "docsite", "rst", "guide_health.rst")
    with open(guide, encoding="utf-8") as handle:
        text = handle.read()
    assert states.diagram() in text
    for name in states.NAMES:
        assert "``%s``" % name in states.diagram()
    run = subprocess.run([sys.executable, os.path.join(ROOT, "hack", "states_doc.py"), "--check"], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr


def test_the_check_finds_a_stale_guide(tmp_path):
    sys.path.insert(0, os.path.join(ROOT, "hack"))
    try:
        import states_doc
    finally:
        sys.path.pop(0)
    stale = "intro\n\n%s\n\nold table\n\n%s\n\nrest\n" % (states_doc.BEGIN, states_doc.END)
    new = states_doc.written(stale, states.diagram())
    assert "old table" not in new and states.diagram() in new and new.startswith("intro") and new.endswith("rest\n")
    assert states_doc.written(new, states.diagram()) == new
