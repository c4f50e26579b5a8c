# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: the release of a quarantined node (module gpu_quarantine, ``state: released``).

The ledger's open entry for the node is closed first, with ``result`` and its seconds from quarantine to release (where it
cannot be, the node stays quarantined as the ledger says: the state ``released`` of ``states.py``). Then only what is ours
comes off, by the ledger's record: the taint by its key, the annotation, the cordon only where we made it, and a pause's
labels, restored; the Node condition says True."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import marks, states


def release(s):
    """The module's result for ``state: released`` (``s``: a session.Session)."""
    node, entry, current = s.read()
    spec, restore = marks.ours(node, current)
    ours_cordon = "unschedulable" in spec
    annotations = marks.meta(node).get("annotations") or {}
    result = {"node": s.node, "uncordoned": ours_cordon, "untainted": "taints" in spec, "was": current,
              "foreign_cordon": bool(marks.spec(node).get("unschedulable")) and not ours_cordon,
              "recover_seconds": (s.now - int(entry["at"])) if entry and entry.get("at") is not None else None, "result": s.p["result"]}
    result["restored_labels"] = restore
    if entry is None and not spec and marks.REMEDIATION not in annotations and marks.CORDON_MARK not in annotations:
        return dict(result, changed=False, msg="node %s carries nothing of a GPU remediation" % s.node)
    if s.check_mode:
        return dict(result, changed=True, msg="would release %s" % s.node)
    if entry is not None:
        states.move(current["step"], states.RELEASED)
        # the ledger first: where it cannot be written, the node stays quarantined as it was (and counts as in flight, as it is)
        s.close_entry(s.p["result"])
    s.patch_node(node, spec, {marks.REMEDIATION: None, marks.CORDON_MARK: None}, labels=restore or None)
    after = " after %d s in quarantine" % result["recover_seconds"] if result["recover_seconds"] is not None else ""
    result["condition_error"] = s.set_condition(node, "True", marks.condition_reason([s.p["result"]], None),
                                                "gpuops.fleet released the node (%s)%s" % (s.p["result"], after))
    return dict(result, changed=True, msg="released %s (%s%s)" % (s.node, s.p["result"], ", cordon kept: not ours" if result["foreign_cordon"] else ""))
