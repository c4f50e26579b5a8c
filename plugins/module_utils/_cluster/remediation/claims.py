# -*- coding: utf-8 -*-
# Copyright (c) 2026, gpuops.fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""PRIVATE to the gpuops.fleet collection: several remediations at once, safely, pure (no API call). Each rule is decided
inside the ledger's own optimistic concurrency (``ledger.update``: a write at the resourceVersion read; a concurrent run's
write in between makes it read and decide again), so two runs started together cannot both pass it:

* **A run's claim on a node.** A run that writes a node's open entry holds it (``claim``: the run's id and until when);
  another run that would write it while the claim is live is refused (``Claimed``) before it writes the ledger or the node,
  and leaves the node to the claim's run. A run that stops for the node (its pods, a blocked drain) lets it go; a claim
  of a run that died ends by itself (``until``).
* **The fleet's cap** (the plan's ``capacity.cap``), where a run opens a node's entry: the open entries of the other nodes
  the plan counted in flight, and those opened since (a concurrent run's), must leave a place (``Refused``, deferred).
* **The same-signal breaker**, where a run opens a node's entry: the nodes with one of its signal keys and its driver in
  the breaker's window, this one included, must stay under the plan's threshold; else the breaker trips in the same
  write and the node is refused (a storm two runs saw half each is still one fleet event).

The plan's row carries the numbers (``guard``: ``cap``, ``in_flight``, ``threshold``, ``window``), so the check needs no
read of its own."""

from __future__ import annotations

from ansible_collections.gpuops.fleet.plugins.module_utils._cluster.remediation import ledger as ledgers
from ansible_collections.gpuops.fleet.plugins.module_utils._common.errors import GpuopsError

CLAIM_SECONDS = 3600  # a remediation's longest hold of a node: a drain, a reset or a reboot (30 min) and the verification


class Claimed(GpuopsError):
    """Another run holds the node (``claim``: its id and until when)."""

    def __init__(self, node, claim):
        self.claim = dict(claim)
        super().__init__("node %s: another run (%s) acts on it until %s: this run leaves it" % (node, claim.get("run"), claim.get("until")))


class Refused(GpuopsError):
    """The node may not be opened now (``reason``: ``deferred_capacity`` or ``fleet_event``); the ledger says why."""

    def __init__(self, node, reason, why):
        self.reason = reason
        super().__init__("node %s: %s, nothing was changed: %s" % (node, reason, why))


def live(claim, now):
    return isinstance(claim, dict) and isinstance(claim.get("until"), (int, float)) and claim["until"] > now


def take(node, entry, run, now, seconds=CLAIM_SECONDS):
    """``entry`` (the node's open entry, changed in place) held by ``run`` until ``now + seconds``; Claimed where another run's
    claim is live."""
    held = entry.get("claim")
    if live(held, now) and held.get("run") != run:
        raise Claimed(node, held)
    entry["claim"] = {"run": run[:ledgers.MAX_TEXT], "until": now + seconds}


def let_go(entry, run):
    """The run's claim on ``entry`` given up (the run stops for the node); another run's is left."""
    held = entry.get("claim")
    if isinstance(held, dict) and held.get("run") == run:
        entry["claim"] = None


def check_open(ledger, node, guard, keys, driver, now):
    """Before ``node``'s entry is opened: Refused where the fleet's cap has no place left or the same signal reaches the
    breaker's threshold (the ledger, changed in place, then records the tripped breaker). ``guard``: the plan row's."""
    if not isinstance(guard, dict):
        return
    entries = [e for e in ledger.get("entries") or () if e.get("node") != node]
    counted = set(guard.get("in_flight") or ())
    in_flight = set(e["node"] for e in entries if not e.get("closed_at")
                    and (e["node"] in counted or now - (e.get("at") or 0) <= ledgers.STALE_OPEN))
    cap = guard.get("cap")
    if isinstance(cap, int) and len(in_flight) >= cap:
        raise Refused(node, "deferred_capacity", "the fleet's cap of %d is taken (%s in flight; a run started beside this one "
                                                 "took the last place)" % (cap, ", ".join(sorted(in_flight))))
    threshold, window = guard.get("threshold"), guard.get("window")
    if not isinstance(threshold, int) or not isinstance(window, int):
        return
    for key in keys or ():
        same = set(e["node"] for e in entries if now - (e.get("at") or 0) <= window and key in (e.get("keys") or ())
                   and e.get("driver_version") == driver)
        if len(same) + 1 >= threshold:
            nodes = sorted(same | {node})
            ledger["breaker"] = dict(ledger.get("breaker") or {}, state="tripped", at=now, keys=[key],
                                     reason=("same signal on %d nodes or more: %s (driver %s) on %s" % (threshold, key, driver, ", ".join(nodes)))[:4096])
            raise Refused(node, "fleet_event", "the same signal %s is on %s: the breaker trips (runs started beside each other saw "
                                               "part of it each)" % (key, ", ".join(nodes)))
