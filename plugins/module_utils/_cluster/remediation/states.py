# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: a node's remediation states, declared once, pure data (it imports only the collection's error base).

A GPU remediation holds a node from its quarantine to its release or an operator's cancel. Its states and the moves between
them are this table; every part reads them here and spells none of them itself: the ledger (an open entry's ``step``, the
truth about what is in flight), the quarantine (each move it makes goes through ``move``, which refuses one the table does
not allow), the plan (an operator's cancel holds the node for the same signal), the run's outcome (the states the role stops
at without failing the run), the event source (the step the node's annotation mirrors) and the role (``stops`` of
``gpu_quarantine``'s result). NVSentinel declares its node lifecycle the same way, once, shared by its drainer and its
remediation (``commons/pkg/statemanager/statemanager.go``: typed states and a map of valid transitions).

Each row says:

* ``recorded``: an open ledger entry holds it as its ``step``; a state that is not recorded is ``terminal``: the entry is
  closed with a result (``released``: the release's result, ``cancelled_by_operator``: that text).
* ``holds``: our quarantine holds the node (our taint, our cordon where we made it) in this state.
* ``stops``: the role stops for the node at this state without failing the run (the report's ``outcome`` is the state's
  name, ``next`` its ``waits_for``).
* ``shown``: what the node's annotation (the record's mirror, for people and the event source) calls it, None where no
  annotation says it (it is written once the node is marked and removed at the end).
* ``next``: the states it may move to. A state moves to itself too (a run that finds it there again).
* ``waits_for``: what the node waits for in it, a sentence (the report's ``next`` where the role stops there, the guide's
  diagram).
* ``waiting``: the node waits there for what no run can hurry (pods that run to their end, a PodDisruptionBudget): the
  plan offers it to every run, and it takes no place in the plan's batch (``WAITING``), so one waiting node never holds
  back the faulty nodes behind it.

The diagram in ``docs/docsite/rst/guide_health.rst`` is ``diagram()``'s text (a test holds them together:
``python hack/states_doc.py`` writes it).
"""

from __future__ import annotations

from typing import Dict, Tuple, Union

from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

MARKING, DRAINING, DRAINED, DRAIN_BLOCKED, AWAITING_PODS = "marking", "draining", "drained", "drain_blocked", "awaiting_pods"
RELEASED, CANCELLED_BY_OPERATOR = "released", "cancelled_by_operator"
# the state before any: no open ledger entry for the node (``move(None, MARKING)`` opens one)
START = None
Row = Dict[str, Union[bool, str, None, Tuple[str, ...]]]

_FIELDS = ("recorded", "holds", "stops", "shown", "next", "waits_for", "waiting")
_ENDS = (RELEASED, CANCELLED_BY_OPERATOR)
# a drain's states move among themselves (a later run drains again, a pod ends, a budget refuses) and to either end
_DRAIN: dict[str, tuple[str, ...]] = dict(
    (name, tuple(n for n in (DRAINING, DRAINED, DRAIN_BLOCKED, AWAITING_PODS) if n != name) + _ENDS)
    for name in (DRAINING, DRAINED, DRAIN_BLOCKED, AWAITING_PODS))
# name: (holds, stops, shown, next, waits_for); recorded = not terminal = a non-empty next
_ROWS = (
    # marking: our taint is not on yet, so no operator can have taken it off (no cancel); evictions follow the mark (draining),
    # a node with none to evict is drained (or waits for its pods) at once
    (MARKING, True, False, DRAINING, (DRAINING, DRAINED, AWAITING_PODS, RELEASED),
     "the node's one patch (the cordon, our taint, the annotation), after the ledger's entry is written", False),
    (DRAINING, True, False, DRAINING, _DRAIN[DRAINING],
     "the evicted pods to go (kubectl drain's rules, up to drain_timeout)", False),
    (DRAINED, True, False, DRAINED, _DRAIN[DRAINED],
     "the reset or reboot, the recovery check, DCGM's diagnostic where it is installed, and the release", False),
    (DRAIN_BLOCKED, True, False, DRAIN_BLOCKED, _DRAIN[DRAIN_BLOCKED],
     "a later run's drain: a PodDisruptionBudget still refused an eviction at drain_timeout; no reset or reboot may run", True),
    (AWAITING_PODS, True, True, AWAITING_PODS, _DRAIN[AWAITING_PODS],
     "the GPUs stay quarantined while the pods of waiting_for run (their eviction modes: allow_completion, "
     "delete_after_timeout before its time, a system namespace's pod); a later run goes on once they are gone", True),
    (RELEASED, False, False, None, (),
     "nothing: the ledger's entry is closed with the release's result (recovered, rebooted, ...) and only what was ours came off", False),
    (CANCELLED_BY_OPERATOR, False, True, None, (),
     "nothing: an operator took the node out of the remediation by hand (see cancelled_by_operator); the ledger records it, "
     "and the plan leaves the node alone for the same signal", False),
)
TABLE: dict[str, Row] = dict(
    (name, dict(zip(_FIELDS, (bool(nxt), holds, stops, shown, nxt, waits, waiting))))
    for name, holds, stops, shown, nxt, waits, waiting in _ROWS)
NAMES: tuple[str, ...] = tuple(str(row[0]) for row in _ROWS)


def _next(name: str) -> tuple[str, ...]:
    found = TABLE[name]["next"]
    return found if isinstance(found, tuple) else ()


def shown(step: str) -> str | None:
    """A recorded step as the node's annotation shows it (None: a state no annotation says)."""
    found = TABLE[step]["shown"]
    return found if isinstance(found, str) else None


# an open ledger entry's steps (the ledger checks an entry's step against these)
RECORDED = tuple(n for n in NAMES if TABLE[n]["recorded"])
TERMINAL = tuple(n for n in NAMES if not TABLE[n]["recorded"])
# the steps the node's annotation may show (the event source reports any other text as "other")
SHOWN = tuple(sorted(set(s for s in (shown(n) for n in NAMES) if s), key=NAMES.index))
# the states the role stops at for the node without failing the run
STOPS = tuple(n for n in NAMES if TABLE[n]["stops"])
WAITING = tuple(n for n in NAMES if TABLE[n]["waiting"])


class IllegalMove(GpuopsError):
    """A move the table does not allow: a defect of the code that tried it (the tests make every move), never of the input; a
    run that meets one fails the node's task with this message, before the move is written."""


def move(before: str | None, after: str) -> str:
    """``after``, where a node in ``before`` (``START``: no open entry) may move there; else ``IllegalMove``. From ``START``
    the one move is to ``MARKING`` (the ledger's entry opened before the node is marked)."""
    if after not in TABLE:
        raise IllegalMove("%r is no remediation state (states.NAMES)" % (after,))
    if before is START:
        if after != MARKING:
            raise IllegalMove("a remediation starts at %s, never at %s" % (MARKING, after))
        return after
    if before not in TABLE:
        raise IllegalMove("%r is no remediation state (states.NAMES)" % (before,))
    allowed = _next(before)
    if after != before and after not in allowed:
        raise IllegalMove("%s may not move to %s (it may move to: %s)" % (before, after, ", ".join(allowed) or "nothing"))
    return after


def diagram() -> str:
    """The guide's section on the states: a table of them and their moves, as reStructuredText (``hack/states_doc.py``)."""
    lines = [".. list-table:: A node's remediation states (``plugins/module_utils/_cluster/remediation/states.py``)",
             "   :header-rows: 1", "", "   * - State", "     - Holds the node", "     - The role stops there",
             "     - Annotation shows", "     - Moves to", "     - Waits for", "     - Takes no batch place"]
    for name in NAMES:
        row = TABLE[name]
        lines += ["   * - ``%s``" % name, "     - %s" % ("yes" if row["holds"] else "no"), "     - %s" % ("yes" if row["stops"] else "no"),
                  "     - %s" % ("``%s``" % row["shown"] if row["shown"] else "(none)"),
                  "     - %s" % (", ".join("``%s``" % n for n in _next(name)) or "(the end)"), "     - %s" % row["waits_for"],
                  "     - %s" % ("yes: every run offers it" if row["waiting"] else "no")]
    lines += ["", ".. code-block:: text", "", "   (no entry) -> %s" % MARKING]
    for name in RECORDED:
        lines.append("   %s -> %s" % (name, ", ".join(_next(name))))
    return "\n".join(lines) + "\n"
