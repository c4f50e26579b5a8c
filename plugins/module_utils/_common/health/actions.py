# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the one table of GPU remediation actions, pure data.

Every place that names an action (the decision's rules, the plan, the quarantine, the run's targets and report, the role's
argument spec) reads it here; nothing else spells an action's name. As NVSentinel resolves its ``RemediationActions`` by
name (template, scope, equivalence group), each row says:

* ``severity``: the order a node's verdict is picked by (the most severe of its GPUs' and its own); ``investigate``
  outranks ``reset``: a node a person must look at gets no automatic reset meanwhile.
* ``scope``: what the action acts on (``gpu``, ``node``, or None: it changes nothing).
* ``automated``: whether a run may take it itself (``gpu_remediation_allowed_actions``' choices); the others are quarantined
  and reported only.
* ``evicts``: the pods the quarantine evicts: ``none``, ``gpu`` (the target GPUs' pods; ``gpu+peers`` where the verdict
  names NVLink peers), ``node`` (every pod but DaemonSet and mirror pods, as ``kubectl drain``).
* ``step``: the role's step for the action (``quarantine`` only, or the action's own block), and ``stages``: the role's
  registered results of that block, in order; ``tried_by``: the stage whose having run means the action was tried.
* ``escalates_to``: the action that follows where this one fails and the run allows it (NVIDIA: a reset that does not
  recover the GPU is followed by a reboot).
* ``outcome``: the report's outcome where the run ends at the quarantine on purpose (``rma_candidate``, ``needs_human``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Sequence

NONE, OBSERVE, RESET, INVESTIGATE, REBOOT, REPLACE = "none", "observe", "reset", "investigate", "reboot", "replace"
QUARANTINE = "quarantine"  # the step of an action a run does not take itself, and of every action in quarantine mode
EVICTS = ("none", "gpu", "gpu+peers", "node")
SCOPES = ("gpu", "node")
OUTCOMES = ("rma_candidate", "needs_human")

_FIELDS = ("severity", "scope", "automated", "evicts", "step", "stages", "tried_by", "escalates_to", "outcome")
# name: (scope, automated, evicts, stages, tried_by, escalates_to, outcome), in severity order
_ROWS = (
    (NONE, None, False, "none", (), None, None, None),
    (OBSERVE, None, False, "none", (), None, None, None),
    (RESET, "gpu", True, "gpu", ("pause", "reset"), "reset", REBOOT, None),
    (INVESTIGATE, "node", False, "node", (), None, None, "needs_human"),
    (REBOOT, "node", True, "node", ("escalate", "reboot", "reboot_wait", "verify"), "reboot_wait", None, None),
    (REPLACE, "node", False, "node", (), None, None, "rma_candidate"),
)
TABLE: dict[str, dict[str, Any]] = dict(
    (name, dict(zip(_FIELDS, (rank, scope, automated, evicts, name if automated else (QUARANTINE if scope else None),
                              stages, tried_by, escalates_to, outcome))))
    for rank, (name, scope, automated, evicts, stages, tried_by, escalates_to, outcome) in enumerate(_ROWS))
NAMES: tuple[str, ...] = tuple(str(row[0]) for row in _ROWS)
# the actions that quarantine a node (a scope), those a run takes itself, and the node-scoped ones
ACTING = tuple(n for n in NAMES if TABLE[n]["scope"])
AUTOMATED = tuple(n for n in NAMES if TABLE[n]["automated"])
NODE_SCOPED = tuple(n for n in NAMES if TABLE[n]["scope"] == "node")
# the role's registered results, in the order it runs them: the quarantine, each automated action's block, the recovery
# check, DCGM's diagnostic (the gate where DCGM is installed) and the release (roles/gpu_remediation/tasks/main.yml registers
# gpu_remediation_<stage>; a test holds them together)
STAGES = ("quarantine",) + tuple(s for n in AUTOMATED for s in TABLE[n]["stages"]) + ("recovery", "diag", "release")


def severity(action: str) -> int:
    return TABLE[action]["severity"]


def scope_of(action: str) -> str | None:
    """``node`` for an action on the whole node, ``gpu`` for one on GPUs, None for one that changes nothing."""
    return TABLE[action]["scope"]


def evicts(action: str, peers: bool = False) -> str:
    """What the quarantine for ``action`` evicts; ``peers``: the verdict adds the GPUs' NVLink peers."""
    found = TABLE[action]["evicts"]
    return "gpu+peers" if found == "gpu" and peers else found


def most_severe(names: Iterable[str]) -> str:
    return max(names, key=severity)


def step(action: str, mode_acts: bool) -> str | None:
    """The role's step for ``action``: its own block where the run takes it (``mode_acts``: not quarantine mode), else the
    quarantine alone; None for an action that changes nothing."""
    row = TABLE[action]
    if row["scope"] is None:
        return None
    return row["step"] if mode_acts else QUARANTINE


def escalation(action: str, allowed: Sequence[str]) -> str | None:
    """The action that follows a failed ``action`` in this run (``allowed``: the run's automated actions), or None."""
    nxt = TABLE[action]["escalates_to"]
    return nxt if nxt in allowed else None


def outcome_at_quarantine(action: str) -> str | None:
    """The report's outcome where a run stops at the quarantine on purpose (None: the run goes on)."""
    return TABLE[action]["outcome"]


def tried(ran: Callable[[str], bool]) -> list:
    """The automated actions a run tried: those whose ``tried_by`` stage ran (``ran``: stage -> bool)."""
    return [n for n in AUTOMATED if ran(TABLE[n]["tried_by"])]
